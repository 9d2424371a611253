//! `[[tenant]]`: a tenant's segments routed at the edge, each with an
//! anycast gateway the switch answers for (docs/guide/routing.md).
//!
//! ```toml
//! [[tenant]]
//! name = "blue"
//! gateways = { 10 = "198.19.80.254/24", 20 = ["198.19.81.254/24", "fd81::1/64"] }  # VLAN = gateway/prefix (and IPv6)
//! routes = [{ to = "0.0.0.0/0", via = "198.19.80.1" }]             # static, via a neighbour
//! gateway_mac = "02:68:76:00:00:01"                                # the same on every host
//! l3_vni = 5999        # routed across hosts (symmetric IRB): an EVPN uplink's `vlans` carries it
//! ```

use super::{line_of, ParseError, Section, Uplink, Vm};
use hvnet_datapath::route::{
    Gateway, L3Vni, RouterConfig, StaticRoute, Tenant, DEFAULT_GATEWAY_MAC,
};
use hvnet_wire::MacAddr;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `[[tenant]]` as written.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct TenantRepr {
    name: String,
    gateways: BTreeMap<String, GatewayRepr>,
    #[serde(default)]
    routes: Vec<RouteRepr>,
    gateway_mac: Option<String>,
    l3_vni: Option<u32>,
}

/// A segment's gateway: its IPv4 address, or that and an IPv6 one.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum GatewayRepr {
    One(String),
    Both(Vec<String>),
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RouteRepr {
    to: String,
    via: String,
}

/// `a.b.c.d/n` (`/n` required when `prefix`, else a bare address).
fn ipv4_prefix(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (a, n) = s.split_once('/')?;
    let n: u8 = n.parse().ok().filter(|n| *n <= 32)?;
    Some((a.parse().ok()?, n))
}

/// `a:b::c/n`.
fn ipv6_prefix(s: &str) -> Option<(Ipv6Addr, u8)> {
    let (a, n) = s.split_once('/')?;
    let n: u8 = n.parse().ok().filter(|n| (8..=126).contains(n))?;
    Some((a.parse().ok()?, n))
}

/// True if `a` is in the subnet `(net, n)`.
fn within<A: Into<IpAddr>>(a: A, (net, n): (A, u8)) -> bool {
    hvnet_datapath::route::within(a, net, n)
}

pub(super) fn parse_tenants(
    text: &str,
    reprs: &[toml::Spanned<TenantRepr>],
    uplinks: &[Uplink],
    vms: &[Vm],
) -> Result<Vec<Tenant>, ParseError> {
    let mut tenants: Vec<Tenant> = Vec::new();
    for r in reprs {
        let line = line_of(text, r.span().start);
        let t = r.get_ref();
        let bad = |why: String| ParseError::at(line, Section::Tenant(t.name.clone()), why);
        if !super::valid_name(&t.name) || t.name.len() > 32 {
            return Err(bad("name: 1-32 characters of a-z, 0-9 and '-'".into()));
        }
        if tenants.iter().any(|o| o.name == t.name) {
            return Err(bad("duplicate tenant name".into()));
        }
        let mac = match &t.gateway_mac {
            None => DEFAULT_GATEWAY_MAC,
            Some(m) => m
                .parse::<MacAddr>()
                .ok()
                .filter(|m| !m.is_multicast() && m.0 != [0; 6])
                .ok_or_else(|| bad(format!("gateway_mac {m:?} is not a unicast MAC address")))?,
        };
        if t.gateways.is_empty() {
            return Err(bad(
                "gateways: at least one segment, as { 10 = \"198.19.80.254/24\" }".into(),
            ));
        }
        let mut gateways = Vec::new();
        for (vlan, addr) in &t.gateways {
            let vlan = vlan
                .parse::<u16>()
                .ok()
                .filter(|v| (1..=4094).contains(v))
                .ok_or_else(|| bad(format!("gateways: VLAN {vlan:?} is outside 1..4094")))?;
            let addrs: Vec<&String> = match addr {
                GatewayRepr::One(a) => vec![a],
                GatewayRepr::Both(list) => list.iter().collect(),
            };
            let (v6, v4): (Vec<&String>, Vec<&String>) =
                addrs.into_iter().partition(|a| a.contains(':'));
            let [a4] = v4.as_slice() else {
                return Err(bad(format!(
                    "gateways: VLAN {vlan}: one IPv4 address and prefix (8..30), and at most one IPv6, as \"198.19.80.254/24\" or [\"198.19.80.254/24\", \"fd80::1/64\"]"
                )));
            };
            let ipv4 = ipv4_prefix(a4)
                .filter(|(_, n)| (8..=30).contains(n))
                .ok_or_else(|| {
                    bad(format!(
                        "gateways: VLAN {vlan}: {a4:?} is not the gateway's IPv4 address and prefix (8..30), as \"198.19.80.254/24\""
                    ))
                })?;
            let ipv6 = match v6.as_slice() {
                [] => None,
                [a6] => Some(ipv6_prefix(a6).ok_or_else(|| {
                    bad(format!(
                        "gateways: VLAN {vlan}: {a6:?} is not the gateway's IPv6 address and prefix (8..126), as \"fd80::1/64\""
                    ))
                })?),
                _ => {
                    return Err(bad(format!(
                        "gateways: VLAN {vlan}: at most one IPv6 address"
                    )))
                }
            };
            if let Some(a) = ipv6 {
                let overlaps =
                    |g: &&Gateway| g.ipv6.is_some_and(|b| within(a.0, b) || within(b.0, a));
                if let Some(g) = gateways.iter().find(overlaps) {
                    return Err(bad(format!(
                        "gateways: VLAN {vlan}'s IPv6 subnet ({}/{}) overlaps VLAN {}'s",
                        a.0, a.1, g.vlan
                    )));
                }
            }
            if let Some(o) = tenants
                .iter()
                .find(|o| o.gateways.iter().any(|g| g.vlan == vlan))
            {
                return Err(bad(format!(
                    "gateways: VLAN {vlan} is tenant {:?}'s already (a segment is one tenant's)",
                    o.name
                )));
            }
            if let Some(g) = gateways
                .iter()
                .find(|g: &&Gateway| within(ipv4.0, g.ipv4) || within(g.ipv4.0, ipv4))
            {
                return Err(bad(format!(
                    "gateways: VLAN {vlan}'s subnet overlaps VLAN {}'s: a tenant's subnets are apart",
                    g.vlan
                )));
            }
            gateways.push(Gateway { vlan, ipv4, ipv6 });
        }
        let mut routes = Vec::new();
        for (i, rt) in t.routes.iter().enumerate() {
            let to = ipv4_prefix(&rt.to).ok_or_else(|| {
                bad(format!(
                    "routes[{i}]: to {:?} is not an IPv4 prefix, as \"0.0.0.0/0\"",
                    rt.to
                ))
            })?;
            let via: Ipv4Addr = rt.via.parse().map_err(|_| {
                bad(format!(
                    "routes[{i}]: via {:?} is not an IPv4 address",
                    rt.via
                ))
            })?;
            if !gateways.iter().any(|g| within(via, g.ipv4)) {
                return Err(bad(format!(
                    "routes[{i}]: via {via} is in none of the tenant's subnets (the next hop is a neighbour)"
                )));
            }
            routes.push(StaticRoute { to, via });
        }
        let l3 = match t.l3_vni {
            None => None,
            Some(vni) => Some(l3_vni(vni, &tenants, &gateways, uplinks, vms).map_err(bad)?),
        };
        tenants.push(Tenant {
            name: t.name.clone(),
            mac,
            gateways,
            routes,
            l3,
        });
    }
    Ok(tenants)
}

/// Tenant's L3 VNI `vni`: the VLAN an EVPN uplink carries it in (its
/// `vlans`), that no VM and no segment of a gateway uses.
fn l3_vni(
    vni: u32,
    tenants: &[Tenant],
    gateways: &[Gateway],
    uplinks: &[Uplink],
    vms: &[Vm],
) -> Result<L3Vni, String> {
    let carried = uplinks
        .iter()
        .filter_map(|u| u.vxlan.as_ref().filter(|v| v.evpn))
        .find_map(|v| v.vlans.iter().find(|(_, n)| *n == vni));
    let Some(&(vlan, _)) = carried else {
        return Err(format!(
            "l3_vni {vni}: no EVPN uplink carries it; map it to a VLAN of its own in [uplink.vxlan] vlans (as 999 = {vni})"
        ));
    };
    if tenants.iter().any(|t| t.l3.is_some()) {
        return Err(
            "l3_vni: one tenant per host is routed across hosts (a Linux VRF device per tenant is what FRR needs for more, and this kernel has none)".into(),
        );
    }
    if gateways.iter().any(|g| g.vlan == vlan) {
        return Err(format!(
            "l3_vni {vni}: its VLAN {vlan} is a segment with a gateway; the L3 VNI's VLAN carries routed frames only"
        ));
    }
    if let Some(vm) = vms.iter().find(|vm| vm.vlans().carries(vlan)) {
        return Err(format!(
            "l3_vni {vni}: VM {:?} is on its VLAN {vlan}, which carries routed frames only",
            vm.name
        ));
    }
    Ok(L3Vni { vni, vlan })
}

/// This host's router MAC: made from the VTEP address of the EVPN uplink
/// that carries a tenant's L3 VNI (unique in the fabric, the same after a
/// restart); the shadow's L3 bridge has it, so FRR advertises it.
pub fn router_mac(tenants: &[Tenant], uplinks: &[Uplink]) -> MacAddr {
    let vtep = tenants
        .iter()
        .filter_map(|t| t.l3)
        .find_map(|l3| {
            uplinks
                .iter()
                .filter_map(|u| u.vxlan.as_ref())
                .find(|v| v.vlans.iter().any(|(_, n)| *n == l3.vni))
        })
        .map(|v| v.local.0);
    match vtep {
        Some(IpAddr::V4(a)) => {
            let o = a.octets();
            MacAddr([0x02, 0x72, o[0], o[1], o[2], o[3]])
        }
        _ => MacAddr([0x02, 0x72, 0, 0, 0, 1]),
    }
}

/// The gateway of `vm`'s segment: its VLAN a tenant's, its IPv4 address
/// in the gateway's subnet.
pub fn gateway_of(tenants: &[Tenant], vm: &Vm) -> Option<Ipv4Addr> {
    let (ip, _) = vm.ipv4?;
    tenants
        .iter()
        .flat_map(|t| &t.gateways)
        .find(|g| g.vlan == vm.vlan && within(ip, g.ipv4))
        .map(|g| g.ipv4.0)
}

/// The IPv6 gateway of `vm`'s segment, where its IPv6 address is in the
/// gateway's subnet.
pub fn gateway6_of(tenants: &[Tenant], vm: &Vm) -> Option<Ipv6Addr> {
    let (ip, _) = vm.ipv6?;
    tenants
        .iter()
        .flat_map(|t| &t.gateways)
        .filter(|g| g.vlan == vm.vlan)
        .find_map(|g| g.ipv6.filter(|p| within(ip, *p)))
        .map(|p| p.0)
}

/// The MAC `vm` sends a frame to `dst` to: its tenant's gateway's where
/// `dst` is off its subnet and its segment has a gateway of that version.
pub fn next_hop_mac(tenants: &[Tenant], vm: &Vm, dst: IpAddr) -> Option<MacAddr> {
    let off_subnet = match dst {
        IpAddr::V4(d) => {
            gateway_of(tenants, vm)?;
            !within(d, vm.ipv4?)
        }
        IpAddr::V6(d) => {
            gateway6_of(tenants, vm)?;
            !within(d, vm.ipv6?)
        }
    };
    if !off_subnet {
        return None;
    }
    tenants
        .iter()
        .find(|t| t.gateways.iter().any(|g| g.vlan == vm.vlan))
        .map(|t| t.mac)
}

/// The router's configuration: the tenants, and each VM's address in a
/// tenant's segment (its VLAN's, within the gateway's subnet).
pub fn router_config(tenants: &[Tenant], vms: &[Vm], uplinks: &[Uplink]) -> Option<RouterConfig> {
    if tenants.is_empty() {
        return None;
    }
    let neighbours = vms
        .iter()
        .flat_map(|vm| {
            let v4 = gateway_of(tenants, vm)
                .and(vm.ipv4)
                .map(|a| IpAddr::V4(a.0));
            let v6 = gateway6_of(tenants, vm)
                .and(vm.ipv6)
                .map(|a| IpAddr::V6(a.0));
            v4.into_iter().chain(v6).map(|ip| (vm.vlan, ip, vm.mac))
        })
        .collect();
    Some(RouterConfig {
        tenants: tenants.to_vec(),
        neighbours,
        router_mac: router_mac(tenants, uplinks),
    })
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::{refused, GOOD};

    const BLUE: &str = "\n[[tenant]]\nname = \"blue\"\ngateways = { 10 = [\"198.19.80.254/24\", \"fd80::1/64\"], 20 = \"198.19.81.254/24\" }\nroutes = [{ to = \"0.0.0.0/0\", via = \"198.19.80.1\" }]\n";

    #[test]
    fn a_tenant_is_read_and_its_vms_are_its_neighbours() {
        let text = GOOD.replace(
            "ipv4 = \"10.1.0.1/24\"",
            "ipv4 = \"198.19.80.1/24\"\nvlan = 10",
        ) + BLUE;
        let t = parse(&text).unwrap();
        assert_eq!(t.tenants.len(), 1);
        let b = &t.tenants[0];
        assert_eq!(b.mac, hvnet_datapath::route::DEFAULT_GATEWAY_MAC);
        assert_eq!(
            b.gateways.iter().map(|g| g.vlan).collect::<Vec<_>>(),
            [10, 20]
        );
        let cfg = t.router_config().unwrap();
        assert_eq!(cfg.neighbours.len(), 1, "vm1 in VLAN 10's subnet");
        assert_eq!(cfg.neighbours[0].0, 10);
    }

    #[test]
    fn bad_tenants_are_refused_with_the_line_and_why() {
        let cases = [
            ("gateways = { 5000 = \"198.19.80.254/24\" }", "outside 1..4094"),
            ("gateways = { 10 = \"198.19.80.254\" }", "prefix"),
            ("gateways = { 10 = \"198.19.80.254/24\", 20 = \"198.19.80.1/16\" }", "overlaps"),
            ("gateways = {}", "at least one segment"),
            ("gateways = { 10 = [\"fd80::1/64\"] }", "one IPv4 address"),
            ("gateways = { 10 = [\"198.19.80.254/24\", \"fd80::1/200\"] }", "IPv6 address and prefix"),
            ("gateways = { 10 = [\"198.19.80.254/24\", \"fd80::1/64\"], 20 = [\"198.19.81.254/24\", \"fd80::9/64\"] }", "IPv6 subnet"),
            ("gateways = { 10 = \"198.19.80.254/24\" }\nroutes = [{ to = \"0.0.0.0/0\", via = \"10.0.0.1\" }]", "none of the tenant's subnets"),
            ("gateways = { 10 = \"198.19.80.254/24\" }\ngateway_mac = \"01:00:5e:00:00:01\"", "unicast"),
        ];
        for (keys, why) in cases {
            let (line, reason) = refused(&format!("{GOOD}\n[[tenant]]\nname = \"t\"\n{keys}\n"));
            assert!(reason.contains(why), "{keys}: {reason}");
            assert!(reason.contains("tenant \"t\""), "{reason}");
            assert!(line > 1, "{reason}");
        }
        let two = format!(
            "{GOOD}{BLUE}\n[[tenant]]\nname = \"red\"\ngateways = {{ 20 = \"10.0.0.1/24\" }}\n"
        );
        assert!(refused(&two).1.contains("tenant \"blue\"'s already"));
    }
}
