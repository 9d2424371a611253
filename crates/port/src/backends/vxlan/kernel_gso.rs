//! Tunnelled frames handed to the kernel whole: a TAP that takes the
//! 24-byte virtio-net header (Linux 6.17's `TUNSETVNETHDRSZ` 24) accepts
//! a VXLAN frame around a 64 KiB inner TCP GSO frame as one write, and the
//! kernel carries it as Linux's own `vxlan` device would (one
//! `SKB_GSO_UDP_TUNNEL` buffer, segmented only where a device cannot take
//! it whole; across a veth it is not segmented at all). The TAP's ingress
//! is redirected to the underlay's egress by a `tc` filter the control
//! plane puts on it (`mirred egress redirect`), so nothing reaches the
//! TAP's own stack. An AF_PACKET socket cannot do this: its virtio-net
//! header is 10 or 12 bytes and knows no tunnel GSO type.
//!
//! Every frame of the endpoint goes this way while the TAP is there (one
//! path, so a flow's frames keep their order), except where checksums
//! must leave complete (`csum = "software"`: all go the socket's way) and
//! GSO frames the kernel takes no tunnel GSO for (UDP segmentation; an
//! inner frame too long for one outer IP packet), segmented here; ARP and
//! neighbour discovery stay on the underlay's socket.
//!
//! Over a team there is a TAP per member, each redirected to its member,
//! and the team picks the member of each frame by its outer headers
//! ([`PickMember`]), as its own transmitters would.

use super::Inner;
use crate::outgoing::Written;
use hvnet_offload::csum::pseudo_header_at;
use hvnet_offload::vxlan::{encap_header_split, fits, Tunnel, MAX_OUTER_LEN};
use hvnet_offload::CsumState;
use hvnet_sys::{offload, FrameQueue};
use hvnet_wire::checksum::Sum;
use hvnet_wire::ip_protocol;
use hvnet_wire::virtio_net::{self, flags, GsoType, Repr, TunnelRepr, LEN_TUNNEL};
use serde::Serialize;
use std::io::{self, IoSlice};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

/// Which of several underlay devices (a team's members) an outer frame
/// leaves by.
pub trait PickMember: Send + Sync + std::fmt::Debug {
    /// The member for the outer frame that starts with `head` (its
    /// Ethernet, IP and UDP headers), `len` bytes in all; `None` when no
    /// member may send.
    fn pick(&self, head: &[u8], len: u64) -> Option<usize>;
    /// The frame went by `member`: counted there.
    fn sent(&self, member: usize, len: u64);
}

/// The TAPs a tunnel endpoint writes whole tunnelled frames into: one, or
/// one per member of a team.
#[derive(Debug)]
pub struct TunnelTap {
    /// Each TAP's one queue, in member order; empty once closed (the port
    /// left the switch: the devices go at once, not when the last
    /// reference does).
    queues: RwLock<Vec<FrameQueue>>,
    /// The TAPs' names, joined by `+` as a team's members are.
    name: String,
    /// Over a team: who picks each frame's TAP.
    team: Option<Arc<dyn PickMember>>,
    counters: KernelGsoCounters,
}

/// What went through the TAP.
#[derive(Debug, Default)]
struct KernelGsoCounters {
    gso_frames: AtomicU64,
    frames: AtomicU64,
    errors: AtomicU64,
}

/// The TAP path as the views show it.
#[derive(Clone, Debug, Serialize)]
pub struct KernelGsoView {
    /// The TAP's name.
    pub device: String,
    /// Tunnelled GSO frames written whole (each one write, however many
    /// segments the kernel or the wire makes of it).
    pub gso_frames: u64,
    /// Frames written that needed no segmentation.
    pub frames: u64,
    /// Writes the kernel refused.
    pub errors: u64,
}

impl TunnelTap {
    /// Creates TAP `name` with the 24-byte header; fails where a device of
    /// that name exists, and where the kernel has no tunnel GSO (before
    /// 6.17: the tunnel offloads are refused).
    pub fn open(name: &str) -> io::Result<TunnelTap> {
        TunnelTap::open_team(&[name], None)
    }

    /// Creates a TAP per name (a team's members, in order), `team` picking
    /// which one each frame is written into.
    pub fn open_team(names: &[&str], team: Option<Arc<dyn PickMember>>) -> io::Result<TunnelTap> {
        let queues = names
            .iter()
            .map(|n| TunnelTap::open_one(n))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(TunnelTap {
            name: queues
                .iter()
                .map(|q| q.name())
                .collect::<Vec<_>>()
                .join("+"),
            queues: RwLock::new(queues),
            team,
            counters: KernelGsoCounters::default(),
        })
    }

    fn open_one(name: &str) -> io::Result<FrameQueue> {
        let queue = FrameQueue::open_new_tap(name)?;
        queue.set_vnet_hdr_size(LEN_TUNNEL as i32)?;
        // What the kernel may hand the TAP to read; nothing is read from
        // it, but the tunnel bits are refused by kernels without them.
        queue.set_offload(
            offload::CSUM
                | offload::TSO4
                | offload::TSO6
                | offload::UDP_TUNNEL_GSO
                | offload::UDP_TUNNEL_GSO_CSUM,
        )?;
        queue.set_nonblocking(true)?;
        Ok(queue)
    }

    /// The devices' names, joined by `+`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Closes the TAPs (the kernel removes the devices); writes fail after.
    pub(super) fn close(&self) {
        self.queues.write().expect("lock").clear();
    }

    /// True while the TAPs are open.
    pub(super) fn is_open(&self) -> bool {
        !self.queues.read().expect("lock").is_empty()
    }

    /// The path as the views show it.
    pub fn view(&self) -> KernelGsoView {
        let c = &self.counters;
        KernelGsoView {
            device: self.name().to_string(),
            gso_frames: c.gso_frames.load(Relaxed),
            frames: c.frames.load(Relaxed),
            errors: c.errors.load(Relaxed),
        }
    }

    /// True when `inner` can go whole to endpoints at `local`'s family: it
    /// fits one outer IP packet (no jumbograms), and a GSO frame is TCP
    /// whose headers were parsed where it entered. Else the endpoint
    /// segments it itself, as without the TAP.
    pub(super) fn takes(inner: &Inner<'_>, local: IpAddr) -> bool {
        if !fits(local.is_ipv6(), inner.len()) {
            return false;
        }
        let Some(g) = inner.offload.gso else {
            return true;
        };
        matches!(g.kind, GsoType::TcpV4 | GsoType::TcpV6)
            && inner.layers.is_some_and(|l| {
                l.net().is_some()
                    && l.transport()
                        .is_some_and(|t| t.protocol == ip_protocol::TCP)
            })
    }

    /// Writes one copy of `inner` to one remote, whole, added to `written`.
    /// A GSO frame leaves as one tunnelled GSO frame: its inner checksum
    /// partial at its TCP header, the outer UDP checksum partial too where
    /// the tunnel has one. `head` is scratch for the inner headers.
    pub(super) fn write(
        &self,
        tunnel: &Tunnel,
        inner: &Inner<'_>,
        head: &mut Vec<u8>,
        written: &mut Written,
    ) -> Result<(), ()> {
        let r = self.write_inner(tunnel, inner, head, written);
        if r.is_err() {
            self.counters.errors.fetch_add(1, Relaxed);
        }
        r
    }

    fn write_inner(
        &self,
        tunnel: &Tunnel,
        inner: &Inner<'_>,
        head: &mut Vec<u8>,
        written: &mut Written,
    ) -> Result<(), ()> {
        let (frame, rest) = (inner.frame, inner.rest);
        let outer_len = tunnel.outer_len();
        let outer_th = tunnel.outer_udp();
        let mut outer = [0u8; MAX_OUTER_LEN];
        let outer = &mut outer[..outer_len];
        let mut vnet = [0u8; LEN_TUNNEL];
        let gso = inner.offload.gso;
        if gso.is_none() {
            // One frame, as the underlay's socket would send it: the
            // outer checksum done here, an inner partial one left to the
            // kernel.
            let info = encap_header_split(tunnel, (frame, rest), inner.hash, inner.offload, outer)
                .map_err(drop)?;
            let mut hdr = Repr::default();
            if let CsumState::Partial { start, offset } = info.csum {
                hdr.flags = flags::NEEDS_CSUM;
                hdr.csum_start = start;
                hdr.csum_offset = offset;
            }
            TunnelRepr {
                inner: hdr,
                ..TunnelRepr::default()
            }
            .emit(&mut vnet);
            self.send(&[&vnet, outer, frame, rest])?;
            self.counters.frames.fetch_add(1, Relaxed);
            written.frames += 1;
            written.bytes += (outer_len + inner.len()) as u64;
            return Ok(());
        }
        // A GSO frame: TCP whose headers were parsed where it entered.
        let (Some(g), Some(l)) = (gso, inner.layers) else {
            return Err(());
        };
        let (Some(net), Some(t)) = (l.net(), l.transport()) else {
            return Err(());
        };
        if t.protocol != ip_protocol::TCP || !matches!(g.kind, GsoType::TcpV4 | GsoType::TcpV6) {
            return Err(());
        }
        // The outer UDP checksum is the kernel's to make per segment: here
        // its field gets the pseudo-header sum only (put over whatever
        // encap_header left in it).
        encap_header_split(tunnel, (frame, rest), inner.hash, inner.offload, outer)
            .map_err(drop)?;
        let udp_len = outer_len - outer_th + inner.len();
        let outer_csum = tunnel.outer_csum();
        let field = if outer_csum {
            tunnel.pseudo_header(udp_len).fold()
        } else {
            0
        };
        outer[outer_th + 6..outer_th + 8].copy_from_slice(&field.to_be_bytes());
        // The inner headers, copied so that the TCP checksum field holds
        // what a partial checksum needs (the pseudo-header sum over the
        // whole frame's TCP length), whatever the datapath left in it.
        let headers = l.payload_offset();
        let Some(inner_head) = frame.get(..headers) else {
            return Err(());
        };
        head.clear();
        head.extend_from_slice(inner_head);
        let tcp_len = inner.len() - t.offset;
        let ph: Sum = pseudo_header_at(head, net.kind, net.offset, ip_protocol::TCP, tcp_len);
        head[t.offset + 16..t.offset + 18].copy_from_slice(&ph.fold().to_be_bytes());
        TunnelRepr {
            inner: Repr {
                flags: flags::NEEDS_CSUM,
                gso_type: g.kind,
                gso_ecn: g.ecn,
                hdr_len: (outer_len + headers) as u16,
                gso_size: g.size,
                csum_start: (outer_len + t.offset) as u16,
                csum_offset: 16,
                num_buffers: 0,
            },
            outer_ipv6: tunnel.ipv6(),
            outer_csum,
            outer_th_offset: outer_th as u16,
            inner_nh_offset: (outer_len + net.offset) as u16,
        }
        .emit(&mut vnet);
        self.send(&[&vnet, outer, head, &frame[headers..], rest])?;
        self.counters.gso_frames.fetch_add(1, Relaxed);
        written.frames += 1;
        written.bytes += (outer_len + inner.len()) as u64;
        Ok(())
    }

    /// Writes one frame: `pieces` are its header, its outer headers and
    /// the rest (empty pieces are left out).
    fn send(&self, pieces: &[&[u8]]) -> Result<(), ()> {
        let len = pieces[1..].iter().map(|p| p.len() as u64).sum();
        let member = match &self.team {
            Some(team) => team.pick(pieces[1], len).ok_or(())?,
            None => 0,
        };
        let iov: smallvec::SmallVec<[IoSlice<'_>; 5]> = pieces
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| IoSlice::new(p))
            .collect();
        match self.queues.read().expect("lock").get(member) {
            Some(q) => crate::vnet::write_frame(q, &iov).map_err(drop)?,
            None => return Err(()),
        }
        if let Some(team) = &self.team {
            team.sent(member, len);
        }
        Ok(())
    }
}

const _: () = assert!(virtio_net::LEN_TUNNEL == 24);
