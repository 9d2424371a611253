//! A worker's ingress steps, per frame read: an uplink's software
//! checksum check and LRO, then the
//! switching decision (policy, learning, ARP and ND suppression, lookup,
//! multicast snooping, flooding).

use super::ingress_lro::IngressLro;
use super::ingress_mcast::{Snooped, Targets};
use super::{Ctx, State};
use crate::capture::{Point, Way};
use crate::counters::{add, DropReason};
use crate::fdb::Learn;
use crate::forward::{self, Action, Ingress};
use crate::ipfix::TunnelKey;
use crate::rate::Policed;
use hvnet_port::Packet;
use std::time::Instant;

/// A frame from the port dropped: counted under its reason, and copied
/// for the port's `drop` captures.
fn drop_from(cx: &Ctx, reason: DropReason, pkt: &Packet) {
    cx.port.ingress[cx.q].count_drop(reason, 1);
    cx.port.taps.dropped(Way::Inbound, cx.q, reason, pkt);
}

impl State {
    /// A counted frame: at an uplink, its checksum checked in software
    /// when the device's is not taken, and coalesced first when its LRO is
    /// software; else switched at once.
    pub(super) fn coalesce_or_switch(&mut self, cx: &Ctx, mut pkt: Packet, now: Instant) {
        if cx.port.is_uplink() && !self.settings[cx.port.id].csum {
            super::ingress_csum::verify(&mut pkt, &cx.port.ingress[cx.q]);
        }
        if cx.port.is_uplink() && self.settings[cx.port.id].lro {
            self.ingress_lro(cx, Some(pkt), now);
        } else {
            self.switch_frame(cx, pkt, now);
        }
    }

    /// Offers `pkt` to the uplink's software LRO (or, with `None` at the
    /// end of a batch, flushes it) and switches what it made ready.
    pub(super) fn ingress_lro(&mut self, cx: &Ctx, pkt: Option<Packet>, now: Instant) {
        let mut lro = match (self.ingress_lro.take(), &pkt) {
            (Some(l), _) => l,
            (None, Some(_)) => IngressLro::new(),
            (None, None) => return,
        };
        let mut ready = std::mem::take(&mut self.lro_ready);
        let (c, pool) = (&cx.port.ingress[cx.q], &mut self.pool);
        let mut out = |p| ready.push(p);
        match pkt {
            Some(p) => lro.receive(p, pool, c, &mut out),
            None => lro.flush(pool, c, &mut out),
        }
        self.ingress_lro = Some(lro);
        for p in ready.drain(..) {
            cx.port.taps.packet(Point::Offload, Way::Inbound, cx.q, &p);
            self.switch_frame(cx, p, now);
        }
        self.lro_ready = ready;
    }

    /// The switching decision for a counted frame: policy, learning,
    /// lookup, and the offload stage for each destination.
    pub(super) fn switch_frame(&mut self, cx: &Ctx, mut pkt: Packet, now: Instant) {
        let c = &cx.port.ingress[cx.q];
        if self.mirrors.dedicated.get(cx.port.id) == Some(&true) {
            drop_from(cx, DropReason::MirrorPort, &pkt);
            return;
        }
        if !self.settings[cx.port.id].connected {
            drop_from(cx, DropReason::Disconnected, &pkt);
            return;
        }
        match cx.port.rates.police(&mut pkt, now) {
            Policed::Pass => {}
            Policed::Cut => add(&c.policed_cut, 1),
            Policed::Drop => {
                drop_from(cx, DropReason::Policed, &pkt);
                return;
            }
        }
        let ingress = Ingress {
            port: cx.port.id,
            mac: cx.port.mac,
            allow_forged_transmits: self.settings[cx.port.id].allow_forged_transmits,
        };
        if !forward::admit(&ingress, &pkt) {
            drop_from(cx, DropReason::Policy, &pkt);
            return;
        }
        if let Err(reason) = self.guard(cx, &mut pkt) {
            drop_from(cx, reason, &pkt);
            return;
        }
        if let Some(acl) = self.acls.get(cx.port.id).and_then(Option::as_ref) {
            let out = crate::acl::Direction::Out;
            if let Err(d) = acl.check(out, pkt.buf.held(), &pkt.meta.layers, now) {
                drop_from(cx, d.reason(out), &pkt);
                return;
            }
        }
        // The frame's VLAN, from its tag and the port's mode (an access
        // port's untagged frame: its VLAN, in one branch).
        let Some(vlan) =
            forward::ingress_vlan(&self.settings[cx.port.id].vlans_of(cx.port.vlan), &pkt)
        else {
            drop_from(cx, DropReason::VlanNotAllowed, &pkt);
            return;
        };
        pkt.meta.vlan = vlan;
        if !self.mirrors.none() {
            self.mirror_in(cx, &mut pkt);
        }
        let (src, dst) = (pkt.src(), pkt.dst());
        if self.learned != Some((vlan, src)) {
            let fdb = &cx.sw.fdb;
            let mut learn = fdb.learn(vlan, src, cx.port.id, now);
            if learn == Learn::Refused && cx.sw.release_address(vlan, src) {
                learn = fdb.learn(vlan, src, cx.port.id, now);
            }
            if learn == Learn::Refused {
                add(&c.fdb_learn_refused, 1);
            }
            self.learned = Some((vlan, src));
        }
        let learned = match self.route {
            Some((v, mac, port)) if (v, mac) == (vlan, dst) => port,
            _ => {
                let port = (!dst.is_multicast())
                    .then(|| cx.sw.fdb.lookup(vlan, dst, now))
                    .flatten();
                self.route = Some((vlan, dst, port));
                port
            }
        };
        if let Some(ix) = &self.ipfix {
            // Systematic 1-in-N sampling, counted per queue.
            self.ipfix_skip -= 1;
            if self.ipfix_skip == 0 {
                self.ipfix_skip = ix.config.sampling.max(1);
                let at = self.endpoint;
                let tunnel = pkt.meta.tunnel.zip(at).map(|(t, e)| TunnelKey::of(t, e));
                ix.meter(cx.port.id, learned, &pkt, tunnel);
            }
        }
        let mut snooped = Snooped::Flood;
        if dst.is_multicast() {
            // Copies for every port, or an answer made from it: its
            // payload is read here (one copy is for one receiver).
            pkt.buf.fill_pending();
            if self.suppress(cx, &pkt) {
                return;
            }
            snooped = self.snoop(cx, &pkt, now);
        }
        let (ports, settings, mirror_output) = (&cx.ports, &self.settings, &self.mirrors.dedicated);
        let link_up = |p: usize| super::takes(ports, settings, mirror_output, p, vlan);
        match forward::route(&ingress, learned, link_up) {
            Action::NoRoute => {
                drop_from(cx, DropReason::NoRoute, &pkt);
            }
            Action::Unicast(p) => {
                add(&c.forwarded, 1);
                self.egress(cx, p, pkt);
            }
            Action::Flood => {
                pkt.buf.fill_pending();
                let (targets, flooded) = match snooped {
                    Snooped::Dropped => return,
                    Snooped::Flood => (
                        ports
                            .iter()
                            .filter(|p| p.id != cx.port.id && link_up(p.id))
                            .map(|p| p.id)
                            .collect::<Targets>(),
                        true,
                    ),
                    Snooped::To {
                        ports: mut to,
                        report,
                    } => {
                        to.sort_unstable();
                        to.dedup();
                        to.retain(|p| *p != cx.port.id && link_up(*p));
                        if to.is_empty() && report {
                            add(&c.mcast_consumed, 1);
                            return;
                        }
                        (to, false)
                    }
                };
                let Some((&last, rest)) = targets.split_last() else {
                    drop_from(cx, DropReason::NoRoute, &pkt);
                    return;
                };
                add(&c.forwarded, 1);
                if flooded {
                    add(&c.flooded, 1);
                }
                for &p in rest {
                    // A copy counts against this port's buffers too; with
                    // none left, that destination does not get one.
                    if let Some(mut b) = self.pool.take(pkt.buf.class()) {
                        b.fill(pkt.frame());
                        self.egress(
                            cx,
                            p,
                            Packet {
                                buf: b,
                                meta: pkt.meta,
                            },
                        );
                    } else {
                        add(&cx.port.ingress[cx.q].no_buffer_stalls, 1);
                    }
                }
                self.egress(cx, last, pkt);
            }
        }
    }
}
