//! `load-based` teaming (vSphere's "route based on physical NIC load"):
//! every 30 s, a member whose traffic both ways averaged more than 75 % of
//! its speed gives its busiest VM to the least loaded usable member — if
//! that VM's traffic fits there under the same mark (else moving it would
//! only move the problem, and the next look would move it back). Pure:
//! byte counts and time are passed in.

use super::policy::Placements;
use hvnet_wire::MacAddr;
use std::time::{Duration, Instant};

/// How long a look averages over.
pub const WINDOW: Duration = Duration::from_secs(30);
/// Busier than this share of its speed (percent), a member gives a VM away.
pub const THRESHOLD_PCT: u64 = 75;

/// The load looks of one team.
#[derive(Debug)]
pub struct LoadLook {
    /// Each member's speed, bits a second.
    speeds: Vec<u64>,
    last: Option<Instant>,
    /// Each member's bytes both ways at the last look.
    bytes: Vec<u64>,
}

impl LoadLook {
    /// Looks for members of these speeds (bits a second).
    pub fn new(speeds: Vec<u64>) -> LoadLook {
        let n = speeds.len();
        LoadLook {
            speeds,
            last: None,
            bytes: vec![0; n],
        }
    }

    /// At `now`, with each member's bytes both ways so far: once a
    /// [`WINDOW`] passed, the VM to move off a member busier than
    /// [`THRESHOLD_PCT`] (its new home set in `placements`), if any.
    pub fn look(
        &mut self,
        now: Instant,
        member_bytes: &[u64],
        placements: &mut Placements,
        usable: &[usize],
    ) -> Option<(MacAddr, usize)> {
        let Some(last) = self.last else {
            self.start(now, member_bytes, placements);
            return None;
        };
        let secs = now.duration_since(last).as_secs_f64();
        if now.duration_since(last) < WINDOW {
            return None;
        }
        let rate = |bytes: u64| (bytes as f64 * 8.0 / secs) as u64;
        let load: Vec<u64> = member_bytes
            .iter()
            .zip(&self.bytes)
            .map(|(b, was)| rate(b.saturating_sub(*was)))
            .collect();
        let limit = |m: usize| self.speeds[m] / 100 * THRESHOLD_PCT;
        let busy = usable
            .iter()
            .copied()
            .filter(|&m| load[m] > limit(m))
            .max_by_key(|&m| load[m] * 100 / self.speeds[m].max(1));
        let target = usable
            .iter()
            .copied()
            .min_by_key(|&m| load[m] * 100 / self.speeds[m].max(1));
        let mut moved = None;
        if let (Some(from), Some(to)) = (busy, target) {
            let vm = placements
                .iter()
                .filter(|(_, p)| p.now == from)
                .map(|(mac, p)| (*mac, rate(p.bytes.saturating_sub(p.bytes_at_look))))
                .max_by_key(|&(_, r)| r);
            if let Some((mac, _)) = vm.filter(|&(_, r)| to != from && load[to] + r <= limit(to)) {
                placements.rehome(&mac, to);
                moved = Some((mac, to));
            }
        }
        self.start(now, member_bytes, placements);
        moved
    }

    fn start(&mut self, now: Instant, member_bytes: &[u64], placements: &mut Placements) {
        self.last = Some(now);
        self.bytes = member_bytes.to_vec();
        placements.mark_look();
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::{Source, Teaming};
    use super::*;

    const GBIT: u64 = 1_000_000_000;

    fn place(p: &mut Placements, i: u8, usable: &[usize], now: Instant) -> MacAddr {
        let mac = MacAddr([2, 0, 0, 0, 0, i]);
        let s = Source {
            mac,
            tag: None,
            ipv4: None,
            ipv6: None,
        };
        p.member_of(Teaming::LoadBased, &s, 0, usable, 2, now);
        mac
    }

    #[test]
    fn a_busy_member_gives_its_busiest_vm_to_the_idle_one() {
        let t0 = Instant::now();
        let mut p = Placements::default();
        // Three VMs: two land on member 0 (the first, then the third), one
        // on member 1; member 1 then goes away for a while.
        let a = place(&mut p, 1, &[0, 1], t0);
        let b = place(&mut p, 2, &[0, 1], t0);
        let c = place(&mut p, 3, &[0, 1], t0);
        assert_eq!(
            (
                p.get(&a).unwrap().now,
                p.get(&b).unwrap().now,
                p.get(&c).unwrap().now
            ),
            (0, 1, 0)
        );
        let mut l = LoadLook::new(vec![GBIT, GBIT]);
        assert_eq!(l.look(t0, &[0, 0], &mut p, &[0, 1]), None);
        // In 30 s member 0 carried 0.9 Gbit/s (a: 0.6, c: 0.3), member 1 little.
        let bytes = |gbit: f64| (gbit * 30.0 * GBIT as f64 / 8.0) as u64;
        p.get_mut(&a).unwrap().bytes = bytes(0.6);
        p.get_mut(&c).unwrap().bytes = bytes(0.3);
        let t30 = t0 + WINDOW;
        assert_eq!(
            l.look(
                t30 - Duration::from_secs(1),
                &[bytes(0.9), 0],
                &mut p,
                &[0, 1]
            ),
            None,
            "not before the window"
        );
        let moved = l.look(t30, &[bytes(0.9), bytes(0.05)], &mut p, &[0, 1]);
        assert_eq!(moved, Some((a, 1)));
        assert_eq!((p.get(&a).unwrap().home, p.get(&a).unwrap().now), (1, 1));
        // Under the mark, nothing moves.
        let t60 = t30 + WINDOW;
        assert_eq!(
            l.look(t60, &[bytes(1.2), bytes(0.65)], &mut p, &[0, 1]),
            None
        );
    }

    #[test]
    fn a_vm_that_would_overload_the_other_member_stays() {
        let t0 = Instant::now();
        let mut p = Placements::default();
        let a = place(&mut p, 1, &[0, 1], t0);
        let mut l = LoadLook::new(vec![GBIT, GBIT]);
        l.look(t0, &[0, 0], &mut p, &[0, 1]);
        let bytes = |gbit: f64| (gbit * 30.0 * GBIT as f64 / 8.0) as u64;
        p.get_mut(&a).unwrap().bytes = bytes(0.95);
        assert_eq!(
            l.look(t0 + WINDOW, &[bytes(0.95), 0], &mut p, &[0, 1]),
            None
        );
    }
}
