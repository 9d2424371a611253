//! The forwarding decision and the frame's way out ([`crate::forward`]):
//! to the port its destination was learned on, or copied to every port
//! of its VLAN (or, for a snooped group, to its members and the router
//! ports), each copy through its destination's egress arc.

use crate::arc::always;
use crate::arc::{Decl, Kind};
use crate::counters::{add, DropReason};
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};
use crate::forward::{self, Action};
use crate::snoop::{Snooped, Targets};
use hvnet_port::{Packet, RecvError};

pub(crate) const DECL: Decl<InRun> = Decl {
    name: "forward",
    kind: Kind::Engine,
    after: &["fdb", "suppress", "snoop"],
    before: &[],
    wants: always,
    run: forward_burst,
};

/// Each frame still on its way, taken on to its destinations.
fn forward_burst(st: &mut State, cx: &Ctx, b: &mut Burst) {
    let mut frames = std::mem::take(&mut b.frames);
    let mut snooped = std::mem::take(&mut b.snooped);
    let mut group = snooped.iter_mut().peekable();
    for i in b.live() {
        // A live frame is an `Ok` entry (a refused or dropped one is an
        // `Err`, its buffer given back already; those are cleared below).
        // Taken from its place straight into the call, not drained whole
        // into a temporary first (read back at once, it waited on its
        // stores).
        let Ok(pkt) = std::mem::replace(&mut frames[i], Err(RecvError::Consumed)) else {
            continue;
        };
        st.mirrored = b.mirrored[i];
        st.tracing = b.traced(i);
        while group.next_if(|(j, _)| *j < i).is_some() {}
        // Snooping's word (most frames have none) by reference: it is
        // 144 bytes, copied per frame when passed by value.
        let word = group.next_if(|(j, _)| *j == i).map(|(_, s)| s);
        st.forward(cx, pkt, b.learned[i], word);
    }
    st.tracing = None;
    frames.clear();
    snooped.clear();
    b.snooped = snooped;
    b.frames = frames;
}

impl State {
    /// One frame to the port its destination was learned on, or flooded.
    fn forward(
        &mut self,
        cx: &Ctx,
        mut pkt: Packet,
        learned: Option<usize>,
        snooped: Option<&mut Snooped>,
    ) {
        let c = &cx.port.ingress[cx.q];
        let vlan = pkt.meta.vlan;
        let (ports, settings, mirror_output) = (&cx.ports, &self.settings, &self.mirrors.dedicated);
        let link_up =
            |p: usize| crate::engine::worker::takes(ports, settings, mirror_output, p, vlan);
        // To a port's own address while its cable is pulled (`connected =
        // off`): the frame is that port's alone, dropped there under its
        // reason, not flooded to everyone else (as a vSwitch keeps a
        // disconnected vNIC's MAC where it is). A port whose guest left
        // is not one: its MAC may be on its way elsewhere (a migration),
        // and floods find it. The FDB is the switch's and may name a port
        // added after this worker read its table: not one of its ports yet.
        let to_disconnected = learned.filter(|&p| {
            p != cx.port.id
                && ports.get(p).is_some_and(|x| x.mac == pkt.dst())
                && settings.get(p).is_some_and(|s| !s.connected)
        });
        if let Some(p) = to_disconnected {
            cx.count(&c.forwarded, 1);
            self.trace_out(cx, "forward", || {
                format!("to {}: its own address, its cable pulled", cx.ports[p].name)
            });
            if !cx.synthetic() {
                add(&self.lane(cx, p, 0).counters.offered, 1);
            }
            self.drop_out(cx, p, 0, DropReason::PortDown, &pkt);
            return;
        }
        match forward::route(cx.port.id, learned, link_up) {
            Action::NoRoute => {
                self.trace_out(cx, "forward", || {
                    "to the port it came from: no route".into()
                });
                self.trace_drop(cx, None, DropReason::NoRoute);
                cx.drop_frame(DropReason::NoRoute, &pkt);
            }
            Action::Unicast(p) => {
                cx.count(&c.forwarded, 1);
                self.trace_out(cx, "forward", || format!("to {}", cx.ports[p].name));
                self.egress(cx, p, pkt);
            }
            Action::Flood => {
                pkt.buf.fill_pending();
                let (targets, flooded) = match snooped {
                    Some(Snooped::Dropped) => return,
                    None | Some(Snooped::Flood) => (self.ports_of_vlan(cx, vlan), true),
                    Some(Snooped::To { ports, report }) => {
                        let (mut to, report) = (std::mem::take(ports), *report);
                        to.sort_unstable();
                        to.dedup();
                        to.retain(|p| *p != cx.port.id && link_up(*p));
                        if to.is_empty() && report {
                            cx.count(&c.mcast_consumed, 1);
                            return;
                        }
                        (to, false)
                    }
                };
                let Some((&last, rest)) = targets.split_last() else {
                    self.trace_out(cx, "forward", || format!("flooded in VLAN {vlan}: no port"));
                    self.trace_drop(cx, None, DropReason::NoRoute);
                    cx.drop_frame(DropReason::NoRoute, &pkt);
                    return;
                };
                cx.count(&c.forwarded, 1);
                if flooded {
                    cx.count(&c.flooded, 1);
                }
                self.trace_out(cx, "forward", || {
                    let how = if flooded {
                        "flooded"
                    } else {
                        "to the group's ports"
                    };
                    format!("{how} in VLAN {vlan}: {} ports", targets.len())
                });
                self.send_copies(cx, rest, last, pkt);
            }
        }
    }

    /// Frame `pkt` to each of ports `rest`, a copy each, and itself to
    /// `last`. A copy counts against this port's buffers too; with none
    /// left, that destination does not get one.
    pub(crate) fn send_copies(&mut self, cx: &Ctx, rest: &[usize], last: usize, pkt: Packet) {
        for &p in rest {
            if let Some(mut b) = self.pool.take(pkt.buf.class()) {
                b.fill(pkt.frame());
                // A decapsulated frame's outer headers stay in its own
                // buffer, not the copy's.
                let copy = Packet {
                    buf: b,
                    meta: hvnet_port::packet::Meta {
                        tunnel: None,
                        ..pkt.meta
                    },
                };
                self.egress(cx, p, copy);
            } else {
                add(&cx.port.ingress[cx.q].no_buffer_stalls, 1);
            }
        }
        self.egress(cx, last, pkt);
    }

    /// The ports other than this one that take frames of VLAN `vlan` now.
    pub(crate) fn ports_of_vlan(&self, cx: &Ctx, vlan: u16) -> Targets {
        let (ports, settings, mirror_output) = (&cx.ports, &self.settings, &self.mirrors.dedicated);
        ports
            .iter()
            .filter(|p| {
                p.id != cx.port.id
                    && crate::engine::worker::takes(ports, settings, mirror_output, p.id, vlan)
            })
            .map(|p| p.id)
            .collect()
    }
}
