//! The guest's receive virtqueue: frames written into the buffers the
//! guest posted, each into one chain or, with mergeable buffers, as many
//! as it takes (`num_buffers` set in the first), from hvnet's memory and
//! from a tail still in the sending guest's; nothing of a frame that
//! finds too few buffers.

use super::memory::{GuestView, OutOfRange};
use super::ring::{Desc, DescriptorFault, Ring};
use super::tail::{copy_tail, guest_memory};
// The rings `on_ring!` picks between.
use super::{packed::PackedRing, split::SplitRing};
use super::{GuestMemoryMmap, Layout, VirtqError};
use crate::pool::Pending;
use crate::vnet::VNET_HDR_LEN;
use std::io::IoSlice;
use virtio_queue::Queue;

/// Offset of `num_buffers` in `struct virtio_net_hdr_v1`.
pub(super) const NUM_BUFFERS_OFFSET: u64 = 10;

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
