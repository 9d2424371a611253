//! Delivery into a guest: the receive queue's delivery thread (the VM's
//! "vCPU"), and the batch writer it shares with ingress workers that
//! deliver an idle queue's frames themselves.
//!
//! Per item: a GSO frame for a guest that does not take it whole is
//! segmented, each segment written as it is made; every other frame is
//! prepared (partial checksums completed for a guest without checksum
//! offload, `DATA_VALID` for checksums hvnet verified) and handed to the
//! port's transmitter with its metadata, a run of such frames as one batch
//! (one `sendmmsg` at an uplink, one lock of a guest's virtqueue, one
//! io_uring submission at a TAP when asked for; a tunnel endpoint
//! encapsulates them). Buffers go home as the items are dropped.

use crate::capture::{Point, Taps, Way};
use crate::counters::{add, DropReason, EgressCounters};
use crate::engine::{Port, PortState, Switch};
use crate::item::{RingItem, BATCH};
use crate::ring::{Consumer, Slot};
use crate::settings::{PortSettings, RxOverflow, BACKPRESSURE_WAIT};
use hvnet_offload::gso::{self, CsumMode};
use hvnet_offload::{csum, CsumState, GsoInfo, OffloadInfo};
use hvnet_port::outgoing::recycle;
use hvnet_port::{BatchOptions, OutFrame, Packet, SendError, Transmitter, TxOptions, Written};
use std::io::IoSlice;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A destination queue's captures (`hvnet capture`): what the offload
/// stage made for it, what was written, what was dropped.
#[derive(Clone, Copy)]
pub(crate) struct Tap<'a> {
    pub(crate) taps: &'a Taps,
    pub(crate) queue: usize,
}

impl<'a> Tap<'a> {
    /// The captures of `port`'s queue `queue`.
    pub(crate) fn of(port: &'a Port, queue: usize) -> Tap<'a> {
        Tap {
            taps: &port.taps,
            queue,
        }
    }

    /// A copy of an item at `point` (a drop: with its reason).
    pub(crate) fn item(self, point: Point, reason: Option<DropReason>, item: &RingItem) {
        if !self.taps.on(point) {
            return;
        }
        match (item, reason) {
            (RingItem::Frame { pkt, .. }, Some(r)) => {
                self.taps.dropped(Way::Outbound, self.queue, r, pkt)
            }
            (RingItem::Frame { pkt, .. }, None) => {
                self.taps.packet(point, Way::Outbound, self.queue, pkt)
            }
            (RingItem::Coalesced(co), _) => {
                let pieces =
                    std::iter::once(co.header()).chain(co.segments.iter().map(|s| s.bytes()));
                self.taps
                    .pieces(point, Way::Outbound, self.queue, reason, pieces)
            }
        }
    }
}

/// Scratch space kept between batches, so delivering allocates nothing in
/// steady state.
#[derive(Default)]
pub(crate) struct Scratch {
    frames: Vec<OutFrame<'static>>,
}

/// How long a full receiver is waited on, by the port's settings, by a
/// queue's delivery thread.
pub(crate) fn hold(s: &PortSettings) -> Option<Duration> {
    (s.rx_overflow == RxOverflow::Backpressure).then_some(BACKPRESSURE_WAIT)
}

/// How a worker writing a receiver itself treats a full one: never by
/// waiting (that would hold every other queue of the worker), but, under
/// backpressure, by keeping what did not fit, in order, to write again
/// ([`KEEP_WHEN_FULL`]); else by dropping it.
pub(crate) fn inline_hold(s: &PortSettings) -> Option<Duration> {
    (s.rx_overflow == RxOverflow::Backpressure).then_some(KEEP_WHEN_FULL)
}

/// A zero hold: the first frame that finds the receiver full ends the
/// batch, and it and the frames after it stay with the caller.
pub(crate) const KEEP_WHEN_FULL: Duration = Duration::ZERO;

/// The delivery thread of one guest receive queue.
pub(crate) fn deliver_loop(sw: &Switch, port: &Port, q: usize) {
    let ring = &port.rxq[q].rings;
    ring.reset_use();
    let mut consumer = Consumer::attach(ring);
    let opts = TxOptions {
        uring: sw.io.uring_write,
    };
    let mut tx = Arc::clone(&port.dev).transmitter(q, opts);
    let c = &*ring.delivery;
    let mut batch: Vec<Slot<RingItem>> = Vec::with_capacity(BATCH);
    let mut scratch = Scratch::default();
    let mut gen = u64::MAX;
    let mut s = port.settings();
    let mut removed_at: Option<Instant> = None;
    // A port removed from the switch takes its delivery threads with it,
    // once no worker can still hand its queue a batch (one that read the
    // port table before the removal may, for a batch, or a backpressure
    // wait): what arrives until then, and what the ring still holds, is
    // dropped as the port's, so every frame stays accounted.
    while !sw.stopping() {
        if port.state() == PortState::Removed
            && removed_at.get_or_insert_with(Instant::now).elapsed() >= REMOVED_DRAIN
        {
            break;
        }
        // A shaped queue takes one frame at a time: a batch sent on the
        // bucket's word would leave up to 64 frames of debt at once.
        let max = if s.rx_rate.is_some() { 1 } else { BATCH };
        consumer.pop_batch(ring, &mut batch, max);
        if batch.is_empty() {
            consumer.wait(ring, Duration::from_millis(100));
            continue;
        }
        let now_gen = sw.settings_gen.load(Ordering::Acquire);
        if now_gen != gen {
            gen = now_gen;
            s = port.effective_settings();
        }
        let (r1, r2) = batch
            .iter()
            .fold((0, 0), |(a, b), x| (a + x.r1(), b + x.r2()));
        if s.rx_rate.is_some() {
            // The shaper: the batch waits (in the ring, which holds what
            // arrives meanwhile) until the rate allows it.
            pace(sw, port, c, &batch);
        }
        if port.is_up() {
            let tap = Tap::of(port, q);
            deliver_batch(&mut *tx, c, &s, hold(&s), &mut batch, &mut scratch, tap);
        } else {
            for x in batch.drain(..) {
                c.count_drop(DropReason::PortDown, x.item.sources());
            }
        }
        ring.release(r1, r2);
    }
    consumer.drain(ring, &mut batch);
    for x in batch.drain(..) {
        c.count_drop(DropReason::PortDown, x.item.sources());
    }
}

/// How long a removed port's delivery thread goes on dropping what
/// still arrives before it ends: beyond a worker's batch and its longest
/// wait for ring space ([`BACKPRESSURE_WAIT`]).
const REMOVED_DRAIN: Duration = Duration::from_secs(1);

/// Waits until `port`'s shaper lets `batch` go (in steps, so that a
/// stopping switch, or a port removed, is not kept waiting), then takes
/// its bytes.
fn pace(sw: &Switch, port: &Port, c: &EgressCounters, batch: &[Slot<RingItem>]) {
    loop {
        let wait = port.rates.shape_wait(Instant::now());
        if wait.is_zero() || sw.stopping() || port.state() == PortState::Removed {
            break;
        }
        add(&c.shaper_waits, 1);
        std::thread::sleep(wait.min(Duration::from_millis(20)));
    }
    let bytes = batch.iter().map(|x| x.item.bytes() as u64).sum();
    port.rates.shaped(bytes, Instant::now());
}

/// Delivers `items` through `tx` (a port's transmitter for this queue),
/// counting into `c`, and empties `items` — but for what a full
/// receiver did not take with `hold` [`KEEP_WHEN_FULL`], which stays in
/// `items`, in order, not counted. Items are written in order, runs of
/// whole frames a batch per call, GSO frames for a receiver that does not
/// take them whole segmented in between.
pub(crate) fn deliver_batch(
    tx: &mut dyn Transmitter,
    c: &EgressCounters,
    s: &PortSettings,
    hold: Option<Duration>,
    items: &mut Vec<Slot<RingItem>>,
    scratch: &mut Scratch,
    tap: Tap<'_>,
) {
    let mut start = 0;
    while start < items.len() {
        let run = items[start..]
            .iter()
            .position(|x| segmented(&x.item).is_some())
            .map_or(items.len(), |i| start + i);
        if run > start {
            if let Some(k) = write_run(tx, c, s, hold, &mut items[start..run], scratch, tap) {
                // The receiver is full: what it did not take stays.
                items.drain(..start + k);
                tx.flush();
                return;
            }
        }
        if let Some(slot) = items.get(run) {
            if let (RingItem::Frame { pkt, .. }, Some(g)) = (&slot.item, segmented(&slot.item)) {
                deliver_segmented(tx, c, s, hold.filter(|h| !h.is_zero()), pkt, g, tap);
            }
        }
        start = run + 1;
    }
    items.clear();
    tx.flush();
}

/// The segment size of an item to be segmented on delivery.
fn segmented(item: &RingItem) -> Option<GsoInfo> {
    match item {
        RingItem::Frame { segment, .. } => *segment,
        RingItem::Coalesced(_) => None,
    }
}

/// Writes a run of whole frames (none to be segmented) with one batch.
/// With `hold` [`KEEP_WHEN_FULL`], returns the index of the first frame
/// the full receiver did not take (it and the rest are not counted).
fn write_run(
    tx: &mut dyn Transmitter,
    c: &EgressCounters,
    s: &PortSettings,
    hold: Option<Duration>,
    items: &mut [Slot<RingItem>],
    scratch: &mut Scratch,
    tap: Tap<'_>,
) -> Option<usize> {
    for slot in items.iter_mut() {
        tap.item(Point::Offload, None, &slot.item);
        match &mut slot.item {
            RingItem::Frame { pkt, .. } => prepare(pkt, s, c),
            RingItem::Coalesced(co) => {
                if !s.csum {
                    co.fill_checksums();
                }
            }
        }
    }
    let mut frames: Vec<OutFrame<'_>> = recycle(std::mem::take(&mut scratch.frames));
    frames.extend(items.iter().map(|slot| match &slot.item {
        RingItem::Frame { pkt, .. } => OutFrame::Packet(pkt),
        RingItem::Coalesced(co) => OutFrame::Coalesced(co),
    }));
    // Results come in the order the frames were written; a frame the
    // transmitter did not report on was not written.
    let keep = hold == Some(KEEP_WHEN_FULL);
    let (mut slots, mut at, mut kept) = (items.iter(), 0, None);
    let how = BatchOptions { hold, csum: s.csum };
    tx.send_batch(&frames, how, &mut |r| {
        if let Some(slot) = slots.next() {
            if keep && r == Err(SendError::Full) {
                kept.get_or_insert(at);
            } else {
                count(c, &slot.item, r, tap);
            }
            at += 1;
        }
    });
    for slot in slots {
        count(c, &slot.item, Err(SendError::Failed), tap);
    }
    scratch.frames = recycle(frames);
    kept
}

/// True when a frame written whole to a receiver with these settings has
/// its partial checksum completed first ([`prepare`]): the receiver does
/// not take partial ones, and no segmenting completes it.
pub(crate) fn completes_csum(info: &OffloadInfo, s: &PortSettings) -> bool {
    !s.csum && info.gso.is_none() && matches!(info.csum, CsumState::Partial { .. })
}

/// Readies a frame for a receiver: its partial checksum completed if the
/// receiver cannot take it partial.
fn prepare(pkt: &mut Packet, s: &PortSettings, c: &EgressCounters) {
    let info = pkt.meta.offload;
    if let (true, CsumState::Partial { start, offset }) = (completes_csum(&info, s), info.csum) {
        if csum::complete_partial(pkt.buf.frame_mut(), start, offset).is_ok() {
            add(&c.csum_completed, 1);
            pkt.meta.offload.csum = CsumState::Good;
        }
    }
    if pkt.meta.offload.csum == CsumState::Good {
        add(&c.data_valid_frames, 1);
    }
}

/// Counts one item by what its transmitter wrote of it (and copies it
/// for the captures, as written or dropped).
#[inline]
fn count(c: &EgressCounters, item: &RingItem, r: Result<Written, SendError>, tap: Tap<'_>) {
    let n = item.sources();
    let w = match r {
        Ok(w) => w,
        Err(e) => {
            tap.item(Point::Drop, Some(e.into()), item);
            return c.count_drop(e.into(), n);
        }
    };
    tap.item(Point::Out, None, item);
    match item {
        RingItem::Frame { pkt, .. } => {
            add(&c.delivered_frames, u64::from(w.frames));
            add(&c.delivered_bytes, w.bytes);
            add(&c.delivered_source_frames, 1);
            if pkt.buf.pending().is_some() {
                add(&c.one_copy_frames, 1);
            }
            if w.segmented {
                add(&c.segmented_frames, 1);
                add(&c.segments_out, u64::from(w.frames));
            } else if pkt.meta.offload.gso.is_some() {
                add(&c.gso_intact_frames, 1);
            }
        }
        RingItem::Coalesced(co) => {
            let len = co.len() as u64;
            add(&c.delivered_frames, 1);
            add(&c.delivered_bytes, len);
            add(&c.delivered_source_frames, n);
            add(&c.lro_frames, 1);
            add(&c.lro_bytes, len);
            add(&c.lro_segments, n);
        }
    }
}

/// A GSO frame for a guest that does not take it whole: segmented on the
/// way in, each segment written as it is made.
fn deliver_segmented(
    tx: &mut dyn Transmitter,
    c: &EgressCounters,
    s: &PortSettings,
    hold: Option<Duration>,
    pkt: &Packet,
    g: GsoInfo,
    tap: Tap<'_>,
) {
    let mode = if s.csum {
        CsumMode::Partial
    } else {
        CsumMode::Full
    };
    let mut written = 0u64;
    let mut failed = None;
    let how = BatchOptions { hold, csum: s.csum };
    let r = gso::segment(pkt.frame(), &pkt.meta.layers, g, mode, &mut |seg| {
        // The segment as cut, then as written or dropped.
        let copy = |point, why| {
            let pieces = [seg.header, seg.payload];
            tap.taps
                .pieces(point, Way::Outbound, tap.queue, why, pieces)
        };
        copy(Point::Offload, None);
        let pieces = [IoSlice::new(seg.header), IoSlice::new(seg.payload)];
        let frame = OutFrame::Pieces {
            pieces: &pieces,
            offload: seg.info,
        };
        match tx.send(frame, how) {
            Ok(w) => {
                written += u64::from(w.frames);
                add(&c.delivered_bytes, w.bytes);
                copy(Point::Out, None);
            }
            Err(e) => {
                copy(Point::Drop, Some(e.into()));
                failed = Some(e);
            }
        }
    });
    match (r, failed) {
        (_, Some(e)) => c.count_drop(e.into(), 1),
        (Err(_), None) => c.count_drop(DropReason::WriteError, 1),
        (Ok(_), None) => {
            add(&c.segmented_frames, 1);
            add(&c.segments_out, written);
            add(&c.delivered_frames, written);
            add(&c.delivered_source_frames, 1);
        }
    }
}
