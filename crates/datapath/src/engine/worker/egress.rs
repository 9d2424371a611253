//! The way to one destination: its egress arc, which begins with the
//! engine's choice of receive queue (RSS over the flow, hashed once) and
//! ends with the engine's write into it — the MTU, LRO into the guest or
//! a GSO frame passed whole or marked for segmenting, and staging into
//! the queue's lane.

use crate::arc::always;
use crate::arc::{Decl, Kind};
use crate::capture::Way;
use crate::counters::{add, DropReason};
use crate::engine::worker::{Ctx, State};
use crate::engine::worker::{Out, OutRun};
use crate::item::RingItem;
use crate::stages::lro::GRO_MAX_SEGMENTS;
use hvnet_offload::gro::{may_coalesce, GroConfig, GroOutput, GroTable};
use hvnet_port::Packet;

pub(crate) const QUEUE: Decl<OutRun> = Decl {
    name: "queue",
    kind: Kind::Engine,
    after: &[],
    before: &["mirror"],
    wants: always,
    run: queue,
};

/// The destination's receive queue, and the frame counted as offered to
/// it.
fn queue(st: &mut State, cx: &Ctx, o: &mut Out<'_>) -> Result<(), DropReason> {
    let port = &cx.ports[o.dst];
    let nq = port.dev.active_queues().min(port.rxq.len());
    o.q = if nq > 1 {
        let pkt = &mut *o.pkt;
        let (sw, frame, layers) = (&cx.sw, pkt.buf.frame(), &pkt.meta.layers);
        let h = *pkt
            .meta
            .hash
            .get_or_insert_with(|| sw.rss.hash(frame, layers).map_or(0, |(h, _)| h));
        h as usize % nq
    } else {
        0
    };
    if !cx.synthetic() {
        add(&st.lane(cx, o.dst, o.q).counters.offered, 1);
    }
    st.trace_out(cx, "queue", || {
        format!("to {} queue {} of {nq}", port.name, o.q)
    });
    Ok(())
}

impl State {
    /// A frame to port `dst`: through its egress arc, then written.
    pub(crate) fn egress(&mut self, cx: &Ctx, dst: usize, mut pkt: Packet) {
        let mut o = Out {
            dst,
            q: 0,
            pkt: &mut pkt,
        };
        for k in 0..self.out_arcs[dst].len() {
            let (name, run) = self.out_arcs[dst].stage(k);
            if let Err(why) = run(self, cx, &mut o) {
                let q = o.q;
                self.trace_out(cx, name, || {
                    format!("to {}: dropped, {}", cx.ports[dst].name, why.name())
                });
                self.drop_out(cx, dst, q, why, &pkt);
                return;
            }
        }
        let q = o.q;
        self.write(cx, dst, q, pkt);
    }

    /// A frame to port `dst` (its queue `q`) dropped for `why`: the
    /// trace's drop line, and, for a real frame, the lane's counters under
    /// the reason and a copy for the port's `drop` captures (a synthetic
    /// frame is counted nowhere, as [`Ctx::drop_frame`] has it on the way
    /// in).
    pub(super) fn drop_out(
        &mut self,
        cx: &Ctx,
        dst: usize,
        q: usize,
        why: DropReason,
        pkt: &Packet,
    ) {
        self.trace_drop(cx, Some(dst), why);
        if !cx.synthetic() {
            self.lane(cx, dst, q).counters.count_drop(why, 1);
            cx.ports[dst].taps.dropped(Way::Outbound, q, why, pkt);
        }
    }

    /// A traced frame to uplink `dst`: the way its device will send it (a
    /// team's member and why), in a line.
    fn explain_way_out(&mut self, cx: &Ctx, dst: usize, q: usize, pkt: &Packet) {
        let port = &cx.ports[dst];
        let tx = crate::engine::worker::transmitter(&mut self.dest(cx, dst, q).tx, port, q);
        if let Some(how) = tx.explain(pkt) {
            self.trace_out(cx, "team", || format!("to {}: {how}", port.name));
        }
    }

    /// A synthetic frame's copy to `dst` is written nowhere: its trace
    /// says where it would have gone. True if `pkt` was one.
    fn not_delivered(&self, cx: &Ctx, dst: usize, q: usize, how: &str) -> bool {
        if !cx.synthetic() {
            return false;
        }
        self.trace_out(cx, "write", || {
            format!(
                "to {} queue {q}: {how} (not delivered: a synthetic frame)",
                cx.ports[dst].name
            )
        });
        true
    }

    /// The engine's end of the way: the MTU, LRO or a GSO frame's
    /// segmenting, and staging into the queue's lane (one caller: inlined,
    /// so that the frame is not moved once more).
    #[inline(always)]
    fn write(&mut self, cx: &Ctx, dst: usize, q: usize, mut pkt: Packet) {
        let port = &cx.ports[dst];
        let s = &self.settings[dst];
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
        // Longest frame the receiver takes: its MTU and this frame's link
        // header (its tag counted); less the outer headers a tunnel
        // endpoint adds on the wire.
        let limit = (mtu + pkt.meta.layers.l2_len()).saturating_sub(overhead);
        // The receiver takes partial checksums (for the trace's line).
        let takes_partial = s.csum;
        // A traced frame to a tunnel endpoint leaves marked, for the far
        // end to trace it too.
        let marks = |pkt: &Packet| {
            pkt.meta.offload.gso.is_none() && pkt.len() <= limit && cx.sw.endpoint(dst).is_some()
        };
        let pkt = match self.tracing {
            Some(_) if marks(&pkt) => match self.send_traced(cx, dst, q, pkt) {
                Some(pkt) => pkt,
                None => return,
            },
            _ => pkt,
        };
        if self.tracing.is_some() && uplink {
            self.explain_way_out(cx, dst, q, &pkt);
        }
        let too_long = |what: &str, st: &State| {
            st.trace_out(cx, "write", || {
                format!("to {}: {what} over the MTU", port.name)
            });
        };
        // What no LRO table would hold goes by as a table would pass it
        // (at once, held runs untouched): a receiver that gets only such
        // frames (a broadcast's copies) keeps no table.
        let offered = lro && may_coalesce(&pkt.meta.layers);
        match pkt.meta.offload.gso {
            Some(g) => {
                // Segments that would not fit the receiver's MTU (or the
                // wire's, whoever segments) are refused here rather than
                // written for a driver to drop.
                if (!whole || uplink) && g.size as usize + pkt.header_len() > limit {
                    too_long("segments", self);
                    self.drop_out(cx, dst, q, DropReason::MtuExceeded, &pkt);
                    return;
                }
                if self.not_delivered(cx, dst, q, "a GSO frame") {
                    return;
                }
                // Segments of its flow held for coalescing go first: a
                // GSO frame must not overtake them.
                if lro {
                    self.flush_gro(cx, dst, q);
                }
                let segment = (!whole).then_some(g);
                self.trace_out(cx, "write", || {
                    let how = if whole { "whole" } else { "to be segmented" };
                    format!("to {} queue {q}: a GSO frame, {how}", port.name)
                });
                self.stage(cx, dst, q, RingItem::Frame { pkt, segment });
            }
            None if pkt.len() > limit => {
                too_long("frame", self);
                self.drop_out(cx, dst, q, DropReason::MtuExceeded, &pkt);
            }
            None if self.not_delivered(
                cx,
                dst,
                q,
                if offered { "offered to LRO" } else { "written" },
            ) => {}
            None if offered => {
                self.trace_out(cx, "write", || {
                    format!("to {} queue {q}: offered to LRO", port.name)
                });
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
            None => {
                self.trace_out(cx, "write", || {
                    let csum = match pkt.meta.offload.csum {
                        hvnet_offload::CsumState::Partial { .. } if !takes_partial => {
                            ", its partial checksum completed here (the receiver takes none)"
                        }
                        hvnet_offload::CsumState::Partial { .. } => {
                            ", its checksum left partial for the receiver"
                        }
                        _ => "",
                    };
                    format!("to {} queue {q}{csum}", port.name)
                });
                self.stage(cx, dst, q, RingItem::Frame { pkt, segment: None });
            }
        }
    }

    pub(crate) fn stage_gro_output(&mut self, cx: &Ctx, dst: usize, q: usize) {
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
    pub(crate) fn flush_gro(&mut self, cx: &Ctx, dst: usize, q: usize) {
        if let Some(t) = self.dests[dst][q].gro.as_mut() {
            if t.held() > 0 {
                let out = &mut self.gro_out;
                t.flush_all(&mut |o| out.push(o));
                self.stage_gro_output(cx, dst, q);
            }
        }
    }
}
