//! A packed virtqueue (virtio 1.1, 2.8) as a burst works it: one ring of
//! descriptors the driver and the device both write, a descriptor
//! available when its `AVAIL` flag matches the device's wrap counter and
//! its `USED` flag does not; used descriptors written back in place, a
//! burst's ids and lengths first and its first descriptor's flags last
//! (one release store publishes them all, as DPDK's shadow used ring
//! does); event suppression read from the driver's area and written to
//! the device's.
//!
//! The protocol crate keeps one 16-bit position per queue, as
//! `SET_VRING_BASE` gives it for packed rings: the index in bits 0–14
//! and the wrap counter in bit 15 (DPDK's `lib/vhost` reads it so). The
//! used side is not kept: every burst returns what it took, in order,
//! so it starts where the available side does.

use super::memory::GuestView;
use super::ring::{
    indirect_entries, read_raw, Desc, DescriptorFault, Mark, Ring, UsedEntry, DESC_SIZE,
    F_INDIRECT, F_NEXT, F_WRITE, SHADOW,
};
use smallvec::SmallVec;
use std::sync::atomic::{fence, Ordering};
use virtio_queue::{Queue, QueueT};

const F_AVAIL: u16 = 1 << 7;
const F_USED: u16 = 1 << 15;
/// Event suppression (`desc_event_flags`).
const EVENT_ENABLE: u16 = 0;
const EVENT_DISABLE: u16 = 1;
const EVENT_DESC: u16 = 2;
/// The wrap counter's bit in a position.
const WRAP: u16 = 1 << 15;

/// A chain taken from the ring.
#[derive(Debug)]
pub struct Head {
    /// Buffer id (the last descriptor's), given back with the used one.
    id: u16,
    /// Ring slots the chain took (an indirect table takes one).
    slots: u16,
    descs: SmallVec<[Desc; 4]>,
    /// Why the chain cannot be used, after the descriptors read.
    bad: Option<DescriptorFault>,
}

/// A packed ring's addresses and position for one burst.
pub struct PackedRing {
    desc: u64,
    /// The driver's event suppression area (where the driver says when
    /// to interrupt it) and the device's (when to be kicked).
    driver_area: u64,
    device_area: u64,
    size: u16,
    next_avail: u16,
    avail_wrap: bool,
    next_used: u16,
    used_wrap: bool,
    /// Used elements (id, bytes written, slots) not yet written out.
    shadow: SmallVec<[(u16, u32, u16); SHADOW]>,
}

impl PackedRing {
    fn desc_at(&self, i: u16) -> u64 {
        self.desc + DESC_SIZE * u64::from(i)
    }

    /// Whether the descriptor at the next available slot is available:
    /// its flags loaded with acquire, which orders the reads of the rest
    /// after them.
    fn peek(&self, view: &GuestView<'_>) -> Result<bool, DescriptorFault> {
        let flags =
            u16::from_le(view.load::<u16>(self.desc_at(self.next_avail) + 14, Ordering::Acquire)?);
        Ok(is_available(flags, self.avail_wrap))
    }

    fn read_desc(view: &GuestView<'_>, at: u64) -> Result<(Desc, u16, u16), DescriptorFault> {
        let (addr, len, id, flags) = read_raw(view, at)?;
        let desc = Desc {
            addr,
            len,
            write: flags & F_WRITE != 0,
        };
        Ok((desc, id, flags))
    }

    /// Moves the available position on by one slot.
    fn step_avail(&mut self) {
        self.next_avail += 1;
        if self.next_avail == self.size {
            self.next_avail = 0;
            self.avail_wrap = !self.avail_wrap;
        }
    }

    /// Reads an indirect table (every entry is a buffer, in order).
    fn indirect(
        view: &GuestView<'_>,
        table: u64,
        len: u32,
        size: u16,
        out: &mut SmallVec<[Desc; 4]>,
    ) -> Result<(), DescriptorFault> {
        let n = indirect_entries(len, size)?;
        for i in 0..u64::from(n) {
            let (d, _, flags) = Self::read_desc(view, table + DESC_SIZE * i)?;
            if flags & F_INDIRECT != 0 {
                return Err(DescriptorFault::Indirect);
            }
            out.push(d);
        }
        Ok(())
    }

    /// Writes the shadow's used descriptors: ids and lengths, then the
    /// flags of all but the first, then the first's (release): the driver
    /// reads the first's flags before the rest.
    fn write_used(&mut self, view: &GuestView<'_>) {
        if self.shadow.is_empty() {
            return;
        }
        let (first_at, first_flags) = (
            self.next_used,
            self.used_flags(self.used_wrap, self.shadow[0].1),
        );
        let mut at = self.next_used;
        let mut wrap = self.used_wrap;
        for (k, &(id, len, slots)) in self.shadow.iter().enumerate() {
            let d = self.desc_at(at);
            // Length and id are side by side: one write.
            let mut len_id = [0u8; 6];
            len_id[..4].copy_from_slice(&len.to_le_bytes());
            len_id[4..].copy_from_slice(&id.to_le_bytes());
            let _ = view.write(d + 8, &len_id);
            if k > 0 {
                let flags = self.used_flags(wrap, len);
                let _ = view.store(d + 14, flags.to_le(), Ordering::Release);
            }
            let next = u32::from(at) + u32::from(slots);
            if next >= u32::from(self.size) {
                wrap = !wrap;
            }
            at = (next % u32::from(self.size)) as u16;
        }
        let _ = view.store(
            self.desc_at(first_at) + 14,
            first_flags.to_le(),
            Ordering::Release,
        );
        self.next_used = at;
        self.used_wrap = wrap;
        self.shadow.clear();
    }

    /// A used descriptor's flags: `AVAIL` and `USED` both the used wrap
    /// counter; `WRITE` when the device wrote into it (as DPDK sets it).
    fn used_flags(&self, wrap: bool, len: u32) -> u16 {
        let mut f = if wrap { F_AVAIL | F_USED } else { 0 };
        if len > 0 {
            f |= F_WRITE;
        }
        f
    }
}

/// A descriptor the driver made available in the round `wrap`.
fn is_available(flags: u16, wrap: bool) -> bool {
    (flags & F_AVAIL != 0) == wrap && (flags & F_USED != 0) != wrap
}

impl Ring for PackedRing {
    type Head = Head;

    fn open(queue: &Queue) -> Option<PackedRing> {
        let size = queue.size();
        if size == 0 {
            return None;
        }
        let base = queue.next_avail();
        let (at, wrap) = ((base & !WRAP) % size, base & WRAP != 0);
        Some(PackedRing {
            desc: queue.desc_table(),
            driver_area: queue.avail_ring(),
            device_area: queue.used_ring(),
            size,
            next_avail: at,
            avail_wrap: wrap,
            next_used: at,
            used_wrap: wrap,
            shadow: SmallVec::new(),
        })
    }

    fn save(&self, queue: &mut Queue) {
        let pos = self.next_avail | if self.avail_wrap { WRAP } else { 0 };
        queue.set_next_avail(pos);
        queue.set_next_used(pos);
    }

    /// The chain at the next available slot: its descriptors in
    /// consecutive slots while `NEXT` is set (at most the ring's size),
    /// or one indirect descriptor and its table. A chain that is
    /// malformed is still taken (its slots are the guest's to get back),
    /// with why.
    fn take(&mut self, view: &GuestView<'_>) -> Result<Option<Head>, DescriptorFault> {
        if !self.peek(view)? {
            return Ok(None);
        }
        let mut head = Head {
            id: 0,
            slots: 0,
            descs: SmallVec::new(),
            bad: None,
        };
        loop {
            if head.slots == self.size {
                head.bad = Some(DescriptorFault::Loop);
                break;
            }
            let at = self.desc_at(self.next_avail);
            // The slot is the chain's whatever it holds: it goes back used
            // with the rest.
            head.slots += 1;
            let read = Self::read_desc(view, at);
            self.step_avail();
            let (d, id, flags) = match read {
                Ok(r) => r,
                Err(e) => {
                    head.bad = Some(e);
                    break;
                }
            };
            head.id = id;
            if flags & F_INDIRECT != 0 {
                if head.slots > 1 || flags & F_NEXT != 0 {
                    head.bad.get_or_insert(DescriptorFault::Indirect);
                } else if let Err(e) =
                    Self::indirect(view, d.addr, d.len, self.size, &mut head.descs)
                {
                    head.bad = Some(e);
                }
            } else if head.bad.is_none() {
                head.descs.push(d);
            }
            // A refused chain is still followed to its end: every slot
            // of it goes back with one used descriptor (as DPDK does).
            if flags & F_NEXT == 0 {
                break;
            }
        }
        Ok(Some(head))
    }

    /// Reads the descriptor that many slots on (a chain of one each, as
    /// small frames are) and, if it is available, asks for its buffer's
    /// line; read without ordering, as a hint (the chain is read again,
    /// in order, when it is taken).
    fn prefetch(&self, view: &GuestView<'_>, ahead: u16) {
        let Some(slot) = self.next_avail.checked_add(ahead) else {
            return;
        };
        let (slot, wrap) = if slot < self.size {
            (slot, self.avail_wrap)
        } else if slot - self.size < self.size {
            (slot - self.size, !self.avail_wrap)
        } else {
            return;
        };
        if let Ok((addr, len, _, flags)) = read_raw(view, self.desc_at(slot)) {
            if is_available(flags, wrap) && flags & F_INDIRECT == 0 {
                view.prefetch(addr, len as usize);
            }
        }
    }

    fn descs<'a>(
        &'a self,
        _view: &'a GuestView<'_>,
        head: &'a Head,
    ) -> impl Iterator<Item = Result<Desc, DescriptorFault>> + 'a {
        head.descs.iter().map(|&d| Ok(d)).chain(head.bad.map(Err))
    }

    fn publish(&mut self, view: &GuestView<'_>) {
        self.write_used(view);
    }

    fn used_entry(&self, head: &Head) -> UsedEntry {
        UsedEntry {
            id: head.id,
            slots: head.slots,
        }
    }

    fn push_entry(&mut self, view: &GuestView<'_>, entry: UsedEntry, len: u32) {
        if self.shadow.len() == SHADOW {
            self.write_used(view);
        }
        self.shadow.push((entry.id, len, entry.slots));
    }

    fn set_used_mark(&mut self, mark: u16) {
        self.next_used = mark & !WRAP;
        self.used_wrap = mark & WRAP != 0;
    }

    fn mark(&self) -> Mark {
        Mark {
            next_avail: self.next_avail,
            wrap: self.avail_wrap,
            known: 0,
        }
    }

    fn rewind(&mut self, mark: Mark) {
        self.next_avail = mark.next_avail;
        self.avail_wrap = mark.wrap;
    }

    fn used_mark(&self) -> u16 {
        self.next_used | if self.used_wrap { WRAP } else { 0 }
    }

    /// As DPDK's `vhost_vring_call_packed`: the driver's flags say
    /// always, never, or (with the event index) once the used side passed
    /// the position it gave.
    fn wants_signal(&self, view: &GuestView<'_>, old: u16) -> bool {
        let now = self.used_mark();
        if now == old {
            return false;
        }
        fence(Ordering::SeqCst);
        let Ok(flags) = view.load::<u16>(self.driver_area + 2, Ordering::Relaxed) else {
            return true;
        };
        match u16::from_le(flags) {
            EVENT_DISABLE => false,
            EVENT_DESC => {
                let Ok(off_wrap) = view.load::<u16>(self.driver_area, Ordering::Relaxed) else {
                    return true;
                };
                let off_wrap = u16::from_le(off_wrap);
                let size = i32::from(self.size);
                let new = i32::from(now & !WRAP);
                let mut old = i32::from(old & !WRAP);
                if new <= old {
                    old -= size;
                }
                let mut off = i32::from(off_wrap & !WRAP);
                if (off_wrap & WRAP != 0) != self.used_wrap {
                    off -= size;
                }
                // vring_need_event(off, new, old), in positions that may
                // have gone negative by a ring.
                ((new - off - 1) as u16) < ((new - old) as u16)
            }
            _ => true,
        }
    }

    fn set_kicks(&self, view: &GuestView<'_>, on: bool) -> bool {
        let flags = if on { EVENT_ENABLE } else { EVENT_DISABLE };
        if view
            .store(self.device_area + 2, flags.to_le(), Ordering::Relaxed)
            .is_err()
            || !on
        {
            return false;
        }
        fence(Ordering::SeqCst);
        self.has_available(view)
    }

    fn has_available(&self, view: &GuestView<'_>) -> bool {
        self.peek(view).unwrap_or(false)
    }
}
