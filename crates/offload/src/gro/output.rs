//! What a GRO table hands back: a frame passed alone, or a coalesced run —
//! one rewritten header and the payload pieces of its segments, in order.

use super::flow::{NetCb, OuterCb, Segment};
use super::MAX_HEADER;
use crate::meta::{CsumState, OffloadInfo};
use hvnet_wire::checksum::Sum;

/// Where the layers of a coalesced frame's header are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) outer: Option<OuterCb>,
    pub(super) net: NetCb,
    pub(super) tcp_offset: usize,
}

/// A frame built from two or more segments.
#[derive(Debug)]
pub struct Coalesced<B> {
    pub(super) header: [u8; MAX_HEADER],
    pub(super) header_len: usize,
    /// The payload pieces, in sequence order. The first is the first
    /// segment's payload.
    pub segments: Vec<Segment<B>>,
    /// GSO TCPv4/TCPv6 with the run's MSS, and the checksum state.
    pub info: OffloadInfo,
    /// Segments coalesced.
    pub count: u16,
    pub(super) layout: Layout,
}

impl<B: AsRef<[u8]>> Coalesced<B> {
    /// The rewritten headers (Ethernet through TCP).
    pub fn header(&self) -> &[u8] {
        &self.header[..self.header_len]
    }
    /// Offset of the TCP header (the checksum start).
    pub fn tcp_offset(&self) -> usize {
        self.layout.tcp_offset
    }
    /// Total frame length.
    pub fn len(&self) -> usize {
        self.header_len + self.payload_len()
    }
    /// Never true: a coalesced frame has headers.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Bytes of TCP payload.
    pub fn payload_len(&self) -> usize {
        self.segments
            .iter()
            .map(|s| (s.end - s.start) as usize)
            .sum()
    }
    /// Copies the frame into one buffer (for pcap output and tests; the
    /// switch writes the pieces with `writev`).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(self.header());
        for s in &self.segments {
            v.extend_from_slice(s.bytes());
        }
        v
    }
    /// Replaces the partial TCP checksum with the full one (and fills the
    /// outer UDP checksum of a VXLAN frame), summing the pieces in place.
    /// For receivers that cannot take a partial checksum.
    pub fn fill_checksums(&mut self) {
        let t = self.layout.tcp_offset;
        self.header[t + 16..t + 18].copy_from_slice(&[0, 0]);
        let tcp_len = self.header_len - t + self.payload_len();
        let ph = self
            .layout
            .net
            .pseudo_header(&self.header, hvnet_wire::ip_protocol::TCP, tcp_len);
        let payload = self.payload_sum(self.header_len - t);
        let c = ph
            .add_bytes(&self.header[t..self.header_len])
            .combine(payload)
            .finish();
        self.header[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
        if let Some(o) = self.layout.outer.filter(|o| o.udp_csum) {
            let u = o.udp_offset;
            self.header[u + 6..u + 8].copy_from_slice(&[0, 0]);
            let udp_len = self.len() - u;
            let ph = o
                .net
                .pseudo_header(&self.header, hvnet_wire::ip_protocol::UDP, udp_len);
            let payload = self.payload_sum(self.header_len - u);
            let c = ph
                .add_bytes(&self.header[u..self.header_len])
                .combine(payload)
                .finish();
            let c = if c == 0 { 0xffff } else { c };
            self.header[u + 6..u + 8].copy_from_slice(&c.to_be_bytes());
        }
        self.info.csum = CsumState::Good;
    }

    fn payload_sum(&self, mut at: usize) -> Sum {
        let mut s = Sum::ZERO;
        for seg in &self.segments {
            s = s.add_at(seg.bytes(), at % 2 == 1);
            at += seg.bytes().len();
        }
        s
    }

    /// Gives back the received buffers (for recycling into a pool).
    pub fn into_segments(self) -> Vec<Segment<B>> {
        self.segments
    }
}

/// One frame out of the table.
///
/// The coalesced variant carries its rewritten header inline (256 bytes):
/// boxing it would cost an allocation per coalesced frame, and an output is
/// moved once, into the caller's sink.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum GroOutput<B> {
    /// A packet passed on as it came, with its (possibly now validated)
    /// metadata.
    Single {
        /// The frame.
        frame: B,
        /// Its offload metadata.
        info: OffloadInfo,
    },
    /// A coalesced frame.
    Coalesced(Coalesced<B>),
}

impl<B: AsRef<[u8]>> GroOutput<B> {
    /// Frame length.
    pub fn len(&self) -> usize {
        match self {
            GroOutput::Single { frame, .. } => frame.as_ref().len(),
            GroOutput::Coalesced(c) => c.len(),
        }
    }
    /// True for an empty frame.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies the frame into one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        match self {
            GroOutput::Single { frame, .. } => frame.as_ref().to_vec(),
            GroOutput::Coalesced(c) => c.to_vec(),
        }
    }
    /// The frame's offload metadata.
    pub fn info(&self) -> OffloadInfo {
        match self {
            GroOutput::Single { info, .. } => *info,
            GroOutput::Coalesced(c) => c.info,
        }
    }
}
