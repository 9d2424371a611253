//! The virtio-net header at the port boundary, for every backend: the
//! receive errors a port reports (each its own drop counter), the check
//! of a received header against its frame (a guest's or the kernel's
//! offsets validated once, then trusted by the engines), and writing a
//! frame behind a header. TAP queues, uplink sockets and a vhost-user
//! guest's virtqueues all carry the same 12-byte header.

use crate::packet::Packet;
use crate::pool::{Buf, HEADROOM};
use hvnet_offload::gso::{self, GsoError};
use hvnet_offload::{CsumState, OffloadInfo};
use hvnet_sys::FrameQueue;
use hvnet_wire::virtio_net::{self, Repr as VirtioNetHdr};
use hvnet_wire::Layers;
use std::io::{self, IoSlice, Write};

/// Size of the virtio-net header on every hvnet TAP.
pub const VNET_HDR_LEN: usize = virtio_net::LEN_V1;
const _: () = assert!(VNET_HDR_LEN == HEADROOM);

/// Most segments a guest's GSO frame may ask for. A 64 KiB frame needs a
/// `gso_size` of at least 256; Linux's TCP never goes below an MSS of 536
/// on a path it has not been told is narrower. Without a bound, a
/// `gso_size` of 16 would turn one frame into 4096 segments, and as many
/// system calls for a receiver that takes no GSO frames.
pub const MAX_GSO_SEGMENTS: usize = 256;

/// Why a received frame was refused, or nothing was received.
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    /// Nothing to read now.
    #[error("no frame ready")]
    WouldBlock,
    /// The port's buffer cap is reached: nothing was read.
    #[error("no buffer free under the port's cap")]
    NoBuffer,
    /// The device is gone (the guest's namespace was deleted).
    #[error("the device is gone")]
    Gone,
    /// The link went down (`ENETDOWN`: an uplink's device was set down or
    /// deleted).
    #[error("the link is down")]
    LinkDown,
    /// Shorter than a virtio-net header, or an undefined header field.
    #[error("bad virtio-net header")]
    BadVnetHeader,
    /// A frame header claims to be there and is malformed.
    #[error("malformed frame: {0}")]
    BadFrame(hvnet_wire::Error),
    /// A virtio-net header that does not fit its frame.
    #[error("virtio-net header does not fit the frame: {0}")]
    BadOffload(GsoError),
    /// A GSO frame that would make more than [`MAX_GSO_SEGMENTS`] segments.
    #[error("GSO frame asks for more than {MAX_GSO_SEGMENTS} segments")]
    TooManySegments,
    /// A guest's transmit descriptor chain that cannot be read: outside
    /// its memory, device-writable, longer than any frame, or changed
    /// while read (vhost-user ports).
    #[error("bad transmit descriptor chain: {0}")]
    BadDescriptor(crate::backends::vhost_user::virtq::ring::DescriptorFault),
    /// At a tunnel endpoint: neither VXLAN to it nor ARP for it.
    #[error("neither VXLAN to the endpoint nor ARP for it")]
    NotTunnel,
    /// At a tunnel endpoint: VXLAN to its address and port that is
    /// malformed (no I flag, a truncated header, an inner frame whose
    /// headers lie).
    #[error("malformed VXLAN")]
    BadVxlan,
    /// At a tunnel endpoint: VXLAN for another VNI.
    #[error("VXLAN for another VNI")]
    WrongVni,
    /// Not refused but taken by the device itself: ARP for a tunnel
    /// endpoint's own address (answered by it). Counted, never forwarded.
    #[error("taken by the device (ARP for the tunnel endpoint)")]
    Consumed,
    /// Refused by a team of uplinks (its members' frames it does not
    /// take, its LACPDUs it does not read).
    #[error("refused by the team: {0}")]
    Team(TeamRefusal),
    /// Any other read error.
    #[error("read from the TAP failed")]
    Read(#[source] io::Error),
}

/// Why a team of uplinks refused a frame from the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TeamRefusal {
    /// On a member that is not the active one (`active-backup`;
    /// broadcasts and multicasts for the other switch-independent
    /// policies).
    #[error("not from the active member")]
    NotActiveMember,
    /// Sent by one of the team's own VMs: a frame the team sent on one
    /// member and the physical switch sent back on another.
    #[error("one of the team's own frames, looped back")]
    Looped,
    /// On a member LACP does not collect from.
    #[error("on a member LACP does not collect from")]
    NotCollecting,
    /// A LACPDU that does not parse.
    #[error("a malformed LACPDU")]
    LacpMalformed,
    /// A LACPDU from a second partner on a member whose partner is
    /// current.
    #[error("a LACPDU from a second partner")]
    LacpSecondPartner,
    /// A LACPDU on a team that does not run LACP.
    #[error("a LACPDU on a team without LACP")]
    LacpNotRunning,
    /// A LACPDU past three a second on one member (802.1AX's limit).
    #[error("LACPDUs past three a second")]
    LacpTooMany,
}

impl RecvError {
    /// True when the error is about the queue, not one frame: reading
    /// stops (nothing ready, no buffer, the link, a failed read). A
    /// refused frame is counted and reading goes on.
    pub fn ends_batch(&self) -> bool {
        matches!(
            self,
            RecvError::WouldBlock
                | RecvError::NoBuffer
                | RecvError::Gone
                | RecvError::LinkDown
                | RecvError::Read(_)
        )
    }
}

/// Reads up to `max` frames with `read` into `out`: frames, and frames
/// refused (counted by the caller, which goes on); stops at the first
/// error about the queue rather than one frame ([`RecvError::ends_batch`])
/// and returns it. Every backend's batch is this loop over its own read.
pub(crate) fn read_up_to(
    max: usize,
    out: &mut Vec<Result<Packet, RecvError>>,
    mut read: impl FnMut() -> Result<Packet, RecvError>,
) -> Result<(), RecvError> {
    for _ in 0..max {
        match read() {
            Err(e) if e.ends_batch() => return Err(e),
            r => out.push(r),
        }
    }
    Ok(())
}

pub(crate) fn read_result(n: io::Result<usize>) -> Result<usize, RecvError> {
    match n {
        Ok(0) => Err(RecvError::Gone),
        Ok(n) => Ok(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(RecvError::WouldBlock),
        // EIO, EBADFD, ENODEV: the device went away with its namespace.
        Err(e) if matches!(e.raw_os_error(), Some(5) | Some(77) | Some(19)) => Err(RecvError::Gone),
        Err(e) if e.raw_os_error() == Some(ENETDOWN) => Err(RecvError::LinkDown),
        Err(e) => Err(RecvError::Read(e)),
    }
}

/// `ENETDOWN` on Linux.
const ENETDOWN: i32 = 100;

/// Checks what a read of `n` bytes (virtio-net header and frame) put into
/// `buf`, parses the frame once and returns it as a packet. A guest's
/// `DATA_VALID` is not believed: virtio defines it only from device to
/// driver.
pub fn check(buf: Buf, n: usize) -> Result<Packet, RecvError> {
    check_with(buf, n, |_, e| e)
}

/// [`check`], the buffer given back with the error (a reader that parsed
/// only a frame's head reads the rest and checks it again).
pub fn check_parts(buf: Buf, n: usize) -> Result<Packet, (Buf, RecvError)> {
    check_with(buf, n, |b, e| (b, e))
}

/// [`check`] into the end of `out`: the packet made where it stays, its
/// header stack parsed in place. (A packet built on the stack and moved
/// into the burst at once waits for its just-written bytes to land before
/// it can be read whole; the read path did that several times a frame.)
#[inline]
pub fn check_into(out: &mut Vec<Result<Packet, RecvError>>, buf: Buf, n: usize) {
    out.push(Ok(Packet::parsed(buf, Layers::EMPTY, OffloadInfo::NONE)));
    if let Some(slot) = out.last_mut() {
        if let Ok(p) = slot {
            if let Err(e) = check_in_place(p, n) {
                *slot = Err(e);
            }
        }
    }
}

/// [`check`] and [`check_parts`]: a packet made of `buf`, checked by
/// [`check_in_place`].
#[inline(always)]
fn check_with<E>(buf: Buf, n: usize, fail: impl Fn(Buf, RecvError) -> E) -> Result<Packet, E> {
    let mut p = Packet::parsed(buf, Layers::EMPTY, OffloadInfo::NONE);
    match check_in_place(&mut p, n) {
        Ok(()) => Ok(p),
        Err(e) => Err(fail(p.buf, e)),
    }
}

/// The one body of every check: a packet whose `n` bytes (virtio-net
/// header and frame) were read into its buffer gets its metadata, or the
/// reason it is refused.
#[inline(always)]
fn check_in_place(p: &mut Packet, n: usize) -> Result<(), RecvError> {
    if n < VNET_HDR_LEN {
        return Err(RecvError::BadVnetHeader);
    }
    let head = &p.buf.storage()[..VNET_HDR_LEN];
    // Flags and GSO type both 0: the header asks for nothing, and the
    // packet's offload metadata stays as made (most frames; the header's
    // other fields mean nothing then). Read off the bytes: the parsed
    // header's fields, read back at once, measured 4–5 % more a frame.
    let asks_nothing = head[0] == 0 && head[1] == 0;
    let Ok(vnet) = VirtioNetHdr::parse(head, VNET_HDR_LEN) else {
        return Err(RecvError::BadVnetHeader);
    };
    p.meta
        .layers
        .parse_into(p.buf.frame(), hvnet_wire::vxlan::PORT)
        .map_err(RecvError::BadFrame)?;
    if asks_nothing {
        debug_assert_eq!(p.meta.offload, OffloadInfo::NONE);
        return Ok(());
    }
    let mut info =
        gso::validate_vnet(p.frame(), &vnet, &p.meta.layers).map_err(RecvError::BadOffload)?;
    if info.csum == CsumState::Good {
        info.csum = CsumState::Unknown;
    }
    if let Some(g) = info.gso {
        let payload = p.len().saturating_sub(p.header_len());
        if payload.div_ceil(g.size as usize) > MAX_GSO_SEGMENTS {
            return Err(RecvError::TooManySegments);
        }
    }
    p.meta.offload = info;
    Ok(())
}

/// The virtio-net header as bytes.
#[inline]
pub fn vnet_bytes(vnet: &VirtioNetHdr) -> [u8; VNET_HDR_LEN] {
    let mut hdr = [0u8; VNET_HDR_LEN];
    vnet.emit(&mut hdr, VNET_HDR_LEN);
    hdr
}

/// Writes a frame (a header and pieces) to a TAP queue in one `writev`.
pub fn send(q: &FrameQueue, vnet: &VirtioNetHdr, pieces: &[&[u8]]) -> io::Result<()> {
    let hdr = vnet_bytes(vnet);
    // On the stack for up to 64 pieces (a 64 KiB run of 1448-byte segments
    // has 45): no allocation per frame.
    let mut iov: smallvec::SmallVec<[IoSlice<'_>; 64]> = smallvec::SmallVec::new();
    iov.push(IoSlice::new(&hdr));
    iov.extend(pieces.iter().map(|p| IoSlice::new(p)));
    write_frame(q, &iov)
}

/// Writes one frame given as I/O slices (header first) in one `writev`;
/// a short write is an error.
pub fn write_frame(q: &FrameQueue, iov: &[IoSlice<'_>]) -> io::Result<()> {
    let total: usize = iov.iter().map(|s| s.len()).sum();
    let n = q.file().write_vectored(iov)?;
    if n != total {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short write to TAP",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Home, Pool, PoolCaps, SizeClass};
    use hvnet_offload::testutil::{tcp4_frame, vxlan_wrap};
    use proptest::prelude::*;

    /// A buffer holding `bytes` (a virtio-net header and a frame) as a
    /// read leaves it.
    fn read_into(pool: &mut Pool, bytes: &[u8]) -> (Buf, usize) {
        let mut buf = pool.take(SizeClass::Large).expect("a buffer");
        let n = bytes.len().min(buf.storage().len());
        buf.storage_mut()[..n].copy_from_slice(&bytes[..n]);
        buf.set_len(n.saturating_sub(VNET_HDR_LEN));
        (buf, n)
    }

    use crate::packet::Meta;

    /// What a check gave, comparable: the metadata, or the error's text.
    fn outcome(r: &Result<Packet, RecvError>) -> Result<Meta, String> {
        match r {
            Ok(p) => Ok(p.meta),
            Err(e) => Err(e.to_string()),
        }
    }

    proptest! {
        /// The check made in place gives what the check that returns the
        /// packet gives, for headers that ask for nothing, for a checksum
        /// or for segmentation, on frames plain, in VXLAN, or with bytes
        /// rewritten at random (malformed ones among them).
        #[test]
        fn prop_check_into_is_check(
            flags in prop::sample::select(vec![0u8, 1, 2, 3, 0x80]),
            gso in prop::sample::select(vec![0u8, 1, 3, 4, 5, 2, 0x81]),
            fields in prop::array::uniform10(any::<u8>()),
            payload in 0usize..200,
            vxlan in any::<bool>(),
            edits in prop::collection::vec((0usize..300, any::<u8>()), 0..4),
        ) {
            let mut frame = tcp4_frame(7, 1, payload, 0x10);
            if vxlan {
                frame = vxlan_wrap(&frame, 42, 49152, 2, false);
            }
            let mut bytes = vec![flags, gso];
            bytes.extend_from_slice(&fields[..VNET_HDR_LEN - 2]);
            bytes.extend_from_slice(&frame);
            for (at, v) in edits {
                if let Some(b) = bytes.get_mut(at) {
                    *b = v;
                }
            }
            let mut pool = Pool::new(Home::new(PoolCaps { small: 4, large: 4 }));
            let (buf, n) = read_into(&mut pool, &bytes);
            let returned = check(buf, n);
            let (buf, n) = read_into(&mut pool, &bytes);
            let mut out = Vec::new();
            check_into(&mut out, buf, n);
            prop_assert_eq!(out.len(), 1);
            prop_assert_eq!(outcome(&out[0]), outcome(&returned));
        }
    }

    #[test]
    fn a_refused_frame_gives_its_buffer_back() {
        let home = Home::new(PoolCaps { small: 1, large: 1 });
        let mut pool = Pool::new(home);
        // An IPv4 header whose IHL is below 5.
        let mut frame = tcp4_frame(1, 1, 10, 0x10);
        frame[14] = 0x41;
        let mut bytes = vec![0u8; VNET_HDR_LEN];
        bytes.extend_from_slice(&frame);
        let (buf, n) = read_into(&mut pool, &bytes);
        let mut out = Vec::new();
        check_into(&mut out, buf, n);
        assert!(
            matches!(out[0], Err(RecvError::BadFrame(_))),
            "{:?}",
            out[0].as_ref().err()
        );
        out.clear();
        // The port's one large buffer is free again.
        assert!(pool.take(SizeClass::Large).is_some());
    }
}
