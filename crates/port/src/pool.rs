//! Buffers and per-thread buffer pools with two size classes.
//!
//! Every buffer belongs to one port's [`Home`]: a cap on how many buffers of
//! each class that port may have alive at once (in its reader, in GRO
//! tables, in other ports' rings, anywhere), and a lock-free return queue.
//! A [`Buf`] goes home by itself when dropped, wherever that happens, so a
//! buffer cannot leak and a guest can never make hvnet hold more than its
//! port's cap, whatever it sends.
//!
//! The thread that reads a port takes buffers from a [`Pool`]: a LIFO cache
//! of its own (the most recently freed, cache-warm buffer first), refilled
//! in batches from the home queue, and allocating only while under the cap.
//!
//! Classes: [`SizeClass::Small`] holds any frame of a standard MTU (no GSO);
//! [`SizeClass::Large`] holds up to a 64 KiB GSO frame. A frame is read into
//! a small buffer with a large one behind it (one `readv`); only a frame
//! that overflows the small one keeps the large buffer, so an in-order
//! stream of tiny segments pins 2 KiB per segment, not 64 KiB.

use crossbeam_queue::ArrayQueue;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// Bytes before the frame in every buffer: room for the 12-byte virtio-net
/// header a TAP read writes there.
pub const HEADROOM: usize = 12;
/// Frame bytes a small buffer holds (a 1500-byte MTU frame with two VLAN
/// tags fits).
pub const SMALL_FRAME: usize = 2048 - HEADROOM;
/// Frame bytes a large buffer holds: a 64 KiB GSO frame plus Ethernet.
pub const LARGE_FRAME: usize = 65535 + 14 + 4;

/// A buffer size class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeClass {
    /// 2 KiB: frames of a standard MTU.
    Small,
    /// 64 KiB: GSO and jumbo frames.
    Large,
}

impl SizeClass {
    /// Storage bytes of a buffer of this class (headroom and frame).
    pub const fn storage(self) -> usize {
        HEADROOM
            + match self {
                SizeClass::Small => SMALL_FRAME,
                SizeClass::Large => LARGE_FRAME,
            }
    }
}

/// How many buffers of each class a port may have alive at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PoolCaps {
    /// Small buffers.
    pub small: usize,
    /// Large buffers.
    pub large: usize,
}

impl PoolCaps {
    /// Default: 8192 small (16 MiB) and 512 large (32 MiB) per port:
    /// enough to fill 4096-entry rings at two destinations while frames
    /// are being read and held for coalescing.
    pub const DEFAULT: PoolCaps = PoolCaps {
        small: 8192,
        large: 512,
    };

    /// Bytes the cap allows.
    pub fn bytes(&self) -> usize {
        self.small * SizeClass::Small.storage() + self.large * SizeClass::Large.storage()
    }
}

struct Class {
    free: ArrayQueue<Box<[u8]>>,
    alive: AtomicUsize,
    cap: usize,
}

impl Class {
    fn new(cap: usize) -> Class {
        Class {
            free: ArrayQueue::new(cap.max(1)),
            alive: AtomicUsize::new(0),
            cap,
        }
    }
}

/// A port's buffer account: caps and the queue freed buffers return to.
pub struct Home {
    small: Class,
    large: Class,
}

/// A snapshot of a port's buffers, for `hvnet port`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStatus {
    /// Small buffers allocated (in use or idle).
    pub small_alive: usize,
    /// Small buffers idle in the return queue.
    pub small_idle: usize,
    /// Large buffers allocated.
    pub large_alive: usize,
    /// Large buffers idle in the return queue.
    pub large_idle: usize,
    /// Bytes allocated.
    pub bytes: usize,
    /// Bytes the cap allows.
    pub cap_bytes: usize,
}

impl Home {
    /// A home with the given caps.
    pub fn new(caps: PoolCaps) -> Arc<Home> {
        Arc::new(Home {
            small: Class::new(caps.small),
            large: Class::new(caps.large),
        })
    }

    /// Buffers allocated and idle, and bytes.
    pub fn status(&self) -> PoolStatus {
        let (sa, la) = (
            self.small.alive.load(Relaxed),
            self.large.alive.load(Relaxed),
        );
        PoolStatus {
            small_alive: sa,
            small_idle: self.small.free.len(),
            large_alive: la,
            large_idle: self.large.free.len(),
            bytes: sa * SizeClass::Small.storage() + la * SizeClass::Large.storage(),
            cap_bytes: self.caps().bytes(),
        }
    }

    /// The caps.
    pub fn caps(&self) -> PoolCaps {
        PoolCaps {
            small: self.small.cap,
            large: self.large.cap,
        }
    }

    fn give_back(&self, data: Box<[u8]>) {
        let c = match SizeClass::from_storage(data.len()) {
            SizeClass::Small => &self.small,
            SizeClass::Large => &self.large,
        };
        if c.free.push(data).is_err() {
            // Cannot happen while alive ≤ cap = queue capacity; if it does,
            // the memory is freed and the account follows.
            c.alive.fetch_sub(1, Relaxed);
        }
    }
}

/// Memory outside hvnet's buffers that frame bytes may still be in (a
/// sending guest's), read by whoever needs them.
pub trait PendingSource: Send + Sync {
    /// Copies the bytes at `addr` into `into`; false if they are not
    /// there (cannot happen for ranges checked when they were made).
    fn read(&self, addr: u64, into: &mut [u8]) -> bool;
    /// For the one writer that copies from it directly (a guest's
    /// receive virtqueue, from another guest's memory).
    fn as_any(&self) -> &dyn std::any::Any;
}

/// Frame bytes a buffer does not hold yet: the payload of a frame a
/// guest sent, left in the guest's memory until the end of the batch that
/// read it, so that a frame for another guest is copied once, straight
/// from one guest's buffers into the other's. Whatever else reads the
/// payload fills the buffer first ([`Buf::fill_pending`]).
pub struct Pending {
    /// Where the bytes are (kept mapped while the frame lives).
    pub source: Arc<dyn PendingSource>,
    /// Their ranges there, in order.
    pub ranges: smallvec::SmallVec<[(u64, u32); 2]>,
    /// Their total length.
    pub len: usize,
}

impl Pending {
    /// Copies the bytes into `into` (as long as they are); bytes that
    /// cannot be read are left zero, never another frame's.
    fn fill(&self, into: &mut [u8]) {
        let mut at = 0;
        for &(addr, len) in &self.ranges {
            let len = len as usize;
            if !self.source.read(addr, &mut into[at..at + len]) {
                into[at..at + len].fill(0);
            }
            at += len;
        }
    }
}

/// A frame buffer: [`HEADROOM`] bytes, then the frame. Returns to its
/// port's [`Home`] when dropped.
pub struct Buf {
    data: Box<[u8]>,
    /// Where the frame starts: [`HEADROOM`], or further in once outer
    /// headers were taken off ([`Buf::keep_range`]). 32 bits, as the
    /// length (a buffer is at most 64 KiB and a little): a buffer moves
    /// with every packet, so it is kept small.
    start: u32,
    len: u32,
    home: Option<Arc<Home>>,
    /// The frame's last bytes, not in `data` yet (a guest's payload);
    /// boxed, so that every other frame's buffer stays small.
    pending: Option<Box<Pending>>,
}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buf")
            .field("len", &self.len)
            .field("pending", &self.pending.as_ref().map(|p| p.len))
            .field("class", &self.class())
            .finish()
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Some(h) = self.home.take() {
            h.give_back(std::mem::take(&mut self.data));
        }
    }
}

impl Buf {
    /// Its class.
    pub fn class(&self) -> SizeClass {
        SizeClass::from_storage(self.data.len())
    }
    /// Most frame bytes it can hold.
    pub fn capacity(&self) -> usize {
        self.data.len() - self.start as usize
    }
    /// The frame. With bytes pending ([`Buf::pending`]) only its head is
    /// in place: readers of the payload fill the buffer first.
    #[inline]
    pub fn frame(&self) -> &[u8] {
        &self.data[self.start as usize..(self.start + self.len) as usize]
    }
    /// Where the frame starts in [`Buf::storage`].
    pub fn start(&self) -> usize {
        self.start as usize
    }
    /// The frame, writable (for completing a checksum in place): the
    /// pending bytes filled in first.
    pub fn frame_mut(&mut self) -> &mut [u8] {
        self.fill_pending();
        &mut self.data[self.start as usize..(self.start + self.len) as usize]
    }
    /// The bytes of the frame in place: all of it, or its head while the
    /// rest is pending.
    pub fn held(&self) -> &[u8] {
        let pending = self.pending.as_ref().map_or(0, |p| p.len);
        &self.data[self.start as usize..(self.start + self.len) as usize - pending]
    }
    /// The frame's last bytes, still in the sending guest's memory.
    pub fn pending(&self) -> Option<&Pending> {
        self.pending.as_deref()
    }
    /// Leaves the frame's last `pending.len` bytes where they are (the
    /// frame's length already counts them).
    pub fn set_pending(&mut self, pending: Box<Pending>) {
        debug_assert!(pending.len <= self.len as usize);
        self.pending = Some(pending);
    }
    /// Copies the pending bytes into place, if any: true if there were.
    pub fn fill_pending(&mut self) -> bool {
        let Some(p) = self.pending.take() else {
            return false;
        };
        let end = (self.start + self.len) as usize;
        p.fill(&mut self.data[end - p.len..end]);
        true
    }
    /// Appends the whole frame to `into`, the pending bytes read from
    /// where they are (the buffer unchanged: a capture's copy).
    pub fn copy_frame(&self, into: &mut Vec<u8>) {
        let at = into.len();
        into.extend_from_slice(self.frame());
        if let Some(p) = &self.pending {
            let end = into.len();
            p.fill(&mut into[end - p.len..]);
        }
        debug_assert_eq!(into.len() - at, self.len as usize);
    }
    /// Replaces the frame with a copy of `bytes` (cut at the capacity).
    pub fn fill(&mut self, bytes: &[u8]) {
        self.pending = None;
        self.start = HEADROOM as u32;
        let n = bytes.len().min(self.capacity());
        self.data[HEADROOM..HEADROOM + n].copy_from_slice(&bytes[..n]);
        self.len = n as u32;
    }
    /// Keeps only `frame()[range]` (what a tunnel endpoint does with an
    /// inner frame): the frame now starts further in, and no byte moves.
    /// A range past the frame is cut to it.
    pub fn keep_range(&mut self, range: std::ops::Range<usize>) {
        self.fill_pending();
        let end = range.end.min(self.len as usize);
        let start = range.start.min(end);
        self.start += start as u32;
        self.len = (end - start) as u32;
    }
    /// Moves the frame's start `n` bytes back into the headroom (the
    /// frame is `n` bytes longer, its new first bytes whatever was
    /// there); false, and nothing changed, without the room.
    pub fn grow_front(&mut self, n: usize) -> bool {
        if (self.start as usize) < n {
            return false;
        }
        self.start -= n as u32;
        self.len += n as u32;
        true
    }
    /// Moves the frame's start `n` bytes on (its first `n` bytes are no
    /// longer the frame's); the pending bytes, at its end, stay where
    /// they are.
    pub fn shrink_front(&mut self, n: usize) {
        let n = n.min(self.held().len());
        self.start += n as u32;
        self.len -= n as u32;
    }
    /// The frame's bytes in place, writable (its head while the rest is
    /// pending: for headers, with no payload copied).
    pub fn held_mut(&mut self) -> &mut [u8] {
        let pending = self.pending.as_ref().map_or(0, |p| p.len);
        &mut self.data[self.start as usize..(self.start + self.len) as usize - pending]
    }
    /// The whole storage (headroom and frame area), for a read to fill:
    /// the frame starts at [`HEADROOM`] again.
    #[inline]
    pub fn storage_mut(&mut self) -> &mut [u8] {
        self.pending = None;
        self.start = HEADROOM as u32;
        &mut self.data
    }
    /// The whole storage, read-only (the headroom holds a decapsulated
    /// frame's outer headers).
    #[inline]
    pub fn storage(&self) -> &[u8] {
        &self.data
    }
    /// Sets the frame length after a read put `n` frame bytes in place.
    #[inline]
    pub fn set_len(&mut self, n: usize) {
        self.len = n.min(self.capacity()) as u32;
    }
    /// Frame length.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True when no frame is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl AsRef<[u8]> for Buf {
    fn as_ref(&self) -> &[u8] {
        self.frame()
    }
}

/// One thread's cache over a port's [`Home`].
pub struct Pool {
    home: Arc<Home>,
    small: Vec<Box<[u8]>>,
    large: Vec<Box<[u8]>>,
}

/// Buffers moved from the home queue into a thread's cache at a time.
const REFILL: usize = 32;

impl Pool {
    /// A cache over `home`.
    pub fn new(home: Arc<Home>) -> Pool {
        Pool {
            home,
            small: Vec::with_capacity(REFILL * 2),
            large: Vec::with_capacity(REFILL * 2),
        }
    }

    /// The home this pool draws on.
    pub fn home(&self) -> &Arc<Home> {
        &self.home
    }

    /// A buffer of `class`, or `None` when the port's cap is reached and
    /// none is free (the caller stops reading: backpressure, not growth).
    /// Inlined into its callers, so that the buffer is made where it goes
    /// rather than returned through memory and read back at once.
    #[inline]
    pub fn take(&mut self, class: SizeClass) -> Option<Buf> {
        let cache = match class {
            SizeClass::Small => &mut self.small,
            SizeClass::Large => &mut self.large,
        };
        let data = match cache.pop() {
            Some(d) => d,
            None => self.refill(class)?,
        };
        Some(Buf {
            data,
            start: HEADROOM as u32,
            len: 0,
            home: Some(Arc::clone(&self.home)),
            pending: None,
        })
    }

    /// [`Pool::take`] with this thread's cache of `class` empty: refilled
    /// from the home queue, or a new buffer under the port's cap.
    #[cold]
    fn refill(&mut self, class: SizeClass) -> Option<Box<[u8]>> {
        let (cache, c) = match class {
            SizeClass::Small => (&mut self.small, &self.home.small),
            SizeClass::Large => (&mut self.large, &self.home.large),
        };
        while cache.len() < REFILL {
            match c.free.pop() {
                Some(b) => cache.push(b),
                None => break,
            }
        }
        if let Some(d) = cache.pop() {
            return Some(d);
        }
        if c.alive.fetch_add(1, Relaxed) >= c.cap {
            c.alive.fetch_sub(1, Relaxed);
            return None;
        }
        Some(vec![0u8; class.storage()].into_boxed_slice())
    }

    /// Keeps a buffer in this thread's cache instead of sending it home
    /// (for buffers the reader took and did not use).
    pub fn keep(&mut self, mut b: Buf) {
        if b.home.as_ref().is_some_and(|h| Arc::ptr_eq(h, &self.home)) && !b.data.is_empty() {
            b.home = None;
            let data = std::mem::take(&mut b.data);
            match SizeClass::from_storage(data.len()) {
                SizeClass::Small => self.small.push(data),
                SizeClass::Large => self.large.push(data),
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for d in self.small.drain(..).chain(self.large.drain(..)) {
            self.home.give_back(d);
        }
    }
}

impl SizeClass {
    fn from_storage(n: usize) -> SizeClass {
        if n == SizeClass::Small.storage() {
            SizeClass::Small
        } else {
            SizeClass::Large
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_bound_what_is_alive_and_drop_returns_home() {
        let home = Home::new(PoolCaps { small: 3, large: 1 });
        let mut p = Pool::new(Arc::clone(&home));
        let a = p.take(SizeClass::Small).unwrap();
        let b = p.take(SizeClass::Small).unwrap();
        let c = p.take(SizeClass::Small).unwrap();
        assert!(p.take(SizeClass::Small).is_none(), "cap reached");
        let l = p.take(SizeClass::Large).unwrap();
        assert!(p.take(SizeClass::Large).is_none());
        assert_eq!(l.capacity(), LARGE_FRAME);
        // Freed on another thread: it goes home and can be taken again.
        std::thread::spawn(move || drop(b)).join().unwrap();
        assert_eq!(home.status().small_idle, 1);
        let d = p.take(SizeClass::Small).unwrap();
        assert_eq!(home.status().small_alive, 3);
        drop((a, c, d, l));
        let s = home.status();
        assert_eq!((s.small_alive, s.small_idle, s.large_idle), (3, 3, 1));
        assert_eq!(s.cap_bytes, 3 * 2048 + (LARGE_FRAME + HEADROOM));
    }

    #[test]
    fn keeping_a_range_moves_no_byte_and_a_read_starts_afresh() {
        let home = Home::new(PoolCaps { small: 1, large: 1 });
        let mut p = Pool::new(home);
        let mut a = p.take(SizeClass::Small).unwrap();
        let frame: Vec<u8> = (0..200u8).collect();
        a.fill(&frame);
        let at = a.frame()[50..].as_ptr();
        a.keep_range(50..150);
        assert_eq!(a.frame(), &frame[50..150]);
        assert_eq!(a.frame().as_ptr(), at, "the inner frame stays where it is");
        assert_eq!(a.capacity(), SMALL_FRAME - 50);
        // Past the frame: cut to it.
        a.keep_range(90..500);
        assert_eq!(a.frame(), &frame[140..150]);
        // A buffer filled again (or handed to a read) starts at the headroom.
        a.fill(b"again");
        assert_eq!(a.frame(), b"again");
        assert_eq!(a.capacity(), SMALL_FRAME);
        a.storage_mut()[HEADROOM] = b'A';
        assert_eq!(a.frame(), b"Again");
    }

    #[test]
    fn the_cache_is_lifo() {
        let home = Home::new(PoolCaps { small: 8, large: 1 });
        let mut p = Pool::new(home);
        let mut a = p.take(SizeClass::Small).unwrap();
        a.fill(b"first");
        let ptr = a.storage().as_ptr();
        p.keep(a);
        let b = p.take(SizeClass::Small).unwrap();
        assert_eq!(
            b.storage().as_ptr(),
            ptr,
            "the warmest buffer comes back first"
        );
    }
}
