//! Software LRO at an uplink (`lro = "software"`): hvnet's GRO over what
//! one receive queue read in a batch, before switching, so that the
//! switch forwards one coalesced frame where the wire brought many — what
//! a hypervisor's software LRO does when the NIC cannot. A coalesced frame
//! is copied into one large buffer and forwarded as a GSO frame (a VM with
//! LRO takes it whole, one without gets it segmented, as a VM's TSO frame);
//! the rest pass as they came, in order.

pub(crate) mod stage;

use crate::counters::{add, IngressCounters};
use hvnet_offload::gro::{Coalesced, GroConfig, GroOutput, GroTable};
use hvnet_port::{Packet, Pool, SizeClass};

/// Segments a GRO run may hold: 64 KiB of 1448-byte segments is 45; an
/// in-order stream of tiny segments stops here instead of pinning a buffer
/// per byte.
pub const GRO_MAX_SEGMENTS: usize = 64;

/// One receive queue's ingress GRO table and its outputs.
pub(crate) struct IngressLro {
    table: GroTable<Packet>,
    out: Vec<GroOutput<Packet>>,
}

impl IngressLro {
    pub(crate) fn new() -> IngressLro {
        IngressLro {
            table: GroTable::new(GroConfig {
                buckets: 64,
                max_segments: GRO_MAX_SEGMENTS,
                ..GroConfig::default()
            }),
            out: Vec::with_capacity(crate::item::BATCH),
        }
    }

    /// Offers one frame read from the wire; what is ready to forward is
    /// handed to `forward` in order.
    pub(crate) fn receive(
        &mut self,
        pkt: Packet,
        pool: &mut Pool,
        c: &IngressCounters,
        forward: &mut impl FnMut(Packet),
    ) {
        let (layers, info) = (pkt.meta.layers, pkt.meta.offload);
        let out = &mut self.out;
        self.table
            .receive(pkt, info, &layers, 0, &mut |o| out.push(o));
        self.drain(pool, c, forward);
    }

    /// End of the batch: everything held goes out.
    pub(crate) fn flush(
        &mut self,
        pool: &mut Pool,
        c: &IngressCounters,
        forward: &mut impl FnMut(Packet),
    ) {
        if self.table.held() > 0 {
            let out = &mut self.out;
            self.table.flush_all(&mut |o| out.push(o));
            self.drain(pool, c, forward);
        }
    }

    fn drain(&mut self, pool: &mut Pool, c: &IngressCounters, forward: &mut impl FnMut(Packet)) {
        for o in self.out.drain(..) {
            match o {
                GroOutput::Single { mut frame, info } => {
                    frame.meta.offload = info;
                    forward(frame);
                }
                GroOutput::Coalesced(co) => match flatten(&co, pool) {
                    Some(p) => {
                        add(&c.lro_frames, 1);
                        add(&c.lro_segments, u64::from(co.count));
                        for s in co.into_segments() {
                            pool.keep(s.buf.buf);
                        }
                        forward(p);
                    }
                    // No large buffer left under the port's cap (or, never
                    // seen, a header that does not parse): the segments
                    // go on as they came, each still whole.
                    None => {
                        add(&c.no_buffer_stalls, 1);
                        for s in co.into_segments() {
                            forward(s.buf);
                        }
                    }
                },
            }
        }
    }
}

/// The coalesced frame in one buffer, parsed once, with its GSO metadata.
fn flatten(co: &Coalesced<Packet>, pool: &mut Pool) -> Option<Packet> {
    let mut buf = pool.take(SizeClass::Large)?;
    let len = co.len();
    if len > buf.capacity() {
        pool.keep(buf);
        return None;
    }
    let header = co.header();
    let storage = buf.storage_mut();
    let head = hvnet_port::HEADROOM;
    storage[head..head + header.len()].copy_from_slice(header);
    let mut at = head + header.len();
    for s in &co.segments {
        let b = s.bytes();
        storage[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    }
    buf.set_len(len);
    Packet::parse(buf, co.info)
        .map_err(|(b, _)| pool.keep(b))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvnet_offload::gso::{self, CsumMode};
    use hvnet_offload::meta::OffloadInfo;
    use hvnet_offload::testutil::{tcp4_frame, ACK};
    use hvnet_port::{Home, PoolCaps};
    use std::sync::atomic::Ordering::Relaxed;

    fn packet(pool: &mut Pool, frame: &[u8]) -> Packet {
        let mut b = pool.take(SizeClass::Small).expect("a buffer");
        b.fill(frame);
        Packet::parse(b, OffloadInfo::NONE).expect("parses")
    }

    /// A run of wire-sized segments comes out as one GSO frame whose
    /// segmentation (hvnet's GSO, full checksums) gives back exactly the
    /// frames that came in; the counters say how many merged.
    #[test]
    fn a_run_becomes_one_gso_frame_that_segments_back_into_the_wire_frames() {
        let mut pool = Pool::new(Home::new(PoolCaps::DEFAULT));
        let c = IngressCounters::default();
        let wire: Vec<Vec<u8>> = (0..8u32)
            .map(|i| tcp4_frame(1000 + i * 1448, i as u16, 1448, ACK))
            .collect();
        let mut lro = IngressLro::new();
        let mut out = Vec::new();
        for f in &wire {
            let p = packet(&mut pool, f);
            lro.receive(p, &mut pool, &c, &mut |p| out.push(p));
        }
        assert!(out.is_empty(), "held until the end of the batch");
        lro.flush(&mut pool, &c, &mut |p| out.push(p));
        assert_eq!(out.len(), 1);
        let g = out[0].meta.offload.gso.expect("a GSO frame");
        assert_eq!(g.size, 1448);
        assert_eq!(
            (c.lro_frames.load(Relaxed), c.lro_segments.load(Relaxed)),
            (1, 8)
        );
        let mut back = Vec::new();
        gso::segment(
            out[0].frame(),
            &out[0].meta.layers,
            g,
            CsumMode::Full,
            &mut |s| back.push(s.to_vec()),
        )
        .unwrap();
        assert_eq!(back, wire);
    }

    /// What cannot be coalesced passes as it came, in order.
    #[test]
    fn frames_that_do_not_coalesce_pass_in_order() {
        let mut pool = Pool::new(Home::new(PoolCaps::DEFAULT));
        let c = IngressCounters::default();
        // Out of sequence: no run forms across the gap.
        let wire = [tcp4_frame(1000, 1, 100, ACK), tcp4_frame(9000, 2, 100, ACK)];
        let mut lro = IngressLro::new();
        let mut out = Vec::new();
        for f in &wire {
            let p = packet(&mut pool, f);
            lro.receive(p, &mut pool, &c, &mut |p| out.push(p));
        }
        lro.flush(&mut pool, &c, &mut |p| out.push(p));
        let got: Vec<&[u8]> = out.iter().map(|p| p.frame()).collect();
        assert_eq!(got, [&wire[0][..], &wire[1][..]]);
        assert_eq!(c.lro_frames.load(Relaxed), 0);
    }
}
