//! Staging: a worker's frames for each destination queue held in its
//! lane until the end of the batch (or until the ring has room), then
//! handed over — published to the queue's delivery thread, or delivered
//! from the worker itself when the queue is idle.

use super::{transmitter, Ctx, Dest, State};
use crate::capture::Point;
use crate::counters::{add, DropReason};
use crate::deliver;
use crate::item::RingItem;
use crate::ring::{self, Full, Lane};
use crate::settings::{Delivery, RxOverflow, BACKPRESSURE_WAIT};
use std::time::{Duration, Instant};

impl State {
    pub(super) fn mark_active(&mut self, cx: &Ctx, dst: usize, q: usize) {
        let d = self.dest(cx, dst, q);
        if !d.active {
            d.active = true;
            self.active.push((dst, q));
        }
    }

    pub(super) fn lane(&mut self, cx: &Ctx, dst: usize, q: usize) -> &mut Lane<RingItem> {
        let ring = &cx.ports[dst].rxq[q].rings;
        let d = self.dest(cx, dst, q);
        if d.lane.as_ref().is_some_and(|l| l.stale(ring)) {
            // Publish what it holds before it is replaced.
            if let Some(mut old) = d.lane.take() {
                old.publish(ring);
            }
        }
        d.lane.get_or_insert_with(|| ring.lane())
    }

    /// Places an item in the lane to `(dst, q)` for this batch. When the
    /// batch fills the queue's ring: a queue this worker writes itself
    /// (run to completion) is written now and the item staged again; one
    /// with a delivery thread is waited on (backpressure) or the item is
    /// dropped and counted.
    #[inline]
    pub(super) fn stage(&mut self, cx: &Ctx, dst: usize, q: usize, item: RingItem) {
        let port = &cx.ports[dst];
        let ring = &port.rxq[q].rings;
        let (r1, r2) = ring_buffers(&item, self.settings[dst].mtu);
        self.mark_active(cx, dst, q);
        let lane = self.lane(cx, dst, q);
        // The way of every frame the ring has room for: moved once, into
        // the lane.
        match lane.room(ring, r1, r2) {
            Ok(()) if port.is_up() => lane.push(item, r1, r2),
            room => self.stage_refused(cx, dst, q, item, (r1, r2), room.err()),
        }
    }

    /// [`State::stage`] of a frame its lane had no room for (`full`), or
    /// to a port that is down (dropped; or staged after all, if it came up
    /// since and there was room).
    #[cold]
    #[inline(never)]
    fn stage_refused(
        &mut self,
        cx: &Ctx,
        dst: usize,
        q: usize,
        item: RingItem,
        (r1, r2): (usize, usize),
        full: Option<Full>,
    ) {
        let port = &cx.ports[dst];
        let ring = &port.rxq[q].rings;
        let s = &self.settings[dst];
        let sources = item.sources();
        let (overflow, delivery) = (s.rx_overflow, s.delivery);
        if !port.is_up() {
            let lane = self.lane(cx, dst, q);
            lane.counters.count_drop(DropReason::PortDown, sources);
            deliver::Tap::of(port, q).item(Point::Drop, Some(DropReason::PortDown), &item);
            return;
        }
        let Some(mut full) = full else {
            // Room, and the port came up between the two looks: staged.
            self.lane(cx, dst, q).push(item, r1, r2);
            return;
        };
        let mut item = item;
        if delivery == Delivery::Auto && self.lane(cx, dst, q).staged() > 0 {
            self.hand_over(cx, dst, q);
            (item, full) = match self.lane(cx, dst, q).stage(ring, item, r1, r2) {
                Ok(()) => return,
                Err(refused) => refused,
            };
        }
        let (size1, size2) = ring.sizes();
        let could_fit = r1 <= size1 && r2 <= size2;
        // A mirror's copy never waits: the frame it copies would wait too.
        let waits = overflow == RxOverflow::Backpressure && !self.mirroring;
        if delivery == Delivery::Thread && waits && could_fit {
            match self.wait_for_room(cx, dst, q, item, r1, r2) {
                Ok(()) => return,
                Err(f) => full = f,
            }
        } else {
            deliver::Tap::of(port, q).item(Point::Drop, Some(full.into()), &item);
        }
        let c = &self.lane(cx, dst, q).counters;
        c.count_drop(full.into(), sources);
    }

    /// Hands over everything staged so far (so the receivers have work),
    /// then waits until `(dst, q)`, a queue with a delivery thread, has
    /// room for `item`.
    pub(super) fn wait_for_room(
        &mut self,
        cx: &Ctx,
        dst: usize,
        q: usize,
        mut item: RingItem,
        r1: usize,
        r2: usize,
    ) -> Result<(), Full> {
        self.hand_over_all(cx);
        let sw = &cx.sw;
        let port = &cx.ports[dst];
        let ring = &port.rxq[q].rings;
        let deadline = Instant::now() + BACKPRESSURE_WAIT;
        let lane = self.lane(cx, dst, q);
        add(&lane.counters.backpressure_waits, 1);
        loop {
            std::thread::park_timeout(Duration::from_micros(50));
            match lane.stage(ring, item, r1, r2) {
                Ok(()) => return Ok(()),
                Err((back, full)) => {
                    if Instant::now() >= deadline || sw.stopping() || !port.is_up() {
                        return Err(full);
                    }
                    item = back;
                }
            }
        }
    }

    /// Hands over what every destination queue of this batch holds.
    fn hand_over_all(&mut self, cx: &Ctx) {
        for i in 0..self.active.len() {
            let (dst, q) = self.active[i];
            self.hand_over(cx, dst, q);
        }
    }

    /// Writes what was staged for `(dst, q)` from this worker (run to
    /// completion) — unless the port's queue has a delivery thread
    /// (`delivery = "thread"`, or frames that thread still holds from
    /// before the port changed to `auto`, which must not be overtaken): then
    /// publishes it to that thread.
    pub(super) fn hand_over(&mut self, cx: &Ctx, dst: usize, q: usize) {
        let port = &cx.ports[dst];
        let ring = &port.rxq[q].rings;
        let s = &self.settings[dst];
        let Dest { lane, tx, .. } = &mut self.dests[dst][q];
        let Some(lane) = lane.as_mut() else {
            return;
        };
        if lane.staged() == 0 {
            return;
        }
        let inline = !ring.has_consumer() || (s.delivery == Delivery::Auto && ring.idle());
        if !inline {
            // Another thread writes them, after this batch: payloads
            // left in a sending guest's memory are copied out first.
            lane.staged_mut().for_each(RingItem::fill_pending);
            lane.publish(ring);
            return;
        }
        lane.take_staged(&mut self.inline);
        if !port.is_up() {
            for x in self.inline.drain(..) {
                lane.counters
                    .count_drop(DropReason::PortDown, x.item.sources());
            }
            return;
        }
        add(&lane.counters.inline_batches, 1);
        deliver::deliver_batch(
            transmitter(tx, port, q),
            &lane.counters,
            s,
            deliver::inline_hold(s),
            &mut self.inline,
            &mut self.scratch,
            deliver::Tap::of(port, q),
        );
        if !self.inline.is_empty() {
            // A full receiver under backpressure: what it did not take is
            // kept, in order, and this queue reads nothing more until it
            // is written ([`State::retry_kept`]) — past this batch, so
            // with its payloads in its buffers.
            for x in &mut self.inline {
                x.item.fill_pending();
            }
            lane.restage(&mut self.inline);
            if !self.kept.contains(&(dst, q)) {
                self.kept.push((dst, q));
            }
            self.kept_since.get_or_insert(self.now);
        }
    }

    /// Before a batch: writes again what full receivers did not take. True
    /// while some is still kept (the queue is not read meanwhile); what
    /// was kept longer than [`BACKPRESSURE_WAIT`] is dropped and counted,
    /// as a delivery thread gives up a receiver that stopped.
    pub(super) fn retry_kept(&mut self, cx: &Ctx) -> bool {
        if self.kept.is_empty() {
            return false;
        }
        let kept = std::mem::take(&mut self.kept);
        let now = Instant::now();
        self.now = now;
        for &(dst, q) in &kept {
            // A destination that left the switch took what was kept for
            // it along.
            if cx.ports.get(dst).is_some() && self.dests[dst].len() > q {
                self.hand_over(cx, dst, q);
            }
        }
        if self.kept.is_empty() {
            self.kept_since = None;
            return false;
        }
        if self
            .kept_since
            .is_some_and(|t| now.duration_since(t) >= BACKPRESSURE_WAIT)
        {
            for (dst, q) in std::mem::take(&mut self.kept) {
                if let Some(lane) = self.dests[dst][q].lane.as_mut() {
                    lane.take_staged(&mut self.inline);
                    for x in self.inline.drain(..) {
                        lane.counters
                            .count_drop(DropReason::VirtqueueFull, x.item.sources());
                    }
                }
            }
            self.kept_since = None;
            return false;
        }
        true
    }
}

/// Ring buffers an item takes at a queue of MTU `mtu`: (ring 1, ring 2).
fn ring_buffers(item: &RingItem, mtu: u16) -> (usize, usize) {
    let ring1_buf = ring::ring1_buf_size(mtu);
    match item {
        RingItem::Frame {
            pkt,
            segment: Some(g),
        } => {
            // Each segment takes a buffer of its own.
            let segs = pkt
                .len()
                .saturating_sub(pkt.header_len())
                .div_ceil(g.size.max(1) as usize)
                .max(1);
            (segs, 0)
        }
        RingItem::Frame { pkt, .. } => ring::buffers_for(pkt.len(), ring1_buf),
        RingItem::Coalesced(c) => ring::buffers_for(c.len(), ring1_buf),
    }
}
