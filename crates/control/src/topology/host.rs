//! `[[host]]`: an external host on an uplink's wire (tests, demos, the
//! lab), as a topology file writes it, checked into a [`Host`].

use super::{auto_mac, check_name, line_of, parse_addrs, ParseError, Section, Uplink, Vm};
use hvnet_wire::MacAddr;
use serde::Deserialize;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A `[[host]]` table as written.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct HostRepr {
    name: String,
    uplink: String,
    ipv4: Option<String>,
    ipv6: Option<String>,
    mac: Option<String>,
    #[serde(default)]
    tso: bool,
}

/// An external host: a namespace on an uplink's wire.
#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    /// Its name.
    pub name: String,
    /// Its uplink's name (uplinks come and go at run time: a name stays
    /// right where an index into [`Topology::uplinks`](super::Topology::uplinks)
    /// would move).
    pub uplink: String,
    /// IPv4 address and prefix length.
    pub ipv4: Option<(Ipv4Addr, u8)>,
    /// IPv6 address and prefix length.
    pub ipv6: Option<(Ipv6Addr, u8)>,
    /// Its NIC's MAC.
    pub mac: MacAddr,
    /// Its NIC sends TSO frames (false: wire-sized frames).
    pub tso: bool,
}

/// The `[[host]]` tables, each checked (against the VMs, the uplinks and
/// the hosts before it) into a [`Host`]; errors carry the line of the
/// host's table.
pub(super) fn parse_hosts(
    topology: &str,
    text: &str,
    reprs: &[toml::Spanned<HostRepr>],
    vms: &[Vm],
    uplinks: &[Uplink],
) -> Result<Vec<Host>, ParseError> {
    let mut out: Vec<Host> = Vec::new();
    for (i, sh) in reprs.iter().enumerate() {
        let line = line_of(text, sh.span().start);
        let h = sh.get_ref();
        let bad = |r: String| ParseError::at(line, Section::Host(h.name.clone()), r);
        check_name(&h.name).map_err(bad)?;
        if vms.iter().any(|v| v.name == h.name) || out.iter().any(|o| o.name == h.name) {
            return Err(bad(
                "a VM or another host has this name (each is a namespace)".into(),
            ));
        }
        if !uplinks.iter().any(|u| u.name == h.uplink) {
            return Err(bad(format!("no [[uplink]] named {:?}", h.uplink)));
        }
        if uplinks
            .iter()
            .any(|u| u.name == h.uplink && u.team.is_some())
        {
            return Err(bad(format!(
                "uplink {} is a team: a host joins a single-device uplink (put a switch, such as Open vSwitch, on the team's devices)",
                h.uplink
            )));
        }
        if out.iter().any(|o| o.uplink == h.uplink) {
            return Err(bad(format!(
                "uplink {} has a host already (one veth pair per uplink)",
                h.uplink
            )));
        }
        let (ipv4, ipv6) = parse_addrs(h.ipv4.as_deref(), h.ipv6.as_deref()).map_err(bad)?;
        let mac = match h.mac.as_deref() {
            Some(m) => m
                .parse::<MacAddr>()
                .ok()
                .filter(|m| !m.is_multicast())
                .ok_or_else(|| bad(format!("mac {m:?} is not a unicast MAC address")))?,
            None => auto_mac(topology, 1, i),
        };
        if vms.iter().any(|v| v.mac == mac) {
            return Err(bad(format!("mac {mac} is a VM's")));
        }
        out.push(Host {
            name: h.name.clone(),
            uplink: h.uplink.clone(),
            ipv4,
            ipv6,
            mac,
            tso: h.tso,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::{refused, GOOD, UPLINK};

    #[test]
    fn hosts_are_namespaces_on_an_uplinks_wire() {
        let t = parse(&format!("{GOOD}{UPLINK}")).unwrap();
        assert_eq!(t.hosts[0].uplink, "up0");
        assert_eq!(t.uplink_of(&t.hosts[0]).device, "hvx0");
        assert!(!t.hosts[0].tso, "a host sends wire-sized frames by default");
        assert_eq!(t.namespaces(), ["t1-vm1", "t1-vm2", "t1-ext"]);
        let err = |from: &str, to: &str| refused(&format!("{GOOD}{}", UPLINK.replace(from, to)));
        assert!(err("uplink = \"up0\"", "uplink = \"up9\"")
            .1
            .contains("no [[uplink]] named"));
        assert!(err("name = \"ext\"", "name = \"vm1\"")
            .1
            .contains("a VM or another host"));
    }
}
