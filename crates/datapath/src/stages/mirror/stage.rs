//! A worker's side of port mirroring ([`crate::mirror`]): the mirrors as
//! this worker last read them, resolved to port indexes, and the copies
//! made of a frame as it comes in from a port and as it goes to one.

use super::view::{add_copy, plenty, Target};
use super::Mirror;
use crate::arc::{Decl, Kind};
use crate::engine::worker::{Ctx, State};
use crate::engine::worker::{InRun, OutRun};
use hvnet_offload::gso::{self, CsumMode};
use hvnet_port::Packet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

pub(crate) const IN: Decl<InRun> = Decl {
    name: "mirror",
    kind: Kind::Observation,
    after: &["vlan"],
    before: &["fdb"],
    wants: |f| f.mirror_in,
    run: |st, cx, b| {
        for i in b.live() {
            // A traced frame's copies are traced on their way too.
            st.tracing = b.traced(i);
            let m = st.mirror_in(cx, &mut b[i]);
            st.tracing = None;
            b.mirrored[i] = m;
            b.trace(&cx.port.tracer, i, "mirror", || match m {
                0 => "no mirror selects it".into(),
                m => format!("copied for mirrors {m:#x}"),
            });
        }
    },
};

pub(crate) const OUT: Decl<OutRun> = Decl {
    name: "mirror",
    kind: Kind::Observation,
    after: &["queue"],
    before: &["acl"],
    wants: |f| f.mirror_out,
    run: |st, cx, o| {
        // A mirror's copy is not mirrored again.
        if !st.mirroring {
            let m = st.mirror_out(cx, o.dst, o.pkt);
            st.trace_out(cx, "mirror", || match m {
                0 => format!("to {}: no mirror selects it", cx.ports[o.dst].name),
                m => format!("to {}: copied for mirrors {m:#x}", cx.ports[o.dst].name),
            });
        }
        Ok(())
    },
};

impl State {
    /// Copies of a frame from the port, for the mirrors selecting it as
    /// it comes in (its VLAN known): those mirrors.
    fn mirror_in(&mut self, cx: &Ctx, pkt: &mut Packet) -> u64 {
        let m = self.mirrors.selecting_in(cx.port.id, pkt.meta.vlan);
        if m != 0 {
            self.mirror(cx, m, pkt, false);
        }
        m
    }

    /// Copies of a frame to `dst`, for the mirrors selecting it there
    /// that did not copy it yet (as it came in, or to another of a
    /// flood's destinations): a frame is copied once per mirror.
    fn mirror_out(&mut self, cx: &Ctx, dst: usize, pkt: &mut Packet) -> u64 {
        let m = self.mirrors.dst.get(dst).copied().unwrap_or(0) & !self.mirrored;
        self.mirrored |= m;
        if m != 0 {
            self.mirror(cx, m, pkt, true);
        }
        m
    }

    fn mirror(&mut self, cx: &Ctx, mut mask: u64, pkt: &mut Packet, egress: bool) {
        // A copy is read whole: the payload is copied out of the sending
        // guest's memory first.
        pkt.buf.fill_pending();
        self.mirroring = true;
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let (m, target) = (
                Arc::clone(&self.mirrors.mirrors[i]),
                self.mirrors.targets[i].clone(),
            );
            match target {
                Target::Port(p) if p != cx.port.id => self.copy_to(cx, &m, p, pkt, pkt.meta.vlan),
                Target::Port(_) | Target::Nowhere => {}
                Target::Vlan(vlan) => {
                    let (settings, outputs) = (&self.settings, &self.mirrors.dedicated);
                    let to: Vec<usize> = (cx.ports.iter().map(|p| p.id))
                        .filter(|&p| {
                            p != cx.port.id
                                && crate::engine::worker::takes(
                                    &cx.ports, settings, outputs, p, vlan,
                                )
                        })
                        .collect();
                    for p in to {
                        self.copy_to(cx, &m, p, pkt, vlan);
                    }
                }
                Target::Erspan(_) if cx.synthetic() => {
                    self.trace_out(cx, "mirror", || {
                        format!(
                            "mirror {}: its ERSPAN copy not sent, a synthetic frame",
                            m.spec.name
                        )
                    });
                }
                Target::Erspan(e) => {
                    let (vlan, tagged) = (pkt.meta.vlan, pkt.meta.layers.outer_vlan().is_some());
                    let mut sent = true;
                    let mut out = std::mem::take(&mut self.erspan_out);
                    let frame = pkt.frame();
                    match pkt.meta.offload.gso {
                        // A GSO frame goes as the segments the wire
                        // would carry.
                        Some(g) => {
                            let r = gso::segment(
                                frame,
                                &pkt.meta.layers,
                                g,
                                CsumMode::Full,
                                &mut |s| {
                                    let pieces = [s.header, s.payload];
                                    sent &= e.send(&pieces, vlan, tagged, egress, &mut out);
                                    add_copy(&m, s.header.len() + s.payload.len());
                                },
                            );
                            sent &= r.is_ok();
                        }
                        None => {
                            sent = e.send(&[frame], vlan, tagged, egress, &mut out);
                            add_copy(&m, frame.len());
                        }
                    }
                    self.erspan_out = out;
                    if !sent {
                        m.lost.fetch_add(1, Relaxed);
                    }
                }
            }
        }
        self.mirroring = false;
    }

    /// One copy of `pkt`, on `vlan`, to port `p`, through its offload
    /// stage (its queue, MTU, tag, segmenting).
    fn copy_to(&mut self, cx: &Ctx, m: &Mirror, p: usize, pkt: &Packet, vlan: u16) {
        if !plenty(&cx.port.home, pkt.buf.class()) {
            m.lost.fetch_add(1, Relaxed);
            return;
        }
        let Some(mut b) = self.pool.take(pkt.buf.class()) else {
            m.lost.fetch_add(1, Relaxed);
            return;
        };
        b.fill(pkt.frame());
        let mut meta = pkt.meta;
        meta.vlan = vlan;
        add_copy(m, pkt.len());
        self.egress(cx, p, Packet { buf: b, meta });
    }
}
