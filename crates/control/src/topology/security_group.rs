//! `[[security_group]]`: named, ordered rules a VM's port takes with
//! `security_groups = ["web", ...]`, and `[conntrack]`, the connection
//! tables' bounds (docs/guide/security-groups.md).
//!
//! ```toml
//! [[security_group]]
//! name = "web"
//! rules = [
//!   { direction = "in", protocol = "tcp", ports = "80", remote = "198.18.0.0/15" },
//!   { direction = "in", protocol = "tcp", ports = 22, remote_group = "admin" },
//!   { direction = "in", protocol = "icmp", icmp_type = 8 },
//!   { direction = "in", action = "deny", protocol = "udp", ports = "1-1023", stateless = true },
//!   { direction = "out" },                    # anything out (and its replies back)
//! ]
//!
//! [conntrack]
//! max = 262144            # connections over every port
//! max_per_port = 65536    # per port
//! tcp_be_liberal = false  # true: TCP segments are not judged against their windows
//! ```
//!
//! A rule: `direction` ("in": to the VM, "out": from it; required),
//! `action` ("allow", the default, or "deny"), `protocol` ("any", the
//! default, "tcp", "udp", "icmp", "icmpv6" or a number 0-255),
//! `ethertype` ("ipv4" or "ipv6"; default both, or the family the rule's
//! protocol or remote implies), `remote` (the other end's prefix, as
//! `198.18.0.0/15`, `fd00::/8`, an address alone, or "any") or
//! `remote_group` (the addresses of every VM in that group, as
//! OpenStack's remote group), `ports` (destination port or `"low-high"`,
//! TCP and UDP), `icmp_type` and `icmp_code` (ICMP and ICMPv6),
//! `stateless` (OVN's allow-stateless: no connection tracked, replies
//! need rules of their own). A port's rules are its groups' in the order
//! given, each group's in its order; the first that matches decides, and
//! a port with groups denies what none allows. Every error names the
//! line of the rule or table at fault; a file with one is refused whole.

use super::vm::Vm;
use super::{check_name, line_of, ParseError, Section};
use hvnet_datapath::acl::flow::{proto, Family};
use hvnet_datapath::acl::{AclConfig, Action, Direction, Limits, Prefix, Rule, RuleSet};
use serde::Deserialize;
use std::net::IpAddr;

/// Rules a port may have over all its groups.
pub const MAX_RULES: usize = 4096;

/// Largest `[conntrack]` bound (16 Mi connections, some 3 GiB).
pub const MAX_CONNTRACK: usize = 1 << 24;

/// A `[[security_group]]` as written.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct GroupRepr {
    name: String,
    #[serde(default, alias = "rules")]
    rule: Vec<toml::Spanned<RuleRepr>>,
}

/// A number or a word (`ports = 22` or `ports = "1000-2000"`).
#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
enum NumOrText {
    Num(i64),
    Text(String),
}

/// A rule as written.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleRepr {
    direction: String,
    action: Option<String>,
    protocol: Option<NumOrText>,
    ethertype: Option<String>,
    remote: Option<String>,
    remote_group: Option<String>,
    ports: Option<NumOrText>,
    icmp_type: Option<i64>,
    icmp_code: Option<i64>,
    #[serde(default)]
    stateless: bool,
}

/// `[conntrack]` as written.
#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ConntrackRepr {
    max: Option<i64>,
    max_per_port: Option<i64>,
    tcp_be_liberal: Option<bool>,
}

/// Where a rule's remote end may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remote {
    /// Anywhere.
    Any,
    /// In this prefix.
    Prefix(Prefix),
    /// An address of a VM of this group.
    Group(String),
}

/// A rule, checked (its remote group still a name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRule {
    /// The 1-based line it was written on.
    pub line: usize,
    /// The rule, its remote aside.
    pub rule: Rule,
    /// Its remote end.
    pub remote: Remote,
}

/// A security group, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecurityGroup {
    /// Its name.
    pub name: String,
    /// Its rules, in order.
    pub rules: Vec<GroupRule>,
}

fn parse_num(what: &str, v: i64, max: i64) -> Result<i64, String> {
    if (0..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{what} {v} is outside 0..{max}"))
    }
}

fn parse_ports(p: &NumOrText) -> Result<(u16, u16), String> {
    let one = |s: &str| {
        s.trim()
            .parse::<u16>()
            .map_err(|_| format!("ports {s:?} is not a port number (0..65535)"))
    };
    match p {
        NumOrText::Num(n) => {
            let n = parse_num("ports", *n, 65535)? as u16;
            Ok((n, n))
        }
        NumOrText::Text(t) => {
            let (lo, hi) = match t.split_once('-') {
                Some((a, b)) => (one(a)?, one(b)?),
                None => (one(t)?, one(t)?),
            };
            if lo > hi {
                return Err(format!("ports {t:?} runs backwards"));
            }
            Ok((lo, hi))
        }
    }
}

fn parse_prefix(s: &str) -> Result<Prefix, String> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a.trim().parse().map_err(|_| {
        format!("remote {s:?} is not an address or prefix (as 198.18.0.0/15 or fd00::/8)")
    })?;
    let (family, bits, value) = match addr {
        IpAddr::V4(v) => (Family::V4, 32, u128::from(u32::from(v))),
        IpAddr::V6(v) => (Family::V6, 128, u128::from(v)),
    };
    let len = match len {
        None => bits,
        Some(l) => l
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|l| *l <= bits)
            .ok_or_else(|| format!("remote {s:?} has a bad prefix length (0..{bits})"))?,
    };
    let host = u32::from(bits - len);
    let mask = if host >= 128 { 0 } else { !0u128 << host };
    if value & !mask & if bits == 32 { 0xffff_ffff } else { !0 } != 0 {
        return Err(format!(
            "remote {s:?} has bits set past its prefix length (write the network's address)"
        ));
    }
    Ok(Prefix {
        family,
        addr: value,
        len,
    })
}

/// One rule, checked; `group` and `i` name it in views.
fn parse_rule(group: &str, i: usize, r: &RuleRepr) -> Result<(Rule, Remote), String> {
    let direction = match r.direction.as_str() {
        "in" | "ingress" => Direction::In,
        "out" | "egress" => Direction::Out,
        o => return Err(format!("direction {o:?} is not \"in\" or \"out\"")),
    };
    let action = match r.action.as_deref() {
        None | Some("allow") => Action::Allow,
        Some("deny") | Some("drop") => Action::Deny,
        Some(o) => return Err(format!("action {o:?} is not \"allow\" or \"deny\"")),
    };
    let protocol = match &r.protocol {
        None => None,
        Some(NumOrText::Num(n)) => Some(parse_num("protocol", *n, 255)? as u8),
        Some(NumOrText::Text(t)) => match t.as_str() {
            "any" => None,
            "tcp" => Some(proto::TCP),
            "udp" => Some(proto::UDP),
            "icmp" => Some(proto::ICMP),
            "icmpv6" | "ipv6-icmp" => Some(proto::ICMPV6),
            o => {
                return Err(format!(
                    "protocol {o:?} is not \"any\", \"tcp\", \"udp\", \"icmp\", \"icmpv6\" or a number 0-255"
                ))
            }
        },
    };
    let mut family = match r.ethertype.as_deref() {
        None => None,
        Some("ipv4" | "IPv4") => Some(Family::V4),
        Some("ipv6" | "IPv6") => Some(Family::V6),
        Some(o) => return Err(format!("ethertype {o:?} is not \"ipv4\" or \"ipv6\"")),
    };
    let mut imply = |f: Family, why: &str| -> Result<(), String> {
        match family {
            Some(g) if g != f => Err(format!(
                "{why} is {}, the rule's ethertype {}",
                fam(f),
                fam(g)
            )),
            _ => {
                family = Some(f);
                Ok(())
            }
        }
    };
    match protocol {
        Some(proto::ICMP) => imply(Family::V4, "protocol icmp")?,
        Some(proto::ICMPV6) => imply(Family::V6, "protocol icmpv6")?,
        _ => {}
    }
    let remote = match (&r.remote, &r.remote_group) {
        (Some(_), Some(_)) => {
            return Err("remote and remote_group both given: a rule has one remote end".into())
        }
        (Some(a), None) if a == "any" => Remote::Any,
        (Some(a), None) => {
            let p = parse_prefix(a)?;
            imply(p.family, &format!("remote {a}"))?;
            Remote::Prefix(p)
        }
        (None, Some(g)) => Remote::Group(g.clone()),
        (None, None) => Remote::Any,
    };
    let ports = match &r.ports {
        None => None,
        Some(p) if matches!(protocol, Some(proto::TCP | proto::UDP)) => Some(parse_ports(p)?),
        Some(_) => return Err("ports needs protocol = \"tcp\" or \"udp\"".into()),
    };
    let icmp = matches!(protocol, Some(proto::ICMP | proto::ICMPV6));
    let icmp_type = match r.icmp_type {
        None => None,
        Some(t) if icmp => Some(parse_num("icmp_type", t, 255)? as u8),
        Some(_) => return Err("icmp_type needs protocol = \"icmp\" or \"icmpv6\"".into()),
    };
    let icmp_code = match r.icmp_code {
        None => None,
        Some(_) if icmp_type.is_none() => return Err("icmp_code needs an icmp_type".into()),
        Some(c) => Some(parse_num("icmp_code", c, 255)? as u8),
    };
    let rule = Rule {
        label: format!("{group}#{i}"),
        direction,
        action,
        stateless: r.stateless,
        family,
        protocol,
        remote: None,
        ports,
        icmp_type,
        icmp_code,
        text: String::new(),
    };
    Ok((rule, remote))
}

fn fam(f: Family) -> &'static str {
    match f {
        Family::V4 => "IPv4",
        Family::V6 => "IPv6",
    }
}

/// The rule in words, for views (`in allow tcp 22 from 198.18.0.0/15`).
fn describe(r: &Rule, remote: &Remote) -> String {
    let mut s = format!(
        "{} {}",
        r.direction.name(),
        match r.action {
            Action::Allow => "allow",
            Action::Deny => "deny",
        }
    );
    if let Some(f) = r.family {
        s += &format!(" {}", fam(f));
    }
    s += &match r.protocol {
        None => " any".to_string(),
        Some(proto::TCP) => " tcp".into(),
        Some(proto::UDP) => " udp".into(),
        Some(proto::ICMP) => " icmp".into(),
        Some(proto::ICMPV6) => " icmpv6".into(),
        Some(p) => format!(" proto {p}"),
    };
    match r.ports {
        Some((a, b)) if a == b => s += &format!(" port {a}"),
        Some((a, b)) => s += &format!(" ports {a}-{b}"),
        None => {}
    }
    if let Some(t) = r.icmp_type {
        s += &format!(" type {t}");
    }
    if let Some(c) = r.icmp_code {
        s += &format!(" code {c}");
    }
    let way = match r.direction {
        Direction::In => "from",
        Direction::Out => "to",
    };
    match remote {
        Remote::Any => {}
        Remote::Prefix(p) => {
            let a = match p.family {
                Family::V4 => IpAddr::from(std::net::Ipv4Addr::from(p.addr as u32)),
                Family::V6 => IpAddr::from(std::net::Ipv6Addr::from(p.addr)),
            };
            s += &format!(" {way} {a}/{}", p.len);
        }
        Remote::Group(g) => s += &format!(" {way} group {g}"),
    }
    if r.stateless {
        s += " stateless";
    }
    s
}

/// The `[[security_group]]` tables and `[conntrack]`, checked, and each
/// VM's `security_groups` against them (`vm_lines`: each VM's table's
/// line). Errors carry the line of what is at fault.
pub(super) fn parse_groups(
    text: &str,
    reprs: &[toml::Spanned<GroupRepr>],
    conntrack: Option<&toml::Spanned<ConntrackRepr>>,
    vms: &[Vm],
    vm_lines: &[usize],
) -> Result<(Vec<SecurityGroup>, Limits), ParseError> {
    let mut groups: Vec<SecurityGroup> = Vec::new();
    for sg in reprs {
        let line = line_of(text, sg.span().start);
        let g = sg.get_ref();
        let bad =
            |reason: String| ParseError::at(line, Section::SecurityGroup(g.name.clone()), reason);
        check_name(&g.name).map_err(bad)?;
        if groups.iter().any(|o| o.name == g.name) {
            return Err(bad("defined twice".into()));
        }
        let mut rules = Vec::new();
        for (i, r) in g.rule.iter().enumerate() {
            let rline = line_of(text, r.span().start);
            let (mut rule, remote) = parse_rule(&g.name, i, r.get_ref()).map_err(|e| {
                ParseError::at(
                    rline,
                    Section::Rule {
                        group: g.name.clone(),
                        index: i,
                    },
                    e,
                )
            })?;
            rule.text = describe(&rule, &remote);
            rules.push(GroupRule {
                line: rline,
                rule,
                remote,
            });
        }
        groups.push(SecurityGroup {
            name: g.name.clone(),
            rules,
        });
    }
    for g in &groups {
        for (i, r) in g.rules.iter().enumerate() {
            if let Remote::Group(name) = &r.remote {
                if !groups.iter().any(|o| &o.name == name) {
                    return Err(ParseError::at(
                        r.line,
                        Section::Rule {
                            group: g.name.clone(),
                            index: i,
                        },
                        format!("remote_group {name:?} is no [[security_group]] of this file"),
                    ));
                }
            }
        }
    }
    for (vm, &line) in vms.iter().zip(vm_lines) {
        let bad = |reason: String| ParseError::at(line, Section::Vm(vm.name.clone()), reason);
        for (i, name) in vm.security_groups.iter().enumerate() {
            if !groups.iter().any(|g| &g.name == name) {
                return Err(bad(format!(
                    "security group {name:?} is no [[security_group]] of this file"
                )));
            }
            if vm.security_groups[..i].contains(name) {
                return Err(bad(format!("security group {name:?} listed twice")));
            }
        }
        let n: usize = groups
            .iter()
            .filter(|g| vm.security_groups.contains(&g.name))
            .map(|g| g.rules.len())
            .sum();
        if n > MAX_RULES {
            return Err(bad(format!(
                "its groups have {n} rules; a port takes at most {MAX_RULES}"
            )));
        }
    }
    let mut limits = Limits::default();
    if let Some(c) = conntrack {
        let line = line_of(text, c.span().start);
        let bad = |reason: String| ParseError::at(line, Section::Conntrack, reason);
        let r = c.get_ref();
        let bound = |what: &str, v: Option<i64>, d: usize| match v {
            None => Ok(d),
            Some(v) if (1..=MAX_CONNTRACK as i64).contains(&v) => Ok(v as usize),
            Some(v) => Err(bad(format!("{what} {v} is outside 1..{MAX_CONNTRACK}"))),
        };
        limits.max = bound("max", r.max, limits.max)?;
        limits.max_per_port = bound("max_per_port", r.max_per_port, limits.max_per_port)?;
        limits.tcp_be_liberal = r.tcp_be_liberal.unwrap_or(limits.tcp_be_liberal);
        if limits.max_per_port > limits.max {
            return Err(bad(format!(
                "max_per_port {} is more than max {}",
                limits.max_per_port, limits.max
            )));
        }
    }
    Ok((groups, limits))
}

/// What the switch installs for a topology: each VM with groups, its
/// groups' rules in order with remote groups made their members'
/// addresses now.
pub fn acl_config(groups: &[SecurityGroup], limits: Limits, vms: &[Vm]) -> AclConfig {
    let members = |g: &str| -> Vec<Prefix> {
        vms.iter()
            .filter(|v| v.security_groups.iter().any(|n| n == g))
            .flat_map(|v| {
                let a4 = v.ipv4.map(|(a, _)| Prefix {
                    family: Family::V4,
                    addr: u128::from(u32::from(a)),
                    len: 32,
                });
                let a6 = v.ipv6.map(|(a, _)| Prefix {
                    family: Family::V6,
                    addr: u128::from(a),
                    len: 128,
                });
                a4.into_iter().chain(a6)
            })
            .collect()
    };
    let mut cfg = AclConfig {
        limits,
        ..AclConfig::default()
    };
    for vm in vms.iter().filter(|v| !v.security_groups.is_empty()) {
        let mut rules = Vec::new();
        for name in &vm.security_groups {
            let Some(g) = groups.iter().find(|g| &g.name == name) else {
                continue;
            };
            for r in &g.rules {
                let mut rule = r.rule.clone();
                rule.remote = match &r.remote {
                    Remote::Any => None,
                    Remote::Prefix(p) => Some(vec![*p]),
                    Remote::Group(m) => Some(members(m)),
                };
                rules.push(rule);
            }
        }
        cfg.ports.insert(
            vm.name.clone(),
            RuleSet {
                rules,
                groups: vm.security_groups.clone(),
            },
        );
    }
    cfg
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::GOOD;
    use super::super::ParseError;
    use super::*;

    fn with(groups: &str) -> Result<super::super::Topology, ParseError> {
        parse(&format!(
            "{}\n{groups}",
            GOOD.replace(
                "name = \"vm1\"\n",
                "name = \"vm1\"\nsecurity_groups = [\"web\"]\n"
            )
        ))
    }

    const WEB: &str = r#"
[[security_group]]
name = "web"
rules = [
  { direction = "in", protocol = "tcp", ports = "80", remote = "198.18.0.0/15" },
  { direction = "in", protocol = "tcp", ports = 22, remote_group = "admin" },
  { direction = "in", protocol = "icmp", icmp_type = 8 },
  { direction = "in", action = "deny", protocol = "udp", ports = "1-1023", stateless = true },
  { direction = "out" },
]

[[security_group]]
name = "admin"

[[security_group.rule]]
direction = "in"
protocol = "icmpv6"
"#;

    #[test]
    fn groups_are_read_in_order_and_remote_groups_become_their_members() {
        let t = with(WEB).unwrap();
        assert_eq!(t.vms[0].security_groups, vec!["web"]);
        assert_eq!(t.security_groups.len(), 2);
        assert_eq!(
            t.security_groups[1].rules.len(),
            1,
            "[[security_group.rule]]"
        );
        let web = &t.security_groups[0].rules;
        assert_eq!(web[0].rule.ports, Some((80, 80)));
        assert_eq!(web[0].rule.family, Some(Family::V4));
        assert_eq!(web[2].rule.family, Some(Family::V4), "icmp is IPv4's");
        assert_eq!(web[3].rule.action, Action::Deny);
        assert!(web[3].rule.stateless);
        assert_eq!(
            web[0].rule.text,
            "in allow IPv4 tcp port 80 from 198.18.0.0/15"
        );
        let cfg = t.acl_config();
        assert_eq!(cfg.ports.len(), 1, "vm2 has no groups");
        let rules = &cfg.ports["vm1"].rules;
        assert_eq!(rules.len(), 5);
        assert_eq!(rules[1].remote, Some(vec![]), "admin has no members yet");
        let both = parse(&format!(
            "{}\n{WEB}",
            GOOD.replace(
                "name = \"vm1\"\n",
                "name = \"vm1\"\nsecurity_groups = [\"web\"]\n"
            )
            .replace(
                "name = \"vm2\"\n",
                "name = \"vm2\"\nsecurity_groups = [\"admin\"]\n"
            )
        ))
        .unwrap();
        let cfg = both.acl_config();
        let admins = cfg.ports["vm1"].rules[1].remote.clone().unwrap();
        assert_eq!(admins.len(), 1);
        assert_eq!(
            admins[0].addr,
            u128::from(u32::from_be_bytes([10, 1, 0, 2]))
        );
        assert_eq!(both.conntrack, Limits::default());
    }

    #[test]
    fn rules_that_cannot_apply_are_refused_with_their_line_and_reason() {
        // GOOD ends on line 14; the blank line and [[security_group]] are
        // 16-17, name 18, `rules = [` 19, the first rule 20.
        let bad = |rule: &str, why: &str| {
            let g = format!(
                "\n[[security_group]]\nname = \"web\"\nrules = [\n  {{ direction = \"out\" }},\n  {rule},\n]\n"
            );
            let e = with(&g).unwrap_err();
            let reason = e.to_string();
            assert!(reason.contains(why), "{rule}: {reason}");
            assert_eq!(e.line, 22, "{rule}: {reason}");
            assert_eq!(
                e.section,
                Some(Section::Rule {
                    group: "web".into(),
                    index: 1
                }),
                "{reason}"
            );
            assert!(
                reason.starts_with("security_group \"web\" rule 1: "),
                "{reason}"
            );
        };
        bad("{ direction = \"sideways\" }", "is not \"in\" or \"out\"");
        bad(
            "{ direction = \"in\", action = \"maybe\" }",
            "\"allow\" or \"deny\"",
        );
        bad(
            "{ direction = \"in\", protocol = \"sctp\" }",
            "is not \"any\"",
        );
        bad("{ direction = \"in\", protocol = 300 }", "outside 0..255");
        bad("{ direction = \"in\", ports = 80 }", "ports needs protocol");
        bad(
            "{ direction = \"in\", protocol = \"tcp\", ports = \"90-80\" }",
            "runs backwards",
        );
        bad(
            "{ direction = \"in\", protocol = \"tcp\", ports = \"http\" }",
            "not a port number",
        );
        bad(
            "{ direction = \"in\", protocol = \"tcp\", icmp_type = 3 }",
            "icmp_type needs",
        );
        bad(
            "{ direction = \"in\", protocol = \"icmp\", icmp_code = 3 }",
            "icmp_code needs an icmp_type",
        );
        bad(
            "{ direction = \"in\", protocol = \"icmp\", remote = \"fd00::/8\" }",
            "is IPv6, the rule's ethertype IPv4",
        );
        bad(
            "{ direction = \"in\", ethertype = \"ipv6\", remote = \"10.0.0.0/8\" }",
            "is IPv4",
        );
        bad(
            "{ direction = \"in\", remote = \"10.0.0.1/8\" }",
            "bits set past its prefix",
        );
        bad(
            "{ direction = \"in\", remote = \"10.0.0.0/33\" }",
            "bad prefix length",
        );
        bad(
            "{ direction = \"in\", remote = \"ten\" }",
            "not an address or prefix",
        );
        bad(
            "{ direction = \"in\", remote = \"any\", remote_group = \"web\" }",
            "both given",
        );
        bad(
            "{ direction = \"in\", remote_group = \"nobody\" }",
            "is no [[security_group]]",
        );
        // Unknown keys: the TOML parser's word, at the rule's line.
        let e = with(
            "\n[[security_group]]\nname = \"web\"\nrules = [\n  { direction = \"out\" },\n  { direction = \"in\", port = 80 },\n]\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 22, "{e}");
        assert!(e.reason.contains("port"), "{e}");
        assert_eq!(
            e.section,
            Some(Section::Rule {
                group: "web".into(),
                index: 1
            }),
            "the rule, found by the place the TOML reader gives: {e}"
        );
    }

    #[test]
    fn a_vm_s_groups_and_the_bounds_are_checked() {
        let e = with("").unwrap_err();
        assert_eq!(e.line, 5, "vm1's table");
        assert_eq!(e.section, Some(Section::Vm("vm1".into())));
        assert_eq!(
            e.to_string(),
            "vm \"vm1\": security group \"web\" is no [[security_group]] of this file"
        );
        let e = with(&format!("{WEB}\n[[security_group]]\nname = \"web\"\n")).unwrap_err();
        assert_eq!(e.to_string(), "security_group \"web\": defined twice");
        assert_eq!(e.line, 35);
        let limits = |keys: &str| with(&format!("{WEB}\n[conntrack]\n{keys}\n"));
        let t = limits("max = 1000\nmax_per_port = 10").unwrap();
        assert_eq!(
            t.conntrack,
            Limits {
                max: 1000,
                max_per_port: 10,
                tcp_be_liberal: false,
            }
        );
        assert!(
            limits("tcp_be_liberal = true")
                .unwrap()
                .conntrack
                .tcp_be_liberal
        );
        assert!(limits("tcp_be_liberal = 1").is_err());
        let e = limits("max = 10\nmax_per_port = 100").unwrap_err();
        assert!(e.reason.contains("more than max"), "{e}");
        assert_eq!((e.line, e.section), (35, Some(Section::Conntrack)));
        assert!(limits("max = 0")
            .unwrap_err()
            .to_string()
            .starts_with("conntrack: max 0 is outside 1.."));
    }
}
