//! `[[mirror]]`: port mirrors, in Open vSwitch's words
//! (docs/guide/capture.md).
//!
//! ```toml
//! [[mirror]]
//! name = "web-span"
//! select_src_port = ["web0"]     # what these ports send
//! select_dst_port = ["web0"]     # what is sent to them
//! select_vlan = [10]             # frames on these VLANs, either way
//! select_all = false             # every frame
//! output_port = "mon"            # SPAN: to a VM (a monitor), or an uplink
//! # output_vlan = 999            # RSPAN: to every port carrying VLAN 999
//! # erspan = { remote = "198.18.5.2", type = 3, session = 7 }  # max_frame: what fits a 1500-byte path
//! ```
//!
//! Exactly one output. A mirror's output port is its own: nothing else is
//! forwarded to it, and it is selected by no mirror. Every error names the
//! mirror's line; a file with one is refused whole.

use super::{check_name, line_of, ParseError, Section, Uplink, Vm};
use hvnet_datapath::mirror::{ErspanConfig, MirrorSpec, Output};
use serde::Deserialize;
use std::net::IpAddr;

/// Most mirrors a switch has.
pub const MAX_MIRRORS: usize = 64;

/// A `[[mirror]]` as written.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct MirrorRepr {
    name: String,
    #[serde(default)]
    select_all: bool,
    #[serde(default)]
    select_src_port: Vec<String>,
    #[serde(default)]
    select_dst_port: Vec<String>,
    #[serde(default)]
    select_vlan: Vec<i64>,
    output_port: Option<String>,
    output_vlan: Option<i64>,
    erspan: Option<ErspanRepr>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct ErspanRepr {
    remote: String,
    #[serde(rename = "type", default = "d_type")]
    kind: i64,
    #[serde(default)]
    session: i64,
    max_frame: Option<i64>,
}

fn d_type() -> i64 {
    2
}
/// The path MTU a session's copies are cut to fit unless told
/// (`max_frame`): a standard Ethernet path's, so that a full-size frame's
/// copy is not fragmented on its way.
const PATH_MTU: usize = 1500;

/// The most of a frame a copy carries in a `PATH_MTU` packet: less the
/// outer IP header, GRE's (with its sequence number) and ERSPAN's.
fn fitting_frame(remote: IpAddr, version: u8) -> usize {
    let ip = if remote.is_ipv4() { 20 } else { 40 };
    let erspan = if version == 2 { 8 } else { 12 };
    PATH_MTU - ip - 8 - erspan
}

pub(super) fn parse_mirrors(
    text: &str,
    reprs: &[toml::Spanned<MirrorRepr>],
    vms: &[Vm],
    uplinks: &[Uplink],
) -> Result<Vec<MirrorSpec>, ParseError> {
    let mut out: Vec<MirrorSpec> = Vec::new();
    if let Some(first) = reprs.get(MAX_MIRRORS) {
        return Err(ParseError::at(
            line_of(text, first.span().start),
            Section::Mirror(first.get_ref().name.clone()),
            format!("at most {MAX_MIRRORS} [[mirror]] tables"),
        ));
    }
    let ports: Vec<&str> = vms
        .iter()
        .map(|v| v.name.as_str())
        .chain(uplinks.iter().map(|u| u.name.as_str()))
        .collect();
    for r in reprs {
        let line = line_of(text, r.span().start);
        let m = r.get_ref();
        let fail = |why: String| Err(ParseError::at(line, Section::Mirror(m.name.clone()), why));
        if let Err(e) = check_name(&m.name) {
            return fail(e);
        }
        if out.iter().any(|x| x.name == m.name) {
            return fail("a mirror of that name is already defined".into());
        }
        for p in m.select_src_port.iter().chain(&m.select_dst_port) {
            if !ports.contains(&p.as_str()) {
                return fail(format!(
                    "no port named {p:?} (there are: {})",
                    ports.join(", ")
                ));
            }
        }
        let mut vlans = Vec::new();
        for &v in &m.select_vlan {
            match u16::try_from(v) {
                Ok(v) if v <= 4094 => vlans.push(v),
                _ => return fail(format!("select_vlan {v}: a VLAN is 0..4094 (0: untagged)")),
            }
        }
        if !m.select_all
            && m.select_src_port.is_empty()
            && m.select_dst_port.is_empty()
            && vlans.is_empty()
        {
            return fail(
                "selects nothing: say select_src_port, select_dst_port, select_vlan or select_all"
                    .into(),
            );
        }
        let output = match (&m.output_port, m.output_vlan, &m.erspan) {
            (Some(p), None, None) => {
                if !ports.contains(&p.as_str()) {
                    return fail(format!(
                        "output_port {p:?}: no such port (there are: {})",
                        ports.join(", ")
                    ));
                }
                if m.select_src_port.contains(p) || m.select_dst_port.contains(p) {
                    return fail(format!("output_port {p:?} is also selected: a mirror to itself would copy its own copies"));
                }
                if let Some(o) = out.iter().find(|o| selects(o, p)) {
                    return fail(format!(
                        "output_port {p:?} is selected by mirror {:?}",
                        o.name
                    ));
                }
                Output::Port(p.clone())
            }
            (None, Some(v), None) => match u16::try_from(v) {
                Ok(v) if vlans.contains(&v) => {
                    return fail(format!(
                        "output_vlan {v} is also selected: its copies would be copied again"
                    ))
                }
                Ok(v) if (1..=4094).contains(&v) => Output::Vlan(v),
                _ => return fail(format!("output_vlan {v}: a VLAN is 1..4094")),
            },
            (None, None, Some(e)) => Output::Erspan(match erspan(e) {
                Ok(c) => c,
                Err(why) => return fail(why),
            }),
            _ => return fail("needs exactly one of output_port, output_vlan and erspan".into()),
        };
        // A port that is an earlier mirror's output is selected by none.
        for o in &out {
            if let Output::Port(p) = &o.output {
                if m.select_src_port.contains(p) || m.select_dst_port.contains(p) {
                    return fail(format!("selects {p:?}, mirror {:?}'s output port", o.name));
                }
            }
        }
        out.push(MirrorSpec {
            name: m.name.clone(),
            select_all: m.select_all,
            select_src_port: m.select_src_port.clone(),
            select_dst_port: m.select_dst_port.clone(),
            select_vlan: vlans,
            output,
        });
    }
    Ok(out)
}

/// True if `m` selects what `port` sends or receives.
fn selects(m: &MirrorSpec, port: &str) -> bool {
    m.select_src_port
        .iter()
        .chain(&m.select_dst_port)
        .any(|p| p == port)
}

fn erspan(e: &ErspanRepr) -> Result<ErspanConfig, String> {
    let remote: IpAddr = e
        .remote
        .parse()
        .map_err(|_| format!("erspan remote {:?}: an IPv4 or IPv6 address", e.remote))?;
    let version = match e.kind {
        2 | 3 => e.kind as u8,
        k => return Err(format!("erspan type {k}: 2 (type II) or 3 (type III)")),
    };
    let session = u16::try_from(e.session)
        .ok()
        .filter(|s| *s <= 1023)
        .ok_or_else(|| format!("erspan session {}: 0..1023", e.session))?;
    let max_frame = match e.max_frame {
        None => fitting_frame(remote, version),
        Some(m) => usize::try_from(m)
            .ok()
            .filter(|n| (64..=9216).contains(n))
            .ok_or_else(|| format!("erspan max_frame {m}: 64..9216 bytes"))?,
    };
    Ok(ErspanConfig {
        remote,
        version,
        session,
        max_frame,
    })
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::{refused, GOOD};
    use super::*;

    fn mirror(keys: &str) -> Result<Vec<MirrorSpec>, (usize, String)> {
        parse(&format!("{GOOD}\n[[mirror]]\nname = \"m\"\n{keys}\n"))
            .map(|t| t.mirrors)
            .map_err(|e| (e.line, e.to_string()))
    }

    #[test]
    fn span_rspan_and_erspan_are_read() {
        let m = mirror("select_src_port = [\"vm1\"]\nselect_vlan = [0, 10]\noutput_port = \"vm2\"")
            .unwrap();
        assert_eq!(m[0].output, Output::Port("vm2".into()));
        assert_eq!(m[0].select_vlan, vec![0, 10]);
        let m = mirror("select_all = true\noutput_vlan = 999").unwrap();
        assert_eq!(m[0].output, Output::Vlan(999));
        let m = mirror("select_dst_port = [\"vm1\"]\nerspan = { remote = \"198.18.5.2\", type = 3, session = 7 }")
            .unwrap();
        let Output::Erspan(e) = &m[0].output else {
            panic!("not erspan")
        };
        // Cut to fit a 1500-byte path: IPv4, GRE with its sequence
        // number, type III's header.
        assert_eq!((e.version, e.session, e.max_frame), (3, 7, 1460));
        let m = mirror("select_all = true\nerspan = { remote = \"fd00::2\", max_frame = 9000 }")
            .unwrap();
        let Output::Erspan(e) = &m[0].output else {
            panic!("not erspan")
        };
        assert_eq!((e.version, e.max_frame), (2, 9000));
        let m = mirror("select_all = true\nerspan = { remote = \"fd00::2\" }").unwrap();
        let Output::Erspan(e) = &m[0].output else {
            panic!("not erspan")
        };
        assert_eq!(e.max_frame, 1500 - 40 - 8 - 8);
    }

    #[test]
    fn bad_mirrors_are_refused_with_their_line_and_reason() {
        // The line of the `[[mirror]]` header, after GOOD and a blank line.
        let line = GOOD.lines().count() + 2;
        for (keys, says) in [
            (
                "select_src_port = [\"vm1\"]\noutput_port = \"vm1\"",
                "mirror to itself",
            ),
            (
                "select_src_port = [\"nope\"]\noutput_vlan = 5",
                "no port named \"nope\"",
            ),
            ("output_vlan = 5", "selects nothing"),
            (
                "select_all = true\noutput_vlan = 5\noutput_port = \"vm2\"",
                "exactly one of",
            ),
            ("select_all = true", "exactly one of"),
            ("select_all = true\noutput_vlan = 4095", "1..4094"),
            (
                "select_all = true\nerspan = { remote = \"x\" }",
                "IPv4 or IPv6",
            ),
            (
                "select_all = true\nerspan = { remote = \"198.18.0.1\", type = 1 }",
                "type II",
            ),
            (
                "select_all = true\nerspan = { remote = \"198.18.0.1\", session = 1024 }",
                "0..1023",
            ),
        ] {
            let (at, why) = mirror(keys).unwrap_err();
            assert!(why.contains(says), "{keys}: {why}");
            assert_eq!(at, line, "{keys}: {why}");
        }
        let two = format!(
            "{GOOD}\n[[mirror]]\nname = \"a\"\nselect_src_port = [\"vm1\"]\noutput_port = \"vm2\"\n\
             [[mirror]]\nname = \"b\"\nselect_dst_port = [\"vm2\"]\noutput_vlan = 5\n"
        );
        let (_, why) = refused(&two);
        assert!(why.contains("output port"), "{why}");
    }
}
