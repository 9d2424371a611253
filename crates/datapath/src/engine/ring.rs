//! A guest receive queue's rings, and the lock-free hand-off that fills
//! them.
//!
//! The model is VMXNET3's: ring 1 holds small buffers (the first buffer of
//! every frame), ring 2 large ones (4 KiB pages for the rest of jumbo and
//! coalesced frames). A frame needs one ring-1 buffer plus as many ring-2
//! buffers as its bytes past the first buffer fill; when either ring lacks
//! them the frame is refused ("ring 1 full" / "ring 2 full", as VMXNET3
//! counts them). Buffers return when the queue's delivery thread — the VM's
//! "vCPU" — has written the frame into the guest.
//!
//! The hand-off: every ingress worker that sends to a queue has a
//! single-producer/single-consumer lane to it ([`Lane`], an `rtrb` ring
//! created on first use), staged during a batch and published once at its
//! end with one release store. The consumer sleeps only after announcing it
//! ([`RxRing::sleeping`]) and checking the lanes again; a producer wakes it
//! only if it announced sleep. Ring occupancy is two counters the
//! producers add to once per batch and the consumer subtracts from once per
//! delivered batch; no lock is taken on the path.

use crate::counters::{DropReason, EgressCounters, Level};
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::Duration;

/// Size of one ring-2 buffer.
pub const RING2_BUF: usize = 4096;
/// Largest ring size (VMXNET3's maximum).
pub const MAX_RING: usize = 4096;

/// The ring-1 buffer size for an MTU: the whole frame up to a standard MTU,
/// the first 3 KiB of a jumbo frame.
pub fn ring1_buf_size(mtu: u16) -> usize {
    if mtu <= 1500 {
        1536
    } else {
        3072
    }
}

/// Buffers a frame of `len` bytes takes: (ring 1, ring 2).
pub fn buffers_for(len: usize, ring1_buf: usize) -> (usize, usize) {
    if len <= ring1_buf {
        (1, 0)
    } else {
        (1, (len - ring1_buf).div_ceil(RING2_BUF))
    }
}

/// Which ring refused a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// Not enough ring-1 buffers.
    Ring1,
    /// Not enough ring-2 buffers.
    Ring2,
}

impl From<Full> for DropReason {
    fn from(f: Full) -> DropReason {
        match f {
            Full::Ring1 => DropReason::Ring1Full,
            Full::Ring2 => DropReason::Ring2Full,
        }
    }
}

/// Occupancy, for `rxqueues/N/status`: levels, every one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RingStatus {
    /// Ring 1 size (buffers).
    pub ring1_size: Level<usize>,
    /// Ring 2 size (buffers).
    pub ring2_size: Level<usize>,
    /// Ring 1 buffers holding frames not yet delivered.
    pub ring1_used: Level<usize>,
    /// Ring 2 buffers holding frames not yet delivered.
    pub ring2_used: Level<usize>,
    /// Producer lanes into this queue (ingress workers that sent to it).
    pub lanes: Level<usize>,
}

/// An item in a lane, with the ring buffers it holds.
pub struct Slot<T> {
    /// The frame.
    pub item: T,
    /// Ring-1 buffers it holds (low half) and ring-2 buffers (high half),
    /// in one word: written with one store as the slot is pushed, so that
    /// moving the slot into the lane reads it back without waiting on two.
    rings: u64,
}

impl<T> Slot<T> {
    /// A slot for `item`, holding `r1` and `r2` ring buffers.
    #[inline]
    fn new(item: T, r1: usize, r2: usize) -> Slot<T> {
        Slot {
            item,
            rings: r1 as u32 as u64 | (r2 as u32 as u64) << 32,
        }
    }
    /// Ring-1 buffers it holds.
    #[inline]
    pub fn r1(&self) -> usize {
        self.rings as u32 as usize
    }
    /// Ring-2 buffers it holds.
    #[inline]
    pub fn r2(&self) -> usize {
        (self.rings >> 32) as usize
    }
}

/// The shared side of one guest receive queue.
pub struct RxRing<T> {
    size1: AtomicUsize,
    size2: AtomicUsize,
    used1: AtomicUsize,
    used2: AtomicUsize,
    /// The consumer announced that it is about to park.
    sleeping: AtomicBool,
    consumer: OnceLock<Thread>,
    /// Lanes created but not yet taken by the consumer (rare: the first
    /// frame from a new sender), with a flag so the consumer looks only
    /// when there are some.
    new_lanes: Mutex<Vec<rtrb::Consumer<Slot<T>>>>,
    lanes_added: AtomicBool,
    /// Every lane's counters (for snapshots), the consumer's own, and
    /// those of the lanes that are gone.
    counters: Mutex<Vec<Arc<EgressCounters>>>,
    /// The delivery thread's counters.
    pub delivery: Arc<EgressCounters>,
    /// What lanes that are gone counted (their producer's port removed,
    /// its worker's state for this queue made afresh): folded into one
    /// set, so that a queue's counters stay whole and its list stays as
    /// long as its live lanes however many senders came and went.
    retired: Arc<EgressCounters>,
}

impl<T> RxRing<T> {
    /// Rings of the given sizes (in buffers).
    pub fn new(size1: usize, size2: usize) -> RxRing<T> {
        let delivery = Arc::new(EgressCounters::default());
        let retired = Arc::new(EgressCounters::default());
        RxRing {
            size1: AtomicUsize::new(size1),
            size2: AtomicUsize::new(size2),
            used1: AtomicUsize::new(0),
            used2: AtomicUsize::new(0),
            sleeping: AtomicBool::new(false),
            consumer: OnceLock::new(),
            new_lanes: Mutex::new(Vec::new()),
            lanes_added: AtomicBool::new(false),
            counters: Mutex::new(vec![Arc::clone(&delivery), Arc::clone(&retired)]),
            delivery,
            retired,
        }
    }

    /// A new producer lane into this queue. Its ring of slots (as many as
    /// ring 1 has buffers then: every frame takes at least one) is made
    /// only when it first publishes to a delivery thread: a worker that
    /// writes the queue itself (run to completion) needs none, so lanes
    /// cost next to nothing however many senders reach a queue.
    pub fn lane(&self) -> Lane<T> {
        let counters = Arc::new(EgressCounters::default());
        let mut sets = self.counters.lock().expect("counters lock");
        // A set only this list holds is a gone lane's: nobody counts into
        // it any more, and no snapshot is reading it (a snapshot holds
        // the sets it reads), so its counts move to `retired` whole.
        // (`get_mut` sees every count its lane made before it dropped.)
        sets.retain_mut(|c| {
            let Some(gone) = Arc::get_mut(c) else {
                return true;
            };
            self.retired.absorb(&gone.snapshot());
            false
        });
        sets.push(Arc::clone(&counters));
        drop(sets);
        Lane {
            producer: None,
            staged: Vec::with_capacity(crate::item::BATCH),
            pending1: 0,
            pending2: 0,
            counters,
        }
    }

    /// The slot ring of a lane that publishes for the first time, its
    /// consumer handed to the delivery thread.
    fn lane_ring(&self) -> rtrb::Producer<Slot<T>> {
        let slots = self.size1.load(Ordering::Relaxed).max(1);
        let (producer, consumer) = rtrb::RingBuffer::new(slots);
        self.new_lanes.lock().expect("lanes lock").push(consumer);
        self.lanes_added.store(true, Ordering::Release);
        producer
    }

    /// Resizes at run time; buffers in use stay in use (a ring shrunk below
    /// its use drains before it accepts again).
    pub fn resize(&self, size1: usize, size2: usize) {
        self.size1.store(size1, Ordering::Relaxed);
        self.size2.store(size2, Ordering::Relaxed);
    }

    /// Current sizes (ring 1, ring 2).
    pub fn sizes(&self) -> (usize, usize) {
        (
            self.size1.load(Ordering::Relaxed),
            self.size2.load(Ordering::Relaxed),
        )
    }

    /// Current sizes and use.
    pub fn status(&self) -> RingStatus {
        RingStatus {
            ring1_size: Level(self.size1.load(Ordering::Relaxed)),
            ring2_size: Level(self.size2.load(Ordering::Relaxed)),
            ring1_used: Level(self.used1.load(Ordering::Relaxed)),
            ring2_used: Level(self.used2.load(Ordering::Relaxed)),
            lanes: Level(
                self.counters
                    .lock()
                    .expect("counters lock")
                    .iter()
                    .filter(|c| Arc::strong_count(c) > 1)
                    .count()
                    - 2,
            ),
        }
    }

    /// Every counter set of this queue (lanes and delivery thread).
    pub fn counter_sets(&self) -> Vec<Arc<EgressCounters>> {
        self.counters.lock().expect("counters lock").clone()
    }

    /// True when no frame holds a ring buffer: nothing published is waiting
    /// or being delivered (so a producer may deliver itself without
    /// overtaking anything).
    pub fn idle(&self) -> bool {
        self.used1.load(Ordering::Acquire) == 0
    }

    /// True once a delivery thread consumes this queue (a port with
    /// `delivery = "thread"`, now or earlier).
    pub fn has_consumer(&self) -> bool {
        self.consumer.get().is_some()
    }

    /// Forgets every buffer in use (a delivery thread starting again: what
    /// its old lanes held is gone with them).
    pub fn reset_use(&self) {
        self.used1.store(0, Ordering::Release);
        self.used2.store(0, Ordering::Release);
    }

    /// Returns delivered frames' buffers to the rings.
    pub fn release(&self, r1: usize, r2: usize) {
        if r1 > 0 {
            self.used1.fetch_sub(r1, Ordering::AcqRel);
        }
        if r2 > 0 {
            self.used2.fetch_sub(r2, Ordering::AcqRel);
        }
    }

    fn wake(&self) {
        // Pairs with the fence in `Consumer::wait`: either we see the
        // consumer's announcement, or it sees what we published.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.sleeping.store(false, Ordering::Relaxed);
            if let Some(t) = self.consumer.get() {
                t.unpark();
            }
        }
    }
}

/// A producer's lane into one receive queue, with what it staged in the
/// current batch.
pub struct Lane<T> {
    /// Its ring of slots to the delivery thread, once it published.
    producer: Option<rtrb::Producer<Slot<T>>>,
    staged: Vec<Slot<T>>,
    pending1: usize,
    pending2: usize,
    /// What this producer offered and dropped at this queue.
    pub counters: Arc<EgressCounters>,
}

impl<T> Lane<T> {
    /// Stages a frame needing `(r1, r2)` buffers, or gives it back with
    /// the ring that is full.
    pub fn stage(
        &mut self,
        ring: &RxRing<T>,
        item: T,
        r1: usize,
        r2: usize,
    ) -> Result<(), (T, Full)> {
        match self.room(ring, r1, r2) {
            Ok(()) => {
                self.push(item, r1, r2);
                Ok(())
            }
            Err(full) => Err((item, full)),
        }
    }

    /// Whether a frame needing `(r1, r2)` buffers fits beside what is
    /// staged, or the ring that is full. (Asked before the frame is moved,
    /// so that a frame that fits moves once, into the lane.)
    #[inline]
    pub fn room(&self, ring: &RxRing<T>, r1: usize, r2: usize) -> Result<(), Full> {
        if ring.used1.load(Ordering::Relaxed) + self.pending1 + r1
            > ring.size1.load(Ordering::Relaxed)
        {
            return Err(Full::Ring1);
        }
        if ring.used2.load(Ordering::Relaxed) + self.pending2 + r2
            > ring.size2.load(Ordering::Relaxed)
        {
            return Err(Full::Ring2);
        }
        Ok(())
    }

    /// Stages a frame [`Lane::room`] found room for.
    #[inline]
    pub fn push(&mut self, item: T, r1: usize, r2: usize) {
        self.pending1 += r1;
        self.pending2 += r2;
        self.staged.push(Slot::new(item, r1, r2));
    }

    /// True when the lane must be replaced: its consumer is gone (the
    /// delivery thread started again with fresh lanes), or ring 1 grew past
    /// the lane's slots. The old lane drains first; the consumer drops it
    /// once it is empty.
    pub fn stale(&self, ring: &RxRing<T>) -> bool {
        self.producer.as_ref().is_some_and(|p| {
            p.is_abandoned() || p.buffer().capacity() < ring.size1.load(Ordering::Relaxed)
        })
    }

    /// Frames staged and not yet published.
    pub fn staged(&self) -> usize {
        self.staged.len()
    }

    /// The staged items, to change in place.
    pub fn staged_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.staged.iter_mut().map(|s| &mut s.item)
    }

    /// Takes the staged frames back (to deliver them from this thread when
    /// the queue is idle).
    pub fn take_staged(&mut self, out: &mut Vec<Slot<T>>) {
        out.append(&mut self.staged);
        self.pending1 = 0;
        self.pending2 = 0;
    }

    /// Stages again, in order and first, frames taken back with
    /// [`Lane::take_staged`] that the receiver did not take.
    pub fn restage(&mut self, items: &mut Vec<Slot<T>>) {
        for s in items.iter() {
            self.pending1 += s.r1();
            self.pending2 += s.r2();
        }
        items.append(&mut self.staged);
        std::mem::swap(items, &mut self.staged);
    }

    /// Publishes the staged frames: one store makes them visible, then the
    /// consumer is woken if it sleeps.
    pub fn publish(&mut self, ring: &RxRing<T>) {
        if self.staged.is_empty() {
            return;
        }
        ring.used1.fetch_add(self.pending1, Ordering::AcqRel);
        if self.pending2 > 0 {
            ring.used2.fetch_add(self.pending2, Ordering::AcqRel);
        }
        self.pending1 = 0;
        self.pending2 = 0;
        let producer = self.producer.get_or_insert_with(|| ring.lane_ring());
        let n = self.staged.len().min(producer.slots());
        if let Ok(chunk) = producer.write_chunk_uninit(n) {
            chunk.fill_from_iter(self.staged.drain(..n));
        }
        // The lane has as many slots as ring 1 had buffers when it was made,
        // and is replaced when ring 1 grows, so everything fits; anything
        // that did not is given back.
        for s in self.staged.drain(..) {
            ring.release(s.r1(), s.r2());
        }
        ring.wake();
    }
}

/// The consumer side of a receive queue, owned by its delivery thread.
pub struct Consumer<T> {
    lanes: Vec<rtrb::Consumer<Slot<T>>>,
    next: usize,
}

impl<T> Consumer<T> {
    /// The consumer of `ring`; registers the calling thread as the one to
    /// wake.
    pub fn attach(ring: &RxRing<T>) -> Consumer<T> {
        let _ = ring.consumer.set(std::thread::current());
        Consumer {
            lanes: Vec::new(),
            next: 0,
        }
    }

    fn adopt(&mut self, ring: &RxRing<T>) {
        if ring.lanes_added.swap(false, Ordering::Acquire) {
            self.lanes
                .append(&mut ring.new_lanes.lock().expect("lanes lock"));
        }
    }

    fn ready(&self) -> bool {
        self.lanes.iter().any(|l| !l.is_empty())
    }

    /// Moves up to `max` published frames into `out`, taking lanes in turn
    /// so that no sender starves the others.
    pub fn pop_batch(&mut self, ring: &RxRing<T>, out: &mut Vec<Slot<T>>, max: usize) {
        self.adopt(ring);
        let n = self.lanes.len();
        for i in 0..n {
            if out.len() >= max {
                break;
            }
            let lane = &mut self.lanes[(self.next + i) % n];
            let take = lane.slots().min(max - out.len());
            if take > 0 {
                if let Ok(chunk) = lane.read_chunk(take) {
                    out.extend(chunk);
                }
            }
        }
        if n > 0 {
            self.next = (self.next + 1) % n;
        }
        // A lane whose producer is gone (its worker restarted, or replaced
        // the lane) and that is drained is dropped.
        self.lanes.retain(|l| !(l.is_abandoned() && l.is_empty()));
    }

    /// Parks until a producer publishes (or `timeout`): announces sleep,
    /// then looks once more, so a wake-up is never missed.
    pub fn wait(&mut self, ring: &RxRing<T>, timeout: Duration) {
        ring.sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.adopt(ring);
        if !self.ready() {
            std::thread::park_timeout(timeout);
        }
        ring.sleeping.store(false, Ordering::Relaxed);
    }

    /// Takes every waiting frame out (when the port goes down or the
    /// thread stops).
    pub fn drain(&mut self, ring: &RxRing<T>, out: &mut Vec<Slot<T>>) {
        self.adopt(ring);
        for l in &mut self.lanes {
            while let Ok(s) = l.pop() {
                out.push(s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{add, EgressStats};

    #[test]
    fn buffers_for_frames() {
        assert_eq!(buffers_for(60, 1536), (1, 0));
        assert_eq!(buffers_for(1514, 1536), (1, 0));
        assert_eq!(buffers_for(9014, 3072), (1, 2));
        assert_eq!(
            buffers_for(65226, 1536),
            (1, 16),
            "a 64 KiB LRO frame takes 16 ring-2 pages"
        );
    }

    #[test]
    fn full_rings_refuse_and_release_frees() {
        let r: RxRing<u32> = RxRing::new(2, 16);
        let mut lane = r.lane();
        let mut c = Consumer::attach(&r);
        lane.stage(&r, 1, 1, 0).unwrap();
        lane.stage(&r, 2, 1, 16).unwrap();
        assert_eq!(lane.stage(&r, 3, 1, 0).unwrap_err().1, Full::Ring1);
        let mut out = Vec::new();
        c.pop_batch(&r, &mut out, 8);
        assert!(out.is_empty(), "nothing is visible before it is published");
        lane.publish(&r);
        assert_eq!(r.status().ring1_used, Level(2));
        c.pop_batch(&r, &mut out, 8);
        assert_eq!(out.iter().map(|s| s.item).collect::<Vec<_>>(), vec![1, 2]);
        r.release(1, 0);
        assert_eq!(lane.stage(&r, 4, 1, 1).unwrap_err().1, Full::Ring2);
        r.release(1, 16);
        lane.stage(&r, 4, 1, 1).unwrap();
        lane.publish(&r);
        r.resize(4096, 4096);
        assert_eq!(r.status().ring1_size, Level(4096));
        let mut rest = Vec::new();
        c.drain(&r, &mut rest);
        assert_eq!(rest.len(), 1);
    }

    /// Senders come and go (a VM's port added, a ping answered, the port
    /// removed): the queue keeps what each counted, not a set per sender
    /// that ever was.
    #[test]
    fn gone_lanes_leave_their_counts_and_not_their_sets() {
        let r: RxRing<u32> = RxRing::new(64, 64);
        let total = |r: &RxRing<u32>| {
            let mut s = EgressStats::default();
            for c in r.counter_sets() {
                s += c.snapshot();
            }
            s
        };
        let kept = r.lane();
        add(&kept.counters.offered, 1);
        for _ in 0..1000 {
            let lane = r.lane();
            add(&lane.counters.offered, 2);
            lane.counters.count_drop(DropReason::PortDown, 1);
        }
        assert_eq!(
            r.status().lanes,
            Level(1),
            "the kept lane: the others are gone"
        );
        assert!(r.counter_sets().len() <= 4, "{}", r.counter_sets().len());
        let t = total(&r);
        assert_eq!(t.offered, 1 + 2 * 1000);
        assert_eq!(t.dropped[DropReason::PortDown], 1000);
    }

    #[test]
    fn a_sleeping_consumer_is_woken_by_a_publish() {
        let r: Arc<RxRing<u64>> = Arc::new(RxRing::new(4096, 4096));
        let r2 = Arc::clone(&r);
        let consumer = std::thread::spawn(move || {
            let mut c = Consumer::attach(&r2);
            let mut got = Vec::new();
            let mut out = Vec::new();
            while got.len() < 10_000 {
                c.pop_batch(&r2, &mut out, 64);
                if out.is_empty() {
                    // A long timeout: a missed wake-up would stall the test.
                    c.wait(&r2, Duration::from_secs(30));
                }
                for s in out.drain(..) {
                    r2.release(s.r1(), s.r2());
                    got.push(s.item);
                }
            }
            got
        });
        let mut lane = r.lane();
        let mut i = 0u64;
        while i < 10_000 {
            for _ in 0..7 {
                if i < 10_000 && lane.stage(&r, i, 1, 0).is_ok() {
                    i += 1;
                }
            }
            lane.publish(&r);
            std::thread::yield_now();
        }
        let got = consumer.join().unwrap();
        assert_eq!(got, (0..10_000).collect::<Vec<_>>(), "in order, none lost");
    }
}
