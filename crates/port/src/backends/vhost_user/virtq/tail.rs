//! One copy guest to guest: a frame's payload left in the sending
//! guest's memory ([`Pending`]) until the end of the batch that read it.
//! The frame's head is copied into a buffer as always (the switch parses
//! a snapshot the guest cannot change under the parse); its payload is
//! copied straight into the receiving guest's buffers, or into the buffer
//! by whatever else reads it (flooding, segmenting, a checksum completed,
//! another kind of port). The sender's chains go back used only after
//! the batch ([`super::complete_batch`]), when nothing reads them any more.

use super::memory::{GuestView, OutOfRange};
use super::GuestMemoryMmap;
use crate::pool::{Pending, PendingSource};
use smallvec::SmallVec;
use std::sync::Arc;

/// Frame bytes of a transmit chain a frame is parsed from when its
/// payload is left in place: enough for every header hvnet parses
/// (Ethernet, two VLAN tags, IPv6 with extension headers, TCP with
/// options).
pub const HEAD: usize = 256;

/// Frames longer than this leave their payload in place: those that need
/// a large buffer (a GSO frame, a jumbo frame). For a frame that fits a
/// small buffer the second copy is of bytes still in the cache, and
/// costs less than leaving them does (measured with testpmd at 1500 B:
/// 519 ns a frame leaving them against 486 copying twice).
pub const LEAVE_MIN: usize = crate::pool::SMALL_FRAME;

impl PendingSource for GuestMemoryMmap {
    fn read(&self, addr: u64, into: &mut [u8]) -> bool {
        GuestView::new(self).read(addr, into).is_ok()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The pending tail of a chain: `ranges` of `mem` (checked inside it), in
/// order.
pub(super) fn guest_tail(
    mem: &Arc<GuestMemoryMmap>,
    ranges: SmallVec<[(u64, u32); 2]>,
) -> Box<Pending> {
    let len = ranges.iter().map(|&(_, n)| n as usize).sum();
    Box::new(Pending {
        source: Arc::clone(mem) as Arc<dyn PendingSource>,
        ranges,
        len,
    })
}

/// The sending guest's memory a pending tail is in, if it is a guest's.
pub(super) fn guest_memory(p: &Pending) -> Option<&GuestMemoryMmap> {
    p.source.as_any().downcast_ref::<GuestMemoryMmap>()
}

/// Copies the tail's bytes from `skip` on, `n` of them, to `dst_addr` in
/// `dst`'s guest, straight from the sending guest's memory.
pub(super) fn copy_tail(
    p: &Pending,
    src: &GuestView<'_>,
    mut skip: usize,
    dst: &GuestView<'_>,
    mut dst_addr: u64,
    mut n: usize,
) -> Result<(), OutOfRange> {
    for &(addr, len) in &p.ranges {
        let len = len as usize;
        if skip >= len {
            skip -= len;
            continue;
        }
        let k = (len - skip).min(n);
        src.copy_to_guest(addr + skip as u64, dst, dst_addr, k)?;
        dst_addr += k as u64;
        n -= k;
        skip = 0;
        if n == 0 {
            break;
        }
    }
    Ok(())
}
