//! Live capture at named points along a frame's path (`hvnet capture`, as
//! ESXi's `pktcap-uw`): a copy of each frame a port hands over, of what
//! the offload stage made of it, of what was written to a port, and of
//! what was dropped at it with the drop's reason. A real guest's frames
//! never cross a kernel device, so this is the only place they can be
//! seen.
//!
//! With no capture on a port, each point costs one relaxed load of the
//! port's mask. A capture's copies wait in a queue of bounded bytes for
//! the control socket's thread to write them out; when it is full, the
//! copy is dropped and counted (`lost`), never the frame.

pub(crate) mod stage;

use crate::counters::DropReason;
use hvnet_port::Packet;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, SystemTime};

/// Bytes of copies a capture holds until its reader takes them (each
/// counted with [`COPY_OVERHEAD`], so that a snap length of a few bytes
/// does not let the queue grow to millions of copies).
pub const QUEUE_BYTES: usize = 8 << 20;

/// What a copy costs beside its bytes.
const COPY_OVERHEAD: usize = std::mem::size_of::<Captured>() + 16;

/// Where on a frame's path a copy is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Point {
    /// As the port handed it over, before anything else (from the port).
    In,
    /// As the offload stage made it: an uplink's frames after software
    /// LRO (from the port); for the port, each frame coalesced into it,
    /// segmented for it or passed whole, before it is written (to the
    /// port).
    Offload,
    /// As written to the port (its tag and checksum done): what the
    /// guest or the wire received.
    Out,
    /// Dropped at the port, either way, with the reason.
    Drop,
}

impl Point {
    /// Every point, in the order along the path.
    pub const ALL: [Point; 4] = [Point::In, Point::Offload, Point::Out, Point::Drop];

    /// Its name in `--point`, the views and the capture's comments.
    pub fn name(self) -> &'static str {
        match self {
            Point::In => "in",
            Point::Offload => "offload",
            Point::Out => "out",
            Point::Drop => "drop",
        }
    }

    /// The point named `s`.
    pub fn parse(s: &str) -> Option<Point> {
        Point::ALL.into_iter().find(|p| p.name() == s)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// Which way a captured frame went, as pcapng's `epb_flags` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// From the port into the switch.
    Inbound,
    /// From the switch to the port.
    Outbound,
    /// Not known (a drop before the frame could be read).
    Unknown,
}

/// One copy.
#[derive(Clone, Debug)]
pub struct Captured {
    /// When it was taken.
    pub ts: Duration,
    /// Where.
    pub point: Point,
    /// Which way it went.
    pub way: Way,
    /// The port's queue it was read from or written to.
    pub queue: u16,
    /// Why it was dropped (at [`Point::Drop`]).
    pub reason: Option<DropReason>,
    /// The frame's length on its way (more than `data` when cut at the
    /// capture's snap length; 0 for a frame that could not be read).
    pub len: u32,
    /// Its bytes, up to the snap length.
    pub data: Vec<u8>,
}

/// A capture filter: true for a frame to keep (its bytes, all of them).
pub type Filter = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// One running capture: what it takes, and the copies waiting for its
/// reader.
pub struct Session {
    points: u8,
    filter: Option<Filter>,
    snaplen: usize,
    queue: Mutex<(VecDeque<Captured>, usize)>,
    ready: Condvar,
    /// Copies dropped because the queue was full.
    pub lost: AtomicU64,
    /// Copies taken (queued).
    pub taken: AtomicU64,
}

impl Session {
    /// A capture at `points`, of frames `filter` keeps (all without one),
    /// cut at `snaplen` bytes (0: whole).
    pub fn new(points: &[Point], filter: Option<Filter>, snaplen: usize) -> Session {
        Session {
            points: points.iter().fold(0, |m, p| m | p.bit()),
            filter,
            snaplen: if snaplen == 0 { usize::MAX } else { snaplen },
            queue: Mutex::new((VecDeque::new(), 0)),
            ready: Condvar::new(),
            lost: AtomicU64::new(0),
            taken: AtomicU64::new(0),
        }
    }

    /// Waits up to `wait` for copies, and takes all there are.
    pub fn take(&self, wait: Duration, into: &mut Vec<Captured>) {
        let mut q = self.queue.lock().expect("capture lock");
        if q.0.is_empty() {
            q = self.ready.wait_timeout(q, wait).expect("capture lock").0;
        }
        into.extend(q.0.drain(..));
        q.1 = 0;
    }

    /// Offers a frame at `point`: `frame` (whole) is filtered, cut and
    /// queued, or counted lost when the queue is full.
    fn offer(&self, point: Point, way: Way, queue: u16, reason: Option<DropReason>, frame: &[u8]) {
        if self.points & point.bit() == 0 || self.filter.as_ref().is_some_and(|f| !f(frame)) {
            return;
        }
        let data = frame[..frame.len().min(self.snaplen)].to_vec();
        let cost = data.len() + COPY_OVERHEAD;
        let mut q = self.queue.lock().expect("capture lock");
        if q.1 + cost > QUEUE_BYTES {
            self.lost.fetch_add(1, Relaxed);
            return;
        }
        q.1 += cost;
        q.0.push_back(Captured {
            ts: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
            point,
            way,
            queue,
            reason,
            len: frame.len() as u32,
            data,
        });
        self.taken.fetch_add(1, Relaxed);
        // The reader waits only on an empty queue, and takes all of it.
        if q.0.len() == 1 {
            self.ready.notify_one();
        }
    }
}

/// A port's captures.
#[derive(Default)]
pub struct Taps {
    /// The points some capture takes (one relaxed load per point).
    mask: AtomicU8,
    sessions: RwLock<Vec<Arc<Session>>>,
    /// The switch's settings generation, moved when a capture starts or
    /// stops (the `in` point is a stage of the port's arc).
    gen: Option<Arc<AtomicU64>>,
}

impl std::fmt::Debug for Taps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taps")
            .field("mask", &self.mask.load(Relaxed))
            .finish()
    }
}

impl Taps {
    /// A port's captures on a switch whose settings generation is `gen`.
    pub fn new(gen: Arc<AtomicU64>) -> Taps {
        Taps {
            gen: Some(gen),
            ..Taps::default()
        }
    }

    fn changed(&self) {
        if let Some(g) = &self.gen {
            g.fetch_add(1, std::sync::atomic::Ordering::Release);
        }
    }
    /// True if a capture takes `point` at this port.
    #[inline]
    pub fn on(&self, point: Point) -> bool {
        self.mask.load(Relaxed) & point.bit() != 0
    }

    /// Starts `s` on this port.
    pub fn attach(&self, s: Arc<Session>) {
        let mut all = self.sessions.write().expect("taps lock");
        all.push(s);
        self.mask
            .store(all.iter().fold(0, |m, s| m | s.points), Relaxed);
        self.changed();
    }

    /// Stops `s`.
    pub fn detach(&self, s: &Arc<Session>) {
        let mut all = self.sessions.write().expect("taps lock");
        all.retain(|x| !Arc::ptr_eq(x, s));
        self.mask
            .store(all.iter().fold(0, |m, s| m | s.points), Relaxed);
        self.changed();
    }

    /// Captures running.
    pub fn sessions(&self) -> usize {
        self.sessions.read().expect("taps lock").len()
    }

    /// A copy of `pkt` at `point` (its payload read from the sending
    /// guest's memory if it is still there), for the captures taking it.
    #[inline]
    pub fn packet(&self, point: Point, way: Way, queue: usize, pkt: &Packet) {
        if self.on(point) {
            self.offer_packet(point, way, queue, None, pkt);
        }
    }

    /// A copy of `pkt`, dropped at this port for `reason`.
    #[inline]
    pub fn dropped(&self, way: Way, queue: usize, reason: DropReason, pkt: &Packet) {
        if self.on(Point::Drop) {
            self.offer_packet(Point::Drop, way, queue, Some(reason), pkt);
        }
    }

    /// A copy of a frame in pieces (a coalesced frame, a segment).
    #[inline]
    pub fn pieces<'a>(
        &self,
        point: Point,
        way: Way,
        queue: usize,
        reason: Option<DropReason>,
        pieces: impl IntoIterator<Item = &'a [u8]>,
    ) {
        if self.on(point) {
            let mut v = Vec::new();
            for p in pieces {
                v.extend_from_slice(p);
            }
            self.offer(point, way, queue, reason, &v);
        }
    }

    /// A drop of a frame that could not be read (a refused descriptor
    /// chain or header): an empty copy with the reason.
    #[inline]
    pub fn refused(&self, queue: usize, reason: DropReason) {
        if self.on(Point::Drop) {
            self.offer(Point::Drop, Way::Inbound, queue, Some(reason), &[]);
        }
    }

    #[cold]
    fn offer_packet(
        &self,
        point: Point,
        way: Way,
        queue: usize,
        reason: Option<DropReason>,
        pkt: &Packet,
    ) {
        if pkt.buf.pending().is_some() {
            let mut v = Vec::with_capacity(pkt.len());
            pkt.buf.copy_frame(&mut v);
            self.offer(point, way, queue, reason, &v);
        } else {
            self.offer(point, way, queue, reason, pkt.frame());
        }
    }

    #[cold]
    fn offer(&self, point: Point, way: Way, queue: usize, r: Option<DropReason>, frame: &[u8]) {
        let q = u16::try_from(queue).unwrap_or(u16::MAX);
        for s in self.sessions.read().expect("taps lock").iter() {
            s.offer(point, way, q, r, frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_takes_its_points_filtered_and_cut() {
        let taps = Taps::default();
        assert!(!taps.on(Point::In));
        let keep_long: Filter = Box::new(|f| f.len() > 10);
        let s = Arc::new(Session::new(&[Point::In, Point::Drop], Some(keep_long), 4));
        taps.attach(Arc::clone(&s));
        assert!(taps.on(Point::In) && taps.on(Point::Drop) && !taps.on(Point::Out));
        taps.pieces(
            Point::In,
            Way::Inbound,
            1,
            None,
            [&[1u8; 8][..], &[2u8; 8][..]],
        );
        taps.pieces(Point::In, Way::Inbound, 1, None, [&[3u8; 8][..]]);
        taps.pieces(Point::Out, Way::Outbound, 0, None, [&[4u8; 20][..]]);
        taps.refused(2, DropReason::TxDescLoop);
        let mut got = Vec::new();
        s.take(Duration::ZERO, &mut got);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].len, &got[0].data[..]), (16, &[1u8, 1, 1, 1][..]));
        assert_eq!((got[0].queue, got[0].point), (1, Point::In));
        taps.detach(&s);
        assert!(!taps.on(Point::In));
    }

    #[test]
    fn a_full_queue_loses_copies_and_counts_them() {
        let taps = Taps::default();
        let s = Arc::new(Session::new(&[Point::Out], None, 0));
        taps.attach(Arc::clone(&s));
        let frame = vec![0u8; 9000];
        let fit = QUEUE_BYTES / (frame.len() + COPY_OVERHEAD);
        for _ in 0..fit + 5 {
            taps.pieces(Point::Out, Way::Outbound, 0, None, [&frame[..]]);
        }
        assert_eq!(s.taken.load(Relaxed), fit as u64);
        assert_eq!(s.lost.load(Relaxed), 5);
        let mut got = Vec::new();
        s.take(Duration::ZERO, &mut got);
        taps.pieces(Point::Out, Way::Outbound, 0, None, [&frame[..]]);
        assert_eq!(
            s.taken.load(Relaxed),
            fit as u64 + 1,
            "room again once read"
        );
    }
}
