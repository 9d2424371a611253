//! Shares of an uplink among the ports sending through it, as vSphere's
//! Network I/O Control divides a physical NIC: the uplink's `capacity`
//! (its link speed, or the rate its provider sells) is split every
//! [`WINDOW`] among the VMs that sent through it in the last one, each
//! first getting what it asked up to its `reservation`, then the rest by
//! its `shares` (weighted max-min: a VM wanting less than its share gets
//! what it wants, the others split what it leaves), and what nobody
//! asked for by shares too, so that a VM can grow into it. Each VM's
//! allowance is the rate of a token bucket of its own (a policer, its
//! burst a window's allowance and at least one largest GSO frame): what
//! it sends over it is dropped at the uplink (a TSO frame cut to the
//! segments that fit, as the policer does, see [`crate::rate`]) and
//! counted (`uplink_share`), spread over the window as a policer's drops
//! are, and its TCP backs off. (An allowance spent per window instead
//! dropped the rest of each window whole: TCP then waited out
//! retransmission timeouts, at an eighth of the capacity.)
//!
//! Only frames from VMs to the uplink are counted: the uplink's own
//! control frames and frames crossing from the wire are not the VMs'.

pub(crate) mod stage;

use crate::rate::{cut_to, wire_bytes, Policed};
use hvnet_port::Packet;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the allowances are worked out again.
pub const WINDOW: Duration = Duration::from_millis(20);

pub use crate::settings::values::SHARES_NORMAL;

/// A VM port's claim on the uplinks it sends through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    /// Its weight beside the others, 1..=100.
    pub shares: u32,
    /// Bytes a second it gets before any share is counted (0: none).
    pub reservation: u64,
}

/// An uplink's shares: off (one relaxed load per frame) until it has a
/// `capacity`.
#[derive(Debug, Default)]
pub struct UplinkShares {
    on: AtomicBool,
    state: Mutex<Option<Windows>>,
}

#[derive(Debug)]
struct Windows {
    /// Bytes the uplink carries in one window.
    capacity: u64,
    start: Instant,
    ports: HashMap<usize, Use>,
}

#[derive(Debug)]
struct Use {
    claim: Option<Claim>,
    /// Bytes offered in the window (sent or not).
    offered: u64,
    /// Bytes it may send in a window: its bucket's rate.
    allowance: u64,
    /// Its bucket: bytes it may send now.
    tokens: u64,
    last: Instant,
}

impl Use {
    fn new(claim: Claim, allowance: u64, now: Instant) -> Use {
        Use {
            claim: Some(claim),
            offered: 0,
            allowance,
            tokens: burst(allowance),
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last);
        let add = (u128::from(self.allowance) * dt.as_nanos() / WINDOW.as_nanos()) as u64;
        if add > 0 {
            self.last = now;
            self.tokens = (self.tokens + add).min(burst(self.allowance));
        }
    }
}

/// A bucket's depth: [`BURST_WINDOWS`] windows of its allowance, and at
/// least one largest GSO frame with its headers.
fn burst(allowance: u64) -> u64 {
    (allowance * BURST_WINDOWS).max(crate::rate::MIN_BURST)
}

/// How many windows of its allowance a VM may send at once: TCP sends a
/// window's worth of TSO frames back to back.
const BURST_WINDOWS: u64 = 4;

impl UplinkShares {
    /// Takes the uplink's `capacity` in bytes a second (None: no shares).
    pub fn apply(&self, capacity: Option<u64>, now: Instant) {
        let mut s = self.state.lock().expect("shares lock");
        let per_window = capacity.map(window_bytes);
        if s.as_ref().map(|w| w.capacity) != per_window {
            *s = per_window.map(|capacity| Windows {
                capacity,
                start: now,
                ports: HashMap::new(),
            });
        }
        self.on.store(per_window.is_some(), Relaxed);
    }

    /// The decision for a frame from port `src` (with its claim) to the
    /// uplink; a TSO frame over the allowance is cut here.
    #[inline]
    pub fn admit(&self, src: usize, claim: Claim, pkt: &mut Packet, now: Instant) -> Policed {
        if !self.on.load(Relaxed) {
            return Policed::Pass;
        }
        let mut s = self.state.lock().expect("shares lock");
        let Some(w) = s.as_mut() else {
            return Policed::Pass;
        };
        if now >= w.start + WINDOW {
            w.roll(now);
        }
        let (wire, tso) = wire_bytes(pkt);
        if !w.ports.contains_key(&src) {
            let allowance = w.newcomer(claim);
            w.ports.insert(src, Use::new(claim, allowance, now));
        }
        let u = w.ports.get_mut(&src).expect("inserted above");
        u.claim = Some(claim);
        u.offered += wire;
        u.refill(now);
        if wire <= u.tokens {
            u.tokens -= wire;
            return Policed::Pass;
        }
        match cut_to(pkt, tso, u.tokens) {
            Some(kept) => {
                u.tokens -= kept;
                Policed::Cut
            }
            None => Policed::Drop,
        }
    }
}

fn window_bytes(bytes_per_sec: u64) -> u64 {
    (u128::from(bytes_per_sec) * WINDOW.as_nanos() / 1_000_000_000) as u64
}

impl Windows {
    /// A new window: each port that offered something in the last gets
    /// its allowance from what it offered (its demand), the others'
    /// demands, reservations and shares; ports that offered nothing
    /// leave the table.
    fn roll(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.start);
        // Idle for more than a window: the last one's demands are stale.
        let fresh = elapsed < WINDOW * 2;
        self.start = now;
        self.ports.retain(|_, u| fresh && u.offered > 0);
        // A VM's demand: twice what it offered, so that one below its
        // share (a TCP flow that just backed off) has room to grow back
        // to it while the others take what it leaves.
        let demands: Vec<(usize, Claim, u64)> = self
            .ports
            .iter()
            .filter_map(|(p, u)| Some((*p, u.claim?, u.offered.saturating_mul(2))))
            .collect();
        let alloc = allocate(self.capacity, &demands);
        for (p, a) in alloc {
            if let Some(u) = self.ports.get_mut(&p) {
                // Its tokens so far at the old rate, then the new one.
                u.refill(now);
                u.allowance = a;
                u.tokens = u.tokens.min(burst(a));
                u.offered = 0;
            }
        }
    }

    /// A port's allowance in its first window: its weighted share of the
    /// capacity beside the ports already sending (their claims), and at
    /// least its reservation.
    fn newcomer(&self, claim: Claim) -> u64 {
        let total: u64 = self
            .ports
            .values()
            .filter_map(|u| u.claim)
            .map(|c| u64::from(c.shares))
            .sum::<u64>()
            + u64::from(claim.shares);
        let share = self.capacity * u64::from(claim.shares) / total.max(1);
        share.max(window_bytes(claim.reservation).min(self.capacity))
    }
}

/// Weighted max-min fair allocation of `capacity` bytes among `demands`
/// (port, claim, bytes it wants): reservations first (up to the demand),
/// then the rest by shares, no port past its demand; what is left when
/// every demand is met goes by shares as headroom.
pub fn allocate(capacity: u64, demands: &[(usize, Claim, u64)]) -> Vec<(usize, u64)> {
    let mut got: Vec<u64> = demands
        .iter()
        .map(|(_, c, d)| window_bytes(c.reservation).min(*d))
        .collect();
    let reserved: u64 = got.iter().sum();
    // Reservations past the capacity: scaled down alike.
    if reserved > capacity {
        for g in &mut got {
            *g = (u128::from(*g) * u128::from(capacity) / u128::from(reserved)) as u64;
        }
        return demands.iter().map(|(p, ..)| *p).zip(got).collect();
    }
    let mut left = capacity - reserved;
    let mut wanting: Vec<usize> = (0..demands.len())
        .filter(|&i| got[i] < demands[i].2)
        .collect();
    while left > 0 && !wanting.is_empty() {
        let weight: u64 = wanting
            .iter()
            .map(|&i| u64::from(demands[i].1.shares))
            .sum();
        let mut given = 0;
        let mut still = Vec::new();
        for &i in &wanting {
            let share =
                (u128::from(left) * u128::from(demands[i].1.shares) / u128::from(weight)) as u64;
            let need = demands[i].2 - got[i];
            let g = share.min(need);
            got[i] += g;
            given += g;
            if got[i] < demands[i].2 {
                still.push(i);
            }
        }
        left -= given;
        // Nobody could take more this round (shares rounded to 0).
        if given == 0 {
            break;
        }
        wanting = still;
    }
    // Headroom: what nobody wanted, by shares.
    let weight: u64 = demands.iter().map(|(_, c, _)| u64::from(c.shares)).sum();
    if left > 0 && weight > 0 {
        for (i, (_, c, _)) in demands.iter().enumerate() {
            got[i] += (u128::from(left) * u128::from(c.shares) / u128::from(weight)) as u64;
        }
    }
    demands.iter().map(|(p, ..)| *p).zip(got).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(shares: u32, reservation: u64) -> Claim {
        Claim {
            shares,
            reservation,
        }
    }

    #[test]
    fn shares_divide_what_the_busy_ports_want() {
        // Three ports each wanting everything: 100:50:50.
        let all = [
            (1, claim(100, 0), 1000),
            (2, claim(50, 0), 1000),
            (3, claim(50, 0), 1000),
        ];
        assert_eq!(allocate(1000, &all), [(1, 500), (2, 250), (3, 250)]);
        // One wants little: it gets that, the others split the rest.
        let some = [
            (1, claim(50, 0), 100),
            (2, claim(50, 0), 1000),
            (3, claim(50, 0), 1000),
        ];
        assert_eq!(allocate(1000, &some), [(1, 100), (2, 450), (3, 450)]);
        // Nobody wants it all: each gets its demand and headroom by shares.
        let few = [(1, claim(50, 0), 100), (2, claim(50, 0), 100)];
        assert_eq!(allocate(1000, &few), [(1, 500), (2, 500)]);
    }

    #[test]
    fn a_reservation_comes_first() {
        // Port 1 reserves 50 bytes a window's worth (2500 B/s at 20 ms).
        let r = 2500;
        let d = [(1, claim(1, r), 1000), (2, claim(100, 0), 1000)];
        let got = allocate(1000, &d);
        assert_eq!(got[0].0, 1);
        assert!(got[0].1 >= 50, "{got:?}");
        // All of it given, but for shares' rounding.
        assert!((990..=1000).contains(&got.iter().map(|g| g.1).sum::<u64>()));
    }

    #[test]
    fn the_allocation_never_exceeds_the_capacity() {
        use proptest::prelude::*;
        proptest!(|(cap in 0u64..1_000_000, ds in proptest::collection::vec((1u32..=100, 0u64..10_000_000, 0u64..2_000_000), 0..8))| {
            let demands: Vec<_> = ds.iter().enumerate().map(|(i, &(s, r, d))| (i, claim(s, r), d)).collect();
            let got = allocate(cap, &demands);
            prop_assert!(got.iter().map(|g| g.1).sum::<u64>() <= cap);
        });
    }
}
