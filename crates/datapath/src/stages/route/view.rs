//! The router as `hvnet route` shows it: per tenant its gateways, its
//! routes (connected, static, from the fabric) and its neighbours, as
//! `ip route show vrf` and `ip neigh` list them.

use super::{network, Hop, L3Vni, NeighbourOrigin, RemoteRoute, Router};
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering::Relaxed;

impl Router {
    /// The router as `hvnet route` shows it.
    pub fn view(&self, tenant: Option<&str>) -> RouterView {
        let n = self.neighbours.read().expect("lock");
        let remote = self.remote.read().expect("lock");
        let tenants = self
            .config
            .tenants
            .iter()
            .enumerate()
            .filter(|(_, t)| tenant.is_none_or(|name| t.name == name))
            .map(|(i, t)| {
                let vlans: Vec<u16> = t.gateways.iter().map(|g| g.vlan).collect();
                let mut routes: Vec<RouteView> = t
                    .gateways
                    .iter()
                    .map(|g| RouteView {
                        to: format!("{}/{}", network(g.ipv4.0, g.ipv4.1), g.ipv4.1),
                        via: None,
                        vlan: g.vlan,
                        kind: "connected",
                    })
                    .collect();
                routes.extend(t.gateways.iter().filter_map(|g| {
                    let (a, n) = g.ipv6?;
                    Some(RouteView {
                        to: format!("{}/{n}", network(a, n)),
                        via: None,
                        vlan: g.vlan,
                        kind: "connected",
                    })
                }));
                routes.extend(t.routes.iter().map(|r| {
                    RouteView {
                        to: format!("{}/{}", r.to.0, r.to.1),
                        via: Some(r.via),
                        vlan: self
                            .hop(self.segment(vlans[0]).expect("the tenant's own"), r.via)
                            .vlan()
                            .unwrap_or(0),
                        kind: "static",
                    }
                }));
                let mut neighbours: Vec<NeighbourView> = n
                    .iter()
                    .filter(|((v, _), _)| vlans.contains(v))
                    .map(|(&(vlan, ip), &(mac, origin))| NeighbourView {
                        vlan,
                        ip,
                        mac: mac.to_string(),
                        origin,
                    })
                    .collect();
                neighbours.sort_by_key(|x| (x.vlan, x.ip));
                let mut from_fabric = remote[i].clone();
                from_fabric.sort_by_key(|r| r.to);
                TenantView {
                    name: t.name.clone(),
                    l3: t.l3,
                    remote: from_fabric,
                    gateway_mac: t.mac.to_string(),
                    gateways: t
                        .gateways
                        .iter()
                        .flat_map(|g| {
                            let v6 = g.ipv6.map(|(a, n)| (g.vlan, format!("{a}/{n}")));
                            std::iter::once((g.vlan, format!("{}/{}", g.ipv4.0, g.ipv4.1)))
                                .chain(v6)
                        })
                        .collect(),
                    routes,
                    neighbours,
                }
            })
            .collect();
        let c = &self.counters;
        RouterView {
            router_mac: self.config.router_mac.to_string(),
            tenants,
            routed: c.routed.load(Relaxed),
            gateway_arp: c.gateway_arp.load(Relaxed),
            gateway_echo: c.gateway_echo.load(Relaxed),
            arp_requests_sent: c.arp_requests_sent.load(Relaxed),
            neighbours_refused: c.neighbours_refused.load(Relaxed),
        }
    }
}

impl Hop {
    fn vlan(self) -> Option<u16> {
        match self {
            Hop::Via { vlan, .. } => Some(vlan),
            _ => None,
        }
    }
}

/// A tenant's routes and neighbours, as `ip route show vrf` and `ip neigh`.
#[derive(Clone, Debug, Serialize)]
pub struct TenantView {
    /// Its name.
    pub name: String,
    /// Its anycast gateway MAC.
    pub gateway_mac: String,
    /// Per segment (VLAN), the gateway's address.
    pub gateways: Vec<(u16, String)>,
    /// Its routes: connected, then static.
    pub routes: Vec<RouteView>,
    /// Routed across hosts: its L3 VNI.
    pub l3: Option<L3Vni>,
    /// The routes the fabric advertised (through the L3 VNI).
    pub remote: Vec<RemoteRoute>,
    /// Its neighbours.
    pub neighbours: Vec<NeighbourView>,
}

/// One route.
#[derive(Clone, Debug, Serialize)]
pub struct RouteView {
    /// The prefix.
    pub to: String,
    /// The next hop (none: connected).
    pub via: Option<Ipv4Addr>,
    /// The segment it leaves into (0: none reachable).
    pub vlan: u16,
    /// "connected" or "static".
    pub kind: &'static str,
}

/// One neighbour.
#[derive(Clone, Debug, Serialize)]
pub struct NeighbourView {
    /// Its segment.
    pub vlan: u16,
    /// Its address.
    pub ip: IpAddr,
    /// Its MAC.
    pub mac: String,
    /// Where it came from.
    pub origin: NeighbourOrigin,
}

/// The router's view.
#[derive(Clone, Debug, Serialize)]
pub struct RouterView {
    /// This host's router MAC (symmetric IRB).
    pub router_mac: String,
    /// Each tenant.
    pub tenants: Vec<TenantView>,
    /// Frames routed.
    pub routed: u64,
    /// ARP requests for a gateway answered.
    pub gateway_arp: u64,
    /// Echo requests to a gateway answered.
    pub gateway_echo: u64,
    /// ARP requests sent for unresolved next hops.
    pub arp_requests_sent: u64,
    /// Learned neighbours refused (the table full).
    pub neighbours_refused: u64,
}
