//! A worker's offload stage for one destination: the receive queue (RSS
//! over the flow, hashed once), the MTU, LRO into the guest or a GSO frame
//! passed whole or marked for segmenting.

use super::{Ctx, State, GRO_MAX_SEGMENTS};
use crate::capture::Way;
use crate::counters::{add, DropReason, EgressCounters};
use crate::forward;
use crate::item::RingItem;
use crate::switch::Port;
use hvnet_offload::gro::{GroConfig, GroOutput, GroTable};
use hvnet_port::Packet;

/// A frame to `port` (its queue `q`) dropped: counted in the lane's
/// counters under its reason, and copied for the port's `drop` captures.
fn drop_to(c: &EgressCounters, port: &Port, q: usize, reason: DropReason, pkt: &Packet) {
    c.count_drop(reason, 1);
    port.taps.dropped(Way::Outbound, q, reason, pkt);
}

impl State {
    /// The offload stage for one destination: queue choice (RSS over the
    /// flow, hashed once), MTU, LRO, and staging into the lane.
    pub(super) fn egress(&mut self, cx: &Ctx, dst: usize, mut pkt: Packet) {
        if !self.mirroring && !self.mirrors.none() {
            self.mirror_out(cx, dst, &mut pkt);
        }
        let to = crate::acl::Direction::In;
        let acl = match self.acls.get(dst).and_then(Option::as_ref) {
            Some(a) => a.check(to, pkt.buf.held(), &pkt.meta.layers, self.now),
            None => Ok(()),
        };
        let port = &cx.ports[dst];
        let nq = port.dev.active_queues().min(port.rxq.len());
        let q = if nq > 1 {
            let (sw, frame, layers) = (&cx.sw, pkt.buf.frame(), &pkt.meta.layers);
            let h = *pkt
                .meta
                .hash
                .get_or_insert_with(|| sw.rss.hash(frame, layers).map_or(0, |(h, _)| h));
            h as usize % nq
        } else {
            0
        };
        let s = &self.settings[dst];
        // The tag the frame wears to this port: none to an access port
        // (nothing to do for an untagged frame, the common case), its
        // VLAN's to a trunk, none for a trunk's native VLAN.
        let tag = forward::egress_tag(&s.vlans_of(port.vlan), &pkt);
        let retag = tag != pkt.meta.layers.l2.vlans[0];
        // A guest with LRO takes GSO frames whole and gets MTU-sized ones
        // coalesced; an uplink with TSO "hardware" hands GSO frames to its
        // device whole, and nothing is coalesced toward the wire.
        let uplink = port.is_uplink();
        let (whole, lro) = if uplink {
            (s.tso, false)
        } else {
            (s.lro, s.lro)
        };
        let (mtu, overhead) = (s.mtu as usize, port.dev.overhead());
        // A payload left in the sending guest's memory is copied from
        // there only into a guest's virtqueue written from this worker,
        // whole (no segmenting, no coalescing, no checksum to complete);
        // for anything else it is copied into the frame's buffer now.
        if pkt.buf.pending().is_some() {
            let passes = match pkt.meta.offload.gso {
                Some(_) => whole && !uplink,
                None => !lro,
            };
            let completes = crate::deliver::completes_csum(&pkt.meta.offload, s);
            let inline = !port.rxq[q].rings.has_consumer();
            if !(passes && !completes && inline && port.dev.writes_pending()) {
                pkt.buf.fill_pending();
            }
        }
        // An uplink's shares among the VMs sending through it.
        let shared = if uplink && !cx.port.is_uplink() && !self.mirroring {
            let src = &self.settings[cx.port.id];
            let claim = crate::nioc::Claim {
                shares: src.shares,
                reservation: src.reservation.map_or(0, |r| r.0 / 8),
            };
            port.shares.admit(cx.port.id, claim, &mut pkt, self.now)
        } else {
            crate::rate::Policed::Pass
        };
        let c = &self.lane(cx, dst, q).counters;
        add(&c.offered, 1);
        if let Err(d) = acl {
            drop_to(c, port, q, d.reason(to), &pkt);
            return;
        }
        match shared {
            crate::rate::Policed::Pass => {}
            crate::rate::Policed::Cut => add(&cx.port.ingress[cx.q].uplink_share_cut, 1),
            crate::rate::Policed::Drop => {
                drop_to(c, port, q, DropReason::UplinkShare, &pkt);
                add(&cx.port.ingress[cx.q].uplink_share_drops, 1);
                return;
            }
        }
        // Every buffer has headroom for a tag, and a frame is pushed one
        // only when it has none: never refused, but counted if it were.
        if retag && !pkt.set_vlan_tag(tag) {
            drop_to(c, port, q, DropReason::WriteError, &pkt);
            return;
        }
        // Longest frame the receiver takes: its MTU and this frame's link
        // header (its tag counted); less the outer headers a tunnel
        // endpoint adds on the wire.
        let limit = (mtu + pkt.meta.layers.l2.header_len).saturating_sub(overhead);
        match pkt.meta.offload.gso {
            Some(g) => {
                // Segments that would not fit the receiver's MTU (or the
                // wire's, whoever segments) are refused here rather than
                // written for a driver to drop.
                if (!whole || uplink) && g.size as usize + pkt.header_len() > limit {
                    drop_to(c, port, q, DropReason::MtuExceeded, &pkt);
                    return;
                }
                // Segments of its flow held for coalescing go first: a
                // GSO frame must not overtake them.
                if lro {
                    self.flush_gro(cx, dst, q);
                }
                let segment = (!whole).then_some(g);
                self.stage(cx, dst, q, RingItem::Frame { pkt, segment });
            }
            None if pkt.len() > limit => {
                drop_to(c, port, q, DropReason::MtuExceeded, &pkt);
            }
            None if lro => {
                self.dest(cx, dst, q);
                let d = &mut self.dests[dst][q];
                let table = d.gro.get_or_insert_with(|| {
                    GroTable::new(GroConfig {
                        buckets: 64,
                        max_segments: GRO_MAX_SEGMENTS,
                        ..GroConfig::default()
                    })
                });
                d.gro_used = Some(self.now);
                let (layers, info) = (pkt.meta.layers, pkt.meta.offload);
                let out = &mut self.gro_out;
                table.receive(pkt, info, &layers, 0, &mut |o| out.push(o));
                self.mark_active(cx, dst, q);
                self.stage_gro_output(cx, dst, q);
            }
            None => self.stage(cx, dst, q, RingItem::Frame { pkt, segment: None }),
        }
    }

    pub(super) fn stage_gro_output(&mut self, cx: &Ctx, dst: usize, q: usize) {
        // Outputs are in the order the receiver must see them.
        let mut outs = std::mem::take(&mut self.gro_out);
        for o in outs.drain(..) {
            let item = match o {
                GroOutput::Single { mut frame, info } => {
                    frame.meta.offload = info;
                    RingItem::Frame {
                        pkt: frame,
                        segment: None,
                    }
                }
                GroOutput::Coalesced(c) => RingItem::Coalesced(Box::new(c)),
            };
            self.stage(cx, dst, q, item);
        }
        self.gro_out = outs;
    }

    /// Stages what the LRO table of `(dst, q)` holds.
    pub(super) fn flush_gro(&mut self, cx: &Ctx, dst: usize, q: usize) {
        if let Some(t) = self.dests[dst][q].gro.as_mut() {
            if t.held() > 0 {
                let out = &mut self.gro_out;
                t.flush_all(&mut |o| out.push(o));
                self.stage_gro_output(cx, dst, q);
            }
        }
    }
}
