//! Frames in and out of a guest's virtqueues: a transmit chain copied
//! into a pool buffer and checked, a frame written into the receive
//! buffers the guest posted (several chains with mergeable buffers).
//! Pure over a `Queue` and guest memory, so the protocol's threads, the
//! tests and the fuzzer (with `virtio-queue`'s mock queues as the
//! independent driver) run the same code.
//!
//! The rings are hvnet's own ([`split`]) rather than `virtio-queue`'s:
//! that crate reads the available index, translates a guest address and
//! writes a used element one access at a time, each through
//! `vm-memory`'s region search, and has no packed rings; a burst here
//! loads the index once, reads the heads in one copy, translates through
//! a view of the regions made once per burst ([`memory`]) and publishes
//! the used ring with one store. The protocol (`vhost-user-backend`)
//! still owns the queue's set-up and position. Every access stays inside
//! the guest's regions; a chain's length is bounded by its table (loops
//! refused) and by the largest frame.

use crate::packet::Packet;
use crate::pool::{Buf, Pending, Pool, SizeClass, HEADROOM};
use crate::vnet::{check, check_parts, RecvError, VNET_HDR_LEN};
use memory::{GuestView, OutOfRange};
use packed::PackedRing;
pub use ring::DescriptorFault;
use ring::{Desc, Ring, UsedEntry};
use split::SplitRing;
use std::io::IoSlice;
use std::sync::Arc;
use tail::{copy_tail, guest_memory, guest_tail};
use virtio_queue::Queue;

mod dirty_log;
mod memory;
mod packed;
pub(crate) mod ring;
mod split;
mod tail;
pub use dirty_log::DirtyLog;
pub use tail::{HEAD, LEAVE_MIN};

/// A guest's memory as a vhost-user port maps it: each region with a
/// dirty log that is empty until a migrating front end hands over its log
/// (`SET_LOG_BASE`); from then on, while `LOG_ALL` is on, every write
/// through `vm-memory` (receive buffers, used rings) marks its pages in
/// the front end's log.
pub type GuestMemoryMmap = vm_memory::GuestMemoryMmap<DirtyLog>;

/// Longest frame a guest may hand over: a 64 KiB GSO frame, its link
/// header and the virtio-net header (the large buffer class).
const MAX_TX_CHAIN: usize = SizeClass::Large.storage();

/// Offset of `num_buffers` in `struct virtio_net_hdr_v1`.
const NUM_BUFFERS_OFFSET: u64 = 10;

/// Why a virtqueue write did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VirtqError {
    /// The guest posted no (or too few) receive buffers: its ring is full.
    #[error("the guest's receive virtqueue has no free buffers")]
    RingFull,
    /// No guest is connected, or its queue is not set up.
    #[error("no guest is connected")]
    NotReady,
    /// A descriptor the guest posted is unusable (outside its memory,
    /// read-only, or the chain is malformed).
    #[error("bad receive descriptor: {0}")]
    BadDescriptor(DescriptorFault),
    /// A guest without mergeable buffers posted a chain too short for the
    /// frame.
    #[error("receive buffer too small for the frame")]
    TooSmall,
}

/// Which virtqueue layout the front end negotiated
/// (`VIRTIO_F_RING_PACKED`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// Descriptor table, available ring, used ring.
    #[default]
    Split,
    /// One ring of descriptors both sides write.
    Packed,
}

impl Layout {
    /// As views name it.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Split => "split",
            Layout::Packed => "packed",
        }
    }
}

/// Runs `$body` with `$ring` bound to the type of ring `$layout` names.
macro_rules! on_ring {
    ($layout:expr, $ring:ident => $body:expr) => {
        match $layout {
            Layout::Split => {
                type $ring = SplitRing;
                $body
            }
            Layout::Packed => {
                type $ring = PackedRing;
                $body
            }
        }
    };
}

/// What a burst of reads did.
#[derive(Debug)]
pub struct ReadBurst {
    /// Chains taken (frames and frames refused).
    pub taken: usize,
    /// Why reading stopped before `max`: [`RecvError::WouldBlock`] (the
    /// guest has posted nothing more) or [`RecvError::NoBuffer`] (the
    /// port's buffers ran out; the chain stays available).
    pub end: Result<(), RecvError>,
    /// The guest asked to be told of the chains returned.
    pub signal: bool,
}

/// Reads up to `max` transmit chains into `out`, each copied into a
/// buffer of `pool` and checked as a TAP read is checked ([`check`]), or
/// refused (counted by the caller). Every chain taken goes back used
/// (length 0: the device wrote nothing), whatever it held, in one
/// publication for the burst. With no buffer free under the port's cap a
/// chain stays available, unread (a TAP read that finds no buffer does
/// not read either): the frame is taken later, not lost.
pub fn read_batch(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    layout: Layout,
    pool: &mut Pool,
    max: usize,
    out: &mut Vec<Result<Packet, RecvError>>,
) -> ReadBurst {
    let mut held = Held::default();
    on_ring!(layout, R => read_on::<R>(queue, mem, None, pool, max, out, &mut held))
}

/// [`read_batch`] leaving payloads in place: a frame longer than
/// [`LEAVE_MIN`] bytes is parsed from its first [`HEAD`], its payload left
/// in the guest's memory
/// (`mem`, kept mapped by each frame that needs it: [`Pending`]); its
/// chain, and every chain after it (the guest may have asked for them in
/// order), go back used only at [`complete_batch`], into `held` until
/// then.
pub fn read_batch_leaving(
    queue: &mut Queue,
    mem: &Arc<GuestMemoryMmap>,
    layout: Layout,
    pool: &mut Pool,
    max: usize,
    out: &mut Vec<Result<Packet, RecvError>>,
    held: &mut Held,
) -> ReadBurst {
    on_ring!(layout, R => read_on::<R>(queue, mem, Some(mem), pool, max, out, held))
}

/// Transmit chains given back used only once the payloads left in their
/// buffers were copied: where the used side stood, and the chains.
#[derive(Debug, Default)]
pub struct Held {
    mark: u16,
    entries: Vec<UsedEntry>,
}

impl Held {
    /// Chains held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets them (the ring they came from was reset).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[allow(clippy::too_many_arguments)]
fn read_on<R: Ring>(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    tails: Option<&Arc<GuestMemoryMmap>>,
    pool: &mut Pool,
    max: usize,
    out: &mut Vec<Result<Packet, RecvError>>,
    held: &mut Held,
) -> ReadBurst {
    let mut burst = ReadBurst {
        taken: 0,
        end: Err(RecvError::WouldBlock),
        signal: false,
    };
    let Some(mut ring) = R::of(queue) else {
        return burst;
    };
    let view = GuestView::new(mem);
    let old = ring.used_mark();
    // One pass, each chain walked, copied, checked and returned in turn.
    // (Three passes over the burst — walk, every copy, every check — as
    // DPDK batches its small copies, cost 18 % more in the benchmark and
    // saved nothing measurable at the ports: 359 against 363 ns a frame.)
    // A ring the guest got wrong (its index past the ring) is refused
    // after the frames taken before it.
    let mut bad_ring = None;
    let holding = !held.is_empty();
    let mut hold = holding;
    while burst.taken < max {
        let mark = ring.mark();
        let head = match ring.take(&view) {
            Ok(Some(head)) => head,
            Ok(None) => break,
            Err(f) => {
                bad_ring = Some(f);
                break;
            }
        };
        let copied = copy_chain(&ring, &view, &head, pool, tails);
        if let Err(RecvError::NoBuffer) = copied {
            ring.rewind(mark);
            burst.end = Err(RecvError::NoBuffer);
            break;
        }
        out.push(copied.and_then(|(buf, n)| check_head(buf, n)));
        hold |= matches!(out.last(), Some(Ok(p)) if p.buf.pending().is_some());
        if hold {
            held.entries.push(ring.used_entry(&head));
        } else {
            ring.push_used(&view, &head, 0);
        }
        burst.taken += 1;
    }
    if let Some(f) = bad_ring {
        out.push(Err(RecvError::BadDescriptor(f)));
    }
    if burst.taken == max {
        burst.end = Ok(());
    }
    ring.publish(&view);
    burst.signal = ring.wants_signal(&view, old);
    if hold && !holding {
        held.mark = ring.used_mark();
    }
    ring.save(queue);
    burst
}

/// [`check`] of a frame whose payload may be pending: one whose headers
/// reach past its head (or whose head did not parse: its headers may)
/// is copied whole and checked again.
#[inline(always)]
fn check_head(buf: Buf, n: usize) -> Result<Packet, RecvError> {
    if buf.pending().is_none() {
        return check(buf, n);
    }
    let mut whole = match check_parts(buf, n) {
        Ok(p) if p.meta.layers.vxlan.is_none() && p.header_len() <= p.buf.held().len() => {
            return Ok(p)
        }
        Ok(p) => p.buf,
        Err((b, _)) => b,
    };
    whole.fill_pending();
    check(whole, n)
}

/// Gives back used the chains [`read_batch`] held, in order, in one
/// publication; true if the guest asked to be told.
pub fn complete_batch(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    layout: Layout,
    held: &mut Held,
) -> bool {
    on_ring!(layout, R => complete_on::<R>(queue, mem, held))
}

fn complete_on<R: Ring>(queue: &mut Queue, mem: &GuestMemoryMmap, held: &mut Held) -> bool {
    if held.is_empty() {
        return false;
    }
    // Given back even to a queue being stopped: its front end is told
    // where the ring stands once they are.
    let Some(mut ring) = R::open(queue) else {
        held.clear();
        return false;
    };
    let view = GuestView::new(mem);
    ring.set_used_mark(held.mark);
    for e in held.entries.drain(..) {
        ring.push_entry(&view, e, 0);
    }
    ring.publish(&view);
    let signal = ring.wants_signal(&view, held.mark);
    ring.save(queue);
    signal
}

/// Takes the next transmit chain of a split ring ([`read_batch`] of one).
pub fn read_frame(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    pool: &mut Pool,
) -> Result<Packet, RecvError> {
    let mut out = Vec::with_capacity(1);
    let burst = read_batch(queue, mem, Layout::Split, pool, 1, &mut out);
    match out.pop() {
        Some(r) => r,
        None => Err(burst.end.err().unwrap_or(RecvError::WouldBlock)),
    }
}

/// Writes frames (each virtio-net header first) into the guest's receive
/// queue: each into one descriptor chain, or as many as it needs when
/// the guest takes mergeable buffers; nothing of a frame when the guest
/// has too few buffers (the chains taken go back to the available
/// side). Each frame's result goes to `done`, in order; writing stops
/// after the first frame that finds the ring full. The used elements are
/// published once, at the end. Returns how many frames were reported.
pub fn write_batch(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    layout: Layout,
    frames: &[&[IoSlice<'_>]],
    mergeable: bool,
    done: &mut dyn FnMut(Result<(), VirtqError>),
) -> usize {
    write_batch_from(queue, mem, layout, frames, &[], mergeable, done)
}

/// [`write_batch`] of frames that may end in bytes still in the sending
/// guest's memory (`tails[i]`, the frame's [`Pending`] tail; `tails` may be
/// shorter than `frames`): those are copied from there straight into this
/// guest's buffers.
pub fn write_batch_from(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    layout: Layout,
    frames: &[&[IoSlice<'_>]],
    tails: &[Option<&Pending>],
    mergeable: bool,
    done: &mut dyn FnMut(Result<(), VirtqError>),
) -> usize {
    on_ring!(layout, R => write_on::<R>(queue, mem, frames, tails, mergeable, done))
}

fn write_on<R: Ring>(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    frames: &[&[IoSlice<'_>]],
    tails: &[Option<&Pending>],
    mergeable: bool,
    done: &mut dyn FnMut(Result<(), VirtqError>),
) -> usize {
    let Some(mut ring) = R::of(queue) else {
        frames.iter().for_each(|_| done(Err(VirtqError::NotReady)));
        return frames.len();
    };
    let view = GuestView::new(mem);
    let mut reported = frames.len();
    for (i, f) in frames.iter().enumerate() {
        let tail = tails.get(i).copied().flatten();
        let from = tail.and_then(|t| Some((t, GuestView::new(guest_memory(t)?))));
        debug_assert_eq!(
            tail.is_some(),
            from.is_some(),
            "a tail not in a guest's memory"
        );
        let src = Source::new(f, from);
        let r = write_one(&mut ring, &view, src, mergeable);
        let full = matches!(r, Err(VirtqError::RingFull));
        done(r);
        if full {
            reported = i + 1;
            break;
        }
    }
    ring.publish(&view);
    ring.save(queue);
    reported
}

/// Writes one frame into a split ring ([`write_batch`] of one).
pub fn write_frame(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    iov: &[IoSlice<'_>],
    mergeable: bool,
) -> Result<(), VirtqError> {
    let mut result = Err(VirtqError::NotReady);
    write_batch(queue, mem, Layout::Split, &[iov], mergeable, &mut |r| {
        result = r
    });
    result
}

/// Writes one frame into as many chains as it takes.
fn write_one<R: Ring>(
    ring: &mut R,
    view: &GuestView<'_>,
    mut src: Source<'_>,
    mergeable: bool,
) -> Result<(), VirtqError> {
    let mark = ring.mark();
    // Each chain used and the bytes written into it; a 64 KiB frame in
    // 1.5 KiB buffers takes 44.
    let mut used: smallvec::SmallVec<[(R::Head, u32); 8]> = smallvec::SmallVec::new();
    let mut first_addr = None;
    let mut failed = None;
    while !src.done() {
        let head = match ring.take(view) {
            Ok(Some(head)) => head,
            Ok(None) => {
                failed = Some(VirtqError::RingFull);
                break;
            }
            Err(f) => {
                ring.rewind(mark);
                return Err(VirtqError::BadDescriptor(f));
            }
        };
        match fill_chain(ring.descs(view, &head), view, &mut src, &mut first_addr) {
            Ok(n) => used.push((head, n as u32)),
            Err(e) => {
                used.push((head, 0));
                failed = Some(e);
                break;
            }
        }
        if !mergeable && !src.done() {
            failed = Some(VirtqError::TooSmall);
            break;
        }
    }
    if let Some(e) = failed {
        match e {
            // The guest sees none of this frame: the chains taken go
            // back to the available side, to be used by a later frame.
            VirtqError::RingFull => ring.rewind(mark),
            // A chain that cannot be used as it is goes back used and
            // empty, with those taken before it (the guest's driver
            // counts a too-short buffer as a receive error).
            _ => {
                for (h, _) in &used {
                    ring.push_used(view, h, 0);
                }
            }
        }
        return Err(e);
    }
    if mergeable {
        if let Some(addr) = first_addr {
            let n = (used.len() as u16).to_le_bytes();
            let _ = view.write(addr + NUM_BUFFERS_OFFSET, &n);
        }
    }
    // The guest's driver reads `num_buffers` from the first buffer and
    // takes that many used elements at once: they are published together
    // (at the end of the batch), never one chain at a time.
    for (h, n) in &used {
        ring.push_used(view, h, *n);
    }
    Ok(())
}

/// Whether the guest wants to be told of used buffers now, the used side
/// having moved since `old` ([`used_mark`] when it was last told).
pub fn wants_signal(queue: &Queue, mem: &GuestMemoryMmap, layout: Layout, old: u16) -> bool {
    on_ring!(layout, R => R::of(queue).is_some_and(|ring| ring.wants_signal(&GuestView::new(mem), old)))
}

/// Where the used side of `queue` stands.
pub fn used_mark(queue: &Queue, layout: Layout) -> u16 {
    on_ring!(layout, R => R::of(queue).map_or(0, |ring| ring.used_mark()))
}

/// Asks the guest to kick when it makes more chains available, or not
/// to; on, true when some arrived meanwhile.
pub fn set_kicks(queue: &Queue, mem: &GuestMemoryMmap, layout: Layout, on: bool) -> bool {
    on_ring!(layout, R => R::of(queue).is_some_and(|ring| ring.set_kicks(&GuestView::new(mem), on)))
}

/// Watches the ring for up to `budget` without a system call; true as
/// soon as the guest made a chain available that was not taken. The
/// clock is read every 32 looks (a read costs more than a look).
pub fn wait_available(
    queue: &Queue,
    mem: &GuestMemoryMmap,
    layout: Layout,
    budget: std::time::Duration,
) -> bool {
    on_ring!(layout, R => {
        let Some(ring) = R::of(queue) else {
            return false;
        };
        let view = GuestView::new(mem);
        let start = std::time::Instant::now();
        for looks in 1u32.. {
            if ring.has_available(&view) {
                return true;
            }
            if looks % 32 == 0 && start.elapsed() >= budget {
                break;
            }
            std::hint::spin_loop();
        }
        false
    })
}

/// The bytes of a frame given as I/O slices, then the bytes it left in
/// the sending guest's memory, consumed in order.
struct Source<'a> {
    iov: &'a [IoSlice<'a>],
    /// Index of the slice and offset in it.
    at: (usize, usize),
    /// The tail, and the sending guest's memory it is in.
    tail: Option<(&'a Pending, GuestView<'a>)>,
    /// Bytes of the tail taken.
    tail_at: usize,
    written: usize,
    total: usize,
}

/// The next piece of a [`Source`].
enum Piece<'a> {
    /// Bytes in hvnet's memory.
    Bytes(&'a [u8]),
    /// `.1` bytes of the tail, from `.0` on.
    Tail(usize, usize),
}

impl<'a> Source<'a> {
    fn new(iov: &'a [IoSlice<'a>], tail: Option<(&'a Pending, GuestView<'a>)>) -> Source<'a> {
        Source {
            iov,
            at: (0, 0),
            total: iov.iter().map(|s| s.len()).sum::<usize>()
                + tail.as_ref().map_or(0, |t| t.0.len),
            tail,
            tail_at: 0,
            written: 0,
        }
    }

    /// Up to `max` next bytes.
    fn next(&mut self, max: usize) -> Option<Piece<'a>> {
        while self.at.0 < self.iov.len() {
            let s: &'a [u8] = &self.iov[self.at.0];
            if self.at.1 < s.len() {
                let n = (s.len() - self.at.1).min(max);
                let out = &s[self.at.1..self.at.1 + n];
                self.at.1 += n;
                self.written += n;
                return Some(Piece::Bytes(out));
            }
            self.at = (self.at.0 + 1, 0);
        }
        let (t, _) = self.tail.as_ref()?;
        let n = (t.len - self.tail_at).min(max);
        if n == 0 {
            return None;
        }
        let from = self.tail_at;
        self.tail_at += n;
        self.written += n;
        Some(Piece::Tail(from, n))
    }

    /// Copies `n` bytes of the tail from `from` on to `at` in `dst`.
    fn copy_tail(
        &self,
        from: usize,
        dst: &GuestView<'_>,
        at: u64,
        n: usize,
    ) -> Result<(), OutOfRange> {
        let (t, view) = self.tail.as_ref().ok_or(OutOfRange)?;
        copy_tail(t, view, from, dst, at, n)
    }

    /// Every byte was taken.
    fn done(&self) -> bool {
        self.written >= self.total
    }
}

/// Copies what remains of `src` into a receive chain's writable buffers;
/// the bytes written.
fn fill_chain(
    chain: impl Iterator<Item = Result<Desc, DescriptorFault>>,
    view: &GuestView<'_>,
    src: &mut Source<'_>,
    first: &mut Option<u64>,
) -> Result<usize, VirtqError> {
    let mut n = 0;
    for desc in chain {
        let desc = desc.map_err(VirtqError::BadDescriptor)?;
        if !desc.write {
            return Err(VirtqError::BadDescriptor(DescriptorFault::Direction));
        }
        if first.is_none() {
            if (desc.len as usize) < VNET_HDR_LEN {
                return Err(VirtqError::BadDescriptor(DescriptorFault::Short));
            }
            *first = Some(desc.addr);
        }
        let mut off = 0usize;
        while off < desc.len as usize {
            let Some(piece) = src.next(desc.len as usize - off) else {
                return Ok(n);
            };
            let outside = VirtqError::BadDescriptor(DescriptorFault::Memory);
            let at = desc.addr.checked_add(off as u64).ok_or(outside)?;
            let k = match piece {
                Piece::Bytes(bytes) => {
                    view.write(at, bytes).map_err(|_| outside)?;
                    bytes.len()
                }
                Piece::Tail(from, k) => {
                    src.copy_tail(from, view, at, k).map_err(|_| outside)?;
                    k
                }
            };
            off += k;
            n += k;
        }
        if src.done() {
            break;
        }
    }
    Ok(n)
}

/// Copies a transmit chain (virtio-net header and frame) into a pool
/// buffer: the buffer and the bytes copied. The chain is walked once,
/// its descriptors kept (a frame's few; a longer chain, bounded by the
/// queue, spills to the heap), and a buffer its size taken before any
/// byte is copied (none free: [`RecvError::NoBuffer`], the chain left).
/// With `tails`, of a frame longer than [`LEAVE_MIN`] only the header and
/// [`HEAD`] frame bytes are copied, the rest left pending in the guest's
/// memory (checked inside it).
fn copy_chain<R: Ring>(
    ring: &R,
    view: &GuestView<'_>,
    head: &R::Head,
    pool: &mut Pool,
    tails: Option<&Arc<GuestMemoryMmap>>,
) -> Result<(Buf, usize), RecvError> {
    let mut descs: smallvec::SmallVec<[Desc; 4]> = smallvec::SmallVec::new();
    let mut total = 0usize;
    for desc in ring.descs(view, head) {
        let desc = desc.map_err(RecvError::BadDescriptor)?;
        if desc.write {
            return Err(RecvError::BadDescriptor(DescriptorFault::Direction));
        }
        total = total.saturating_add(desc.len as usize);
        if total > MAX_TX_CHAIN {
            return Err(RecvError::BadDescriptor(DescriptorFault::TooLong));
        }
        descs.push(desc);
    }
    let class = if total <= SizeClass::Small.storage() {
        SizeClass::Small
    } else {
        SizeClass::Large
    };
    let copy = match tails {
        Some(_) if total > VNET_HDR_LEN + LEAVE_MIN => VNET_HDR_LEN + HEAD,
        _ => total,
    };
    let mut buf = pool.take(class).ok_or(RecvError::NoBuffer)?;
    let storage = buf.storage_mut();
    let mut at = 0usize;
    let mut left: smallvec::SmallVec<[(u64, u32); 2]> = smallvec::SmallVec::new();
    for desc in descs {
        let len = desc.len as usize;
        let here = len.min(copy.saturating_sub(at));
        if here > 0 {
            view.read(desc.addr, &mut storage[at..at + here])
                .map_err(|_| RecvError::BadDescriptor(DescriptorFault::Memory))?;
        }
        if here < len {
            let addr = desc
                .addr
                .checked_add(here as u64)
                .ok_or(RecvError::BadDescriptor(DescriptorFault::Memory))?;
            if !view.contains(addr, len - here) {
                return Err(RecvError::BadDescriptor(DescriptorFault::Memory));
            }
            left.push((addr, (len - here) as u32));
        }
        at += len;
    }
    buf.set_len(at.saturating_sub(HEADROOM));
    if let (Some(mem), false) = (tails, left.is_empty()) {
        buf.set_pending(guest_tail(mem, left));
    }
    Ok((buf, at))
}

#[cfg(test)]
mod tests;
