//! A port's rates, as token buckets in bytes shared by its queues: a
//! policer on what its VM sends (`tx_rate`, `tx_burst`: a frame over the
//! rate is dropped and counted, as Open vSwitch's ingress policing and
//! libvirt's `<outbound>` do it), and a shaper on what it receives
//! (`rx_rate`, `rx_burst`: frames over the rate wait in the port's receive
//! ring, released at the rate by its delivery thread, as libvirt's
//! `<inbound>` does it with HTB). The names follow the port's own counters
//! (`tx_summary`: what the VM sent), as a vNIC's do.
//!
//! A policer counts what the wire would carry (a TSO frame: each of its
//! segments with its headers) and lets a frame through if the bucket holds
//! all of it. A TSO frame it does not hold whole is cut to the segments it
//! does hold, the rest dropped — as a policer behind the NIC's
//! segmentation drops segments, not whole 64 KiB frames: a TCP flow whose
//! every window goes in one TSO frame would otherwise lose each window
//! whole and wait out a retransmission timeout each time (measured:
//! 0.06 of a 1 Gbit/s rate, as Open vSwitch's meter gets; docs/perf/rates.md).
//! A shaper lets a batch go when the bucket is not in debt and takes all
//! of it, going into debt for a large one, so its long-run rate is exact
//! whatever the frame sizes.

pub(crate) mod stage;

pub use crate::settings::values::{
    default_burst, parse_burst, parse_rate, Burst, Rate, MAX_BURST, MAX_RATE, MIN_BURST,
};
use crate::settings::PortSettings;
use hvnet_offload::csum::{pseudo_header_at, set_ip_len};
use hvnet_port::Packet;
use hvnet_wire::ip_protocol;
use hvnet_wire::virtio_net::GsoType;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A token bucket in bytes.
#[derive(Debug)]
pub struct TokenBucket {
    /// Bytes a second.
    rate: u64,
    /// Most tokens it holds.
    burst: i64,
    /// Tokens now; below zero a shaper is in debt.
    tokens: i64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket for `rate` with `burst`.
    pub fn new(rate: Rate, burst: Burst, now: Instant) -> TokenBucket {
        let burst = burst.0.max(MIN_BURST) as i64;
        TokenBucket {
            rate: (rate.0 / 8).max(1),
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last);
        // Whole bytes only; the remainder of the interval stays for the
        // next refill (the clock is not moved past what was credited).
        let add = (dt.as_nanos() * u128::from(self.rate) / 1_000_000_000) as i64;
        if add > 0 {
            let credited =
                Duration::from_nanos((add as u128 * 1_000_000_000 / u128::from(self.rate)) as u64);
            self.last += credited;
            self.tokens = self.tokens.saturating_add(add).min(self.burst);
        }
        if self.tokens == self.burst {
            self.last = now;
        }
    }

    /// A policer's decision for a frame of `bytes`: true (and the tokens
    /// taken) if the bucket holds all of it. A frame larger than the
    /// whole burst (a TSO frame's segments with their headers can be) passes
    /// a full bucket, emptying it.
    pub fn police(&mut self, bytes: u64, now: Instant) -> bool {
        self.refill(now);
        let b = (bytes as i64).min(self.burst);
        if self.tokens >= b {
            self.tokens -= b;
            true
        } else {
            false
        }
    }

    /// How long a shaper waits before it may send at all (zero: now).
    pub fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(
            ((-self.tokens) as u128 * 1_000_000_000 / u128::from(self.rate)) as u64 + 1,
        )
    }

    /// A shaper sent `bytes`: taken, into debt if need be.
    pub fn spend(&mut self, bytes: u64, now: Instant) {
        self.refill(now);
        self.tokens = self.tokens.saturating_sub(bytes as i64);
    }
}

/// What the policer did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policed {
    /// Within the rate.
    Pass,
    /// A TSO frame cut to the segments the bucket held (it goes on).
    Cut,
    /// Over the rate: dropped.
    Drop,
}

/// What a frame takes on the wire (a TSO frame: each of its segments
/// with its headers), and its segments where it is a TCP TSO frame.
pub(crate) fn wire_bytes(pkt: &Packet) -> (u64, Option<(usize, usize, usize)>) {
    let tso = tso_segments(pkt);
    let wire = match tso {
        Some((hdr, size, n)) => n * (hdr + size),
        None => pkt.len(),
    };
    (wire as u64, tso)
}

/// A frame over a budget of `tokens` bytes: a TSO frame (`tso`, from
/// [`wire_bytes`]) cut to the segments the budget holds, their bytes
/// returned; `None` where nothing of it fits (it is dropped).
pub(crate) fn cut_to(
    pkt: &mut Packet,
    tso: Option<(usize, usize, usize)>,
    tokens: u64,
) -> Option<u64> {
    let (hdr, size, _) = tso?;
    let held = tokens as usize / (hdr + size);
    (held > 0 && cut_segments(pkt, held)).then_some((held * (hdr + size)) as u64)
}

/// A TCP TSO frame's (header bytes, segment payload, segments), from the
/// headers parsed where it entered; `None` for anything else.
fn tso_segments(pkt: &Packet) -> Option<(usize, usize, usize)> {
    let g = pkt.meta.offload.gso?;
    if !matches!(g.kind, GsoType::TcpV4 | GsoType::TcpV6) || g.size == 0 {
        return None;
    }
    let l = &pkt.meta.layers;
    l.transport().filter(|t| t.protocol == ip_protocol::TCP)?;
    let hdr = l.payload_offset();
    let payload = pkt.len().checked_sub(hdr)?;
    Some((
        hdr,
        usize::from(g.size),
        payload.div_ceil(usize::from(g.size)).max(1),
    ))
}

/// Cuts TCP TSO frame `pkt` to its first `n` segments: the IP length set
/// again, FIN and PSH cleared (they are the last segment's), the partial
/// TCP checksum's pseudo-header sum made for the new length, and with one
/// segment left, no GSO. False, and nothing changed, where `pkt` is not
/// such a frame or has no more than `n` segments.
pub fn cut_segments(pkt: &mut Packet, n: usize) -> bool {
    let Some((hdr, size, segments)) = tso_segments(pkt) else {
        return false;
    };
    let l = pkt.meta.layers;
    let (Some(net), Some(t)) = (l.net(), l.transport()) else {
        return false;
    };
    if n == 0
        || n >= segments
        || !matches!(
            pkt.meta.offload.csum,
            hvnet_offload::CsumState::Partial { .. }
        )
    {
        return false;
    }
    let len = hdr + n * size;
    pkt.buf.keep_range(0..len);
    let f = pkt.buf.frame_mut();
    set_ip_len(f, net.kind, net.offset, len - net.offset, None);
    f[t.offset + 13] &= !(0x01 | 0x08);
    let ph = pseudo_header_at(f, net.kind, net.offset, ip_protocol::TCP, len - t.offset);
    f[t.offset + 16..t.offset + 18].copy_from_slice(&ph.fold().to_be_bytes());
    pkt.meta.layers.set_net_end(len);
    if n == 1 {
        pkt.meta.offload.gso = None;
    }
    true
}

/// A port's policer and shaper, made again when its rates change. A port
/// without a rate pays one relaxed load per frame.
#[derive(Debug, Default)]
pub struct PortRates {
    policing: AtomicBool,
    police: Mutex<Option<(Rate, Burst, TokenBucket)>>,
    shape: Mutex<Option<(Rate, Burst, TokenBucket)>>,
}

impl PortRates {
    /// True while a policer is on (`tx_rate`).
    pub fn policing(&self) -> bool {
        self.policing.load(Relaxed)
    }

    /// Takes `s`'s rates: a bucket whose rate or burst changed starts
    /// again, full; one unchanged keeps its tokens.
    pub fn apply(&self, s: &PortSettings, now: Instant) {
        let remake = |slot: &Mutex<Option<(Rate, Burst, TokenBucket)>>,
                      rate: Option<Rate>,
                      burst: Option<Burst>| {
            let mut slot = slot.lock().expect("rate lock");
            let want = rate.map(|r| (r, burst.unwrap_or_else(|| default_burst(r))));
            if slot.as_ref().map(|(r, b, _)| (*r, *b)) != want {
                *slot = want.map(|(r, b)| (r, b, TokenBucket::new(r, b, now)));
            }
        };
        remake(&self.police, s.tx_rate, s.tx_burst);
        remake(&self.shape, s.rx_rate, s.rx_burst);
        self.policing.store(s.tx_rate.is_some(), Relaxed);
    }

    /// The policer's bucket now: bytes left and its size (a trace's
    /// line); none without a policer.
    pub fn police_bucket(&self) -> Option<(i64, i64)> {
        let slot = self.police.lock().expect("rate lock");
        slot.as_ref().map(|(_, _, b)| (b.tokens, b.burst))
    }

    /// The policer's decision for a frame the VM sent (always
    /// [`Policed::Pass`] without a policer); a TSO frame it cuts is cut
    /// here.
    #[inline]
    pub fn police(&self, pkt: &mut Packet, now: Instant) -> Policed {
        if !self.policing.load(Relaxed) {
            return Policed::Pass;
        }
        let mut slot = self.police.lock().expect("rate lock");
        let Some((_, _, b)) = &mut *slot else {
            return Policed::Pass;
        };
        let (wire, tso) = wire_bytes(pkt);
        if b.police(wire, now) {
            return Policed::Pass;
        }
        match cut_to(pkt, tso, b.tokens.max(0) as u64) {
            Some(kept) => {
                b.tokens -= kept as i64;
                Policed::Cut
            }
            None => Policed::Drop,
        }
    }

    /// How long the shaper has the port's delivery wait before its next
    /// batch (zero: none, or no shaper).
    pub fn shape_wait(&self, now: Instant) -> Duration {
        match &mut *self.shape.lock().expect("rate lock") {
            Some((_, _, b)) => b.wait(now),
            None => Duration::ZERO,
        }
    }

    /// The port's delivery wrote `bytes`: the shaper's tokens taken.
    pub fn shaped(&self, bytes: u64, now: Instant) {
        if let Some((_, _, b)) = &mut *self.shape.lock().expect("rate lock") {
            b.spend(bytes, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_bursts_read_as_tc_writes_them() {
        assert_eq!(parse_rate("1gbit"), Ok(Rate(1_000_000_000)));
        assert_eq!(parse_rate("500Mbit"), Ok(Rate(500_000_000)));
        assert_eq!(parse_rate("64kbit"), Ok(Rate(64_000)));
        assert_eq!(parse_rate("9600"), Ok(Rate(9600)));
        assert!(parse_rate("1gbps").unwrap_err().contains("kbit, mbit"));
        assert!(parse_rate("0").unwrap_err().contains("outside"));
        assert!(parse_rate("2tbit").unwrap_err().contains("outside"));
        assert!(parse_rate("-5mbit").is_err());
        assert!(parse_rate("99999999999999999999999gbit").is_err());
        assert_eq!(parse_burst("256kb"), Ok(Burst(256 << 10)));
        assert_eq!(parse_burst("2mb"), Ok(Burst(2 << 20)));
        assert!(parse_burst("1500b")
            .unwrap_err()
            .contains("at least one largest GSO frame"));
        for r in ["1gbit", "1500mbit", "64kbit", "9601bit"] {
            assert_eq!(parse_rate(r).unwrap().to_string(), r);
        }
        assert_eq!(Burst(3 << 20).to_string(), "3mb");
        assert_eq!(default_burst(Rate(1_000_000_000)), Burst(1_250_000));
        assert_eq!(default_burst(Rate(10_000_000)), Burst(1_000_000));
        assert_eq!(default_burst(Rate(1_000_000)), Burst(1_000_000));
    }

    #[test]
    fn a_tso_frame_is_cut_to_its_first_segments_and_stays_a_valid_frame() {
        use hvnet_offload::testutil::TcpSpec;
        use hvnet_offload::{csum, CsumState, GsoInfo, OffloadInfo};
        use hvnet_port::{Home, Pool, PoolCaps, SizeClass};
        let mut pool = Pool::new(Home::new(PoolCaps::DEFAULT));
        let mut packet = |frame: &[u8], info| {
            let mut b = pool.take(SizeClass::Large).expect("a buffer");
            b.fill(frame);
            Packet::parse(b, info).expect("parses")
        };
        for v6 in [false, true] {
            let payload: Vec<u8> = (0..4000u32).map(|i| i as u8).collect();
            let frame = TcpSpec {
                v6,
                flags: 0x10 | 0x08 | 0x01, // ACK, PSH, FIN
                payload: payload.clone(),
                ..TcpSpec::default()
            }
            .build();
            let l4 = if v6 { 14 + 40 } else { 14 + 20 };
            let info = OffloadInfo {
                gso: Some(GsoInfo {
                    kind: if v6 { GsoType::TcpV6 } else { GsoType::TcpV4 },
                    size: 1000,
                    ecn: false,
                }),
                csum: CsumState::Partial {
                    start: l4 as u16,
                    offset: 16,
                },
            };
            let mut pkt = packet(&frame, info);
            assert_eq!(tso_segments(&pkt), Some((l4 + 20, 1000, 4)));
            assert!(!cut_segments(&mut pkt, 4), "nothing to cut");
            assert!(cut_segments(&mut pkt, 2));
            let hdr = l4 + 20;
            assert_eq!(pkt.len(), hdr + 2000);
            assert!(pkt.meta.offload.gso.is_some());
            let f = pkt.buf.frame_mut();
            assert_eq!(f[l4 + 13], 0x10, "FIN and PSH are the last segment's");
            csum::complete_partial(f, l4 as u16, 16).expect("completes");
            // What is left parses as a frame of its own length, its
            // checksum right, its payload the first two segments'.
            let again = packet(pkt.frame(), OffloadInfo::default());
            assert_eq!(again.meta.layers.net().map(|n| n.end), Some(hdr + 2000));
            // The cut frame's own metadata says as much as a new parse.
            assert_eq!(pkt.meta.layers, again.meta.layers);
            assert!(matches!(
                csum::validate_l4(again.frame(), &again.meta.layers),
                Ok(CsumState::Good)
            ));
            assert_eq!(&again.frame()[hdr..], &payload[..2000]);
            // One segment left: no GSO.
            let mut pkt = packet(&frame, info);
            assert!(cut_segments(&mut pkt, 1));
            assert_eq!((pkt.len(), pkt.meta.offload.gso), (hdr + 1000, None));
        }
    }

    #[test]
    fn a_policer_passes_the_rate_and_its_burst_and_drops_the_rest() {
        let t0 = Instant::now();
        let (rate, burst) = (Rate(8_000_000), Burst(100_000)); // 1 MB/s
        let mut b = TokenBucket::new(rate, burst, t0);
        // The burst at once, then nothing without time.
        let mut passed = 0u64;
        while b.police(1000, t0) {
            passed += 1000;
        }
        assert_eq!(passed, 100_000);
        // One second on: one second's worth (the bucket refills to its
        // burst, no more).
        let mut passed = 0u64;
        for ms in 1..=1000u64 {
            let now = t0 + Duration::from_millis(ms);
            while b.police(1000, now) {
                passed += 1000;
            }
        }
        assert_eq!(passed, 1_000_000);
        // A frame larger than the burst passes a full bucket only,
        // emptying it.
        let later = t0 + Duration::from_secs(10);
        assert!(b.police(200_000, later));
        assert!(!b.police(1000, later));
        assert!(!b.police(200_000, later + Duration::from_millis(50)));
    }

    #[test]
    fn a_shaper_keeps_its_rate_in_the_long_run_whatever_the_frame_sizes() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(Rate(80_000_000), Burst(MIN_BURST), t0); // 10 MB/s
        let mut now = t0;
        let mut sent = 0u64;
        // 64 KiB frames, each sent when the shaper lets it.
        while now < t0 + Duration::from_secs(2) {
            now += b.wait(now);
            b.spend(65_536, now);
            sent += 65_536;
        }
        let secs = now.duration_since(t0).as_secs_f64();
        let rate = (sent - MIN_BURST) as f64 / secs;
        assert!((rate - 10_000_000.0).abs() / 10_000_000.0 < 0.01, "{rate}");
    }
}
