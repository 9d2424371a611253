//! The shadow devices of an EVPN uplink and the entries hvnet writes on
//! them, as rtnetlink requests.

use crate::rtnl::{LinkChange, NetlinkError, Rtnl};
use hvnet_wire::MacAddr;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_REPLACE};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVxlan, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::net::{IpAddr, Ipv4Addr};

/// The shadow's device names for one VNI (at most 12 characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShadowNames {
    /// The bridge (zebra's SVI for the VNI).
    pub bridge: String,
    /// The `vxlan` device.
    pub vxlan: String,
    /// The bridge port carrying the VMs' MACs.
    pub port: String,
    /// Its veth peer (up, for carrier).
    pub peer: String,
}

/// The names for VNI `vni`.
pub fn shadow_names(vni: u32) -> ShadowNames {
    ShadowNames {
        bridge: format!("hvb-{vni}"),
        vxlan: format!("hvx-{vni}"),
        port: format!("hvp-{vni}"),
        peer: format!("hvq-{vni}"),
    }
}

impl ShadowNames {
    /// Every device, in the order they are made.
    pub fn all(&self) -> [&str; 4] {
        [&self.bridge, &self.vxlan, &self.port, &self.peer]
    }
}

/// Creates the shadow of VNI `vni` with VTEP address `local`, each device
/// given alias `marker` (so `hvnet down` knows them as the topology's),
/// without IPv6 addresses before it comes up.
pub fn create(
    rtnl: &mut Rtnl,
    n: &ShadowNames,
    vni: u32,
    local: Ipv4Addr,
    marker: &str,
) -> Result<(), NetlinkError> {
    let link = |name: &str, info: Vec<LinkInfo>| {
        let mut m = LinkMessage::default();
        m.attributes = vec![
            LinkAttribute::IfName(name.into()),
            LinkAttribute::LinkInfo(info),
        ];
        RouteNetlinkMessage::NewLink(m)
    };
    rtnl.create(
        &format!("create bridge {}", n.bridge),
        link(&n.bridge, vec![LinkInfo::Kind(InfoKind::Bridge)]),
    )?;
    rtnl.create(
        &format!("create vxlan device {}", n.vxlan),
        link(
            &n.vxlan,
            vec![
                LinkInfo::Kind(InfoKind::Vxlan),
                LinkInfo::Data(InfoData::Vxlan(vec![
                    InfoVxlan::Id(vni),
                    InfoVxlan::Local(local),
                    InfoVxlan::Port(crate::topology::SHADOW_PORT),
                    InfoVxlan::Learning(false),
                ])),
            ],
        ),
    )?;
    let here =
        std::fs::File::open("/proc/thread-self/ns/net").map_err(|source| NetlinkError::Io {
            op: "open this network namespace".into(),
            source,
        })?;
    rtnl.add_veth(&n.port, 1500, &n.peer, &here)?;
    for dev in n.all() {
        quiet_ipv6(dev, dev == n.bridge);
        rtnl.set_link(
            dev,
            &LinkChange {
                alias: Some(marker),
                ..Default::default()
            },
        )?;
    }
    let bridge = rtnl.index(&n.bridge)?;
    for dev in [&n.vxlan, &n.port] {
        set_master(rtnl, dev, bridge)?;
    }
    for dev in n.all() {
        rtnl.set_link(
            dev,
            &LinkChange {
                up: Some(true),
                ..Default::default()
            },
        )?;
    }
    Ok(())
}

/// No IPv6 address on `dev`, so that nothing (router or neighbour
/// solicitations, listener reports) is ever sent through the shadow: IPv6
/// off, or on the bridge (`keep`: it holds the VMs' and the remote IPv6
/// neighbours) on without addresses (`addr_gen_mode` none).
fn quiet_ipv6(dev: &str, keep: bool) {
    let conf = format!("/proc/sys/net/ipv6/conf/{dev}");
    if keep {
        let _ = std::fs::write(format!("{conf}/addr_gen_mode"), "1");
        let _ = std::fs::write(format!("{conf}/accept_ra"), "0");
        // On even where the host turned IPv6 off for every new device.
        let _ = std::fs::write(format!("{conf}/disable_ipv6"), "0");
    } else {
        let _ = std::fs::write(format!("{conf}/disable_ipv6"), "1");
    }
}

fn set_master(rtnl: &mut Rtnl, dev: &str, master: u32) -> Result<(), NetlinkError> {
    let mut m = LinkMessage::default();
    m.header.index = rtnl.index(dev)?;
    m.attributes.push(LinkAttribute::Controller(master));
    rtnl.request(
        &format!("attach {dev} to its bridge"),
        RouteNetlinkMessage::SetLink(m),
        0,
    )
    .map(drop)
}

/// A bridge FDB entry for `mac` on port `ifindex`: `static` (advertised by
/// zebra; a plain permanent entry is not, a dynamic one ages).
fn fdb_entry(ifindex: u32, mac: MacAddr) -> NeighbourMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = AddressFamily::Bridge;
    m.header.ifindex = ifindex;
    m.header.state = NeighbourState::Noarp;
    m.header.flags = NeighbourFlags::Controller;
    m.attributes
        .push(NeighbourAttribute::LinkLayerAddress(mac.0.to_vec()));
    m
}

/// Adds (`add`) or removes a VM's MAC on the shadow's port.
pub fn set_local_mac(
    rtnl: &mut Rtnl,
    port: u32,
    mac: MacAddr,
    add: bool,
) -> Result<(), NetlinkError> {
    write(rtnl, fdb_entry(port, mac), &format!("MAC {mac}"), add)
}

/// Adds or removes a VM's IP as a static neighbour on the shadow's bridge.
pub fn set_local_ip(
    rtnl: &mut Rtnl,
    bridge: u32,
    ip: IpAddr,
    mac: MacAddr,
    add: bool,
) -> Result<(), NetlinkError> {
    let mut m = NeighbourMessage::default();
    m.header.family = crate::rtnl::family_of(ip);
    m.header.ifindex = bridge;
    m.header.state = NeighbourState::Noarp;
    m.attributes.push(NeighbourAttribute::Destination(match ip {
        IpAddr::V4(a) => NeighbourAddress::Inet(a),
        IpAddr::V6(a) => NeighbourAddress::Inet6(a),
    }));
    m.attributes
        .push(NeighbourAttribute::LinkLayerAddress(mac.0.to_vec()));
    write(rtnl, m, &ip.to_string(), add)
}

/// Adds (replacing) or deletes one entry; `what` names it in errors.
fn write(rtnl: &mut Rtnl, m: NeighbourMessage, what: &str, add: bool) -> Result<(), NetlinkError> {
    let (op, msg, flags) = if add {
        (
            "advertise",
            RouteNetlinkMessage::NewNeighbour(m),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    } else {
        ("withdraw", RouteNetlinkMessage::DelNeighbour(m), 0)
    };
    rtnl.request(&format!("{op} {what}"), msg, flags).map(drop)
}

/// Every neighbour entry of `family` in the namespace (the sync filters
/// by device), for the first look and after an overflow.
pub fn dump(rtnl: &mut Rtnl, family: AddressFamily) -> Result<Vec<NeighbourMessage>, NetlinkError> {
    let mut m = NeighbourMessage::default();
    m.header.family = family;
    Ok(rtnl
        .request(
            "list neighbours",
            RouteNetlinkMessage::GetNeighbour(m),
            NLM_F_DUMP,
        )?
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewNeighbour(n) => Some(n),
            _ => None,
        })
        .collect())
}
