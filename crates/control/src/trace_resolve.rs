//! A FLOW's names made addresses, for `hvnet trace PORT FLOW`: the
//! sender is the traced port's VM unless `src=` says otherwise; a VM's or
//! an external host's name gives its MAC and address; a destination's MAC
//! is its VM's, a group's, broadcast for ARP, an address EVPN advertised,
//! or `dmac=`.

use crate::flow_spec::{self, FlowSpec, Host, Proto, Resolved};
use crate::topology::Topology;
use hvnet_datapath::Switch;
use hvnet_wire::MacAddr;
use std::net::IpAddr;

/// A VM's (or an external host's) MAC and address by name, or the MAC of
/// a port the topology does not name.
fn named(sw: &Switch, topo: &Topology, name: &str) -> Option<(MacAddr, Option<IpAddr>)> {
    let ip = |v4: Option<(std::net::Ipv4Addr, u8)>, v6: Option<(std::net::Ipv6Addr, u8)>| {
        v4.map(|a| IpAddr::V4(a.0)).or(v6.map(|a| IpAddr::V6(a.0)))
    };
    if let Some(vm) = topo.vms.iter().find(|v| v.name == name) {
        return Some((vm.mac, ip(vm.ipv4, vm.ipv6)));
    }
    if let Some(h) = topo.hosts.iter().find(|h| h.name == name) {
        return Some((h.mac, ip(h.ipv4, h.ipv6)));
    }
    sw.port(name).map(|p| (p.mac, None))
}

/// The IPv6 (`v6`) or IPv4 address of the VM or host named `name`.
fn address_of(topo: &Topology, name: &str, v6: bool) -> Option<IpAddr> {
    let pick = |v4: Option<(std::net::Ipv4Addr, u8)>, v6a: Option<(std::net::Ipv6Addr, u8)>| {
        if v6 {
            v6a.map(|a| IpAddr::V6(a.0))
        } else {
            v4.map(|a| IpAddr::V4(a.0))
        }
    };
    if let Some(vm) = topo.vms.iter().find(|v| v.name == name) {
        return pick(vm.ipv4, vm.ipv6);
    }
    let h = topo.hosts.iter().find(|h| h.name == name)?;
    pick(h.ipv4, h.ipv6)
}

/// The VM or host of the topology with address `ip`: its MAC.
pub(crate) fn mac_of(topo: &Topology, ip: IpAddr) -> Option<MacAddr> {
    let has = |v4: Option<(std::net::Ipv4Addr, u8)>, v6: Option<(std::net::Ipv6Addr, u8)>| match ip
    {
        IpAddr::V4(a) => v4.is_some_and(|x| x.0 == a),
        IpAddr::V6(a) => v6.is_some_and(|x| x.0 == a),
    };
    let vm = topo.vms.iter().find(|v| has(v.ipv4, v.ipv6)).map(|v| v.mac);
    vm.or_else(|| {
        topo.hosts
            .iter()
            .find(|h| has(h.ipv4, h.ipv6))
            .map(|h| h.mac)
    })
}

/// A FLOW's names and defaults made addresses: the sender is the traced
/// port's VM unless `src=` says otherwise; a destination's MAC is its
/// VM's, a group's, or `dmac=`.
pub fn resolve(
    sw: &Switch,
    topo: &Topology,
    port: &str,
    s: &FlowSpec,
) -> Result<Resolved, flow_spec::FlowError> {
    let err = |reason: String| flow_spec::FlowError {
        word: String::new(),
        reason,
    };
    let end = |h: &Host,
               what: &str|
     -> Result<(Option<MacAddr>, Option<IpAddr>), flow_spec::FlowError> {
        Ok(match h {
            Host::Mac(m) => (Some(*m), None),
            Host::Ip(ip) => (None, Some(*ip)),
            Host::Name(n) => {
                let (m, ip) = named(sw, topo, n).ok_or_else(|| {
                    let mut names: Vec<&str> = topo.vms.iter().map(|v| v.name.as_str()).collect();
                    names.extend(topo.hosts.iter().map(|h| h.name.as_str()));
                    err(format!(
                        "{what}={n}: no VM, host or port of that name (the VMs and hosts: {})",
                        names.join(", ")
                    ))
                })?;
                (Some(m), ip)
            }
        })
    };
    let own = Host::Name(port.to_string());
    let (smac, sip) = end(s.src.as_ref().unwrap_or(&own), "src")?;
    let smac = s
        .smac
        .or(smac)
        .or_else(|| sw.port(port).map(|p| p.mac))
        .unwrap_or_default();
    let (dmac, dip) = match &s.dst {
        Some(h) => end(h, "dst")?,
        None => (None, None),
    };
    let group = dip
        .filter(|ip| ip.is_multicast())
        .map(|ip| MacAddr(hvnet_wire::membership::group_mac(ip)));
    let bcast = dip
        .filter(|ip| *ip == IpAddr::V4(std::net::Ipv4Addr::BROADCAST))
        .map(|_| MacAddr::BROADCAST);
    let arp = (s.proto == Some(Proto::Arp)).then_some(MacAddr::BROADCAST);
    // Off its subnet in a tenant's segment, a guest sends to its gateway.
    let routed = match (topo.vms.iter().find(|v| v.name == port), dip) {
        (Some(vm), Some(d)) if s.src.is_none() => topo.next_hop_mac(vm, d),
        _ => None,
    };
    let dmac = s
        .dmac
        .or(arp)
        .or(routed)
        .or(dmac)
        .or(group)
        .or(bcast)
        .or_else(|| dip.and_then(|ip| mac_of(topo, ip)))
        .or_else(|| {
            // A VM behind a tunnel the fabric advertised (EVPN).
            let ip = dip?;
            sw.ports().iter().find_map(|p| {
                let e = sw.endpoint(p.id)?;
                e.segments()
                    .into_iter()
                    .find_map(|(_, vni)| e.evpn_resolve(vni, ip))
            })
        });
    let Some(dmac) = dmac else {
        return Err(err(match dip {
            Some(ip) => format!("no VM or host here has {ip}: give its MAC with dmac="),
            None => "name the receiver: dst= (an address or a VM) or dmac=".into(),
        }));
    };
    if smac == MacAddr::default() {
        return Err(err(format!(
            "{port} has no MAC of its own (an uplink): give smac= or src="
        )));
    }
    // A named sender speaks the destination's IP version where it has
    // an address of it (a dual-stack VM).
    let sip = match (s.src.as_ref().unwrap_or(&own), sip, dip) {
        (Host::Name(n), Some(a), Some(b)) if a.is_ipv6() != b.is_ipv6() => {
            address_of(topo, n, b.is_ipv6()).or(Some(a))
        }
        _ => sip,
    };
    let ips = match (sip, dip) {
        (Some(a), Some(b)) if a.is_ipv6() == b.is_ipv6() => Some((a, b)),
        (Some(_), Some(_)) => return Err(err("src and dst are of different IP versions".into())),
        (None, Some(_)) => {
            return Err(err(
                "the sender's IP address is not known: give src= an address".into(),
            ))
        }
        _ => None,
    };
    Ok(Resolved {
        smac,
        dmac,
        vlan: s.vlan,
        ips,
    })
}
