//! VXLAN tunnel endpoints (RFC 7348) on uplinks, a kind of port of their
//! own ([`VxlanPort`]): the uplink's device is then the underlay, and the
//! VMs' frames cross it inside VXLAN, to remote endpoints named in the
//! topology (the flood list) or learned from what arrives; nothing else of
//! the VMs' segment is bridged onto it. The datapath sees a device like
//! any other: its receivers hand over inner frames (their outer headers
//! in the packet's tunnel metadata), its transmitters take the frames to
//! send and encapsulate them.
//!
//! What the endpoint does, as Linux's `vxlan` device does it, over an IPv4
//! or an IPv6 underlay:
//! - it answers ARP (over IPv6: neighbour solicitations) for its own
//!   underlay address and resolves its peers' MAC addresses the same way
//!   (asking again every [`SOLICIT_EVERY`] while one is unresolved), and
//!   learns a peer's address from the outer header of each frame it
//!   decapsulates;
//! - it decapsulates VXLAN to its address and port, for its VNI, moving the
//!   inner frame to the front of its buffer (no copy into a new buffer),
//!   and learns which remote endpoint each inner source MAC lives behind
//!   (at most [`MAX_REMOTE_MACS`]);
//! - it encapsulates what the switch sends out: to the remote its inner
//!   destination was learned behind, else to every remote in the flood
//!   list (head-end replication), with the outer UDP source port from the
//!   inner flow's hash and the outer checksum as configured (always over
//!   IPv6). An inner GSO frame leaves whole, as a tunnelled GSO frame
//!   written into a TAP of the endpoint's own ([`TunnelTap`], Linux 6.17's
//!   tunnel header), where the kernel takes it; else it is segmented here:
//!   an AF_PACKET socket takes no tunnelled GSO frames (its virtio-net
//!   header knows no UDP-tunnel GSO type). Partial inner checksums stay
//!   partial (the kernel or the NIC completes them on the way out).

mod groups;

use crate::packet::{Packet, TunnelMeta};
use crate::vnet::RecvError;
use hvnet_offload::rss::{Rss, DEFAULT_KEY};
use hvnet_offload::vxlan::VxlanError;
use hvnet_wire::{ip_protocol, EtherType, Ipv4Packet, Ipv6Packet, MacAddr, NetKind, UdpPacket};
use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU16;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::RwLock;
use std::time::{Duration, Instant};

mod encap;
mod evpn;
mod kernel_gso;
mod neighbours;
mod port;
mod traced;
mod view;

/// The inner frame as encapsulation reads it.
struct Inner<'a> {
    /// The frame, or its first part (a tagged frame's headers put
    /// together without the tag) when `rest` holds the rest.
    frame: &'a [u8],
    /// The rest of the frame where it lies (a tagged frame's payload, its
    /// tag left out without copying it); empty for a frame in one part.
    rest: &'a [u8],
    /// Its header stack, where parsed (a whole packet's): what a GSO
    /// frame is segmented by.
    layers: Option<&'a hvnet_wire::Layers>,
    hash: Option<u32>,
    offload: hvnet_offload::OffloadInfo,
}

impl Inner<'_> {
    /// The frame's length, in all its parts.
    fn len(&self) -> usize {
        self.frame.len() + self.rest.len()
    }
}

pub use evpn::{EvpnCounters, EvpnRefusal, Origin, MAX_EVPN_MACS, MAX_FLOOD};
pub use kernel_gso::{KernelGsoView, PickMember, TunnelTap};
pub use neighbours::Reply;
pub use port::VxlanPort;
pub use traced::MAX_REPORT;
pub use view::{RemoteIpView, RemoteMacView, RemoteView, SegmentView, VtepView};

/// What [`Vtep::set_vlans`] changed: the segments, as (VLAN, VNI), it
/// added and removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentChange {
    /// Segments carried from now on.
    pub added: Vec<(u16, u32)>,
    /// Segments no longer carried.
    pub removed: Vec<(u16, u32)>,
}

/// Inner MAC addresses remembered behind remote endpoints, at most, over
/// all the endpoint's segments (a guest behind a remote endpoint sending
/// from random addresses must not grow this without bound).
pub const MAX_REMOTE_MACS: usize = 4096;
/// Underlay neighbours remembered, at most.
pub const MAX_NEIGHBOURS: usize = 256;
/// How often an unresolved remote is asked for again.
pub const SOLICIT_EVERY: Duration = Duration::from_millis(500);
/// A learned inner MAC not seen for this long is forgotten when the table
/// is full.
const REMOTE_MAC_AGE: Duration = Duration::from_secs(300);
/// Outer UDP source ports, as Linux's default range.
const SOURCE_PORTS: (u16, u16) = (32768, 61000);

/// A tunnel endpoint's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VtepConfig {
    /// The VXLAN network identifier (24 bits).
    pub vni: u32,
    /// Its underlay address.
    pub local: IpAddr,
    /// The underlay prefix length (shown; peers are on the same link).
    pub prefix: u8,
    /// The underlay device's MAC (the outer source).
    pub mac: MacAddr,
    /// Static remote endpoints: the flood list (with those the fabric
    /// advertises, where BGP EVPN is on).
    pub remotes: Vec<IpAddr>,
    /// UDP destination port.
    pub port: u16,
    /// Compute the outer UDP checksum (off: zero, as Linux's default).
    pub udp_csum: bool,
    /// More VLANs the tunnel carries, each in a VNI of its own (VLAN,
    /// VNI): a frame of one of them crosses untagged in its VNI, and comes
    /// back tagged with its VLAN. `vni` carries the switch's untagged
    /// frames (the uplink's own VLAN). These are the endpoint's first;
    /// [`Vtep::set_vlans`] changes them at run time ([`Vtep::segments`]
    /// has them now).
    pub vlans: Vec<(u16, u32)>,
}

/// A VXLAN tunnel endpoint.
pub struct Vtep {
    /// Its settings.
    pub cfg: VtepConfig,
    rss: Rss,
    /// The VLANs carried besides the uplink's own, each in its VNI, now.
    vlans: RwLock<Vec<(u16, u32)>>,
    /// `vlans` is not empty: read on every frame without the lock, so a
    /// tunnel of one segment pays nothing for the others.
    has_vlans: std::sync::atomic::AtomicBool,
    /// Per VNI (segment), its flood list: the configured remotes, then
    /// those the fabric advertised in that VNI.
    flood: RwLock<HashMap<u32, Vec<IpAddr>>>,
    /// Set when the fabric changed the flood list: its new members are
    /// asked for at once, not at the next turn.
    flood_changed: std::sync::atomic::AtomicBool,
    evpn: evpn::EvpnTables,
    neighbours: RwLock<HashMap<IpAddr, MacAddr>>,
    /// Inner MACs learned behind remotes, per segment (VNI, MAC): the
    /// same MAC in two segments (two tenants' cloned guests) is two
    /// entries.
    remote_macs: RwLock<HashMap<(u32, MacAddr), (IpAddr, Instant)>>,
    arp_requests_sent: AtomicU64,
    arp_replies_sent: AtomicU64,
    remote_macs_refused: AtomicU64,
    /// Where the kernel takes tunnelled GSO frames whole: the TAP they
    /// are written into.
    tap: Option<TunnelTap>,
    /// Multicast snooping's remotes per group (`groups.rs`).
    groups: groups::GroupRemotes,
    /// Far ends' reports of their part of a trace (`traced.rs`).
    reports: traced::Reports,
}

impl std::fmt::Debug for Vtep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vtep").field("cfg", &self.cfg).finish()
    }
}

/// What the endpoint made of a frame from the underlay.
#[allow(clippy::large_enum_variant)]
pub enum Received {
    /// The inner frame of a VXLAN packet, for the switch to forward as
    /// coming from the uplink.
    Inner(Packet),
    /// An inner frame the remote endpoint marked for a trace (its mark,
    /// and the remote, which its report goes back to).
    Traced(Packet, hvnet_offload::vxlan::OuterMark, IpAddr),
    /// A far end's report of its part of a trace, kept for the trace.
    Report,
    /// ARP or neighbour discovery for the endpoint, consumed; a reply to
    /// send back, if any.
    Neighbour(Option<neighbours::Reply>),
    /// Dropped, for this reason.
    Drop(TunnelDrop),
}

/// Why a frame from the underlay was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelDrop {
    /// Neither VXLAN to this endpoint nor ARP for it.
    NotTunnel,
    /// VXLAN to this endpoint's port that is malformed: no I flag, a
    /// truncated header, an inner frame whose headers lie.
    BadVxlan,
    /// VXLAN for another VNI.
    Vni,
}

impl From<TunnelDrop> for RecvError {
    fn from(d: TunnelDrop) -> RecvError {
        match d {
            TunnelDrop::NotTunnel => RecvError::NotTunnel,
            TunnelDrop::BadVxlan => RecvError::BadVxlan,
            TunnelDrop::Vni => RecvError::WrongVni,
        }
    }
}

impl Vtep {
    /// An endpoint with nothing resolved or learned yet, writing its
    /// frames into `tap` where there is one.
    pub fn new(cfg: VtepConfig, tap: Option<TunnelTap>) -> Vtep {
        let flood = std::iter::once(cfg.vni)
            .chain(cfg.vlans.iter().map(|&(_, vni)| vni))
            .map(|vni| (vni, cfg.remotes.clone()))
            .collect();
        Vtep {
            vlans: RwLock::new(cfg.vlans.clone()),
            has_vlans: std::sync::atomic::AtomicBool::new(!cfg.vlans.is_empty()),
            flood: RwLock::new(flood),
            flood_changed: std::sync::atomic::AtomicBool::new(false),
            evpn: evpn::EvpnTables::default(),
            cfg,
            rss: Rss::new(&DEFAULT_KEY, 1).expect("default RSS key"),
            neighbours: RwLock::new(HashMap::new()),
            remote_macs: RwLock::new(HashMap::new()),
            arp_requests_sent: AtomicU64::new(0),
            arp_replies_sent: AtomicU64::new(0),
            remote_macs_refused: AtomicU64::new(0),
            tap,
            groups: Default::default(),
            reports: Default::default(),
        }
    }

    /// Classifies a frame from the underlay: VXLAN for us is decapsulated
    /// (the inner frame keeping the stack parsed with the outer one), ARP
    /// for us answered or learned from, anything else dropped.
    pub fn receive(&self, mut pkt: Packet, now: Instant) -> Received {
        let l = pkt.meta.layers;
        let frame = pkt.frame();
        // Neighbour discovery for the endpoint's IPv6 address (ICMPv6 is
        // no transport the parse walks into).
        if let Some(net) = l.net().filter(|n| n.kind == NetKind::Ipv6) {
            if net.protocol == hvnet_wire::nd::ICMPV6 && self.cfg.local.is_ipv6() {
                return self.receive_nd(frame, net.offset);
            }
        }
        let (Some(net), Some(t)) = (l.net(), l.transport()) else {
            return match l.ethertype() {
                EtherType::Arp => self.receive_arp(&frame[l.l2_len()..]),
                _ => Received::Drop(TunnelDrop::NotTunnel),
            };
        };
        let ip = &frame[net.offset..];
        let (dst, remote) = match (l.ethertype(), self.cfg.local) {
            (EtherType::Ipv4, IpAddr::V4(_)) => {
                let p = Ipv4Packet::new_unchecked(ip);
                (IpAddr::from(p.dst()), IpAddr::from(p.src()))
            }
            (EtherType::Ipv6, IpAddr::V6(_)) => {
                let p = Ipv6Packet::new_unchecked(ip);
                (IpAddr::from(p.dst()), IpAddr::from(p.src()))
            }
            _ => return Received::Drop(TunnelDrop::NotTunnel),
        };
        if dst != self.cfg.local
            || t.protocol != ip_protocol::UDP
            || UdpPacket::new_unchecked(&frame[t.offset..]).dst_port() != self.cfg.port
        {
            return Received::Drop(TunnelDrop::NotTunnel);
        }
        let d = match hvnet_offload::vxlan::decap(frame, &l, pkt.meta.offload, self.cfg.port) {
            Ok(d) => d,
            Err(
                VxlanError::Malformed(_)
                | VxlanError::NotVxlan
                | VxlanError::TooLarge
                | VxlanError::MixedFamilies
                | VxlanError::BadSplit,
            ) => return Received::Drop(TunnelDrop::BadVxlan),
        };
        let mark = traced::read_mark(frame, &l);
        if let Some(m) = mark.filter(|m| m.kind == hvnet_offload::vxlan::MARK_REPORT) {
            self.keep_report(
                m.token,
                &frame[d.inner_offset..d.inner_end.max(d.inner_offset)],
            );
            return Received::Report;
        }
        // The uplink's own VNI, untagged; another of its VNIs, tagged
        // with that VNI's VLAN; any other, not the endpoint's.
        let vlan = if d.vni == self.cfg.vni {
            None
        } else {
            match self.vlan_of(d.vni) {
                Some(vlan) => Some(vlan),
                None => return Received::Drop(TunnelDrop::Vni),
            }
        };
        let Ok(inner_layers) = d.layers else {
            return Received::Drop(TunnelDrop::BadVxlan);
        };
        let outer_src = pkt.src();
        let outer_len = u16::try_from(pkt.len() - (d.inner_end - d.inner_offset))
            .ok()
            .and_then(NonZeroU16::new);
        let outer_ip = u16::try_from(pkt.buf.start() + net.offset).ok();
        let (Some(outer_len), Some(outer_ip)) = (outer_len, outer_ip) else {
            return Received::Drop(TunnelDrop::BadVxlan);
        };
        pkt.buf.keep_range(d.inner_offset..d.inner_end);
        let mut inner = Packet::parsed(pkt.buf, inner_layers, d.info);
        inner.meta.tunnel = Some(TunnelMeta {
            vni: d.vni,
            outer_len,
            outer_ip,
        });
        if self.has_vlans() {
            // A tunnel of several VLANs carries them untagged, each in its
            // VNI: an inner tag would choose its own VLAN (a hop into
            // another VNI's segment).
            if inner.tagged() {
                return Received::Drop(TunnelDrop::Vni);
            }
            if vlan.is_some() && !inner.set_vlan_tag(vlan) {
                return Received::Drop(TunnelDrop::BadVxlan);
            }
        }
        self.learn_neighbour(remote, outer_src);
        self.learn_remote_mac(d.vni, inner.src(), remote, now);
        match mark {
            Some(m) => Received::Traced(inner, m, remote),
            None => Received::Inner(inner),
        }
    }

    /// An endpoint on VNI 42, UDP 4789, between `local`/`prefix` and the
    /// one static remote `remote`, without a TAP: what the unit tests of
    /// its parts start from.
    #[cfg(test)]
    pub(super) fn for_test(local: IpAddr, prefix: u8, remote: IpAddr) -> Vtep {
        Vtep::new(
            VtepConfig {
                vni: 42,
                local,
                prefix,
                mac: MacAddr([2, 0, 0, 0, 0, 1]),
                remotes: vec![remote],
                port: 4789,
                udp_csum: false,
                vlans: Vec::new(),
            },
            None,
        )
    }

    /// Closes the endpoint's TAP, if it has one: its frames are then
    /// segmented here, as without it.
    pub(crate) fn close_tap(&self) {
        if let Some(tap) = &self.tap {
            tap.close();
        }
    }

    /// True once after the flood list changed (the caller solicits).
    pub(super) fn take_flood_changed(&self) -> bool {
        self.flood_changed.swap(false, Relaxed)
    }

    /// The segments the endpoint carries now, as (VLAN, VNI): the
    /// uplink's own VNI first (`None`: its untagged frames), then one per
    /// VLAN it carries besides.
    pub fn segments(&self) -> Vec<(Option<u16>, u32)> {
        std::iter::once((None, self.cfg.vni))
            .chain(
                self.vlans
                    .read()
                    .expect("lock")
                    .iter()
                    .map(|&(vlan, vni)| (Some(vlan), vni)),
            )
            .collect()
    }

    /// True if the endpoint carries `vni`.
    pub fn carries(&self, vni: u32) -> bool {
        vni == self.cfg.vni || self.vlan_of(vni).is_some()
    }

    /// True if the endpoint carries VLANs besides the uplink's own.
    fn has_vlans(&self) -> bool {
        self.has_vlans.load(Relaxed)
    }

    /// The VLAN segment `vni` carries, if it is one besides the uplink's
    /// own.
    fn vlan_of(&self, vni: u32) -> Option<u16> {
        if !self.has_vlans() {
            return None;
        }
        let vlans = self.vlans.read().expect("lock");
        vlans.iter().find(|&&(_, n)| n == vni).map(|&(v, _)| v)
    }

    /// The VNI VLAN `vlan` crosses in, if it is one besides the uplink's
    /// own.
    fn vni_of(&self, vlan: u16) -> Option<u32> {
        let vlans = self.vlans.read().expect("lock");
        vlans.iter().find(|&&(v, _)| v == vlan).map(|&(_, n)| n)
    }

    /// Makes `vlans` the VLANs the endpoint carries besides the uplink's
    /// own, each in its VNI, while frames cross: a segment added starts
    /// with the static remotes as its flood list and nothing learned; one
    /// removed takes its learned MACs, its flood list and its multicast
    /// remotes with it (what the fabric advertised in it is the caller's
    /// to withdraw, [`Vtep::evpn_clear`], as the switch's FDB has it too).
    /// A VLAN whose VNI changes is a segment removed and another added.
    pub fn set_vlans(&self, vlans: &[(u16, u32)]) -> SegmentChange {
        let mut now = self.vlans.write().expect("lock");
        let change = SegmentChange {
            added: vlans.iter().filter(|s| !now.contains(s)).copied().collect(),
            removed: now.iter().filter(|s| !vlans.contains(s)).copied().collect(),
        };
        let removed = |vni: &u32| change.removed.iter().any(|&(_, n)| n == *vni);
        {
            let mut flood = self.flood.write().expect("lock");
            flood.retain(|vni, _| !removed(vni));
            for &(_, vni) in &change.added {
                flood.insert(vni, self.cfg.remotes.clone());
            }
        }
        self.remote_macs
            .write()
            .expect("lock")
            .retain(|(vni, _), _| !removed(vni));
        for &(_, vni) in &change.removed {
            self.forget_groups(vni);
        }
        *now = vlans.to_vec();
        self.has_vlans.store(!now.is_empty(), Relaxed);
        if !change.added.is_empty() {
            self.flood_changed.store(true, Relaxed);
        }
        change
    }

    /// The flood list of segment `vni` now (empty for a VNI not carried).
    pub fn flood_list(&self, vni: u32) -> Vec<IpAddr> {
        self.flood
            .read()
            .expect("lock")
            .get(&vni)
            .cloned()
            .unwrap_or_default()
    }

    /// True if `ip` is in any segment's flood list (its underlay MAC is
    /// resolved and kept).
    fn in_flood(&self, ip: &IpAddr) -> bool {
        self.flood
            .read()
            .expect("lock")
            .values()
            .any(|f| f.contains(ip))
    }

    /// Every remote of any segment's flood list, each once, in the order of
    /// the segments.
    fn flood_union(&self) -> Vec<IpAddr> {
        let segments = self.segments();
        let flood = self.flood.read().expect("lock");
        let mut all: Vec<IpAddr> = Vec::new();
        for (_, vni) in segments {
            for r in flood.get(&vni).into_iter().flatten() {
                if !all.contains(r) {
                    all.push(*r);
                }
            }
        }
        all
    }

    /// The remote endpoint `mac` is behind in segment `vni`: as
    /// advertised, else as learned.
    pub fn remote_of(&self, vni: u32, mac: &MacAddr) -> Option<IpAddr> {
        self.evpn_remote_of(vni, mac).or_else(|| {
            self.remote_macs
                .read()
                .expect("lock")
                .get(&(vni, *mac))
                .map(|&(r, _)| r)
        })
    }

    fn learn_remote_mac(&self, vni: u32, mac: MacAddr, remote: IpAddr, now: Instant) {
        if mac.is_multicast() {
            return;
        }
        let key = (vni, mac);
        if let Some(&(r, seen)) = self.remote_macs.read().expect("lock").get(&key) {
            // Refreshed at most once a second per address.
            if r == remote && now.duration_since(seen) < Duration::from_secs(1) {
                return;
            }
        }
        let mut t = self.remote_macs.write().expect("lock");
        if t.len() >= MAX_REMOTE_MACS && !t.contains_key(&key) {
            t.retain(|_, (_, seen)| now.duration_since(*seen) < REMOTE_MAC_AGE);
            if t.len() >= MAX_REMOTE_MACS {
                self.remote_macs_refused.fetch_add(1, Relaxed);
                return;
            }
        }
        t.insert(key, (remote, now));
    }
}

#[cfg(test)]
mod tests;
