//! The GRO flow table: held runs per flow, merged and flushed by Linux's
//! rules ([`super::rules`]).

use super::flow::{Cb, Flow, NetCb, Segment};
use super::output::{Coalesced, GroOutput, Layout};
use super::parse;
use super::rules::{flow_hash, mergeable, same_flow};
use super::{FlushReason, GroConfig, GroResult, GroStats, PassReason, MAX_HEADER};
use crate::meta::{CsumState, GsoInfo, OffloadInfo};
use hvnet_wire::layers::{Layers, NetKind};
use hvnet_wire::{tcp, udp, GsoType};

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
    /// (`rte_gro_reassemble_burst`, or one NAPI poll). Each frame comes with
    /// what the parser (`hvnet_wire::Layers::parse`) made of it: a frame it
    /// refused is passed on unchanged, counted as malformed, and held runs
    /// are not touched.
    pub fn coalesce_burst<I>(&mut self, batch: I, now: u64, out: &mut impl FnMut(GroOutput<B>))
    where
        I: IntoIterator<Item = (B, OffloadInfo, hvnet_wire::Result<Layers>)>,
    {
        let mut it = batch.into_iter().peekable();
        while let Some((buf, info, layers)) = it.next() {
            // Touch the next frame's headers now: the load overlaps this
            // frame's work instead of stalling the next one.
            if let Some((next, _, _)) = it.peek() {
                touch_headers(next.as_ref());
            }
            match layers {
                Ok(l) => self.receive(buf, info, &l, now, out),
                Err(_) => self.pass(buf, info, PassReason::Malformed, out),
            };
        }
        self.flush_all(out);
    }

    /// Receives one packet at time `now`, with its header stack as parsed
    /// where it entered (the switch parses each frame once). Any output it
    /// causes (a run it ends, an evicted run, the packet itself) is passed
    /// to `out` in the order a receiver must see it.
    pub fn receive(
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
