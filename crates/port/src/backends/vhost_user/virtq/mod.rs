//! Frames in and out of a guest's split virtqueues: a transmit chain
//! copied into a pool buffer and checked, a frame written into the
//! receive buffers the guest posted (several chains with mergeable
//! buffers). Pure over a `Queue` and guest memory, so the protocol's
//! threads, the tests and the fuzzer (with `virtio-queue`'s mock queues)
//! run the same code. Every access to guest memory goes through
//! `vm-memory`, which refuses addresses outside the guest's regions; a
//! chain's length is bounded by the queue (the iterator's time to live)
//! and by the largest frame.

use crate::packet::Packet;
use crate::pool::{Buf, Pool, SizeClass, HEADROOM};
use crate::vnet::{check, read_up_to, RecvError, VNET_HDR_LEN};
use std::io::IoSlice;
use std::sync::atomic::Ordering;
use virtio_queue::{DescriptorChain, Queue, QueueT};
use vm_memory::{Address, Bytes, GuestAddress};

mod dirty_log;
pub use dirty_log::DirtyLog;

/// A guest's memory as a vhost-user port maps it: each region with a
/// dirty log that is empty until a migrating front end hands over its log
/// (`SET_LOG_BASE`); from then on, while `LOG_ALL` is on, every write
/// through `vm-memory` (receive buffers, used rings) marks its pages in
/// the front end's log.
pub type GuestMemoryMmap = vm_memory::GuestMemoryMmap<DirtyLog>;

type Chain<'m> = DescriptorChain<&'m GuestMemoryMmap>;

/// Longest frame a guest may hand over: a 64 KiB GSO frame, its link
/// header and the virtio-net header (the large buffer class).
const MAX_TX_CHAIN: usize = SizeClass::Large.storage();

/// Offset of `num_buffers` in `struct virtio_net_hdr_v1`.
const NUM_BUFFERS_OFFSET: u64 = 10;

/// The used ring: flags and index, then 8-byte elements (id, len).
const USED_RING_HEADER: u64 = 4;
const USED_ELEMENT: u64 = 8;

/// Why a virtqueue write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum VirtqError {
    /// The guest posted no (or too few) receive buffers: its ring is full.
    #[error("the guest's receive virtqueue has no free buffers")]
    RingFull,
    /// No guest is connected, or its queue is not set up.
    #[error("no guest is connected")]
    NotReady,
    /// A descriptor the guest posted is unusable (outside its memory,
    /// read-only, or the chain is malformed).
    #[error("bad receive descriptor")]
    BadDescriptor,
    /// A guest without mergeable buffers posted a chain too short for the
    /// frame.
    #[error("receive buffer too small for the frame")]
    TooSmall,
}

/// Takes the next transmit chain, copies it into a buffer of `pool` and
/// checks it as a TAP read is checked; the chain goes back to the guest
/// used (length 0: the device wrote nothing), whatever it held. With no
/// buffer free under the port's cap the chain stays available, unread (a
/// TAP read that finds no buffer does not read either): the frame is
/// taken later, not lost.
pub fn read_frame(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    pool: &mut Pool,
) -> Result<Packet, RecvError> {
    let Some(chain) = queue.pop_descriptor_chain(mem) else {
        return Err(RecvError::WouldBlock);
    };
    let head = chain.head_index();
    let r = copy_chain(chain, mem, pool);
    if let Err(RecvError::NoBuffer) = r {
        queue.set_next_avail(queue.next_avail().wrapping_sub(1));
        return Err(RecvError::NoBuffer);
    }
    let _ = queue.add_used(mem, head, 0);
    let (buf, n) = r?;
    check(buf, n)
}

/// Reads up to `max` transmit chains ([`read_frame`] each) into `out`:
/// frames, and frames refused (each counted by the caller). Returns how
/// many chains were taken and, when fewer than `max`, why reading stopped
/// ([`RecvError::WouldBlock`]: the guest has posted nothing more;
/// [`RecvError::NoBuffer`]: the port's buffers ran out, the chain stays
/// available).
pub fn read_batch(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    pool: &mut Pool,
    max: usize,
    out: &mut Vec<Result<Packet, RecvError>>,
) -> (usize, Result<(), RecvError>) {
    let before = out.len();
    let end = read_up_to(max, out, || read_frame(queue, mem, pool));
    (out.len() - before, end)
}

/// Writes one frame (virtio-net header first) into the guest's receive
/// queue: into one descriptor chain, or as many as it needs when the guest
/// takes mergeable buffers. Nothing is written when the guest has too few
/// buffers (the chains taken go back to the available side).
pub fn write_frame(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    iov: &[IoSlice<'_>],
    mergeable: bool,
) -> Result<(), VirtqError> {
    let mut src = Source::new(iov);
    // (head, bytes written) per chain used; a 64 KiB frame in 1.5 KiB
    // buffers takes 44.
    let mut used: smallvec::SmallVec<[(u16, u32); 64]> = smallvec::SmallVec::new();
    let mut first_addr = None;
    let mut failed = None;
    while !src.done() {
        let Some(chain) = queue.pop_descriptor_chain(mem) else {
            failed = Some(VirtqError::RingFull);
            break;
        };
        let head = chain.head_index();
        match fill_chain(chain, mem, &mut src, &mut first_addr) {
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
            VirtqError::RingFull => {
                let back = queue.next_avail().wrapping_sub(used.len() as u16);
                queue.set_next_avail(back);
            }
            // A chain that cannot be used as it is goes back used and
            // empty, with those taken before it (the guest's driver
            // counts a too-short buffer as a receive error).
            _ => {
                for &(h, _) in &used {
                    let _ = queue.add_used(mem, h, 0);
                }
            }
        }
        return Err(e);
    }
    if mergeable {
        if let Some(addr) = first_addr {
            let n = (used.len() as u16).to_le_bytes();
            let _ = mem.write_slice(&n, addr.unchecked_add(NUM_BUFFERS_OFFSET));
        }
    }
    publish_used(queue, mem, &used);
    Ok(())
}

/// Returns a frame's chains to the guest as used in one step: their
/// elements first, then the used index once. The guest's driver reads
/// `num_buffers` from the first buffer and takes that many used entries
/// at once; `add_used` per chain moves the index per chain, and a driver
/// polling on another CPU then finds buffers "missing" and drops the frame.
fn publish_used(queue: &mut Queue, mem: &GuestMemoryMmap, used: &[(u16, u32)]) {
    let size = queue.size();
    let ring = GuestAddress(queue.used_ring());
    let mut idx = queue.next_used();
    for &(head, len) in used {
        // The queue refuses heads past its table; so does this.
        if head >= size || size == 0 {
            continue;
        }
        let mut elem = [0u8; 8];
        elem[..4].copy_from_slice(&u32::from(head).to_le_bytes());
        elem[4..].copy_from_slice(&len.to_le_bytes());
        let at = ring.unchecked_add(USED_RING_HEADER + USED_ELEMENT * u64::from(idx % size));
        if mem.write_slice(&elem, at).is_err() {
            return;
        }
        idx = idx.wrapping_add(1);
    }
    if mem
        .store(idx.to_le(), ring.unchecked_add(2), Ordering::Release)
        .is_ok()
    {
        queue.set_next_used(idx);
    }
}

/// Whether the guest wants to be told of used buffers now: with the event
/// index, when the used index passed its `used_event` since `old` (the
/// index when it was last told); without it, unless it set
/// `VRING_AVAIL_F_NO_INTERRUPT`.
pub fn wants_signal(queue: &Queue, mem: &GuestMemoryMmap, old: u16) -> bool {
    let new = queue.next_used();
    let avail = GuestAddress(queue.avail_ring());
    if queue.event_idx_enabled() {
        let at = avail.unchecked_add(4 + 2 * u64::from(queue.size()));
        let Ok(event) = mem.load::<u16>(at, Ordering::Acquire) else {
            return true;
        };
        let event = u16::from_le(event);
        new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
    } else {
        let flags = mem
            .load::<u16>(avail, Ordering::Acquire)
            .map_or(0, u16::from_le);
        flags & 1 == 0
    }
}

/// The bytes of a frame given as I/O slices, consumed in order.
struct Source<'a> {
    iov: &'a [IoSlice<'a>],
    /// Index of the slice and offset in it.
    at: (usize, usize),
    written: usize,
    total: usize,
}

impl<'a> Source<'a> {
    fn new(iov: &'a [IoSlice<'a>]) -> Source<'a> {
        Source {
            iov,
            at: (0, 0),
            written: 0,
            total: iov.iter().map(|s| s.len()).sum(),
        }
    }

    /// Up to `max` next bytes.
    fn next(&mut self, max: usize) -> Option<&'a [u8]> {
        while self.at.0 < self.iov.len() {
            let s: &'a [u8] = &self.iov[self.at.0];
            if self.at.1 < s.len() {
                let n = (s.len() - self.at.1).min(max);
                let out = &s[self.at.1..self.at.1 + n];
                self.at.1 += n;
                self.written += n;
                return Some(out);
            }
            self.at = (self.at.0 + 1, 0);
        }
        None
    }

    /// Every byte was taken.
    fn done(&self) -> bool {
        self.written >= self.total
    }
}

/// Copies what remains of `src` into a receive chain's writable buffers;
/// the bytes written.
fn fill_chain(
    chain: Chain<'_>,
    mem: &GuestMemoryMmap,
    src: &mut Source<'_>,
    first: &mut Option<GuestAddress>,
) -> Result<usize, VirtqError> {
    let mut n = 0;
    for desc in chain {
        if !desc.is_write_only() {
            return Err(VirtqError::BadDescriptor);
        }
        if first.is_none() {
            if (desc.len() as usize) < VNET_HDR_LEN {
                return Err(VirtqError::BadDescriptor);
            }
            *first = Some(desc.addr());
        }
        let mut off = 0usize;
        while off < desc.len() as usize {
            let Some(bytes) = src.next(desc.len() as usize - off) else {
                return Ok(n);
            };
            mem.write_slice(bytes, desc.addr().unchecked_add(off as u64))
                .map_err(|_| VirtqError::BadDescriptor)?;
            off += bytes.len();
            n += bytes.len();
        }
        if src.done() {
            break;
        }
    }
    Ok(n)
}

/// Copies a transmit chain (virtio-net header and frame) into a pool
/// buffer: the buffer and the bytes copied.
fn copy_chain(
    chain: Chain<'_>,
    mem: &GuestMemoryMmap,
    pool: &mut Pool,
) -> Result<(Buf, usize), RecvError> {
    let mut total = 0usize;
    for desc in chain.clone() {
        if desc.is_write_only() {
            return Err(RecvError::BadDescriptor);
        }
        total = total.saturating_add(desc.len() as usize);
    }
    if total > MAX_TX_CHAIN {
        return Err(RecvError::BadDescriptor);
    }
    let class = if total <= SizeClass::Small.storage() {
        SizeClass::Small
    } else {
        SizeClass::Large
    };
    let mut buf = pool.take(class).ok_or(RecvError::NoBuffer)?;
    let mut at = 0usize;
    for desc in chain {
        let len = desc.len() as usize;
        // The chain is read once more: a guest that changed it meanwhile
        // gets no more than was measured.
        if at + len > total {
            return Err(RecvError::BadDescriptor);
        }
        mem.read_slice(&mut buf.storage_mut()[at..at + len], desc.addr())
            .map_err(|_| RecvError::BadDescriptor)?;
        at += len;
    }
    buf.set_len(at.saturating_sub(HEADROOM));
    Ok((buf, at))
}

#[cfg(test)]
mod tests;
