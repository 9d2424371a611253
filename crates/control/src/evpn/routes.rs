//! A tenant's routes from the fabric (symmetric IRB): what zebra installs
//! in the kernel through the L3 VNI's shadow bridge — a type-2 MAC/IP
//! route as a host route, a type-5 prefix as itself, each `via` the remote
//! VTEP, `onlink` — followed over rtnetlink into the router, as the
//! remote MACs are into the tunnel endpoint. zebra writes them with plain
//! next hops (`no zebra nexthop kernel enable`): a route naming a nexthop
//! object says no VTEP here, and is not taken.

use crate::rtnl::{NetlinkError, Rtnl};
use hvnet_datapath::route::RemoteRoute;
use hvnet_datapath::Switch;
use netlink_packet_core::NLM_F_DUMP;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// The routes installed through the bridge, by prefix; and which router
/// they were given to (a new one, after `hvnet up` changed the tenants,
/// is given them all again).
#[derive(Default)]
pub(super) struct Routes {
    by_prefix: HashMap<(Ipv4Addr, u8), IpAddr>,
    router: Option<usize>,
}

impl Routes {
    /// Gives the router every route again if it is a new one.
    pub(super) fn follow_router(&mut self, sw: &Switch, vni: u32) {
        let now = hvnet_datapath::route::current(sw);
        let id = now.as_ref().map(|r| Arc::as_ptr(r) as usize);
        if id == self.router {
            return;
        }
        self.router = id;
        if let Some(r) = now {
            for (&to, &vtep) in &self.by_prefix {
                r.set_remote(vni, RemoteRoute { to, vtep }, true);
            }
        }
    }

    /// The routes now are `list` (a fresh dump): those gone withdrawn.
    pub(super) fn replace(&mut self, sw: &Switch, vni: u32, bridge: u32, list: &[RouteMessage]) {
        let old = std::mem::take(&mut self.by_prefix);
        for m in list {
            self.apply(sw, vni, bridge, m, true);
        }
        let gone: Vec<_> = old
            .into_iter()
            .filter(|(p, _)| !self.by_prefix.contains_key(p))
            .collect();
        if let Some(r) = hvnet_datapath::route::current(sw) {
            for (to, vtep) in gone {
                r.set_remote(vni, RemoteRoute { to, vtep }, false);
            }
        }
    }

    /// Installs or withdraws what route message `m` says, if it is one
    /// through the L3 VNI's bridge (interface `bridge`).
    pub(super) fn apply(
        &mut self,
        sw: &Switch,
        vni: u32,
        bridge: u32,
        m: &RouteMessage,
        new: bool,
    ) {
        let Some((to, vtep)) = remote_route(m, bridge) else {
            return;
        };
        if new {
            self.by_prefix.insert(to, vtep);
        } else {
            self.by_prefix.remove(&to);
        }
        if let Some(r) = hvnet_datapath::route::current(sw) {
            if !r.set_remote(vni, RemoteRoute { to, vtep }, new) {
                tracing::debug!(prefix = %to.0, len = to.1, "EVPN: a remote route not installed (no tenant, or the table full)");
            }
        }
    }
}

/// An IPv4 route through `bridge` via a VTEP: its prefix and the VTEP.
fn remote_route(m: &RouteMessage, bridge: u32) -> Option<((Ipv4Addr, u8), IpAddr)> {
    if m.header.address_family != AddressFamily::Inet {
        return None;
    }
    let mut oif = None;
    let mut gateway = None;
    let mut dst = Ipv4Addr::UNSPECIFIED;
    for a in &m.attributes {
        match a {
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Gateway(RouteAddress::Inet(g)) => gateway = Some(IpAddr::V4(*g)),
            RouteAttribute::Destination(RouteAddress::Inet(d)) => dst = *d,
            _ => {}
        }
    }
    (oif == Some(bridge)).then_some(())?;
    Some(((dst, m.header.destination_prefix_length), gateway?))
}

/// Every IPv4 route of the namespace (the sync keeps those through the
/// bridge).
pub(super) fn dump(rtnl: &mut Rtnl) -> Result<Vec<RouteMessage>, NetlinkError> {
    let mut m = RouteMessage::default();
    m.header.address_family = AddressFamily::Inet;
    Ok(rtnl
        .request("list routes", RouteNetlinkMessage::GetRoute(m), NLM_F_DUMP)?
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) => Some(r),
            _ => None,
        })
        .collect())
}
