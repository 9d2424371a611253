//! A split virtqueue (virtio 1.x, 2.7) as a burst works it: the
//! available index loaded once (acquire) for as many chains as it
//! shows, each descriptor chain walked and checked as DPDK's
//! `lib/vhost` checks it, used elements kept in a shadow and published
//! with one release store of the used index, and the guest's interrupt
//! suppression (flags or event index) read once per burst.
//!
//! The ring's position (next available, next used) lives in the
//! protocol crate's `Queue`, which answers `GET_VRING_BASE` and sets it on
//! `SET_VRING_BASE`: a burst starts from it ([`SplitRing::of`]) and
//! leaves it where the burst ended ([`SplitRing::save`]).

use super::memory::GuestView;
use super::ring::{
    indirect_entries, read_raw, Desc, DescriptorFault, Mark, Ring, UsedEntry, DESC_SIZE,
    F_INDIRECT, F_NEXT, F_WRITE, SHADOW,
};
use smallvec::SmallVec;
use std::sync::atomic::{fence, Ordering};
use virtio_queue::{Queue, QueueT};

/// `VRING_USED_F_NO_NOTIFY`: the device asks not to be kicked.
const USED_F_NO_NOTIFY: u16 = 1;
/// `VRING_AVAIL_F_NO_INTERRUPT`: the driver asks not to be interrupted.
const AVAIL_F_NO_INTERRUPT: u16 = 1;

/// A split ring's addresses and position for one burst.
pub struct SplitRing {
    desc: u64,
    avail: u64,
    used: u64,
    size: u16,
    event_idx: bool,
    /// The next head to take, and the next used slot to fill.
    next_avail: u16,
    next_used: u16,
    /// Chains known available and not taken (the index is loaded again
    /// when they run out).
    known: u16,
    /// Used elements (head, bytes written) not yet written out.
    shadow: SmallVec<[(u16, u32); SHADOW]>,
}

impl SplitRing {
    /// Chains the guest made available and the device has not taken:
    /// one acquire load, which orders the reads of the heads and
    /// descriptors after it.
    fn available(&self, view: &GuestView<'_>) -> Result<u16, DescriptorFault> {
        let idx = u16::from_le(view.load::<u16>(self.avail + 2, Ordering::Acquire)?);
        let n = idx.wrapping_sub(self.next_avail);
        if n > self.size {
            return Err(DescriptorFault::AvailIndex);
        }
        Ok(n)
    }

    /// Where entry `i` of the available ring is (`i` = the ring's size:
    /// the driver's `used_event`, just after the entries).
    fn avail_entry(&self, i: u16) -> u64 {
        self.avail + 4 + 2 * u64::from(i)
    }

    /// The next head, taken.
    fn take_head(&mut self, view: &GuestView<'_>) -> Result<u16, DescriptorFault> {
        let slot = self.next_avail % self.size;
        let head = u16::from_le(view.read_obj::<u16>(self.avail_entry(slot))?);
        self.next_avail = self.next_avail.wrapping_add(1);
        Ok(head)
    }

    /// The head of the chain `ahead` places on from the next one to be
    /// taken, if it is known available, without taking it.
    fn peek_head(&self, view: &GuestView<'_>, ahead: u16) -> Option<u16> {
        if ahead >= self.known {
            return None;
        }
        let slot = self.next_avail.wrapping_add(ahead) % self.size;
        let head = u16::from_le(view.read_obj::<u16>(self.avail_entry(slot)).ok()?);
        (head < self.size).then_some(head)
    }

    /// The descriptors of the chain at `head`, checked as they are read.
    fn chain<'v, 'm>(&self, view: &'v GuestView<'m>, head: u16) -> Chain<'v, 'm> {
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
}

impl Ring for SplitRing {
    /// The head's index in the descriptor table.
    type Head = u16;

    fn open(queue: &Queue) -> Option<SplitRing> {
        let size = queue.size();
        if size == 0 {
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
            known: 0,
            shadow: SmallVec::new(),
        })
    }

    fn save(&self, queue: &mut Queue) {
        queue.set_next_avail(self.next_avail);
        queue.set_next_used(self.next_used);
    }

    fn take(&mut self, view: &GuestView<'_>) -> Result<Option<u16>, DescriptorFault> {
        if self.known == 0 {
            self.known = self.available(view)?;
            if self.known == 0 {
                return Ok(None);
            }
        }
        let head = self.take_head(view)?;
        self.known -= 1;
        Ok(Some(head))
    }

    /// Reads the head from the available ring and its descriptor (both
    /// on lines the burst reads anyway), then asks for the buffer's.
    fn prefetch(&self, view: &GuestView<'_>, ahead: u16) {
        let Some(head) = self.peek_head(view, ahead) else {
            return;
        };
        if let Ok((addr, len, _, _)) = read_raw(view, self.desc + DESC_SIZE * u64::from(head)) {
            view.prefetch(addr, len as usize);
        }
    }

    fn descs<'a>(
        &'a self,
        view: &'a GuestView<'_>,
        head: &'a u16,
    ) -> impl Iterator<Item = Result<Desc, DescriptorFault>> + 'a {
        self.chain(view, *head)
    }

    fn used_entry(&self, head: &u16) -> UsedEntry {
        UsedEntry {
            id: *head,
            slots: 1,
        }
    }

    /// Written out at [`Ring::publish`] (or when the shadow fills).
    fn push_entry(&mut self, view: &GuestView<'_>, entry: UsedEntry, len: u32) {
        if self.shadow.len() == SHADOW {
            self.write_used(view);
        }
        self.shadow.push((entry.id, len));
    }

    fn set_used_mark(&mut self, mark: u16) {
        self.next_used = mark;
    }

    fn mark(&self) -> Mark {
        Mark {
            next_avail: self.next_avail,
            wrap: false,
            known: self.known,
        }
    }

    fn rewind(&mut self, mark: Mark) {
        self.next_avail = mark.next_avail;
        self.known = mark.known;
    }

    fn used_mark(&self) -> u16 {
        self.next_used
    }

    fn has_available(&self, view: &GuestView<'_>) -> bool {
        self.available(view).is_ok_and(|n| n > 0)
    }

    /// Writes the used elements out and publishes them with one release
    /// store of the used index: the guest sees the chains with the bytes
    /// written into them.
    fn publish(&mut self, view: &GuestView<'_>) {
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
    fn set_kicks(&self, view: &GuestView<'_>, on: bool) -> bool {
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
        self.has_available(view)
    }

    /// Whether the guest wants an interrupt for the used index moving
    /// from `old` to where it is now: with the event index, when it passed
    /// the guest's `used_event`; without, unless the guest set
    /// `VRING_AVAIL_F_NO_INTERRUPT`.
    fn wants_signal(&self, view: &GuestView<'_>, old: u16) -> bool {
        let new = self.next_used;
        if new == old {
            return false;
        }
        // The used index stored before the guest's field is read.
        fence(Ordering::SeqCst);
        if self.event_idx {
            let at = self.avail_entry(self.size);
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
    type Item = Result<Desc, DescriptorFault>;

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
    fn step(&mut self, i: u16) -> Result<Option<Desc>, DescriptorFault> {
        if u32::from(i) >= self.entries {
            return Err(DescriptorFault::Index);
        }
        if self.ttl == 0 {
            return Err(DescriptorFault::Loop);
        }
        self.ttl -= 1;
        let (addr, len, flags, next) = read_raw(self.view, self.table + DESC_SIZE * u64::from(i))?;
        let first = std::mem::replace(&mut self.first, false);
        if flags & F_INDIRECT != 0 {
            if self.indirect || !first || flags & F_NEXT != 0 {
                return Err(DescriptorFault::Indirect);
            }
            let n = indirect_entries(len, self.queue_size)?;
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
