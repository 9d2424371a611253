//! `[frr]`: FRR's daemons for BGP EVPN as a topology file sets them, and
//! what EVPN asks of the uplinks. How `hvnet up` runs FRR with them is
//! the `evpn` module's.

use super::{line_of, ParseError, Section, Uplink};
use serde::Deserialize;
use std::net::Ipv4Addr;

/// `[frr]` as written in a topology file.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct FrrRepr {
    asn: u32,
    router_id: String,
    #[serde(default)]
    neighbors: Vec<String>,
    #[serde(default = "d_keepalive")]
    keepalive_secs: u16,
}

fn d_keepalive() -> u16 {
    3
}

/// FRR as `hvnet up` starts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frr {
    /// The BGP AS (iBGP with every neighbour).
    pub asn: u32,
    /// BGP's router ID: the host's own underlay address, whose IP stack
    /// runs BGP.
    pub router_id: Ipv4Addr,
    /// The BGP neighbours (the other VTEPs, or route reflectors).
    pub neighbors: Vec<Ipv4Addr>,
    /// BGP keepalive interval (hold time three times it): how soon a host
    /// that stops without a word is withdrawn.
    pub keepalive_secs: u16,
}

impl FrrRepr {
    /// Checked: addresses parse, the AS is not 0, a neighbour is not the
    /// host itself.
    fn validate(&self) -> Result<Frr, String> {
        if self.asn == 0 {
            return Err("asn 0 is reserved (1..4294967295)".into());
        }
        let router_id: Ipv4Addr = self
            .router_id
            .parse()
            .map_err(|_| format!("router_id {:?} is not an IPv4 address", self.router_id))?;
        let neighbors = self
            .neighbors
            .iter()
            .map(|n| {
                n.parse::<Ipv4Addr>()
                    .map_err(|_| format!("neighbor {n:?} is not an IPv4 address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if neighbors.contains(&router_id) {
            return Err("a neighbor is the router_id (this host)".into());
        }
        if !(1..=600).contains(&self.keepalive_secs) {
            return Err(format!(
                "keepalive_secs {} is outside 1..600",
                self.keepalive_secs
            ));
        }
        Ok(Frr {
            asn: self.asn,
            router_id,
            neighbors,
            keepalive_secs: self.keepalive_secs,
        })
    }
}

/// `[frr]`, for a topology whose uplinks use EVPN; and those uplinks'
/// VNIs, one each.
pub(super) fn parse_frr(
    text: &str,
    repr: Option<&toml::Spanned<FrrRepr>>,
    uplinks: &[Uplink],
) -> Result<Option<Frr>, ParseError> {
    let frr = match repr {
        None => None,
        Some(r) => {
            let line = line_of(text, r.span().start);
            let evpn_uplinks = uplinks
                .iter()
                .filter(|u| u.vxlan.as_ref().is_some_and(|v| v.evpn))
                .count();
            if evpn_uplinks == 0 {
                return Err(ParseError::at(
                    line,
                    Section::Frr,
                    "is for EVPN: no uplink has [uplink.vxlan] evpn = true",
                ));
            }
            Some(
                r.get_ref()
                    .validate()
                    .map_err(|e| ParseError::at(line, Section::Frr, e))?,
            )
        }
    };
    let mut vnis: Vec<u32> = uplinks
        .iter()
        .filter_map(|u| u.vxlan.as_ref().filter(|v| v.evpn).map(|v| v.vni))
        .collect();
    vnis.sort_unstable();
    if vnis.windows(2).any(|w| w[0] == w[1]) {
        return Err(ParseError::whole(
            1,
            "two EVPN uplinks have the same VNI (FRR knows a VNI by one device)",
        ));
    }
    Ok(frr)
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::refused;
    use super::*;

    #[test]
    fn evpn_frr_and_a_hosts_namespace_are_read_and_checked_with_their_line() {
        let file = |vxlan: &str, tail: &str| {
            format!(
                "name = \"t\"\nnetns = \"h1\"\n\n[[vm]]\nname = \"a\"\nconnected = \"off\"\n\n[[uplink]]\nname = \"up0\"\ndevice = \"u0\"\n\n[uplink.vxlan]\nvni = 42\nlocal = \"198.18.60.1/24\"\n{vxlan}\n{tail}"
            )
        };
        let frr =
            "[frr]\nasn = 65000\nrouter_id = \"198.18.60.11\"\nneighbors = [\"198.18.60.12\"]\n";
        let t = parse(&file("evpn = true", frr)).unwrap();
        assert!(t.uplinks[0].vxlan.as_ref().unwrap().evpn);
        assert_eq!(t.netns.as_deref(), Some("h1"));
        assert!(!t.vms[0].settings.connected);
        let f = t.frr.unwrap();
        assert_eq!((f.asn, f.neighbors.len(), f.keepalive_secs), (65000, 1, 3));
        let (line, reason) = refused(&file("evpn = false", frr));
        assert_eq!(line, 16, "{reason}");
        assert!(reason.contains("no uplink has"), "{reason}");
        let (_, reason) = refused(&file("evpn = true", &frr.replace("65000", "0")));
        assert!(reason.contains("asn 0"), "{reason}");
        let (_, reason) = refused(&file("evpn = true\nport = 65330", ""));
        assert!(reason.contains("shadow"), "{reason}");
    }

    #[test]
    fn bad_settings_are_named() {
        let r = |asn, id: &str, n: &[&str]| FrrRepr {
            asn,
            router_id: id.into(),
            neighbors: n.iter().map(|s| s.to_string()).collect(),
            keepalive_secs: 3,
        };
        assert!(r(0, "1.1.1.1", &[])
            .validate()
            .unwrap_err()
            .contains("asn 0"));
        assert!(r(1, "x", &[]).validate().unwrap_err().contains("router_id"));
        assert!(r(1, "1.1.1.1", &["1.1.1.1"])
            .validate()
            .unwrap_err()
            .contains("this host"));
        assert!(r(1, "1.1.1.1", &["nope"])
            .validate()
            .unwrap_err()
            .contains("neighbor"));
    }
}
