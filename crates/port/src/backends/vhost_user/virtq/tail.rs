//! One copy guest to guest: a frame's payload left in the sending
//! guest's memory ([`GuestTail`]) until the end of the batch that read it.
//! The frame's head is copied into a buffer as always (the switch parses
//! a snapshot the guest cannot change under the parse); its payload is
//! copied straight into the receiving guest's buffers, or into the buffer
//! by whatever else reads it (flooding, segmenting, a checksum completed,
//! another kind of port). The sender's chains go back used only after
//! the batch ([`super::complete_batch`]), when nothing reads them any more.

use super::memory::GuestView;
use super::GuestMemoryMmap;
use crate::pool::Pending;
use smallvec::SmallVec;
use std::sync::Arc;

/// Frame bytes of a transmit chain beyond the head a frame is parsed
/// from: enough for every header hvnet parses (Ethernet, two VLAN tags,
/// IPv6 with extension headers, TCP with options), so that a frame with
/// more is one whose payload there is to leave in place.
pub const HEAD: usize = 256;

/// The guest memory ranges holding a frame's last bytes, checked inside
/// the memory when read, and the memory itself (kept mapped while the
/// frame lives, whatever memory table the front end sets meanwhile).
pub struct GuestTail {
    mem: Arc<GuestMemoryMmap>,
    ranges: SmallVec<[(u64, u32); 2]>,
    len: usize,
}

impl GuestTail {
    /// The tail of a chain: `ranges` of `mem`, in order.
    pub(super) fn new(mem: Arc<GuestMemoryMmap>, ranges: SmallVec<[(u64, u32); 2]>) -> GuestTail {
        let len = ranges.iter().map(|&(_, n)| n as usize).sum();
        GuestTail { mem, ranges, len }
    }

    /// Copies the tail's bytes from `skip` on, `n` of them, to `dst_addr`
    /// in `dst`'s guest.
    pub(super) fn copy_to(
        &self,
        mut skip: usize,
        dst: &GuestView<'_>,
        mut dst_addr: u64,
        mut n: usize,
    ) -> Result<(), super::memory::OutOfRange> {
        let src = GuestView::new(&self.mem);
        for &(addr, len) in &self.ranges {
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
}

impl Pending for GuestTail {
    fn fill(&self, into: &mut [u8]) {
        let view = GuestView::new(&self.mem);
        let mut at = 0;
        for &(addr, len) in &self.ranges {
            let len = len as usize;
            // Checked inside the memory when the chain was read, and the
            // memory is the same: a failure cannot happen, and would
            // leave zeros, never another frame's bytes.
            if view.read(addr, &mut into[at..at + len]).is_err() {
                into[at..at + len].fill(0);
            }
            at += len;
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
