//! A split virtqueue (virtio 1.x, 2.7) as a burst works it: the
//! available index loaded once (acquire) and the heads behind it read in
//! one copy, each descriptor chain walked and checked as DPDK's
//! `lib/vhost` checks it, used elements kept in a shadow and published
//! with one release store of the used index, and the guest's interrupt
//! suppression (flags or event index) read once per burst.
//!
//! The ring's position (next available, next used) lives in the
//! protocol crate's `Queue`, which answers `GET_VRING_BASE` and sets it on
//! `SET_VRING_BASE`: a burst starts from it ([`SplitRing::of`]) and
//! leaves it where the burst ended ([`SplitRing::save`]).

use super::memory::{GuestView, OutOfRange};
use smallvec::SmallVec;
use std::sync::atomic::{fence, Ordering};
use virtio_queue::{Queue, QueueT};

const F_NEXT: u16 = 1;
const F_WRITE: u16 = 2;
const F_INDIRECT: u16 = 4;
/// `VRING_USED_F_NO_NOTIFY`: the device asks not to be kicked.
const USED_F_NO_NOTIFY: u16 = 1;
/// `VRING_AVAIL_F_NO_INTERRUPT`: the driver asks not to be interrupted.
const AVAIL_F_NO_INTERRUPT: u16 = 1;
const DESC_SIZE: u64 = 16;
/// The longest indirect table taken: the queue's size, and no fewer
/// than 256 (a small queue still takes a 64 KiB frame's pieces).
fn max_indirect(queue_size: u16) -> u32 {
    u32::from(queue_size).max(256)
}

/// Used elements kept before they are written out (a burst is smaller).
const SHADOW: usize = 64;

/// One descriptor: a buffer in guest memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    /// The device writes it (a receive buffer); otherwise it reads it.
    pub write: bool,
}

/// Why a chain (or the ring) was refused; each is a descriptor the guest
/// got wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// A descriptor index past the table.
    #[error("descriptor index outside the table")]
    Index,
    /// More descriptors than the table holds: the chain loops.
    #[error("descriptor chain loops")]
    Loop,
    /// An indirect descriptor inside an indirect table, one with `NEXT`
    /// set, or one that is not the chain's first.
    #[error("misplaced indirect descriptor")]
    Indirect,
    /// An indirect table whose length is not a whole number of
    /// descriptors, or longer than the queue (and 256).
    #[error("bad indirect table length")]
    IndirectLen,
    /// A descriptor, table or ring outside the guest's memory.
    #[error("address outside the guest's memory")]
    Memory,
    /// The available index moved by more than the queue holds.
    #[error("available index out of range")]
    AvailIndex,
}

impl From<OutOfRange> for ChainError {
    fn from(_: OutOfRange) -> ChainError {
        ChainError::Memory
    }
}

/// A split ring's addresses and position for one burst.
pub struct SplitRing {
    desc: u64,
    avail: u64,
    used: u64,
    size: u16,
    event_idx: bool,
    /// The next head to take, and the next used slot to fill.
    pub next_avail: u16,
    next_used: u16,
    /// Used elements (head, bytes written) not yet written out.
    shadow: SmallVec<[(u16, u32); SHADOW]>,
}

impl SplitRing {
    /// The ring `queue` describes, when the front end set it up.
    pub fn of(queue: &Queue) -> Option<SplitRing> {
        let size = queue.size();
        if !queue.ready() || size == 0 {
            return None;
        }
        Some(SplitRing {
            desc: queue.desc_table(),
            avail: queue.avail_ring(),
            used: queue.used_ring(),
            size,
            event_idx: queue.event_idx_enabled(),
            next_avail: queue.next_avail(),
            next_used: queue.next_used(),
            shadow: SmallVec::new(),
        })
    }

    /// Leaves the ring's position where the burst ended (after
    /// [`SplitRing::publish`]).
    pub fn save(&self, queue: &mut Queue) {
        queue.set_next_avail(self.next_avail);
        queue.set_next_used(self.next_used);
    }

    /// The used index published so far.
    pub fn next_used(&self) -> u16 {
        self.next_used
    }

    /// Chains the guest made available and the device has not taken:
    /// one acquire load, which orders the reads of the heads and
    /// descriptors after it.
    pub fn available(&self, view: &GuestView<'_>) -> Result<u16, ChainError> {
        let idx = u16::from_le(view.load::<u16>(self.avail + 2, Ordering::Acquire)?);
        let n = idx.wrapping_sub(self.next_avail);
        if n > self.size {
            return Err(ChainError::AvailIndex);
        }
        Ok(n)
    }

    /// The next `out.len()` heads from the available ring, in one copy
    /// (two where the ring wraps); the position does not move.
    pub fn heads(&self, view: &GuestView<'_>, out: &mut [u16]) -> Result<(), ChainError> {
        let mut raw = [0u8; 2 * SHADOW];
        let mut done = 0;
        while done < out.len() {
            let slot = self.next_avail.wrapping_add(done as u16) % self.size;
            let n = (out.len() - done)
                .min(usize::from(self.size - slot))
                .min(SHADOW);
            let bytes = &mut raw[..2 * n];
            view.read(self.avail + 4 + 2 * u64::from(slot), bytes)?;
            for (i, h) in bytes.chunks_exact(2).enumerate() {
                out[done + i] = u16::from_le_bytes([h[0], h[1]]);
            }
            done += n;
        }
        Ok(())
    }

    /// The next head, taken.
    pub fn take_head(&mut self, view: &GuestView<'_>) -> Result<u16, ChainError> {
        let slot = self.next_avail % self.size;
        let head = u16::from_le(view.read_obj::<u16>(self.avail + 4 + 2 * u64::from(slot))?);
        self.next_avail = self.next_avail.wrapping_add(1);
        Ok(head)
    }

    /// The descriptors of the chain at `head`, checked as they are read.
    pub fn chain<'v, 'm>(&self, view: &'v GuestView<'m>, head: u16) -> Chain<'v, 'm> {
        Chain {
            view,
            table: self.desc,
            entries: u32::from(self.size),
            next: Some(head),
            ttl: u32::from(self.size),
            first: true,
            indirect: false,
            queue_size: self.size,
        }
    }

    /// Returns chain `head` to the guest, `len` bytes written into it.
    /// Written out at [`SplitRing::publish`] (or when the shadow fills).
    pub fn push_used(&mut self, view: &GuestView<'_>, head: u16, len: u32) {
        if self.shadow.len() == SHADOW {
            self.write_used(view);
        }
        self.shadow.push((head, len));
    }

    /// Writes the shadow's elements into the used ring (without moving
    /// the index the guest reads).
    fn write_used(&mut self, view: &GuestView<'_>) {
        let mut raw = [0u8; 8 * SHADOW];
        let mut i = 0;
        while i < self.shadow.len() {
            let slot = self.next_used % self.size;
            let n = (self.shadow.len() - i).min(usize::from(self.size - slot));
            for (k, &(head, len)) in self.shadow[i..i + n].iter().enumerate() {
                raw[8 * k..8 * k + 4].copy_from_slice(&u32::from(head).to_le_bytes());
                raw[8 * k + 4..8 * k + 8].copy_from_slice(&len.to_le_bytes());
            }
            // A used ring outside memory: the guest gets nothing back, as
            // it asked for.
            let _ = view.write(self.used + 4 + 8 * u64::from(slot), &raw[..8 * n]);
            self.next_used = self.next_used.wrapping_add(n as u16);
            i += n;
        }
        self.shadow.clear();
    }

    /// Writes the used elements out and publishes them with one release
    /// store of the used index: the guest sees the chains with the bytes
    /// written into them.
    pub fn publish(&mut self, view: &GuestView<'_>) {
        let before = self.next_used;
        self.write_used(view);
        if self.next_used != before {
            let _ = view.store(self.used + 2, self.next_used.to_le(), Ordering::Release);
        }
    }

    /// Asks the guest to kick when it makes more chains available (`on`)
    /// or not to; on, true when chains arrived meanwhile (the caller
    /// reads them rather than sleeping). With the event index the device
    /// never kicks past its avail event, so off leaves it as it is.
    pub fn set_kicks(&self, view: &GuestView<'_>, on: bool) -> bool {
        let r = if self.event_idx {
            if !on {
                return false;
            }
            let at = self.used + 4 + 8 * u64::from(self.size);
            view.store(at, self.next_avail.to_le(), Ordering::Relaxed)
        } else {
            let flags = if on { 0 } else { USED_F_NO_NOTIFY };
            view.store(self.used, flags.to_le(), Ordering::Relaxed)
        };
        if r.is_err() || !on {
            return false;
        }
        // The flag or event written before the index is read again.
        fence(Ordering::SeqCst);
        self.available(view).is_ok_and(|n| n > 0)
    }

    /// Whether the guest wants an interrupt for the used index moving
    /// from `old` to where it is now: with the event index, when it passed
    /// the guest's `used_event`; without, unless the guest set
    /// `VRING_AVAIL_F_NO_INTERRUPT`.
    pub fn wants_signal(&self, view: &GuestView<'_>, old: u16) -> bool {
        let new = self.next_used;
        if new == old {
            return false;
        }
        // The used index stored before the guest's field is read.
        fence(Ordering::SeqCst);
        if self.event_idx {
            let at = self.avail + 4 + 2 * u64::from(self.size);
            let Ok(event) = view.load::<u16>(at, Ordering::Relaxed) else {
                return true;
            };
            let event = u16::from_le(event);
            new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
        } else {
            let flags = view
                .load::<u16>(self.avail, Ordering::Relaxed)
                .map_or(0, u16::from_le);
            flags & AVAIL_F_NO_INTERRUPT == 0
        }
    }
}

/// The descriptors of one chain, read as they are walked: an index past
/// the table, a loop (more descriptors than the table has), an indirect
/// table anywhere but first or nested, or memory outside the guest's
/// ends the walk with an error.
pub struct Chain<'v, 'm> {
    view: &'v GuestView<'m>,
    table: u64,
    entries: u32,
    next: Option<u16>,
    ttl: u32,
    first: bool,
    indirect: bool,
    queue_size: u16,
}

impl Iterator for Chain<'_, '_> {
    type Item = Result<Desc, ChainError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let i = self.next.take()?;
            let r = self.step(i);
            if let Ok(None) = r {
                continue;
            }
            return Some(r.map(|d| d.expect("a descriptor")));
        }
    }
}

impl Chain<'_, '_> {
    /// Reads descriptor `i`: a buffer, or `None` for an indirect
    /// descriptor (the walk goes on in its table).
    fn step(&mut self, i: u16) -> Result<Option<Desc>, ChainError> {
        if u32::from(i) >= self.entries {
            return Err(ChainError::Index);
        }
        if self.ttl == 0 {
            return Err(ChainError::Loop);
        }
        self.ttl -= 1;
        let raw: [u8; 16] = self.view.read_obj(self.table + DESC_SIZE * u64::from(i))?;
        let addr = u64::from_le_bytes(raw[0..8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(raw[8..12].try_into().expect("4 bytes"));
        let flags = u16::from_le_bytes([raw[12], raw[13]]);
        let next = u16::from_le_bytes([raw[14], raw[15]]);
        let first = std::mem::replace(&mut self.first, false);
        if flags & F_INDIRECT != 0 {
            if self.indirect || !first || flags & F_NEXT != 0 {
                return Err(ChainError::Indirect);
            }
            let n = len / DESC_SIZE as u32;
            if len == 0 || len % DESC_SIZE as u32 != 0 || n > max_indirect(self.queue_size) {
                return Err(ChainError::IndirectLen);
            }
            self.table = addr;
            self.entries = n;
            self.ttl = n;
            self.indirect = true;
            self.next = Some(0);
            return Ok(None);
        }
        if flags & F_NEXT != 0 {
            self.next = Some(next);
        }
        Ok(Some(Desc {
            addr,
            len,
            write: flags & F_WRITE != 0,
        }))
    }
}
