//! What the switch sends into the tunnel: each inner frame to the remote
//! its destination was learned behind, else to the flood list, behind
//! one outer header per remote; an inner GSO frame segmented once, its
//! payload never copied.

use super::kernel_gso::TunnelTap;
use super::{Inner, Vtep, SOURCE_PORTS};
use crate::device::Transmitter;
use crate::outgoing::SendError;
use crate::outgoing::{BatchOptions, OutFrame, Written};
use crate::packet::{mac_at, Packet};
use hvnet_offload::gso::{self, CsumMode};
use hvnet_offload::vxlan::{encap_header, Tunnel, MAX_OUTER_LEN};
use hvnet_offload::{CsumState, OffloadInfo};
use hvnet_wire::{Layers, MacAddr};
use std::io::IoSlice;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;

/// Buffers a transmitter keeps for tunnelled GSO frames, so that
/// segmenting them allocates nothing in steady state.
#[derive(Default)]
pub(super) struct TunnelScratch {
    /// The segments' headers (outer and inner).
    arena: Vec<u8>,
    /// Where each segment is.
    spans: Vec<SegmentSpan>,
    /// A frame handed over in pieces, made one (a segment the datapath
    /// cut: the port's TSO is off).
    linear: Vec<u8>,
    /// A tagged frame of one of the endpoint's VLANs, its tag taken off
    /// (it crosses untagged, in its VLAN's VNI).
    untagged: Vec<u8>,
    /// The inner headers of a GSO frame written whole.
    head: Vec<u8>,
}

/// One segment of a tunnelled GSO frame: its headers in the arena, its
/// payload in the packet's buffer.
struct SegmentSpan {
    header: (usize, usize),
    payload: (usize, usize),
    info: OffloadInfo,
}

impl Vtep {
    /// The remote endpoints an inner frame to `dst` in segment `vni` goes
    /// to, with their MACs where resolved; true if flooded.
    pub(super) fn remotes_for(
        &self,
        vni: u32,
        dst: MacAddr,
        out: &mut smallvec::SmallVec<[(IpAddr, Option<MacAddr>); 8]>,
    ) -> bool {
        out.clear();
        let known = (!dst.is_multicast())
            .then(|| self.remote_of(vni, &dst))
            .flatten();
        let n = self.neighbours.read().expect("lock");
        match known {
            Some(r) => {
                out.push((r, n.get(&r).copied()));
                false
            }
            None => {
                let flood = self.flood.read().expect("lock");
                let list = flood.get(&vni).into_iter().flatten();
                out.extend(list.map(|r| (*r, n.get(r).copied())));
                true
            }
        }
    }

    /// Counts a frame replicated to the flood list, by kind.
    fn count_flooded(&self, dst: MacAddr, arp: bool) {
        let c = &self.evpn.counters;
        c.flooded.fetch_add(1, Relaxed);
        if !dst.is_multicast() {
            c.flooded_unknown_unicast.fetch_add(1, Relaxed);
        } else if arp {
            c.flooded_arp.fetch_add(1, Relaxed);
        }
    }

    /// Encapsulates one frame the switch sends out and writes it through
    /// the underlay's transmitter `tx` once per remote it goes to. With
    /// `how.csum` the underlay takes partial inner checksums; else the
    /// segments of a GSO frame leave with theirs done (the datapath
    /// completed a whole frame's before). Written: every copy and segment
    /// that left; the frame fails only when none did.
    pub(super) fn send(
        &self,
        tx: &mut dyn Transmitter,
        frame: &OutFrame<'_>,
        how: BatchOptions,
        scratch: &mut TunnelScratch,
    ) -> Result<Written, SendError> {
        let mut linear = std::mem::take(&mut scratch.linear);
        let mut untagged = std::mem::take(&mut scratch.untagged);
        let r = self.send_inner(tx, frame, how, scratch, &mut linear, &mut untagged);
        scratch.linear = linear;
        scratch.untagged = untagged;
        r
    }

    /// A tagged inner frame of one of the endpoint's VLANs, as it crosses:
    /// untagged, in that VLAN's VNI, its parsed layers and partial
    /// checksum moved with it. Where it goes whole into the kernel
    /// (`whole`: the TAP takes it and its headers were parsed) only its
    /// headers are put together without the tag, in `untagged`, and its
    /// payload is written where it lies; else the whole frame is copied
    /// there. `None`: the frame as it is, in the uplink's own VNI. An
    /// error for a tag of a VLAN the endpoint does not carry (the switch
    /// sends it none).
    fn untag<'a>(
        &self,
        inner: &Inner<'a>,
        whole: bool,
        untagged: &'a mut Vec<u8>,
        layers: &'a mut Option<Layers>,
    ) -> Result<Option<(u32, Inner<'a>)>, SendError> {
        let f = inner.frame;
        if !self.has_vlans() || f.len() < 18 || f[12..14] != [0x81, 0x00] {
            return Ok(None);
        }
        let vid = u16::from_be_bytes([f[14], f[15]]) & 0x0fff;
        let Some(vni) = self.vni_of(vid) else {
            return Err(SendError::Failed);
        };
        // The headers up to the payload, the tag's 4 bytes apart (the
        // split stays even, as the outer checksum wants).
        let split = inner
            .layers
            .map(|l| l.payload_offset())
            .filter(|&at| whole && at >= 16 && at <= f.len() && at % 2 == 0);
        untagged.clear();
        untagged.extend_from_slice(&f[..12]);
        let rest = match split {
            Some(at) => {
                untagged.extend_from_slice(&f[16..at]);
                &f[at..]
            }
            None => {
                untagged.extend_from_slice(&f[16..]);
                &[]
            }
        };
        *layers = inner.layers.map(|l| {
            let mut l = *l;
            l.pop_vlan();
            l
        });
        let mut offload = inner.offload;
        if let CsumState::Partial { start, .. } = &mut offload.csum {
            *start = start.saturating_sub(4);
        }
        Ok(Some((
            vni,
            Inner {
                frame: untagged,
                rest,
                layers: layers.as_ref(),
                hash: inner.hash,
                offload,
            },
        )))
    }

    fn send_inner(
        &self,
        tx: &mut dyn Transmitter,
        frame: &OutFrame<'_>,
        how: BatchOptions,
        scratch: &mut TunnelScratch,
        linear: &mut Vec<u8>,
        untagged: &mut Vec<u8>,
    ) -> Result<Written, SendError> {
        let inner = match *frame {
            OutFrame::Packet(pkt) => Inner {
                frame: pkt.frame(),
                rest: &[],
                layers: Some(&pkt.meta.layers),
                hash: pkt.meta.hash.or_else(|| self.flow_hash(pkt)),
                offload: pkt.meta.offload,
            },
            OutFrame::Pieces { pieces, offload } => {
                linear.clear();
                pieces.iter().for_each(|p| linear.extend_from_slice(p));
                Inner {
                    frame: linear,
                    rest: &[],
                    layers: None,
                    hash: None,
                    offload,
                }
            }
            // Nothing is coalesced toward an uplink.
            OutFrame::Coalesced(_) => return Err(SendError::Failed),
        };
        if inner.frame.len() < 14 {
            return Err(SendError::Failed);
        }
        // Whole through the kernel where it takes the frame; else
        // segmented here, to the underlay's socket. Where inner checksums
        // must leave complete (the uplink's `csum = "software"`) every
        // frame goes the socket's way: the kernel leaves them partial
        // wherever the next device takes partial checksums, and one path
        // keeps a flow's frames in order.
        let tap = self
            .tap
            .as_ref()
            .filter(|tap| how.csum && TunnelTap::takes(&inner, self.cfg.local) && tap.is_open());
        let mut popped = None;
        let (vni, inner) = match self.untag(&inner, tap.is_some(), untagged, &mut popped)? {
            Some((vni, bare)) => (vni, bare),
            None => (self.cfg.vni, inner),
        };
        let dst = mac_at(inner.frame, 0);
        let mut remotes = smallvec::SmallVec::new();
        let flooded = self.remotes_for(vni, dst, &mut remotes);
        if flooded {
            self.prune_to_members(vni, inner.frame, inner.layers, &mut remotes);
        }
        if flooded && !remotes.is_empty() {
            let arp = inner.layers.map(|l| l.ethertype()) == Some(hvnet_wire::EtherType::Arp);
            self.count_flooded(dst, arp);
        }
        let mode = if how.csum {
            CsumMode::Partial
        } else {
            CsumMode::Full
        };
        let mut written = Written::default();
        let mut failed = false;
        for &(remote, mac) in &remotes {
            let Some(mac) = mac else { continue };
            let tunnel = self.tunnel_to(vni, remote, mac);
            let r = match tap {
                Some(tap) => tap.write(&tunnel, &inner, &mut scratch.head, &mut written),
                None => write_encapsulated(tx, &tunnel, &inner, mode, scratch, &mut written),
            };
            failed |= r.is_err();
        }
        match (written.frames, failed) {
            (0, true) => Err(SendError::Failed),
            (0, false) => Err(SendError::Unresolved),
            _ => Ok(written),
        }
    }

    /// The outer headers to `remote` (its underlay MAC `mac`) in `vni`.
    pub(super) fn tunnel_to(&self, vni: u32, remote: IpAddr, mac: MacAddr) -> Tunnel {
        Tunnel {
            src_mac: self.cfg.mac,
            dst_mac: mac,
            dst_port: self.cfg.port,
            src_port_range: SOURCE_PORTS,
            udp_csum: self.cfg.udp_csum,
            ..Tunnel::new(vni, self.cfg.local, remote)
        }
    }

    /// The inner flow's hash, for the outer source port: taken from the
    /// headers parsed where the frame entered (once for every remote it
    /// goes to), when RSS did not take it already.
    fn flow_hash(&self, pkt: &Packet) -> Option<u32> {
        self.rss.hash(pkt.frame(), &pkt.meta.layers).map(|(h, _)| h)
    }
}

/// One copy of the inner frame to one remote, added to `written`; an error
/// if it, or any of its segments, did not leave.
pub(super) fn write_encapsulated(
    tx: &mut dyn Transmitter,
    tunnel: &Tunnel,
    inner: &Inner<'_>,
    mode: CsumMode,
    scratch: &mut TunnelScratch,
    written: &mut Written,
) -> Result<(), ()> {
    // (A frame in two parts goes only the TAP's way.)
    debug_assert!(inner.rest.is_empty());
    let mut hdr = [0u8; MAX_OUTER_LEN];
    let hdr = &mut hdr[..tunnel.outer_len()];
    let frame = inner.frame;
    let info = encap_header(tunnel, frame, inner.hash, inner.offload, hdr).map_err(|_| ())?;
    let (Some(g), Some(layers)) = (info.gso, inner.layers) else {
        if info.gso.is_some() {
            // A GSO frame in pieces: never handed over (segments carry
            // no segmentation).
            return Err(());
        }
        let pieces = [IoSlice::new(hdr), IoSlice::new(frame)];
        tx.send(
            OutFrame::Pieces {
                pieces: &pieces,
                offload: info,
            },
            BatchOptions::default(),
        )
        .map_err(|_| ())?;
        written.frames += 1;
        written.bytes += (hdr.len() + frame.len()) as u64;
        return Ok(());
    };
    // Segmented once, without putting the outer header and the frame
    // together: each segment's headers (outer and inner) go into the
    // arena, its payload stays where it is in the packet's buffer; all of
    // them are written as one batch.
    let TunnelScratch { arena, spans, .. } = scratch;
    arena.clear();
    spans.clear();
    let base = frame.as_ptr() as usize;
    gso::segment_encapsulated(hdr, frame, layers, g, mode, &mut |seg| {
        let start = arena.len();
        arena.extend_from_slice(seg.header);
        let at = seg.payload.as_ptr() as usize - base;
        spans.push(SegmentSpan {
            header: (start, arena.len()),
            payload: (at, at + seg.payload.len()),
            info: seg.info,
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
    let frames: smallvec::SmallVec<[OutFrame<'_>; 64]> = iov
        .chunks(2)
        .zip(spans.iter())
        .map(|(pieces, s)| OutFrame::Pieces {
            pieces,
            offload: s.info,
        })
        .collect();
    // Segments count as sent up to the first that was not.
    let (mut sent, mut failed) = (0, false);
    tx.send_batch(&frames, BatchOptions::default(), &mut |r| {
        failed |= r.is_err();
        sent += usize::from(!failed);
    });
    let bytes: usize = spans[..sent]
        .iter()
        .map(|s| s.header.1 - s.header.0 + s.payload.1 - s.payload.0)
        .sum();
    written.frames += sent as u32;
    written.bytes += bytes as u64;
    written.segmented = true;
    if sent < spans.len() {
        return Err(());
    }
    Ok(())
}
