//! VXLAN tunnel endpoints (RFC 7348) on uplinks. The uplink's device is
//! then the underlay: the VMs' frames cross it inside VXLAN, to remote
//! endpoints named in the topology (the flood list) or learned from what
//! arrives, and nothing else of the VMs' segment is bridged onto it.
//!
//! What the endpoint does, as Linux's `vxlan` device does it:
//! - it answers ARP for its own underlay address and resolves its peers'
//!   MAC addresses with ARP (asking again every [`SOLICIT_EVERY`] while one
//!   is unresolved), and learns a peer's address from the outer header of
//!   each frame it decapsulates;
//! - it decapsulates VXLAN to its address and port, for its VNI, moving the
//!   inner frame to the front of its buffer (no copy into a new buffer),
//!   and learns which remote endpoint each inner source MAC lives behind
//!   (at most [`MAX_REMOTE_MACS`]);
//! - it encapsulates what the switch sends out: to the remote its inner
//!   destination was learned behind, else to every remote in the flood
//!   list (head-end replication), with the outer UDP source port from the
//!   inner flow's hash and the outer checksum as configured. An inner GSO
//!   frame is segmented here: an AF_PACKET socket takes no tunnelled GSO
//!   frames (`virtio_net_hdr_to_skb` knows no UDP-tunnel GSO type), so
//!   this is the one place that cannot leave segmentation to the device.
//!   Partial inner checksums stay partial (the kernel or the NIC completes
//!   them on the way out).

use crate::counters::{add, EgressCounters};
use crate::item::RingItem;
use hvnet_offload::csum;
use hvnet_offload::gso::{self, CsumMode};
use hvnet_offload::rss::{Rss, DEFAULT_KEY};
use hvnet_offload::vxlan::{encap_header_parsed, Tunnel, VxlanError, OUTER_LEN};
use hvnet_offload::CsumState;
use hvnet_port::{Packet, Transmitter};
use hvnet_wire::{arp, ip_protocol, EtherType, MacAddr, UdpPacket, VirtioNetHdr};
use serde::Serialize;
use std::collections::HashMap;
use std::io::IoSlice;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// Inner MAC addresses remembered behind remote endpoints, at most (a
/// guest behind a remote endpoint sending from random addresses must not
/// grow this without bound).
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
    pub local: Ipv4Addr,
    /// The underlay prefix length (shown; peers are on the same link).
    pub prefix: u8,
    /// The underlay device's MAC (the outer source).
    pub mac: MacAddr,
    /// Static remote endpoints: the flood list.
    pub remotes: Vec<Ipv4Addr>,
    /// UDP destination port.
    pub port: u16,
    /// Compute the outer UDP checksum (off: zero, as Linux's default).
    pub udp_csum: bool,
}

/// A VXLAN tunnel endpoint.
pub struct Vtep {
    /// Its settings.
    pub cfg: VtepConfig,
    rss: Rss,
    neighbours: RwLock<HashMap<Ipv4Addr, MacAddr>>,
    remote_macs: RwLock<HashMap<MacAddr, (Ipv4Addr, Instant)>>,
    arp_requests_sent: AtomicU64,
    arp_replies_sent: AtomicU64,
    remote_macs_refused: AtomicU64,
}

/// What the endpoint made of a frame from the underlay.
#[allow(clippy::large_enum_variant)]
pub enum Received {
    /// The inner frame of a VXLAN packet, for the switch to forward as
    /// coming from the uplink.
    Inner(Packet),
    /// ARP for the endpoint, consumed; a reply to send back, if any.
    Arp(Option<[u8; 42]>),
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

/// A remote endpoint as the views show it.
#[derive(Clone, Debug, Serialize)]
pub struct RemoteView {
    /// Underlay address.
    pub ip: Ipv4Addr,
    /// Its MAC, once resolved.
    pub mac: Option<String>,
    /// In the flood list (configured) or only learned.
    pub configured: bool,
}

/// An inner MAC learned behind a remote endpoint.
#[derive(Clone, Debug, Serialize)]
pub struct RemoteMacView {
    /// The inner MAC.
    pub mac: String,
    /// The remote endpoint it was last seen behind.
    pub remote: Ipv4Addr,
    /// Seconds since it was last seen.
    pub age_secs: u64,
}

/// Buffers a delivery thread keeps for tunnelled GSO frames, so that
/// segmenting them allocates nothing in steady state.
#[derive(Default)]
pub(crate) struct TunnelScratch {
    /// The segments' headers, each with its virtio-net header.
    arena: Vec<u8>,
    /// Where each segment is.
    spans: Vec<SegmentSpan>,
}

/// One segment of a tunnelled GSO frame: its headers in the arena, its
/// payload in the packet's buffer.
struct SegmentSpan {
    header: (usize, usize),
    payload: (usize, usize),
}

/// Writes a frame the endpoint makes itself (ARP), with an empty
/// virtio-net header.
fn send_plain(tx: &mut dyn Transmitter, frame: &[u8]) -> Result<(), hvnet_port::SendError> {
    let vnet = hvnet_port::vnet_bytes(&VirtioNetHdr::default());
    tx.send(&[IoSlice::new(&vnet), IoSlice::new(frame)], None)
}

/// A tunnel endpoint's state, for `hvnet stats /uplinks/NAME/vxlan`.
#[derive(Clone, Debug, Serialize)]
pub struct VtepView {
    /// VNI.
    pub vni: u32,
    /// Underlay address and prefix.
    pub local: String,
    /// Underlay MAC.
    pub mac: String,
    /// UDP port.
    pub port: u16,
    /// Outer UDP checksum on.
    pub udp_csum: bool,
    /// Remote endpoints: configured, and learned from what arrived.
    pub remotes: Vec<RemoteView>,
    /// Inner MACs learned behind remotes.
    pub remote_macs: Vec<RemoteMacView>,
    /// ARP requests sent for unresolved remotes.
    pub arp_requests_sent: u64,
    /// ARP replies sent for the endpoint's address.
    pub arp_replies_sent: u64,
    /// Inner MACs not learned: the table was full.
    pub remote_macs_refused: u64,
}

impl Vtep {
    /// An endpoint with nothing resolved or learned yet.
    pub fn new(cfg: VtepConfig) -> Vtep {
        Vtep {
            cfg,
            rss: Rss::new(&DEFAULT_KEY, 1).expect("default RSS key"),
            neighbours: RwLock::new(HashMap::new()),
            remote_macs: RwLock::new(HashMap::new()),
            arp_requests_sent: AtomicU64::new(0),
            arp_replies_sent: AtomicU64::new(0),
            remote_macs_refused: AtomicU64::new(0),
        }
    }

    /// Classifies a frame from the underlay: VXLAN for us is decapsulated
    /// (the inner frame parsed as a frame of its own), ARP for us answered
    /// or learned from, anything else dropped.
    pub fn receive(&self, mut pkt: Packet, now: Instant) -> Received {
        let l = pkt.meta.layers;
        let frame = pkt.frame();
        match l.l2.ethertype {
            EtherType::Arp => return self.receive_arp(&frame[l.l2.header_len..]),
            EtherType::Ipv4 => {}
            _ => return Received::Drop(TunnelDrop::NotTunnel),
        }
        let (Some(net), Some(t)) = (l.net, l.transport) else {
            return Received::Drop(TunnelDrop::NotTunnel);
        };
        let ip = &frame[net.offset..];
        if ip[16..20] != self.cfg.local.octets()
            || t.protocol != ip_protocol::UDP
            || UdpPacket::new_unchecked(&frame[t.offset..]).dst_port() != self.cfg.port
        {
            return Received::Drop(TunnelDrop::NotTunnel);
        }
        let remote = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let d = match hvnet_offload::vxlan::decap_parsed(frame, &l, pkt.meta.offload, self.cfg.port)
        {
            Ok(d) => d,
            Err(VxlanError::Malformed(_) | VxlanError::NotVxlan | VxlanError::TooLarge) => {
                return Received::Drop(TunnelDrop::BadVxlan)
            }
        };
        if d.vni != self.cfg.vni {
            return Received::Drop(TunnelDrop::Vni);
        }
        let outer_src = pkt.src();
        pkt.buf.keep_range(d.inner_offset..d.inner_end);
        let inner = match Packet::parse(pkt.buf, d.info) {
            Ok(p) => p,
            Err(_) => return Received::Drop(TunnelDrop::BadVxlan),
        };
        self.learn_neighbour(remote, outer_src);
        self.learn_remote_mac(inner.src(), remote, now);
        Received::Inner(inner)
    }

    fn receive_arp(&self, bytes: &[u8]) -> Received {
        let Ok(r) = arp::Packet::new_checked(bytes).and_then(|p| arp::Repr::parse(&p)) else {
            return Received::Drop(TunnelDrop::NotTunnel);
        };
        let local = self.cfg.local.octets();
        if r.target_ip != local {
            return Received::Drop(TunnelDrop::NotTunnel);
        }
        self.learn_neighbour(Ipv4Addr::from(r.sender_ip), r.sender_mac);
        if r.op != arp::Operation::Request {
            return Received::Arp(None);
        }
        self.arp_replies_sent.fetch_add(1, Relaxed);
        Received::Arp(Some(self.arp_frame(arp::Repr {
            op: arp::Operation::Reply,
            sender_mac: self.cfg.mac,
            sender_ip: local,
            target_mac: r.sender_mac,
            target_ip: r.sender_ip,
        })))
    }

    fn arp_frame(&self, r: arp::Repr) -> [u8; 42] {
        let mut f = [0u8; 42];
        let dst = match r.op {
            arp::Operation::Request => MacAddr([0xff; 6]),
            _ => r.target_mac,
        };
        f[0..6].copy_from_slice(&dst.0);
        f[6..12].copy_from_slice(&self.cfg.mac.0);
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        r.emit(&mut arp::Packet::new_unchecked(&mut f[14..]));
        f
    }

    fn learn_neighbour(&self, ip: Ipv4Addr, mac: MacAddr) {
        if mac.is_multicast() {
            return;
        }
        if self.neighbours.read().expect("lock").get(&ip) == Some(&mac) {
            return;
        }
        let mut n = self.neighbours.write().expect("lock");
        if n.len() < MAX_NEIGHBOURS || n.contains_key(&ip) {
            n.insert(ip, mac);
        }
    }

    fn learn_remote_mac(&self, mac: MacAddr, remote: Ipv4Addr, now: Instant) {
        if mac.is_multicast() {
            return;
        }
        if let Some(&(r, seen)) = self.remote_macs.read().expect("lock").get(&mac) {
            // Refreshed at most once a second per address.
            if r == remote && now.duration_since(seen) < Duration::from_secs(1) {
                return;
            }
        }
        let mut t = self.remote_macs.write().expect("lock");
        if t.len() >= MAX_REMOTE_MACS && !t.contains_key(&mac) {
            t.retain(|_, (_, seen)| now.duration_since(*seen) < REMOTE_MAC_AGE);
            if t.len() >= MAX_REMOTE_MACS {
                self.remote_macs_refused.fetch_add(1, Relaxed);
                return;
            }
        }
        t.insert(mac, (remote, now));
    }

    /// Sends an ARP request for each configured remote still unresolved;
    /// the caller (the uplink's first queue thread) calls it every
    /// [`SOLICIT_EVERY`], so a write that fails is tried at the next turn.
    pub fn solicit(&self, tx: &mut dyn Transmitter) {
        let unresolved: Vec<Ipv4Addr> = {
            let n = self.neighbours.read().expect("lock");
            self.cfg
                .remotes
                .iter()
                .filter(|r| !n.contains_key(r))
                .copied()
                .collect()
        };
        for ip in unresolved {
            let f = self.arp_frame(arp::Repr {
                op: arp::Operation::Request,
                sender_mac: self.cfg.mac,
                sender_ip: self.cfg.local.octets(),
                target_mac: MacAddr([0; 6]),
                target_ip: ip.octets(),
            });
            if send_plain(tx, &f).is_ok() {
                self.arp_requests_sent.fetch_add(1, Relaxed);
            }
        }
    }

    /// Sends an ARP reply the worker got from [`Vtep::receive`].
    pub fn send_reply(&self, tx: &mut dyn Transmitter, reply: &[u8; 42]) {
        let _ = send_plain(tx, reply);
    }

    /// The remote endpoints an inner frame to `dst` goes to, with their
    /// MACs where resolved.
    fn remotes_for(
        &self,
        dst: MacAddr,
        out: &mut smallvec::SmallVec<[(Ipv4Addr, Option<MacAddr>); 8]>,
    ) {
        out.clear();
        let n = self.neighbours.read().expect("lock");
        let learned = (!dst.is_multicast())
            .then(|| {
                self.remote_macs
                    .read()
                    .expect("lock")
                    .get(&dst)
                    .map(|&(r, _)| r)
            })
            .flatten();
        match learned {
            Some(r) => out.push((r, n.get(&r).copied())),
            None => out.extend(self.cfg.remotes.iter().map(|r| (*r, n.get(r).copied()))),
        }
    }

    /// Encapsulates one item the switch sends out and writes it through
    /// the uplink's transmitter `tx` once per remote it goes to, counting
    /// into `c`. `csum`: the device
    /// takes partial inner checksums; else they are completed here (and
    /// segments leave with theirs done).
    pub(crate) fn deliver(
        &self,
        tx: &mut dyn Transmitter,
        c: &EgressCounters,
        item: &mut RingItem,
        csum: bool,
        scratch: &mut TunnelScratch,
    ) {
        let RingItem::Frame { pkt, .. } = item else {
            // Nothing is coalesced toward an uplink.
            add(&c.drop_write_error, item.sources());
            return;
        };
        let info = &mut pkt.meta.offload;
        if let (false, None, CsumState::Partial { start, offset }) = (csum, info.gso, info.csum) {
            if csum::complete_partial(pkt.buf.frame_mut(), start, offset).is_ok() {
                add(&c.csum_completed, 1);
                pkt.meta.offload.csum = CsumState::Good;
            }
        }
        // The inner flow's hash, for the outer source port: the one RSS
        // already took, else taken now from the headers parsed where the
        // frame entered; once for every remote it goes to.
        if pkt.meta.hash.is_none() {
            let (frame, layers) = (pkt.frame(), &pkt.meta.layers);
            pkt.meta.hash = self.rss.hash_layers(frame, layers).map(|(h, _)| h);
        }
        let mode = if csum {
            CsumMode::Partial
        } else {
            CsumMode::Full
        };
        let mut remotes = smallvec::SmallVec::new();
        self.remotes_for(pkt.dst(), &mut remotes);
        let mut copies = 0u64;
        let mut failed = false;
        for &(remote, mac) in &remotes {
            let Some(mac) = mac else { continue };
            let tunnel = Tunnel {
                src_mac: self.cfg.mac,
                dst_mac: mac,
                dst_port: self.cfg.port,
                src_port_range: SOURCE_PORTS,
                udp_csum: self.cfg.udp_csum,
                ..Tunnel::new(self.cfg.vni, self.cfg.local.octets(), remote.octets())
            };
            match self.write_encapsulated(tx, c, &tunnel, pkt, mode, scratch) {
                Ok(n) => copies += n,
                Err(()) => failed = true,
            }
        }
        if copies > 0 {
            add(&c.delivered_frames, copies);
            add(&c.delivered_source_frames, 1);
        } else if failed {
            add(&c.drop_write_error, 1);
        } else {
            add(&c.drop_tunnel_unresolved, 1);
        }
    }

    /// One copy of `pkt` to one remote: frames written (segments of a GSO
    /// frame, else 1).
    fn write_encapsulated(
        &self,
        tx: &mut dyn Transmitter,
        c: &EgressCounters,
        tunnel: &Tunnel,
        pkt: &Packet,
        mode: CsumMode,
        scratch: &mut TunnelScratch,
    ) -> Result<u64, ()> {
        let mut hdr = [0u8; OUTER_LEN];
        let (frame, layers) = (pkt.frame(), &pkt.meta.layers);
        let info = encap_header_parsed(tunnel, frame, pkt.meta.hash, pkt.meta.offload, &mut hdr)
            .map_err(|_| ())?;
        let Some(g) = info.gso else {
            let vnet = hvnet_port::vnet_bytes(&info.to_vnet(0));
            let iov = [IoSlice::new(&vnet), IoSlice::new(&hdr), IoSlice::new(frame)];
            tx.send(&iov, None).map_err(|_| ())?;
            add(&c.delivered_bytes, (OUTER_LEN + pkt.len()) as u64);
            return Ok(1);
        };
        // Segmented once, without putting the outer header and the frame
        // together: each segment's headers (virtio-net header, outer and
        // inner) go into the arena, its payload stays where it is in the
        // packet's buffer; all of them are written as one batch.
        let TunnelScratch { arena, spans } = scratch;
        arena.clear();
        spans.clear();
        let base = frame.as_ptr() as usize;
        gso::segment_encapsulated(&hdr, frame, layers, g, mode, &mut |seg| {
            let start = arena.len();
            arena.extend_from_slice(&hvnet_port::vnet_bytes(&seg.info.to_vnet(0)));
            arena.extend_from_slice(seg.header);
            let at = seg.payload.as_ptr() as usize - base;
            spans.push(SegmentSpan {
                header: (start, arena.len()),
                payload: (at, at + seg.payload.len()),
            });
        })
        .map_err(|_| ())?;
        let iov: smallvec::SmallVec<[IoSlice<'_>; 128]> = spans
            .iter()
            .flat_map(|s| {
                [
                    IoSlice::new(&arena[s.header.0..s.header.1]),
                    IoSlice::new(&frame[s.payload.0..s.payload.1]),
                ]
            })
            .collect();
        let frames: smallvec::SmallVec<[&[IoSlice<'_>]; 64]> = iov.chunks(2).collect();
        // Segments count as sent up to the first that was not.
        let (mut sent, mut failed) = (0, false);
        tx.send_batch(&frames, None, &mut |r| {
            failed |= r.is_err();
            sent += usize::from(!failed);
        });
        let bytes: usize = spans[..sent]
            .iter()
            .map(|s| s.header.1 - s.header.0 - hvnet_port::VNET_HDR_LEN + s.payload.1 - s.payload.0)
            .sum();
        add(&c.delivered_bytes, bytes as u64);
        add(&c.segmented_frames, 1);
        add(&c.segments_out, sent as u64);
        if sent < spans.len() {
            return Err(());
        }
        Ok(sent as u64)
    }

    /// The endpoint as the views show it.
    pub fn view(&self, now: Instant) -> VtepView {
        let n = self.neighbours.read().expect("lock");
        let mut remotes: Vec<RemoteView> = self
            .cfg
            .remotes
            .iter()
            .map(|ip| RemoteView {
                ip: *ip,
                mac: n.get(ip).map(|m| m.to_string()),
                configured: true,
            })
            .collect();
        remotes.extend(
            n.iter()
                .filter(|(ip, _)| !self.cfg.remotes.contains(ip))
                .map(|(ip, m)| RemoteView {
                    ip: *ip,
                    mac: Some(m.to_string()),
                    configured: false,
                }),
        );
        let mut macs: Vec<RemoteMacView> = self
            .remote_macs
            .read()
            .expect("lock")
            .iter()
            .map(|(m, (r, seen))| RemoteMacView {
                mac: m.to_string(),
                remote: *r,
                age_secs: now.duration_since(*seen).as_secs(),
            })
            .collect();
        macs.sort_by(|a, b| a.mac.cmp(&b.mac));
        VtepView {
            vni: self.cfg.vni,
            local: format!("{}/{}", self.cfg.local, self.cfg.prefix),
            mac: self.cfg.mac.to_string(),
            port: self.cfg.port,
            udp_csum: self.cfg.udp_csum,
            remotes,
            remote_macs: macs,
            arp_requests_sent: self.arp_requests_sent.load(Relaxed),
            arp_replies_sent: self.arp_replies_sent.load(Relaxed),
            remote_macs_refused: self.remote_macs_refused.load(Relaxed),
        }
    }
}
