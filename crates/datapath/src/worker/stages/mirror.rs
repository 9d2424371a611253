//! A worker's side of port mirroring ([`crate::mirror`]): the mirrors as
//! this worker last read them, resolved to port indexes, and the copies
//! made of a frame as it comes in from a port and as it goes to one.

use super::super::{Ctx, State};
use super::{InRun, OutRun};
use crate::arc::{Decl, Kind};
use crate::mirror::{Mirror, Output};
use crate::port_table::PortTable;
use hvnet_offload::gso::{self, CsumMode};
use hvnet_port::{Home, Packet, SizeClass};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

pub(crate) const IN: Decl<InRun> = Decl {
    name: "mirror",
    kind: Kind::Observation,
    after: &["vlan"],
    before: &["learn"],
    wants: |f| f.mirror_in,
    run: |st, cx, b| {
        for i in b.live() {
            let m = st.mirror_in(cx, &mut b.pkts[i]);
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

/// Most mirrors a switch has (a bit each in a word per port).
pub const MAX_MIRRORS: usize = 64;

/// Where one mirror's copies go, resolved.
#[derive(Clone)]
enum Target {
    Port(usize),
    Vlan(u16),
    Erspan(Arc<crate::mirror::ErspanSender>),
    /// Its output port is not there (now).
    Nowhere,
}

/// The mirrors, resolved against a port table.
#[derive(Default)]
pub(crate) struct MirrorView {
    mirrors: Vec<Arc<Mirror>>,
    targets: Vec<Target>,
    /// Per port index: the mirrors selecting what it sends, and what is
    /// sent to it (bit i: mirror i).
    src: Vec<u64>,
    dst: Vec<u64>,
    vlans: Vec<(u16, u64)>,
    all: u64,
    /// Per RSPAN VLAN, its mirrors: frames on it are copies (from here
    /// or another switch) and are not selected by them.
    rspan: Vec<(u16, u64)>,
    /// Per port index: a mirror's output (nothing else goes to it).
    pub(crate) dedicated: Vec<bool>,
}

impl MirrorView {
    pub(crate) fn new(mirrors: &[Arc<Mirror>], t: &PortTable) -> MirrorView {
        let mut v = MirrorView {
            src: vec![0; t.len()],
            dst: vec![0; t.len()],
            dedicated: vec![false; t.len()],
            ..MirrorView::default()
        };
        let index = |name: &str| (0..t.len()).find(|&i| t.get(i).is_some_and(|p| p.name == name));
        for (i, m) in mirrors.iter().take(MAX_MIRRORS).enumerate() {
            let bit = 1u64 << i;
            let s = &m.spec;
            for p in s.select_src_port.iter().filter_map(|n| index(n)) {
                v.src[p] |= bit;
            }
            for p in s.select_dst_port.iter().filter_map(|n| index(n)) {
                v.dst[p] |= bit;
            }
            for &vlan in &s.select_vlan {
                match v.vlans.iter_mut().find(|(x, _)| *x == vlan) {
                    Some((_, b)) => *b |= bit,
                    None => v.vlans.push((vlan, bit)),
                }
            }
            if s.select_all {
                v.all |= bit;
            }
            v.targets.push(match &s.output {
                Output::Port(n) => index(n).map_or(Target::Nowhere, |p| {
                    v.dedicated[p] = true;
                    Target::Port(p)
                }),
                Output::Vlan(vlan) => {
                    v.rspan.push((*vlan, bit));
                    Target::Vlan(*vlan)
                }
                Output::Erspan(_) => m.erspan.clone().map_or(Target::Nowhere, Target::Erspan),
            });
            v.mirrors.push(Arc::clone(m));
        }
        v
    }

    /// True if a mirror selects what port `p` sends.
    pub(crate) fn selects_from(&self, p: usize) -> bool {
        self.src.get(p).is_some_and(|m| *m != 0) || self.all != 0 || !self.vlans.is_empty()
    }

    /// True if a mirror selects what is sent to port `p`.
    pub(crate) fn selects_to(&self, p: usize) -> bool {
        self.dst.get(p).is_some_and(|m| *m != 0)
    }

    /// The mirrors selecting a frame from `src` on `vlan` as it comes in.
    fn selecting_in(&self, src: usize, vlan: u16) -> u64 {
        let src = self.src.get(src).copied().unwrap_or(0);
        (src | self.all | on(&self.vlans, vlan)) & !on(&self.rspan, vlan)
    }
}

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
                                && super::super::takes(&cx.ports, settings, outputs, p, vlan)
                        })
                        .collect();
                    for p in to {
                        self.copy_to(cx, &m, p, pkt, vlan);
                    }
                }
                Target::Erspan(e) => {
                    let (vlan, tagged) = (pkt.meta.vlan, pkt.meta.layers.l2.vlans[0].is_some());
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

/// The mirrors listed for `vlan`.
fn on(list: &[(u16, u64)], vlan: u16) -> u64 {
    list.iter()
        .filter(|(v, _)| *v == vlan)
        .fold(0, |m, (_, b)| m | b)
}

/// True while under half the sending port's buffers of `class` are in
/// use: copies (held by a monitor that may stop reading) never take the
/// buffers its own frames need.
fn plenty(home: &Home, class: SizeClass) -> bool {
    let (s, caps) = (home.status(), home.caps());
    let (alive, idle, cap) = match class {
        SizeClass::Small => (s.small_alive, s.small_idle, caps.small),
        SizeClass::Large => (s.large_alive, s.large_idle, caps.large),
    };
    alive.saturating_sub(idle) < cap / 2
}

fn add_copy(m: &Mirror, bytes: usize) {
    m.copies.fetch_add(1, Relaxed);
    m.bytes.fetch_add(bytes as u64, Relaxed);
}
