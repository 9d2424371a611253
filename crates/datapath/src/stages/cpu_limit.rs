//! A port's limit on the workers' time (`cpu_limit`, percent of one
//! worker): its queues' turns, on whichever workers they are, spend a
//! bucket that fills at that share of wall time; a port in debt is not
//! read until it is paid (its frames wait in its own TAP queue or
//! virtqueue, and what does not fit there its kernel or guest drops), as
//! vSphere limits a VM's CPU. A flooding VM's frames cost worker time to
//! read even when its policer drops them — as much as its neighbour's
//! whole transfer (`hostile-neighbour`, docs/perf/rates.md) — and that
//! time is taken from the CPUs the other VMs share.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most a port's bucket holds: this long of its share (a queue idle
/// for a while gets one short burst, not its whole idle time back).
const BURST: Duration = Duration::from_millis(10);

/// A port's worker-time bucket. A port without a limit pays one relaxed
/// load per turn.
#[derive(Debug, Default)]
pub struct CpuLimit {
    percent: AtomicU8,
    bucket: Mutex<Option<Bucket>>,
}

#[derive(Debug)]
struct Bucket {
    /// Nanoseconds of worker time it may spend now (negative: in debt).
    tokens: i64,
    last: Instant,
}

impl CpuLimit {
    /// Takes the port's `cpu_limit` (0: none); a changed limit starts
    /// with a full bucket.
    pub fn apply(&self, percent: u8, now: Instant) {
        if self.percent.swap(percent, Relaxed) != percent {
            *self.bucket.lock().expect("cpu limit lock") = (percent > 0).then(|| Bucket {
                tokens: burst_ns(percent),
                last: now,
            });
        }
    }

    /// The limit, percent of one worker (0: none).
    pub fn percent(&self) -> u8 {
        self.percent.load(Relaxed)
    }

    /// Until when the port's queues wait for their next turn, if the
    /// port is in debt now.
    pub fn held_until(&self, now: Instant) -> Option<Instant> {
        let percent = self.percent.load(Relaxed);
        if percent == 0 {
            return None;
        }
        let mut slot = self.bucket.lock().expect("cpu limit lock");
        let b = slot.as_mut()?;
        refill(b, percent, now);
        (b.tokens < 0).then(|| now + ns_to_earn(-b.tokens, percent))
    }

    /// A turn of one of the port's queues took `ns`.
    pub fn spent(&self, ns: u64, now: Instant) {
        let percent = self.percent.load(Relaxed);
        if percent == 0 {
            return;
        }
        if let Some(b) = self.bucket.lock().expect("cpu limit lock").as_mut() {
            refill(b, percent, now);
            b.tokens = b.tokens.saturating_sub(ns.min(i64::MAX as u64) as i64);
        }
    }
}

fn burst_ns(percent: u8) -> i64 {
    BURST.as_nanos() as i64 * i64::from(percent) / 100
}

fn refill(b: &mut Bucket, percent: u8, now: Instant) {
    let elapsed = now.saturating_duration_since(b.last).as_nanos();
    b.last = b.last.max(now);
    let earned = (elapsed * u128::from(percent) / 100).min(i64::MAX as u128) as i64;
    b.tokens = b.tokens.saturating_add(earned).min(burst_ns(percent));
}

/// Wall time in which a port at `percent` earns `ns` of worker time.
fn ns_to_earn(ns: i64, percent: u8) -> Duration {
    Duration::from_nanos((ns as u64).saturating_mul(100) / u64::from(percent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_over_its_share_waits_until_it_has_earned_its_debt() {
        let t0 = Instant::now();
        let l = CpuLimit::default();
        l.spent(5_000_000, t0);
        assert_eq!(l.held_until(t0), None, "no limit: never held");
        l.apply(10, t0);
        // A full bucket: 10 % of 10 ms.
        assert_eq!(l.held_until(t0), None);
        l.spent(1_000_000, t0);
        assert_eq!(l.held_until(t0), None, "spent exactly its burst");
        l.spent(500_000, t0);
        // 0.5 ms of debt at 10 %: 5 ms to earn.
        assert_eq!(l.held_until(t0), Some(t0 + Duration::from_millis(5)));
        let later = t0 + Duration::from_millis(5);
        assert_eq!(l.held_until(later), None);
        // An idle while earns one burst at most.
        let idle = later + Duration::from_secs(10);
        l.spent(1_000_001, idle);
        assert!(l.held_until(idle).is_some());
        // Off: never held again.
        l.apply(0, idle);
        assert_eq!(l.held_until(idle), None);
    }

    #[test]
    fn over_a_long_run_a_port_gets_its_share() {
        let t0 = Instant::now();
        let l = CpuLimit::default();
        l.apply(25, t0);
        // A queue that always has work: turns of 200 µs whenever allowed.
        let (mut now, mut busy) = (t0, Duration::ZERO);
        let end = t0 + Duration::from_secs(2);
        while now < end {
            match l.held_until(now) {
                Some(until) => now = until,
                None => {
                    l.spent(200_000, now);
                    busy += Duration::from_micros(200);
                    now += Duration::from_micros(200);
                }
            }
        }
        let share = busy.as_secs_f64() / 2.0;
        assert!((0.24..=0.26).contains(&share), "{share}");
    }
}
