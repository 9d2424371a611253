//! A guest's memory as one burst sees it: the regions table translated
//! once, then each access a lookup in it, the last region hit tried
//! first (DPDK's `gpa_to_vva`, VPP's `map_guest_mem` with its hint).
//! Nothing is built per burst: the table is the memory's own list of
//! regions.
//!
//! `vm-memory`'s own accessors find the region again on every access
//! through an iterator of closures (`try_access`) the compiler does not
//! inline; with a descriptor, a header and a frame per chain, that was a
//! fifth of a 64-byte frame's CPU. The view is built from the memory
//! table the burst loaded ([`GuestMemoryMmap`] behind an `ArcSwap`), so a
//! table the front end replaces meanwhile (`SET_MEM_TABLE`, hotplug) is
//! seen by the next burst, never half-way through one. Every access stays
//! bounded by a region (`VolatileSlice`'s checks) and every write still
//! marks the dirty log while a guest migrates ([`super::DirtyLog`]).

use super::GuestMemoryMmap;
use smallvec::SmallVec;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use vm_memory::bitmap::BS;
use vm_memory::{
    AtomicAccess, ByteValued, Bytes, GuestMemoryBackend, GuestMemoryRegion, GuestRegionMmap,
    VolatileMemory, VolatileSlice,
};

type Slice<'m> = VolatileSlice<'m, BS<'m, super::DirtyLog>>;

/// A guest address outside every region, or an access that crosses the
/// end of the memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfRange;

/// A guest's memory table, and the region an access hit last.
pub struct GuestView<'m> {
    mem: &'m GuestMemoryMmap,
    hint: Cell<usize>,
}

impl<'m> GuestView<'m> {
    /// The view of `mem` (a guest has a few regions: QEMU two or three,
    /// DPDK one per hugepage segment).
    pub fn new(mem: &'m GuestMemoryMmap) -> GuestView<'m> {
        GuestView {
            mem,
            hint: Cell::new(0),
        }
    }

    /// The bytes of the region holding `addr`, and the offset in it.
    #[inline]
    fn region(&self, addr: u64) -> Result<(Slice<'m>, usize), OutOfRange> {
        let within = |r: &'m GuestRegionMmap<super::DirtyLog>| {
            let off = addr
                .checked_sub(r.start_addr().0)
                .filter(|&o| o < r.len())?;
            Some((r.as_volatile_slice().ok()?, off as usize))
        };
        let hint = self.hint.get();
        if let Some(found) = self.mem.iter().nth(hint).and_then(within) {
            return Ok(found);
        }
        for (i, r) in self.mem.iter().enumerate() {
            if let Some(found) = within(r) {
                self.hint.set(i);
                return Ok(found);
            }
        }
        Err(OutOfRange)
    }

    /// `len` bytes at `addr` when one region holds them all (a buffer a
    /// guest's driver allocates does not cross regions; one that does is
    /// read and written piece by piece).
    #[inline]
    fn slice(&self, addr: u64, len: usize) -> Result<Slice<'m>, OutOfRange> {
        let (r, off) = self.region(addr)?;
        r.subslice(off, len).map_err(|_| OutOfRange)
    }

    /// Copies `out.len()` bytes from `addr`.
    #[inline]
    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), OutOfRange> {
        if let Ok(s) = self.slice(addr, out.len()) {
            s.copy_to(out);
            return Ok(());
        }
        self.pieces(addr, out.len(), |s, at| {
            s.copy_to(&mut out[at..at + s.len()]);
        })
    }

    /// Copies `bytes` to `addr`, marking the dirty log.
    #[inline]
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), OutOfRange> {
        if let Ok(s) = self.slice(addr, bytes.len()) {
            s.copy_from(bytes);
            return Ok(());
        }
        self.pieces(addr, bytes.len(), |s, at| {
            s.copy_from(&bytes[at..at + s.len()])
        })
    }

    /// A plain value at `addr` (a descriptor, a used element): one
    /// volatile read of the whole value, at any alignment (`vm-memory`'s
    /// `read_obj` copies it through its byte-slice copy, a loop for a
    /// 16-byte descriptor read several times a frame).
    #[inline]
    pub fn read_obj<T: ByteValued>(&self, addr: u64) -> Result<T, OutOfRange> {
        let (r, off) = self.region(addr)?;
        r.get_ref::<T>(off)
            .map(|v| v.load())
            .map_err(|_| OutOfRange)
    }

    /// An atomic load of a ring index or flags (aligned, as the virtio
    /// spec places them).
    #[inline]
    pub fn load<T: AtomicAccess>(&self, addr: u64, order: Ordering) -> Result<T, OutOfRange> {
        let (r, off) = self.region(addr)?;
        r.load(off, order).map_err(|_| OutOfRange)
    }

    /// An atomic store of a ring index or flags, marking the dirty log.
    #[inline]
    pub fn store<T: AtomicAccess>(
        &self,
        addr: u64,
        value: T,
        order: Ordering,
    ) -> Result<(), OutOfRange> {
        let (r, off) = self.region(addr)?;
        r.store(value, off, order).map_err(|_| OutOfRange)
    }

    /// Copies `len` bytes at `src` in this guest's memory to `dst_addr`
    /// in `dst`'s, in as many pieces as the two region layouts cut them
    /// into (the destination's pages marked dirty, as every write).
    pub fn copy_to_guest(
        &self,
        src: u64,
        dst: &GuestView<'_>,
        dst_addr: u64,
        len: usize,
    ) -> Result<(), OutOfRange> {
        let mut at = 0usize;
        while at < len {
            let a = src.checked_add(at as u64).ok_or(OutOfRange)?;
            let b = dst_addr.checked_add(at as u64).ok_or(OutOfRange)?;
            let (from, off) = self.region(a)?;
            let (to, to_off) = dst.region(b)?;
            let n = (len - at).min(from.len() - off).min(to.len() - to_off);
            let from = from.subslice(off, n).map_err(|_| OutOfRange)?;
            from.copy_to_volatile_slice(to.subslice(to_off, n).map_err(|_| OutOfRange)?);
            at += n;
        }
        Ok(())
    }

    /// Starts fetching the cache lines of the first `len` bytes at `addr`
    /// (at most two: a small frame and its header) into this core's
    /// caches; nothing is read, and an address outside the memory is let
    /// be.
    #[inline]
    pub fn prefetch(&self, addr: u64, len: usize) {
        let Ok(s) = self.slice(addr, len.clamp(1, 128)) else {
            return;
        };
        let p = s.ptr_guard().as_ptr();
        hvnet_sys::prefetch(p);
        if s.len() > 64 - (p as usize & 63) {
            hvnet_sys::prefetch(p.wrapping_add(64));
        }
    }

    /// True if `len` bytes at `addr` are all inside the guest's memory.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        self.slice(addr, len).is_ok() || self.pieces(addr, len, |_, _| {}).is_ok()
    }

    /// Calls `each` with the consecutive pieces (within one region each)
    /// covering `len` bytes at `addr`, and the offset of each piece; out
    /// of range, before any piece, when one is missing.
    fn pieces(
        &self,
        addr: u64,
        len: usize,
        mut each: impl FnMut(Slice<'m>, usize),
    ) -> Result<(), OutOfRange> {
        let mut found: SmallVec<[Slice<'m>; 4]> = SmallVec::new();
        let mut at = 0usize;
        while at < len {
            let a = addr.checked_add(at as u64).ok_or(OutOfRange)?;
            let (r, off) = self.region(a)?;
            let n = (len - at).min(r.len() - off);
            found.push(r.subslice(off, n).map_err(|_| OutOfRange)?);
            at += n;
        }
        let mut at = 0;
        for s in found {
            let n = s.len();
            each(s, at);
            at += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::GuestAddress;

    fn two_regions() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x1000), (GuestAddress(0x1000), 0x1000)])
            .unwrap()
    }

    #[test]
    fn bytes_across_two_regions_are_read_and_written_in_pieces() {
        let mem = two_regions();
        let view = GuestView::new(&mem);
        let bytes: Vec<u8> = (0..64).collect();
        view.write(0x1000 - 20, &bytes).unwrap();
        let mut back = [0u8; 64];
        view.read(0x1000 - 20, &mut back).unwrap();
        assert_eq!(&back[..], &bytes[..]);
        let mut direct = [0u8; 44];
        mem.read_slice(&mut direct, GuestAddress(0x1000)).unwrap();
        assert_eq!(&direct[..], &bytes[20..]);
    }

    #[test]
    fn addresses_outside_the_memory_are_refused_whole() {
        let mem = two_regions();
        let view = GuestView::new(&mem);
        assert_eq!(view.write(0x2000 - 8, &[1u8; 16]), Err(OutOfRange));
        let mut back = [0u8; 8];
        mem.read_slice(&mut back, GuestAddress(0x2000 - 8)).unwrap();
        assert_eq!(back, [0u8; 8], "nothing of a refused write lands");
        assert_eq!(view.read_obj::<u64>(0x2000), Err(OutOfRange));
        assert_eq!(view.read_obj::<u64>(u64::MAX - 3), Err(OutOfRange));
        assert_eq!(
            view.load::<u16>(0x2000 - 1, Ordering::Acquire),
            Err(OutOfRange)
        );
    }

    #[test]
    fn a_value_is_read_whole_at_any_alignment_and_not_across_regions() {
        let mem = two_regions();
        let view = GuestView::new(&mem);
        let bytes: Vec<u8> = (1..=16).collect();
        view.write(0x103, &bytes).unwrap();
        assert_eq!(
            view.read_obj::<[u8; 16]>(0x103),
            Ok(<[u8; 16]>::try_from(&bytes[..]).unwrap())
        );
        assert_eq!(view.read_obj::<u16>(0x104), Ok(u16::from_le_bytes([2, 3])));
        // A value that would straddle the two regions is refused, as
        // `vm-memory`'s own read of a region refuses it.
        assert_eq!(view.read_obj::<u64>(0x1000 - 4), Err(OutOfRange));
    }

    #[test]
    fn a_prefetch_anywhere_reads_and_changes_nothing() {
        let mem = two_regions();
        let view = GuestView::new(&mem);
        view.write(0x0fc0, &[7u8; 128]).unwrap();
        for (addr, len) in [
            (0x0fc0, 128),
            (0x1ff0, 64),
            (0x2000, 64),
            (u64::MAX - 3, 64),
            (0, 0),
        ] {
            view.prefetch(addr, len);
        }
        let mut back = [0u8; 128];
        view.read(0x0fc0, &mut back).unwrap();
        assert_eq!(back, [7u8; 128]);
    }

    #[test]
    fn the_hint_follows_the_last_region_hit() {
        let mem = two_regions();
        let view = GuestView::new(&mem);
        view.store::<u16>(0x1800, 7, Ordering::Release).unwrap();
        assert_eq!(view.hint.get(), 1);
        assert_eq!(view.load::<u16>(0x10, Ordering::Acquire), Ok(0));
        assert_eq!(view.hint.get(), 0);
        assert_eq!(view.load::<u16>(0x1800, Ordering::Acquire), Ok(7));
    }
}
