//! What crosses the port interface on the way out: frames with their
//! metadata (as Open vSwitch's `dp_packet_batch`), not bytes already
//! serialised. Each transmitter turns the metadata into what its device
//! takes: a virtio-net header in front of the frame for a TAP, a packet
//! socket or a guest's virtqueue ([`Slices`]); outer headers for a tunnel
//! endpoint, which also needs the inner frame's parsed stack and flow hash.

use crate::packet::Packet;
use crate::vnet::{vnet_bytes, VNET_HDR_LEN};
use hvnet_offload::gro::Coalesced;
use hvnet_offload::OffloadInfo;
use std::io::IoSlice;
use std::time::Duration;

/// Why a frame was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The other side had no room (a guest's receive virtqueue without
    /// free buffers).
    Full,
    /// The write failed.
    Failed,
    /// A tunnel endpoint knows no remote's underlay MAC for it yet.
    Unresolved,
    /// A guest's receive descriptor chain that cannot be written (its
    /// chain is given back used and empty).
    BadDescriptor(crate::backends::vhost_user::virtq::ring::DescriptorFault),
    /// A team of uplinks had no member to send it on.
    NoMember,
}

/// One frame handed to a transmitter.
#[derive(Clone, Copy)]
pub enum OutFrame<'a> {
    /// A packet, whole, with the metadata parsed where it entered (a GSO
    /// packet the other side takes whole, too).
    Packet(&'a Packet),
    /// A coalesced frame (software LRO): its rewritten headers and its
    /// segments' payloads, one GSO frame.
    Coalesced(&'a Coalesced<Packet>),
    /// A frame in pieces with its offload state: a segment made on the way
    /// out (its headers, then its payload in its packet's buffer), or a
    /// frame a device made itself (a tunnel endpoint's outer headers and
    /// inner frame, its ARP).
    Pieces {
        /// The bytes, in order.
        pieces: &'a [IoSlice<'a>],
        /// Checksum state (no segmentation owed).
        offload: OffloadInfo,
    },
}

impl<'a> OutFrame<'a> {
    /// The virtio-net header that describes the frame: its checksum state,
    /// and for a GSO frame its segment size and header length.
    pub fn vnet_header(&self) -> [u8; VNET_HDR_LEN] {
        let (info, hdr_len) = match self {
            OutFrame::Packet(p) => (
                p.meta.offload,
                p.meta.offload.gso.map_or(0, |_| p.header_len()),
            ),
            OutFrame::Coalesced(co) => (co.info, co.header().len()),
            OutFrame::Pieces { offload, .. } => (*offload, 0),
        };
        vnet_bytes(&info.to_vnet(hdr_len as u16))
    }

    /// Appends the frame's bytes as I/O slices.
    pub fn push_pieces(&self, out: &mut impl Extend<IoSlice<'a>>) {
        match *self {
            // The bytes in place: a frame whose payload is pending in a
            // sending guest's memory reaches only a guest's receive
            // virtqueue, which copies that from there.
            OutFrame::Packet(p) => out.extend([IoSlice::new(p.buf.held())]),
            OutFrame::Coalesced(co) => {
                out.extend([IoSlice::new(co.header())]);
                out.extend(co.segments.iter().map(|s| IoSlice::new(s.bytes())));
            }
            OutFrame::Pieces { pieces, .. } => out.extend(pieces.iter().copied()),
        }
    }

    /// Its length (Ethernet header on).
    pub fn len(&self) -> usize {
        match self {
            OutFrame::Packet(p) => p.len(),
            OutFrame::Coalesced(co) => co.len(),
            OutFrame::Pieces { pieces, .. } => pieces.iter().map(|s| s.len()).sum(),
        }
    }

    /// Never true for a frame the switch sends.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How a batch is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchOptions {
    /// Wait on a full queue of the other side for up to this long before
    /// giving a frame up (`rx_overflow = "backpressure"`); a zero hold
    /// never waits, and reports the frame that found it full, and every
    /// frame after it, [`crate::SendError::Full`] untried.
    pub hold: Option<Duration>,
    /// The device takes partial checksums (the port's `csum` setting): a
    /// transmitter that segments or encapsulates leaves them partial, else
    /// completes them.
    pub csum: bool,
}

/// What a transmitter wrote for one frame it was given (nothing, by
/// default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Frames that left: 1, or a tunnel endpoint's copies (one per
    /// remote) and their segments.
    pub frames: u32,
    /// Their bytes as they left (outer headers included, virtio-net
    /// headers not).
    pub bytes: u64,
    /// The transmitter segmented the frame itself.
    pub segmented: bool,
}

impl Written {
    /// One frame of `bytes`, as given.
    pub fn one(bytes: usize) -> Written {
        Written {
            frames: 1,
            bytes: bytes as u64,
            segmented: false,
        }
    }
}

/// Frames serialised as I/O slices, each its virtio-net header first: what
/// a TAP, a packet socket or a guest's virtqueue is written with. Kept
/// between batches, so that serialising allocates nothing in steady state.
#[derive(Default)]
pub(crate) struct Slices {
    vnets: Vec<[u8; VNET_HDR_LEN]>,
    iov: Vec<IoSlice<'static>>,
    spans: Vec<(usize, usize)>,
    frames: Vec<&'static [IoSlice<'static>]>,
}

impl Slices {
    /// Serialises `frames` and hands them to `write`, in order, with a
    /// callback for each one's result that tells `done` what left (the
    /// frame as given).
    pub(crate) fn write(
        &mut self,
        frames: &[OutFrame<'_>],
        done: &mut dyn FnMut(Result<Written, SendError>),
        write: impl FnOnce(&[&[IoSlice<'_>]], &mut dyn FnMut(Result<(), SendError>)),
    ) {
        self.vnets.clear();
        self.vnets.extend(frames.iter().map(OutFrame::vnet_header));
        let mut iov: Vec<IoSlice<'_>> = recycle(std::mem::take(&mut self.iov));
        self.spans.clear();
        for (f, vnet) in frames.iter().zip(&self.vnets) {
            let start = iov.len();
            iov.push(IoSlice::new(vnet));
            f.push_pieces(&mut iov);
            self.spans.push((start, iov.len()));
        }
        let mut out: Vec<&[IoSlice<'_>]> = recycle(std::mem::take(&mut self.frames));
        out.extend(self.spans.iter().map(|&(a, b)| &iov[a..b]));
        let mut lens = frames.iter().map(OutFrame::len);
        write(&out, &mut |r| {
            let len = lens.next().unwrap_or(0);
            done(r.map(|()| Written::one(len)));
        });
        self.frames = recycle(out);
        self.iov = recycle(iov);
    }
}

/// Reuses a vector's allocation for references of another lifetime (a
/// batch of frames kept between calls, borrowing each call's buffers). The
/// in-place `collect` of an emptied vector keeps the capacity.
pub fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().map(|_| unreachable!()).collect()
}
