//! The guest's transmit virtqueue: chains read a burst at a time, each
//! walked once, copied into a pool buffer (or its head only, the payload
//! left in the guest's memory) and checked, and given back used in one
//! publication, at once or once the batch that held them is done.

use super::memory::GuestView;
use super::ring::{Desc, DescriptorFault, Ring, UsedEntry};
use super::tail::{guest_tail, HEAD, LEAVE_MIN};
// The rings `on_ring!` picks between.
use super::{packed::PackedRing, split::SplitRing};
use super::{GuestMemoryMmap, Layout};
use crate::packet::Packet;
use crate::pool::{Buf, Pool, SizeClass, HEADROOM};
use crate::vnet::{check, check_parts, RecvError, VNET_HDR_LEN};
use std::sync::Arc;
use virtio_queue::Queue;

/// Longest frame a guest may hand over: a 64 KiB GSO frame, its link
/// header and the virtio-net header (the large buffer class).
const MAX_TX_CHAIN: usize = SizeClass::Large.storage();

/// How many chains after the one it copies the read asks for the buffer
/// of ([`Ring::prefetch`]): the front end wrote it on another core, and its
/// line takes longer to arrive than a frame takes to work.
const PREFETCH_DISTANCE: u16 = 3;

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
/// (`mem`, kept mapped by each frame that needs it: [`Pending`](crate::pool::Pending)); its
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
        // The chain `PREFETCH_DISTANCE` on; at a burst's start, the ones
        // before it too. (`ahead` counts from the next chain to be taken.)
        if burst.taken == 0 {
            for k in 0..PREFETCH_DISTANCE - 1 {
                ring.prefetch(&view, k);
            }
        }
        ring.prefetch(&view, PREFETCH_DISTANCE - 1);
        let copied = copy_chain(&ring, &view, &head, pool, tails);
        if let Err(RecvError::NoBuffer) = copied {
            ring.rewind(mark);
            burst.end = Err(RecvError::NoBuffer);
            break;
        }
        match copied {
            Ok((buf, n)) if buf.pending().is_none() => crate::vnet::check_into(out, buf, n),
            Ok((buf, n)) => out.push(check_pending(buf, n)),
            Err(e) => out.push(Err(e)),
        }
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

/// [`check`] of a frame whose payload is pending: one whose headers reach
/// past its head (or whose head did not parse: its headers may) is copied
/// whole and checked again.
#[inline(always)]
fn check_pending(buf: Buf, n: usize) -> Result<Packet, RecvError> {
    let mut whole = match check_parts(buf, n) {
        Ok(p) if p.meta.layers.vxlan().is_none() && p.header_len() <= p.buf.held().len() => {
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
    // The length first, beside the start `take` wrote: the buffer is
    // moved whole at once after this, and a move that reads two fields
    // written apart waits for both stores.
    buf.set_len(total.saturating_sub(HEADROOM));
    let storage = buf.storage_mut();
    let mut at = 0usize;
    let mut left: smallvec::SmallVec<[(u64, u32); 2]> = smallvec::SmallVec::new();
    // By reference: the chain's list is not moved (read back at once, a
    // move waits on its stores).
    for desc in &descs {
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
    debug_assert_eq!(at, total);
    if let (Some(mem), false) = (tails, left.is_empty()) {
        buf.set_pending(guest_tail(mem, left));
    }
    Ok((buf, at))
}
