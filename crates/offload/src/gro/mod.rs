//! Receive coalescing (GRO/LRO) with Linux's rules.
//!
//! A [`GroTable`] holds, per flow, the first segment of a run and
//! references to the payloads of the segments merged after it. Nothing is
//! copied while a run grows; when the run is flushed, the table writes one
//! rewritten header and hands back the payload pieces in order
//! ([`Coalesced`]), ready for `writev`. The output carries the offload
//! metadata a guest expects: GSO TCPv4/TCPv6 with `gso_size` = the MSS of
//! the run and a partial checksum (`NEEDS_CSUM`), as `tcp_gro_complete` does.
//!
//! Same-flow and flush rules follow `dev_gro_receive`, `inet_gro_receive`,
//! `ipv6_gro_receive`, `tcp_gro_receive` and `gro_receive_network_flush` in
//! Linux 6.18; see `docs/design/gro.md` for the rule table and the tests
//! that pin each rule. Two modes, as in DPDK:
//! - burst: [`GroTable::coalesce_burst`] runs a batch and flushes it all;
//! - table: [`GroTable::receive`] per packet (with the header stack the
//!   switch parsed where it entered), then [`GroTable::flush_all`]
//!   at the end of each poll and [`GroTable::flush_expired`] on a timer, with
//!   time passed in.

mod flow;
mod output;
mod parse;
mod rules;
mod table;

pub use flow::Segment;
pub use output::{Coalesced, GroOutput};
pub use parse::{may_coalesce, MAX_ENCAP_DEPTH};
pub use table::GroTable;

/// Longest header (all layers, VXLAN included) a coalesced frame may have.
pub const MAX_HEADER: usize = 256;

/// Table geometry and limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroConfig {
    /// Hash buckets (a power of two). Linux: 8.
    pub buckets: usize,
    /// Flows held per bucket before the oldest is evicted. Linux: 8.
    pub flows_per_bucket: usize,
    /// A run may not reach this many bytes of IP packet. Linux: 65536.
    pub max_size: u32,
    /// A run may not hold more segments than this (each pins a receive
    /// buffer). Linux has no such bound beyond `max_size`; the switch sets
    /// one so that tiny segments cannot pin a buffer per byte.
    pub max_segments: usize,
    /// Runs older than this (in the caller's time unit) are flushed by
    /// [`GroTable::flush_expired`].
    pub flush_timeout: u64,
}

impl Default for GroConfig {
    fn default() -> Self {
        GroConfig {
            buckets: 8,
            flows_per_bucket: 8,
            max_size: 65536,
            max_segments: u16::MAX as usize,
            flush_timeout: 100_000,
        }
    }
}

/// What happened to one received packet (Linux `enum gro_result`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroResult {
    /// Appended to a held run.
    Merged,
    /// Held as the first segment of a new run.
    Held,
    /// Passed on unchanged (after any run it ended was flushed).
    Normal,
}

/// Why a packet was passed on without being considered for coalescing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PassReason {
    /// Not IPv4 or IPv6.
    NotIp,
    /// Not TCP (or VXLAN carrying TCP).
    NotTcp,
    /// IPv4 header with options.
    IpOptions,
    /// IPv4 or IPv6 fragment.
    Fragment,
    /// IPv4 header or transport checksum failed.
    BadChecksum,
    /// A header is truncated or malformed.
    Malformed,
    /// Headers longer than [`MAX_HEADER`].
    HeaderTooLong,
}

impl PassReason {
    /// Every reason, in counter order.
    pub const ALL: [PassReason; 7] = [
        PassReason::NotIp,
        PassReason::NotTcp,
        PassReason::IpOptions,
        PassReason::Fragment,
        PassReason::BadChecksum,
        PassReason::Malformed,
        PassReason::HeaderTooLong,
    ];
    /// Stable snake_case name for counters.
    pub fn name(self) -> &'static str {
        match self {
            PassReason::NotIp => "not_ip",
            PassReason::NotTcp => "not_tcp",
            PassReason::IpOptions => "ip_options",
            PassReason::Fragment => "fragment",
            PassReason::BadChecksum => "bad_checksum",
            PassReason::Malformed => "malformed",
            PassReason::HeaderTooLong => "header_too_long",
        }
    }
}

/// Why a held run was flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushReason {
    /// The last segment carried PSH, URG, RST, SYN or FIN.
    Flags,
    /// The last segment was shorter than the MSS.
    ShortSegment,
    /// A same-flow segment differed in a header field that must match
    /// (TCP flags, ACK, options, CWR; IP TTL/TOS/DF/ID; IPv6 class/hop limit).
    HeaderMismatch,
    /// A same-flow segment was not the next in sequence.
    SeqGap,
    /// A same-flow segment was larger than the MSS or carried no payload.
    SizeMismatch,
    /// Merging would reach the 64 KiB limit (or the segment limit).
    SizeLimit,
    /// A same-flow packet that may not be merged (padding, GSO, length
    /// fields) ended the run.
    Unmergeable,
    /// The bucket was full and this was the oldest run.
    Evicted,
    /// Older than the flush timeout.
    Aged,
    /// End of a batch / poll.
    EndOfBatch,
}

impl FlushReason {
    /// Every reason, in counter order.
    pub const ALL: [FlushReason; 10] = [
        FlushReason::Flags,
        FlushReason::ShortSegment,
        FlushReason::HeaderMismatch,
        FlushReason::SeqGap,
        FlushReason::SizeMismatch,
        FlushReason::SizeLimit,
        FlushReason::Unmergeable,
        FlushReason::Evicted,
        FlushReason::Aged,
        FlushReason::EndOfBatch,
    ];
    /// Stable snake_case name for counters.
    pub fn name(self) -> &'static str {
        match self {
            FlushReason::Flags => "flags",
            FlushReason::ShortSegment => "short_segment",
            FlushReason::HeaderMismatch => "header_mismatch",
            FlushReason::SeqGap => "seq_gap",
            FlushReason::SizeMismatch => "size_mismatch",
            FlushReason::SizeLimit => "size_limit",
            FlushReason::Unmergeable => "unmergeable",
            FlushReason::Evicted => "evicted",
            FlushReason::Aged => "aged",
            FlushReason::EndOfBatch => "end_of_batch",
        }
    }
}

/// What the table did, counted. Single writer; read by summing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroStats {
    /// Packets received.
    pub frames_in: u64,
    /// Frames handed out (coalesced or not).
    pub frames_out: u64,
    /// Frames handed out that were built from two or more segments.
    pub coalesced_out: u64,
    /// Segments inside those coalesced frames.
    pub coalesced_segments: u64,
    /// Bytes of frames handed out.
    pub bytes_out: u64,
    /// Packets merged into a held run.
    pub merged: u64,
    /// Packets that started a run.
    pub held: u64,
    /// Packets passed on, by reason (indexed as [`PassReason::ALL`]).
    pub passed: [u64; 7],
    /// Same-flow-or-not packets that were eligible but went out alone
    /// (pure ACKs, flagged segments with no run to join).
    pub normal: u64,
    /// Runs flushed, by reason (indexed as [`FlushReason::ALL`]).
    pub flushes: [u64; 10],
}

impl GroStats {
    /// Count for one pass reason.
    pub fn passed(&self, r: PassReason) -> u64 {
        self.passed[PassReason::ALL.iter().position(|&x| x == r).unwrap_or(0)]
    }
    /// Count for one flush reason.
    pub fn flushed(&self, r: FlushReason) -> u64 {
        self.flushes[FlushReason::ALL.iter().position(|&x| x == r).unwrap_or(0)]
    }
    fn pass(&mut self, r: PassReason) {
        if let Some(i) = PassReason::ALL.iter().position(|&x| x == r) {
            self.passed[i] += 1;
        }
    }
    fn flush(&mut self, r: FlushReason) {
        if let Some(i) = FlushReason::ALL.iter().position(|&x| x == r) {
            self.flushes[i] += 1;
        }
    }
}
#[cfg(test)]
mod tests;
