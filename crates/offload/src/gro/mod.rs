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
//! - table: [`GroTable::receive`] per packet, then [`GroTable::flush_all`]
//!   at the end of each poll and [`GroTable::flush_expired`] on a timer, with
//!   time passed in.

mod parse;

use crate::meta::{CsumState, GsoInfo, OffloadInfo};
use hvnet_wire::checksum::Sum;
use hvnet_wire::layers::{Layers, NetKind};
use hvnet_wire::{ipv4, ipv6, tcp, udp, GsoType};
use parse::{Cb, NetCb, OuterCb};

pub use parse::MAX_ENCAP_DEPTH;

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

/// Where the layers of a coalesced frame's header are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    outer: Option<OuterCb>,
    net: NetCb,
    tcp_offset: usize,
}

/// A frame built from two or more segments.
#[derive(Debug)]
pub struct Coalesced<B> {
    header: [u8; MAX_HEADER],
    header_len: usize,
    /// The payload pieces, in sequence order. The first is the first
    /// segment's payload.
    pub segments: Vec<Segment<B>>,
    /// GSO TCPv4/TCPv6 with the run's MSS, and the checksum state.
    pub info: OffloadInfo,
    /// Segments coalesced.
    pub count: u16,
    layout: Layout,
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

/// A held run.
struct Flow<B> {
    segments: Vec<Segment<B>>,
    cb: Cb,
    hash: u32,
    /// Payload length of the first segment: the run's MSS.
    mss: usize,
    count: u16,
    /// Payload bytes held.
    gro_len: usize,
    /// Bytes from the outermost IP header to the end of the run (`p->len`).
    ip_len: usize,
    /// FIN/PSH ORed in from merged segments.
    flags_or: u8,
    /// Per encapsulation level (bit 0 outer/only, bit 1 inner): the run
    /// uses a fixed IPv4 ID rather than an incrementing one.
    fixed_id: u8,
    age: u64,
    info: OffloadInfo,
}

impl<B: AsRef<[u8]>> Flow<B> {
    fn head(&self) -> &[u8] {
        self.segments[0].buf.as_ref()
    }
}

/// The GRO flow table.
pub struct GroTable<B> {
    cfg: GroConfig,
    buckets: Vec<Vec<Flow<B>>>,
    spare: Vec<Vec<Segment<B>>>,
    held: usize,
    stats: GroStats,
}

impl<B: AsRef<[u8]>> GroTable<B> {
    /// An empty table.
    pub fn new(cfg: GroConfig) -> GroTable<B> {
        let buckets = cfg.buckets.max(1).next_power_of_two();
        let cfg = GroConfig {
            buckets,
            flows_per_bucket: cfg.flows_per_bucket.max(1),
            ..cfg
        };
        GroTable {
            buckets: (0..buckets)
                .map(|_| Vec::with_capacity(cfg.flows_per_bucket))
                .collect(),
            cfg,
            spare: Vec::new(),
            held: 0,
            stats: GroStats::default(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &GroConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> &GroStats {
        &self.stats
    }

    /// Runs currently held.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Hands a segment vector back for reuse, so that steady-state
    /// coalescing allocates nothing.
    pub fn recycle(&mut self, mut v: Vec<Segment<B>>) {
        v.clear();
        if self.spare.len() < self.cfg.buckets * self.cfg.flows_per_bucket {
            self.spare.push(v);
        }
    }

    /// Burst mode: coalesces a batch and flushes everything at the end
    /// (`rte_gro_reassemble_burst`, or one NAPI poll).
    pub fn coalesce_burst<I>(&mut self, batch: I, now: u64, out: &mut impl FnMut(GroOutput<B>))
    where
        I: IntoIterator<Item = (B, OffloadInfo)>,
    {
        let mut it = batch.into_iter().peekable();
        while let Some((buf, info)) = it.next() {
            // Touch the next frame's headers now: the load overlaps this
            // frame's work instead of stalling the next one.
            if let Some((next, _)) = it.peek() {
                touch_headers(next.as_ref());
            }
            self.receive(buf, info, now, out);
        }
        self.flush_all(out);
    }

    /// Receives one packet at time `now`. Any output it causes (a run it
    /// ends, an evicted run, the packet itself) is passed to `out` in the
    /// order a receiver must see it.
    pub fn receive(
        &mut self,
        buf: B,
        info: OffloadInfo,
        now: u64,
        out: &mut impl FnMut(GroOutput<B>),
    ) -> GroResult {
        match Layers::parse(buf.as_ref()) {
            Ok(l) => self.receive_parsed(buf, info, &l, now, out),
            Err(_) => self.pass(buf, info, PassReason::Malformed, out),
        }
    }

    /// [`GroTable::receive`] for a frame whose header stack was already
    /// parsed (the switch parses each frame once, where it enters).
    pub fn receive_parsed(
        &mut self,
        buf: B,
        info: OffloadInfo,
        layers: &Layers,
        now: u64,
        out: &mut impl FnMut(GroOutput<B>),
    ) -> GroResult {
        let cb = match parse::parse(buf.as_ref(), &info, layers, MAX_HEADER) {
            Ok(cb) => cb,
            Err(r) => return self.pass(buf, info, r, out),
        };
        self.stats.frames_in += 1;
        self.receive_cb(buf, info, cb, now, out)
    }

    /// Passes a packet on unchanged, for `reason`.
    fn pass(
        &mut self,
        buf: B,
        info: OffloadInfo,
        r: PassReason,
        out: &mut impl FnMut(GroOutput<B>),
    ) -> GroResult {
        self.stats.frames_in += 1;
        self.stats.pass(r);
        let info = if r == PassReason::BadChecksum && info.csum == CsumState::Unknown {
            OffloadInfo {
                csum: CsumState::Bad,
                ..info
            }
        } else {
            info
        };
        self.emit(GroOutput::Single { frame: buf, info }, out);
        GroResult::Normal
    }

    fn receive_cb(
        &mut self,
        buf: B,
        info: OffloadInfo,
        cb: Cb,
        now: u64,
        out: &mut impl FnMut(GroOutput<B>),
    ) -> GroResult {
        let info = OffloadInfo {
            csum: cb.csum,
            ..info
        };
        let frame = buf.as_ref();
        let hash = flow_hash(frame, &cb);
        let bidx = hash as usize & (self.cfg.buckets - 1);
        let found = self.buckets[bidx]
            .iter()
            .position(|f| f.hash == hash && same_flow(f, frame, &cb));

        // Linux `mss` starts at 1 and is the run's MSS only after a merge.
        let mut mss = 1usize;
        if let Some(i) = found {
            let verdict = mergeable(
                &self.buckets[bidx][i],
                frame,
                &cb,
                self.cfg.max_size,
                self.cfg.max_segments,
            );
            match verdict {
                Ok(fixed_id) => {
                    let flow = &mut self.buckets[bidx][i];
                    flow.fixed_id |= fixed_id;
                    let start = cb.payload_offset as u32;
                    flow.segments.push(Segment {
                        buf,
                        start,
                        end: start + cb.payload_len as u32,
                    });
                    flow.count += 1;
                    flow.gro_len += cb.payload_len;
                    flow.ip_len += cb.payload_len;
                    flow.flags_or |= cb.flags & (tcp::flags::FIN | tcp::flags::PSH);
                    self.stats.merged += 1;
                    mss = flow.mss;
                    let last = final_flush(&cb, mss);
                    if let Some(r) = last {
                        let flow = self.buckets[bidx].remove(i);
                        self.held -= 1;
                        self.complete(flow, r, out);
                    }
                    return GroResult::Merged;
                }
                Err(r) => {
                    let flow = self.buckets[bidx].remove(i);
                    self.held -= 1;
                    self.complete(flow, r, out);
                }
            }
        }
        if cb.flush || final_flush(&cb, mss).is_some() {
            self.stats.normal += 1;
            self.emit(GroOutput::Single { frame: buf, info }, out);
            return GroResult::Normal;
        }
        if self.buckets[bidx].len() >= self.cfg.flows_per_bucket {
            let oldest = self.buckets[bidx].remove(0);
            self.held -= 1;
            self.complete(oldest, FlushReason::Evicted, out);
        }
        let mut segments = self.spare.pop().unwrap_or_default();
        let start = cb.payload_offset as u32;
        segments.push(Segment {
            buf,
            start,
            end: start + cb.payload_len as u32,
        });
        let outermost = cb.outer.map_or(cb.net.offset, |o| o.net.offset);
        let ip_len = cb.payload_offset + cb.payload_len - outermost;
        self.buckets[bidx].push(Flow {
            segments,
            cb,
            hash,
            mss: cb.payload_len,
            count: 1,
            gro_len: cb.payload_len,
            ip_len,
            flags_or: 0,
            fixed_id: 0,
            age: now,
            info,
        });
        self.held += 1;
        self.stats.held += 1;
        GroResult::Held
    }

    /// Flushes every held run, oldest first within each bucket
    /// (`napi_gro_flush(napi, false)`).
    pub fn flush_all(&mut self, out: &mut impl FnMut(GroOutput<B>)) {
        for b in 0..self.buckets.len() {
            let flows = std::mem::take(&mut self.buckets[b]);
            for f in flows {
                self.held -= 1;
                self.complete(f, FlushReason::EndOfBatch, out);
            }
        }
    }

    /// Flushes runs whose first segment arrived `flush_timeout` or more
    /// before `now`.
    pub fn flush_expired(&mut self, now: u64, out: &mut impl FnMut(GroOutput<B>)) {
        let timeout = self.cfg.flush_timeout;
        for b in 0..self.buckets.len() {
            let mut i = 0;
            while i < self.buckets[b].len() {
                if now.saturating_sub(self.buckets[b][i].age) >= timeout {
                    let f = self.buckets[b].remove(i);
                    self.held -= 1;
                    self.complete(f, FlushReason::Aged, out);
                } else {
                    i += 1;
                }
            }
        }
    }

    fn emit(&mut self, o: GroOutput<B>, out: &mut impl FnMut(GroOutput<B>)) {
        self.stats.frames_out += 1;
        self.stats.bytes_out += o.len() as u64;
        out(o);
    }

    /// `napi_gro_complete`: a run of one goes out as it came; a longer one
    /// gets its headers rewritten (`inet_gro_complete`, `tcp_gro_complete`).
    fn complete(
        &mut self,
        mut flow: Flow<B>,
        reason: FlushReason,
        out: &mut impl FnMut(GroOutput<B>),
    ) {
        self.stats.flush(reason);
        if flow.count == 1 {
            let seg = flow
                .segments
                .pop()
                .expect("a held run has its first segment");
            self.recycle(std::mem::take(&mut flow.segments));
            self.emit(
                GroOutput::Single {
                    frame: seg.buf,
                    info: flow.info,
                },
                out,
            );
            return;
        }
        let cb = flow.cb;
        let hlen = cb.payload_offset;
        let mut header = [0u8; MAX_HEADER];
        header[..hlen].copy_from_slice(&flow.head()[..hlen]);
        let total_after = |off: usize| hlen - off + flow.gro_len;
        if let Some(o) = cb.outer {
            set_ip_len(&mut header, &o.net, total_after(o.net.offset));
            let mut u = udp::Packet::new_unchecked(&mut header[o.udp_offset..]);
            u.set_len(total_after(o.udp_offset) as u16);
            // Like udp_gro_complete: the outer checksum becomes partial
            // until someone fills it.
            if o.udp_csum {
                let ph = o.net.pseudo_header(
                    &header,
                    hvnet_wire::ip_protocol::UDP,
                    total_after(o.udp_offset),
                );
                udp::Packet::new_unchecked(&mut header[o.udp_offset..]).set_checksum(ph.fold());
            }
        }
        set_ip_len(&mut header, &cb.net, total_after(cb.net.offset));
        let t = cb.tcp_offset;
        let mut th = tcp::Packet::new_unchecked(&mut header[t..]);
        let flags = th.flags() | flow.flags_or;
        th.set_flags(flags);
        let ph = cb
            .net
            .pseudo_header(&header, hvnet_wire::ip_protocol::TCP, total_after(t));
        tcp::Packet::new_unchecked(&mut header[t..]).set_checksum(ph.fold());
        let kind = match cb.net.kind {
            NetKind::Ipv4 => GsoType::TcpV4,
            NetKind::Ipv6 => GsoType::TcpV6,
        };
        self.stats.coalesced_out += 1;
        self.stats.coalesced_segments += flow.count as u64;
        let c = Coalesced {
            header,
            header_len: hlen,
            segments: flow.segments,
            info: OffloadInfo {
                gso: Some(GsoInfo {
                    kind,
                    size: flow.mss as u16,
                    ecn: flags & tcp::flags::CWR != 0,
                }),
                csum: CsumState::Partial {
                    start: t as u16,
                    offset: tcp::CHECKSUM_OFFSET as u16,
                },
            },
            count: flow.count,
            layout: Layout {
                outer: cb.outer,
                net: cb.net,
                tcp_offset: t,
            },
        };
        self.emit(GroOutput::Coalesced(c), out);
    }
}

/// Reads one byte from each of the first two cache lines of a frame, so
/// that their loads are under way early.
#[inline(always)]
fn touch_headers(frame: &[u8]) {
    let a = frame.first().copied().unwrap_or(0);
    let b = frame.get(64).copied().unwrap_or(0);
    std::hint::black_box(a ^ b);
}

fn set_ip_len(header: &mut [u8], net: &NetCb, len: usize) {
    crate::csum::set_ip_len(header, net.kind, net.offset, len, None);
}

/// The end-of-receive check of `tcp_gro_receive` (`out_check_final`): a
/// segment shorter than `mss` or carrying URG/PSH/RST/SYN/FIN ends its run.
/// CWR too: on this machine's kernel (6.18) a CWR segment is never held —
/// it ends its flow's run and goes up alone (pinned by the differential
/// test against the kernel).
fn final_flush(cb: &Cb, mss: usize) -> Option<FlushReason> {
    use tcp::flags::*;
    if cb.flags & (URG | PSH | RST | SYN | FIN | CWR) != 0 {
        Some(FlushReason::Flags)
    } else if cb.payload_len < mss {
        Some(FlushReason::ShortSegment)
    } else {
        None
    }
}

/// A cheap hash of what identifies a flow, to pick a bucket. Collisions only
/// cost a compare.
fn flow_hash(frame: &[u8], cb: &Cb) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |bytes: &[u8]| {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
        }
    };
    let n = &cb.net;
    match n.kind {
        NetKind::Ipv4 => mix(&frame[n.offset + 12..n.offset + 20]),
        NetKind::Ipv6 => mix(&frame[n.offset + 8..n.offset + 40]),
    }
    mix(&frame[cb.tcp_offset..cb.tcp_offset + 4]);
    if let Some(o) = cb.outer {
        mix(&frame[o.udp_offset + 8..o.udp_offset + 16]);
    }
    (h >> 32) as u32 ^ h as u32
}

/// Same-flow test, layer by layer: identical Ethernet headers, same IP
/// protocol and addresses (IPv6: flow label, next header and extension
/// headers too), same ports; for VXLAN also the outer headers and the VNI.
fn same_flow<B: AsRef<[u8]>>(flow: &Flow<B>, frame: &[u8], cb: &Cb) -> bool {
    let head = flow.head();
    let hc = &flow.cb;
    if hc.outer.is_some() != cb.outer.is_some() {
        return false;
    }
    if let (Some(a), Some(b)) = (hc.outer, cb.outer) {
        // Outer Ethernet, outer IP identity, UDP ports and checksum
        // presence, VXLAN flags and VNI, inner Ethernet.
        if a.net.offset != b.net.offset
            || head[..a.net.offset] != frame[..b.net.offset]
            || !same_ip_flow(head, &a.net, frame, &b.net)
            || a.udp_offset != b.udp_offset
            || head[a.udp_offset..a.udp_offset + 4] != frame[b.udp_offset..b.udp_offset + 4]
            || a.udp_csum != b.udp_csum
            || head[a.udp_offset + 8..a.inner_l2] != frame[b.udp_offset + 8..b.inner_l2]
        {
            return false;
        }
    }
    let l2_start = cb.outer.map_or(0, |o| o.inner_l2);
    if hc.l2_len != cb.l2_len
        || hc.net.offset != cb.net.offset
        || head[l2_start..hc.net.offset] != frame[l2_start..cb.net.offset]
    {
        return false;
    }
    if !same_ip_flow(head, &hc.net, frame, &cb.net) {
        return false;
    }
    // tcp_gro_lookup: ports.
    hc.tcp_offset == cb.tcp_offset
        && head[hc.tcp_offset..hc.tcp_offset + 4] == frame[cb.tcp_offset..cb.tcp_offset + 4]
}

fn same_ip_flow(head: &[u8], hn: &NetCb, frame: &[u8], n: &NetCb) -> bool {
    if hn.kind != n.kind {
        return false;
    }
    let a = &head[hn.offset..];
    let b = &frame[n.offset..];
    match n.kind {
        // inet_gro_receive: protocol, saddr, daddr.
        NetKind::Ipv4 => a[9] == b[9] && a[12..20] == b[12..20],
        // ipv6_gro_receive: version and flow label (not traffic class),
        // next header, addresses, and every extension header byte.
        NetKind::Ipv6 => {
            let w = |x: &[u8]| u32::from_be_bytes([x[0], x[1], x[2], x[3]]);
            (w(a) ^ w(b)) & 0xf00f_ffff == 0
                && a[6] == b[6]
                && a[8..40] == b[8..40]
                && hn.header_len == n.header_len
                && a[40..hn.header_len] == b[40..n.header_len]
        }
    }
}

/// The merge decision of `tcp_gro_receive`: an OR of field differences.
/// On success, returns the fixed-IPv4-ID bits this segment decided.
fn mergeable<B: AsRef<[u8]>>(
    flow: &Flow<B>,
    frame: &[u8],
    cb: &Cb,
    max_size: u32,
    max_segments: usize,
) -> Result<u8, FlushReason> {
    use tcp::flags::*;
    if cb.flush {
        return Err(FlushReason::Unmergeable);
    }
    let head = flow.head();
    let th2 = tcp::Packet::new_unchecked(&head[flow.cb.tcp_offset..]);
    let th = tcp::Packet::new_unchecked(&frame[cb.tcp_offset..]);
    // `tcp_flag_word` is the third 32-bit word of the header: data offset,
    // flags and the window. A window change ends the run, as in Linux.
    let word = |p: &tcp::Packet<&[u8]>| ((p.flag_word() as u32) << 16) | p.window() as u32;
    let mut diff = (th.flags() & CWR) as u32;
    diff |= (word(&th) ^ word(&th2)) & !(((CWR | FIN | PSH) as u32) << 16);
    diff |= th.ack() ^ th2.ack();
    if diff == 0 {
        // Same data offset (it is in the flag word), so the option areas
        // have the same length.
        let thlen = cb.tcp_header_len;
        if frame[cb.tcp_offset + 20..cb.tcp_offset + thlen]
            != head[flow.cb.tcp_offset + 20..flow.cb.tcp_offset + thlen]
        {
            diff = 1;
        }
    }
    let (net_flush, fixed_id) = network_flush(flow, frame, cb);
    if diff != 0 || net_flush {
        return Err(FlushReason::HeaderMismatch);
    }
    // A single frame larger than the MSS never merges; zero payload
    // always flushes ((len - 1) >= mss with unsigned wrap).
    if cb.payload_len.wrapping_sub(1) >= flow.mss {
        return Err(FlushReason::SizeMismatch);
    }
    if flow.cb.seq.wrapping_add(flow.gro_len as u32) != cb.seq {
        return Err(FlushReason::SeqGap);
    }
    if flow.ip_len + cb.payload_len >= max_size as usize || flow.count as usize >= max_segments {
        return Err(FlushReason::SizeLimit);
    }
    Ok(fixed_id)
}

/// `gro_receive_network_flush` for each IP level (outer first): whether
/// to flush, and the fixed-ID bits decided by this segment.
fn network_flush<B: AsRef<[u8]>>(flow: &Flow<B>, frame: &[u8], cb: &Cb) -> (bool, u8) {
    let head = flow.head();
    let levels = match (flow.cb.outer, cb.outer) {
        (Some(a), Some(b)) => [Some((a.net, b.net)), Some((flow.cb.net, cb.net))],
        _ => [Some((flow.cb.net, cb.net)), None],
    };
    let mut flush = false;
    let mut fixed = 0u8;
    for (level, (hn, n)) in levels
        .iter()
        .enumerate()
        .filter_map(|(l, x)| x.map(|x| (l as u8, x)))
    {
        let (f, fx) = ip_flush(head, &hn, frame, &n, flow, level);
        flush |= f;
        if fx {
            fixed |= 1 << level;
        }
    }
    (flush, fixed)
}

/// `inet_gro_flush` / `ipv6_gro_flush`. IPv4 IDs must either increment by
/// one per segment or stay fixed; the choice is made on the second segment
/// (fixed only with DF set) and kept for the run.
fn ip_flush<B: AsRef<[u8]>>(
    head: &[u8],
    hn: &NetCb,
    frame: &[u8],
    n: &NetCb,
    flow: &Flow<B>,
    level: u8,
) -> (bool, bool) {
    let a = &head[hn.offset..];
    let b = &frame[n.offset..];
    match n.kind {
        NetKind::Ipv4 => {
            let p2 = ipv4::Packet::new_unchecked(a);
            let p = ipv4::Packet::new_unchecked(b);
            if p.ttl() != p2.ttl() || p.tos() != p2.tos() || p.dont_frag() != p2.dont_frag() {
                return (true, false);
            }
            let offset = p.ident().wrapping_sub(p2.ident());
            let count = flow.count;
            // Linux 6.18 decides "fixed" on the second segment whether or
            // not DF is set (the selftest's "DF=0, Fixed - should coalesce").
            let decided_now = count == 1 && offset == 0;
            let fixed = flow.fixed_id & (1 << level) != 0 || decided_now;
            (
                if fixed { offset != 0 } else { offset != count },
                decided_now,
            )
        }
        NetKind::Ipv6 => {
            let p2 = ipv6::Packet::new_unchecked(a);
            let p = ipv6::Packet::new_unchecked(b);
            (
                p.traffic_class() != p2.traffic_class() || p.hop_limit() != p2.hop_limit(),
                false,
            )
        }
    }
}

#[cfg(test)]
mod tests;
