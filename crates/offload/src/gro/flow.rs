//! The GRO flow: what identifies a packet's flow and where its headers are
//! (the per-packet scratch state, Linux's `napi_gro_cb`), the payload
//! pieces a run holds, and a held run's state. The parsing, rules, table
//! and output modules all read these; this module reads none of them.

use crate::meta::{CsumState, OffloadInfo};
use hvnet_wire::checksum::Sum;
use hvnet_wire::layers::NetKind;

/// A payload piece of a coalesced frame: a range of a received buffer.
#[derive(Clone, Debug)]
pub struct Segment<B> {
    /// The received buffer (the whole frame it arrived as).
    pub buf: B,
    /// Start of the piece in `buf`.
    pub start: u32,
    /// End of the piece in `buf`.
    pub end: u32,
}

impl<B: AsRef<[u8]>> Segment<B> {
    /// The bytes of this piece.
    pub fn bytes(&self) -> &[u8] {
        &self.buf.as_ref()[self.start as usize..self.end as usize]
    }
}

/// One network header of the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetCb {
    pub kind: NetKind,
    /// Offset of the IP header in the frame.
    pub offset: usize,
    /// IP header length including IPv6 extension headers.
    pub header_len: usize,
}

impl NetCb {
    /// The pseudo-header sum for `len` bytes of `proto` after this IP
    /// header, read from `buf` (a frame or a header being rewritten).
    pub fn pseudo_header(&self, buf: &[u8], proto: u8, len: usize) -> Sum {
        crate::csum::pseudo_header_at(buf, self.kind, self.offset, proto, len)
    }
}

/// The VXLAN outer headers of an encapsulated packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OuterCb {
    pub net: NetCb,
    pub udp_offset: usize,
    /// The outer UDP checksum was non-zero.
    pub udp_csum: bool,
    /// Offset of the inner Ethernet header.
    pub inner_l2: usize,
}

/// Per-packet scratch state, filled in place by the receive callbacks of
/// each layer (one struct written through a reference: returning it by
/// value through every layer cost more than the parsing itself).
#[derive(Clone, Copy, Debug)]
pub struct Cb {
    /// Length of the (innermost) Ethernet header, tags included.
    pub l2_len: usize,
    pub outer: Option<OuterCb>,
    /// The innermost IP header (the one TCP rides on).
    pub net: NetCb,
    pub tcp_offset: usize,
    pub tcp_header_len: usize,
    /// Offset of the TCP payload = length of all headers.
    pub payload_offset: usize,
    /// Bytes of TCP payload (Linux `skb_gro_len`: link padding included).
    pub payload_len: usize,
    pub seq: u32,
    pub flags: u8,
    /// The packet may not be merged (lengths disagree with the frame, or it
    /// is already a GSO frame); a held packet of its flow is flushed.
    pub flush: bool,
    /// Checksum state after validation.
    pub csum: CsumState,
}

impl Cb {
    /// Scratch state before the first layer ran.
    pub fn empty() -> Cb {
        Cb {
            l2_len: 0,
            outer: None,
            net: NetCb {
                kind: NetKind::Ipv4,
                offset: 0,
                header_len: 0,
            },
            tcp_offset: 0,
            tcp_header_len: 0,
            payload_offset: 0,
            payload_len: 0,
            seq: 0,
            flags: 0,
            flush: false,
            csum: CsumState::Unknown,
        }
    }
}

/// A held run.
pub(super) struct Flow<B> {
    pub(super) segments: Vec<Segment<B>>,
    pub(super) cb: Cb,
    pub(super) hash: u32,
    /// Payload length of the first segment: the run's MSS.
    pub(super) mss: usize,
    pub(super) count: u16,
    /// Payload bytes held.
    pub(super) gro_len: usize,
    /// Bytes from the outermost IP header to the end of the run (`p->len`).
    pub(super) ip_len: usize,
    /// FIN/PSH ORed in from merged segments.
    pub(super) flags_or: u8,
    /// Per encapsulation level (bit 0 outer/only, bit 1 inner): the run
    /// uses a fixed IPv4 ID rather than an incrementing one.
    pub(super) fixed_id: u8,
    pub(super) age: u64,
    pub(super) info: OffloadInfo,
}

impl<B: AsRef<[u8]>> Flow<B> {
    pub(super) fn head(&self) -> &[u8] {
        self.segments[0].buf.as_ref()
    }
}
