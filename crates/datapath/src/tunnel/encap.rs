//! What the switch sends into the tunnel: each inner frame to the remote
//! its destination was learned behind, else to the flood list, behind
//! one outer header per remote; an inner GSO frame segmented once, its
//! payload never copied.

use super::{Vtep, SOURCE_PORTS};
use crate::counters::{add, DropReason, EgressCounters};
use crate::item::RingItem;
use hvnet_offload::csum;
use hvnet_offload::gso::{self, CsumMode};
use hvnet_offload::vxlan::{encap_header, Tunnel, OUTER_LEN};
use hvnet_offload::CsumState;
use hvnet_port::{Packet, Transmitter};
use hvnet_wire::MacAddr;
use std::io::IoSlice;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering::Relaxed;

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

impl Vtep {
    /// The remote endpoints an inner frame to `dst` goes to, with their
    /// MACs where resolved.
    fn remotes_for(
        &self,
        dst: MacAddr,
        out: &mut smallvec::SmallVec<[(Ipv4Addr, Option<MacAddr>); 8]>,
    ) -> bool {
        out.clear();
        let known = (!dst.is_multicast())
            .then(|| self.remote_of(&dst))
            .flatten();
        let n = self.neighbours.read().expect("lock");
        match known {
            Some(r) => {
                out.push((r, n.get(&r).copied()));
                false
            }
            None => {
                let flood = self.flood.read().expect("lock");
                out.extend(flood.iter().map(|r| (*r, n.get(r).copied())));
                true
            }
        }
    }

    /// Counts a frame replicated to the flood list, by kind.
    fn count_flooded(&self, pkt: &Packet) {
        let c = &self.evpn.counters;
        c.flooded.fetch_add(1, Relaxed);
        if !pkt.dst().is_multicast() {
            c.flooded_unknown_unicast.fetch_add(1, Relaxed);
        } else if pkt.meta.layers.l2.ethertype == hvnet_wire::EtherType::Arp {
            c.flooded_arp.fetch_add(1, Relaxed);
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
            c.count_drop(DropReason::WriteError, item.sources());
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
            pkt.meta.hash = self.rss.hash(frame, layers).map(|(h, _)| h);
        }
        let mode = if csum {
            CsumMode::Partial
        } else {
            CsumMode::Full
        };
        let mut remotes = smallvec::SmallVec::new();
        let flooded = self.remotes_for(pkt.dst(), &mut remotes);
        if flooded && !remotes.is_empty() {
            self.count_flooded(pkt);
        }
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
            c.count_drop(DropReason::WriteError, 1);
        } else {
            c.count_drop(DropReason::TunnelUnresolved, 1);
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
        let info = encap_header(tunnel, frame, pkt.meta.hash, pkt.meta.offload, &mut hdr)
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
}
