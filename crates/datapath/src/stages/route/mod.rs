//! Routing at the edge: a distributed gateway per tenant, as an EVPN
//! fabric of Linux hosts with FRR, NSX's distributed router and OVN's
//! logical routers give every host. Each of a tenant's segments (VLANs)
//! has an anycast gateway — the same IP and MAC on every host — which the
//! switch answers itself (ARP for it, and ping); a frame a VM sends to
//! the gateway's MAC is routed here, between the tenant's segments: its
//! TTL (hop limit) decremented, its MACs rewritten, its checksums kept
//! (the IPv4 header's updated in place; a TSO frame routed whole) and
//! its VLAN changed, then switched in its new VLAN as any other frame.
//!
//! Tenants are VRFs: a tenant's routes reach only its own segments, so
//! two tenants' overlapping subnets never meet. A destination's MAC comes
//! from what the switch already knows — the VMs' addresses in the
//! topology, what BGP EVPN advertised (MAC/IP routes), ARP seen at the
//! gateway — or, on a miss, from an ARP request the gateway sends into
//! the destination's segment (the frame that missed is dropped, counted,
//! as a router without a queue of its own drops it).
//!
//! IPv4 and IPv6 are routed within a host (a segment's IPv6 gateway
//! answers neighbour solicitations, its hop limit is decremented, ICMPv6
//! time exceeded sent back); across hosts (the L3 VNI), IPv4.

pub(crate) mod frames;
pub(crate) mod stage;
mod view;

pub use view::{NeighbourView, RouteView, RouterView, TenantView};

use crate::settings::values::Cidr;
use hvnet_wire::MacAddr;
use serde::Serialize;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Neighbours remembered, at most (what a guest makes up cannot grow it
/// without bound: past this, new learned entries are refused, counted).
pub const MAX_NEIGHBOURS: usize = 16384;
/// How often an unresolved next hop is asked for again, at most.
const ASK_EVERY: Duration = Duration::from_millis(500);
/// The anycast gateway's MAC when the topology names none: one value on
/// every host of the fabric.
pub const DEFAULT_GATEWAY_MAC: MacAddr = MacAddr([0x02, 0x68, 0x76, 0x00, 0x00, 0x01]);

/// One segment's gateway: its VLAN and its address on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Gateway {
    /// The switch's VLAN the segment is.
    pub vlan: u16,
    /// The gateway's address and the subnet's prefix length.
    pub ipv4: (Ipv4Addr, u8),
    /// Its IPv6 address and prefix, for a dual-stack segment.
    pub ipv6: Option<(Ipv6Addr, u8)>,
}

/// A static route of a tenant: `to` (a prefix) through next hop `via`,
/// an address in one of the tenant's subnets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StaticRoute {
    /// The destination prefix (0.0.0.0/0: the default route).
    pub to: (Ipv4Addr, u8),
    /// The next hop.
    pub via: Ipv4Addr,
}

/// A tenant (a VRF): its segments' gateways and its static routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant {
    /// Its name.
    pub name: String,
    /// The anycast gateway MAC of all its segments.
    pub mac: MacAddr,
    /// Its segments' gateways.
    pub gateways: Vec<Gateway>,
    /// Its static routes.
    pub routes: Vec<StaticRoute>,
    /// Routed across hosts (symmetric IRB): its L3 VNI and the switch's
    /// VLAN the tunnel carries it in.
    pub l3: Option<L3Vni>,
}

/// A tenant's L3 VNI (RFC 9135's symmetric IRB): routed frames between
/// hosts cross in it, from one host's router MAC to another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct L3Vni {
    /// The VNI.
    pub vni: u32,
    /// The switch's VLAN the tunnel endpoint carries it in.
    pub vlan: u16,
}

/// What the router is told: the tenants, the addresses the topology
/// knows of its VMs (VLAN, IP, MAC), and this host's router MAC (what
/// routed frames between hosts are sent from and to).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouterConfig {
    /// The tenants.
    pub tenants: Vec<Tenant>,
    /// Neighbours known from the topology.
    pub neighbours: Vec<(u16, IpAddr, MacAddr)>,
    /// This host's router MAC (its L3 VNIs' side of symmetric IRB).
    pub router_mac: MacAddr,
}

/// A route the fabric advertised to a tenant (BGP EVPN: a type-2 host
/// route or a type-5 prefix): through the L3 VNI to a remote endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RemoteRoute {
    /// The destination prefix.
    pub to: (Ipv4Addr, u8),
    /// The remote endpoint (VTEP) it is behind.
    pub vtep: IpAddr,
}

/// Where a neighbour entry came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NeighbourOrigin {
    /// The topology (a VM's address).
    Static,
    /// ARP seen at the gateway.
    Learned,
}

/// The router's counters (switch-wide; a port's own count its frames).
#[derive(Default, Debug)]
pub struct RouterCounters {
    /// Frames routed.
    pub routed: AtomicU64,
    /// ARP requests for a gateway answered.
    pub gateway_arp: AtomicU64,
    /// Echo requests to a gateway answered.
    pub gateway_echo: AtomicU64,
    /// ARP requests sent for unresolved next hops.
    pub arp_requests_sent: AtomicU64,
    /// Learned neighbours refused: the table was full.
    pub neighbours_refused: AtomicU64,
}

/// A segment as the stage looks it up by VLAN: one of a tenant's with its
/// gateway, or (`gateway` none) its L3 VNI's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    tenant: usize,
    gateway: Option<Ipv4Addr>,
    gateway6: Option<Ipv6Addr>,
}

/// The router: a stage service (on every VM port's arc while tenants are
/// configured).
pub struct Router {
    /// What it was configured with.
    pub config: RouterConfig,
    /// Per VLAN, its segment.
    segments: HashMap<u16, Segment>,
    neighbours: RwLock<HashMap<(u16, IpAddr), (MacAddr, NeighbourOrigin)>>,
    /// Next hops asked for, and when.
    asked: Mutex<HashMap<(u16, IpAddr), Instant>>,
    /// Per tenant, the routes the fabric advertised.
    remote: RwLock<Vec<Vec<RemoteRoute>>>,
    /// Its counters.
    pub counters: RouterCounters,
}

impl crate::engine::services::Service for Router {}

/// What a lookup found for a frame's destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hop {
    /// Out into segment `vlan`, to next hop `ip` (the destination itself
    /// where its subnet is the segment's).
    Via { vlan: u16, ip: Ipv4Addr },
    /// Through the tenant's L3 VNI to remote endpoint `vtep` (symmetric
    /// IRB): in its VLAN `vlan`, to that host's router MAC.
    Remote { vni: u32, vlan: u16, vtep: IpAddr },
    /// To a gateway address of the tenant itself.
    Gateway,
    /// No route in the tenant.
    None,
}

/// What a lookup found for an IPv6 frame's destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hop6 {
    /// Out into segment `vlan`, to `ip`.
    Via { vlan: u16, ip: Ipv6Addr },
    /// To a gateway address of the tenant itself.
    Gateway,
    /// No route in the tenant.
    None,
}

/// True if `a` is in `net`'s `prefix`-bit subnet.
pub fn within(a: impl Into<IpAddr>, net: impl Into<IpAddr>, prefix: u8) -> bool {
    Cidr::prefix(net.into(), prefix).contains(a.into())
}

/// The network address of `a`'s `prefix`-bit subnet.
pub fn network(a: impl Into<IpAddr>, prefix: u8) -> IpAddr {
    Cidr::prefix(a.into(), prefix).network()
}

impl Router {
    /// A router for `config`.
    pub fn new(config: RouterConfig) -> Router {
        let mut segments = HashMap::new();
        for (t, tenant) in config.tenants.iter().enumerate() {
            for g in &tenant.gateways {
                segments.insert(
                    g.vlan,
                    Segment {
                        tenant: t,
                        gateway: Some(g.ipv4.0),
                        gateway6: g.ipv6.map(|a| a.0),
                    },
                );
            }
            if let Some(l3) = tenant.l3 {
                segments.insert(
                    l3.vlan,
                    Segment {
                        tenant: t,
                        gateway: None,
                        gateway6: None,
                    },
                );
            }
        }
        let remote = RwLock::new(vec![Vec::new(); config.tenants.len()]);
        let neighbours = config
            .neighbours
            .iter()
            .take(MAX_NEIGHBOURS)
            .map(|&(vlan, ip, mac)| ((vlan, ip), (mac, NeighbourOrigin::Static)))
            .collect();
        Router {
            config,
            segments,
            neighbours: RwLock::new(neighbours),
            asked: Mutex::default(),
            remote,
            counters: RouterCounters::default(),
        }
    }

    /// This host's router MAC.
    pub(crate) fn router_mac(&self) -> MacAddr {
        self.config.router_mac
    }

    /// Installs (or, `present` false, withdraws) a route the fabric
    /// advertised to the tenant of L3 VNI `vni`; false if no tenant has
    /// that VNI or the table is full.
    pub fn set_remote(&self, vni: u32, route: RemoteRoute, present: bool) -> bool {
        let Some(t) = self
            .config
            .tenants
            .iter()
            .position(|t| t.l3.is_some_and(|l| l.vni == vni))
        else {
            return false;
        };
        let mut all = self.remote.write().expect("lock");
        let total: usize = all.iter().map(Vec::len).sum();
        let list = &mut all[t];
        let at = list.iter().position(|r| r.to == route.to);
        match (at, present) {
            (Some(i), true) => list[i] = route,
            (None, true) if total >= MAX_NEIGHBOURS => return false,
            (None, true) => list.push(route),
            (Some(i), false) => {
                list.swap_remove(i);
            }
            (None, false) => {}
        }
        true
    }

    /// What the router before this one learned and was told, kept when
    /// the router is configured again: the neighbours learned from ARP
    /// and ND in the segments that are still a tenant's (the topology's
    /// own entries win), and the routes the fabric advertised, per tenant.
    fn take_over(&self, from: &Router) {
        {
            let old = from.neighbours.read().expect("lock");
            let mut new = self.neighbours.write().expect("lock");
            let learned = old.iter().filter(|((vlan, _), (_, origin))| {
                *origin == NeighbourOrigin::Learned && self.segments.contains_key(vlan)
            });
            for (&key, &entry) in learned {
                if new.len() >= MAX_NEIGHBOURS {
                    break;
                }
                new.entry(key).or_insert(entry);
            }
        }
        let old = from.remote.read().expect("lock");
        let mut new = self.remote.write().expect("lock");
        for (t, tenant) in self.config.tenants.iter().enumerate() {
            if let Some(o) = from
                .config
                .tenants
                .iter()
                .position(|x| x.l3 == tenant.l3 && tenant.l3.is_some())
            {
                new[t] = old[o].clone();
            }
        }
    }

    /// The segment VLAN `vlan` is, if a tenant's.
    pub(crate) fn segment(&self, vlan: u16) -> Option<Segment> {
        self.segments.get(&vlan).copied()
    }

    /// The gateway MAC of segment `s`'s tenant.
    pub(crate) fn mac(&self, s: Segment) -> MacAddr {
        self.config.tenants[s.tenant].mac
    }

    /// Where a frame from segment `from` to `dst` goes: the longest
    /// prefix of the tenant's connected subnets and what the fabric
    /// advertised (a connected one where equal: the host routes of remote
    /// VMs win over their subnet, here as at every host), then its static
    /// routes.
    pub(crate) fn hop(&self, from: Segment, dst: Ipv4Addr) -> Hop {
        let tenant = &self.config.tenants[from.tenant];
        if tenant.gateways.iter().any(|g| g.ipv4.0 == dst) {
            return Hop::Gateway;
        }
        let connected = |ip: Ipv4Addr| {
            tenant
                .gateways
                .iter()
                .filter(|g| within(ip, g.ipv4.0, g.ipv4.1))
                .max_by_key(|g| g.ipv4.1)
                .map(|g| (g.vlan, g.ipv4.1))
        };
        let local = connected(dst);
        if let Some(l3) = tenant.l3 {
            let remote = self.remote.read().expect("lock");
            let best = remote[from.tenant]
                .iter()
                .filter(|r| within(dst, r.to.0, r.to.1))
                .max_by_key(|r| r.to.1);
            if let Some(r) = best.filter(|r| local.is_none_or(|(_, n)| r.to.1 > n)) {
                return Hop::Remote {
                    vni: l3.vni,
                    vlan: l3.vlan,
                    vtep: r.vtep,
                };
            }
        }
        if let Some((vlan, _)) = local {
            return Hop::Via { vlan, ip: dst };
        }
        let route = tenant
            .routes
            .iter()
            .filter(|r| within(dst, r.to.0, r.to.1))
            .max_by_key(|r| r.to.1);
        match route.and_then(|r| Some((connected(r.via)?, r.via))) {
            Some(((vlan, _), ip)) => Hop::Via { vlan, ip },
            None => Hop::None,
        }
    }

    /// Where an IPv6 frame from segment `from` to `dst` goes: the longest
    /// of the tenant's connected IPv6 subnets (IPv6 is not routed across
    /// hosts, nor by static routes).
    pub(crate) fn hop6(&self, from: Segment, dst: Ipv6Addr) -> Hop6 {
        let tenant = &self.config.tenants[from.tenant];
        let subnets = tenant
            .gateways
            .iter()
            .filter_map(|g| Some((g.vlan, g.ipv6?)));
        if subnets.clone().any(|(_, (a, _))| a == dst) {
            return Hop6::Gateway;
        }
        subnets
            .filter(|(_, (a, n))| within(dst, *a, *n))
            .max_by_key(|(_, (_, n))| *n)
            .map_or(Hop6::None, |(vlan, _)| Hop6::Via { vlan, ip: dst })
    }

    /// The MAC of `ip` in segment `vlan`, if known here.
    pub(crate) fn neighbour(&self, vlan: u16, ip: IpAddr) -> Option<MacAddr> {
        self.neighbours
            .read()
            .expect("lock")
            .get(&(vlan, ip))
            .map(|&(m, _)| m)
    }

    /// Learns `ip` at `mac` in segment `vlan` (seen in ARP at the
    /// gateway); a static entry is not overridden.
    pub(crate) fn learn(&self, vlan: u16, ip: IpAddr, mac: MacAddr) {
        if mac.is_multicast() || mac.0 == [0; 6] {
            return;
        }
        if let Some(&(m, o)) = self.neighbours.read().expect("lock").get(&(vlan, ip)) {
            if m == mac || o == NeighbourOrigin::Static {
                return;
            }
        }
        let mut t = self.neighbours.write().expect("lock");
        if t.len() >= MAX_NEIGHBOURS && !t.contains_key(&(vlan, ip)) {
            self.counters.neighbours_refused.fetch_add(1, Relaxed);
            return;
        }
        t.insert((vlan, ip), (mac, NeighbourOrigin::Learned));
        self.asked
            .lock()
            .expect("lock")
            .retain(|&k, _| k != (vlan, ip));
    }

    /// True if the gateway should ask for `ip` in `vlan` now (not asked
    /// within [`ASK_EVERY`]); the asking is remembered.
    pub(crate) fn should_ask(&self, vlan: u16, ip: IpAddr, now: Instant) -> bool {
        let mut a = self.asked.lock().expect("lock");
        if a.len() >= MAX_NEIGHBOURS {
            a.retain(|_, t| now.duration_since(*t) < ASK_EVERY);
        }
        match a.get(&(vlan, ip)) {
            Some(t) if now.duration_since(*t) < ASK_EVERY => false,
            _ => {
                a.insert((vlan, ip), now);
                true
            }
        }
    }
}

/// Configures switch `sw`'s router (None: routing off), replacing the one
/// it had unless the configuration is the same; a new one keeps what the
/// old one learned (neighbours in the segments it still has, the
/// fabric's routes).
pub fn set(sw: &crate::Switch, cfg: Option<RouterConfig>) {
    let old = current(sw);
    if old.as_ref().map(|r| r.config.clone()) == cfg {
        return;
    }
    let next = cfg.filter(|c| !c.tenants.is_empty()).map(|c| {
        let r = Router::new(c);
        if let Some(o) = &old {
            r.take_over(o);
        }
        Arc::new(r)
    });
    sw.replace_service(next);
}

/// Switch `sw`'s router, when on.
pub fn current(sw: &crate::Switch) -> Option<Arc<Router>> {
    sw.services.get::<Router>()
}

#[cfg(test)]
mod tests;
