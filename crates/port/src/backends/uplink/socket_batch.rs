//! Reading an uplink's packet socket a batch per system call.
//!
//! One `recvmmsg(2)` fills up to [`READ_BATCH`] frames, each into a small
//! buffer with a large one behind it (a frame that overflows the small one
//! keeps the large one, as [`crate::TapReader`] does), so a queue thread
//! pays one system call for a burst of small frames instead of one each.
//! A socket's frames come behind a virtio-net header (a plain uplink's,
//! checked as a guest's are: [`crate::vnet::check`]) or whole, with the
//! kernel's word on them in `PACKET_AUXDATA` (a tunnel endpoint's:
//! [`super::whole_frame`]).

use super::whole_frame::offload_of;
use crate::packet::Packet;
use crate::pool::{Buf, Pool, SizeClass, HEADROOM, SMALL_FRAME};
use crate::vnet::{check, read_result, RecvError};
use hvnet_offload::OffloadInfo;
use hvnet_sys::{AuxStatus, FrameQueue};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::io::IoSliceMut;

/// Most frames read per `recvmmsg(2)`.
pub const READ_BATCH: usize = 32;

/// How a socket hands over its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Behind a virtio-net header, which says what offloads are owed.
    Vnet,
    /// Whole, without a header: a tunnel endpoint on this UDP port, whose
    /// offloads are read off the frame ([`offload_of`]).
    Whole {
        /// The endpoint's UDP port.
        tunnel: u16,
    },
}

/// Puts back the outer tag Linux took off a received frame (the wire's
/// 802.1Q tag: a trunk uplink's VLAN), into the buffer's headroom, the
/// parsed layers kept true. A frame whose tag cannot be put back (an
/// 802.1ad outer tag, or a tag behind which another remains) is refused
/// as a bad frame: switched untagged, it would enter the wrong VLAN.
fn retag(mut p: Packet, (tpid, tci): (u16, u16), pool: &mut Pool) -> Result<Packet, RecvError> {
    let vid = tci & 0x0fff;
    if tpid == 0x8100 && !p.tagged() && (vid == 0 || p.set_vlan_tag(Some(vid))) {
        return Ok(p);
    }
    pool.keep(p.buf);
    Err(RecvError::BadFrame(hvnet_wire::Error::TooDeep))
}

/// A frame read and not yet taken: its buffer, whether the kernel cut it,
/// and the kernel's status word.
type Ready = (Buf, bool, AuxStatus);

/// Reads one socket up to `batch` frames per system call.
pub struct SocketBatchReader {
    framing: Framing,
    batch: usize,
    small: Vec<Buf>,
    large: Vec<Buf>,
    ready: VecDeque<Ready>,
    lens: [usize; READ_BATCH],
    truncated: [bool; READ_BATCH],
    status: [AuxStatus; READ_BATCH],
}

impl SocketBatchReader {
    /// A reader of `framing`'s frames, up to `batch` a call, holding no
    /// buffers yet.
    pub fn new(framing: Framing, batch: usize) -> SocketBatchReader {
        SocketBatchReader {
            framing,
            batch: batch.clamp(1, READ_BATCH),
            small: Vec::with_capacity(READ_BATCH),
            large: Vec::with_capacity(READ_BATCH),
            ready: VecDeque::with_capacity(READ_BATCH),
            lens: [0; READ_BATCH],
            truncated: [false; READ_BATCH],
            status: [AuxStatus::default(); READ_BATCH],
        }
    }

    /// The next frame, parsed once and checked; a whole frame's offloads
    /// are read off it for an uplink of MTU `mtu`.
    pub fn read(&mut self, q: &FrameQueue, pool: &mut Pool, mtu: u16) -> Result<Packet, RecvError> {
        if self.ready.is_empty() {
            self.fill(q, pool)?;
        }
        let (buf, truncated, status) = self.ready.pop_front().ok_or(RecvError::WouldBlock)?;
        if truncated {
            pool.keep(buf);
            return Err(RecvError::BadFrame(hvnet_wire::Error::Truncated));
        }
        let p = match self.framing {
            Framing::Vnet => {
                let n = buf.len() + HEADROOM;
                check(buf, n)?
            }
            Framing::Whole { tunnel } => {
                let mut p = Packet::parse_on(buf, OffloadInfo::NONE, tunnel)
                    .map_err(|(_, e)| RecvError::BadFrame(e))?;
                p.meta.offload = offload_of(p.frame(), &p.meta.layers, status, tunnel, mtu)?;
                p
            }
        };
        match status.vlan() {
            Some(tag) => retag(p, tag, pool),
            None => Ok(p),
        }
    }

    fn fill(&mut self, q: &FrameQueue, pool: &mut Pool) -> Result<(), RecvError> {
        while self.small.len() < self.batch {
            match pool.take(SizeClass::Small) {
                Some(b) => self.small.push(b),
                None => break,
            }
        }
        while self.large.len() < self.small.len() {
            match pool.take(SizeClass::Large) {
                Some(b) => self.large.push(b),
                None => break,
            }
        }
        let n = self.small.len().min(self.large.len());
        if n == 0 {
            return Err(RecvError::NoBuffer);
        }
        let small_len = SizeClass::Small.storage();
        // A virtio-net header lands in the headroom, a whole frame after it.
        let start = match self.framing {
            Framing::Vnet => 0,
            Framing::Whole { .. } => HEADROOM,
        };
        let got = {
            let mut iov: SmallVec<[[IoSliceMut<'_>; 2]; READ_BATCH]> = self
                .small
                .iter_mut()
                .zip(self.large.iter_mut())
                .map(|(s, l)| {
                    [
                        IoSliceMut::new(&mut s.storage_mut()[start..]),
                        IoSliceMut::new(&mut l.storage_mut()[small_len..]),
                    ]
                })
                .collect();
            hvnet_sys::recv_frames_aux(
                q,
                &mut iov,
                &mut self.lens,
                &mut self.truncated,
                &mut self.status,
            )
        };
        let got = match got {
            // recvmmsg reports "nothing ready" as 0 frames.
            Ok(0) => return Err(RecvError::WouldBlock),
            r => read_result(r)?,
        };
        // Frames land in the first `got` pairs, in order; a pair's large
        // buffer is kept only by a frame that overflowed its small one.
        let smalls: SmallVec<[Buf; READ_BATCH]> = self.small.drain(..got).collect();
        let mut larges: SmallVec<[Option<Buf>; READ_BATCH]> =
            self.large.drain(..got).map(Some).collect();
        for (i, mut s) in smalls.into_iter().enumerate() {
            // The frame's own length (a header read is not the frame's).
            let len = (start + self.lens[i]).saturating_sub(HEADROOM);
            let buf = if len > SMALL_FRAME {
                let mut l = larges[i].take().expect("one large buffer per pair read");
                l.storage_mut()[..small_len].copy_from_slice(s.storage());
                l.set_len(len);
                self.small.push(s);
                l
            } else {
                s.set_len(len);
                s
            };
            // A read shorter than its virtio-net header is as good as cut.
            let short = start + self.lens[i] < HEADROOM;
            self.ready
                .push_back((buf, self.truncated[i] || short, self.status[i]));
        }
        self.large.extend(larges.into_iter().flatten());
        Ok(())
    }

    /// Gives the buffers it holds back to `pool`'s cache.
    pub fn release(&mut self, pool: &mut Pool) {
        for b in self.small.drain(..).chain(self.large.drain(..)) {
            pool.keep(b);
        }
        for (b, ..) in self.ready.drain(..) {
            pool.keep(b);
        }
    }
}
