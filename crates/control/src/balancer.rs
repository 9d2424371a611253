//! Dynamic NetQueue (`netqueue = "dynamic"`): a load balancer over an
//! uplink's receive queues, as NIC Technology in vSphere describes vSphere's
//! (docs/references.md). VM filters
//! start packed on one queue; each second the balancer reads how long the
//! datapath's workers spent on each queue (its `busy_ns`) and
//! how many frames each VM received, gives each filter its share of its
//! queue's CPU, and then:
//! - spreads: a queue whose worker spent more than the threshold (a share of
//!   one core) gives a filter to the least busy queue, if that lowers the
//!   busiest load (not if it only moves the hot spot);
//! - packs: when the two least busy queues in use together stay under half
//!   the threshold for [`PACK_AFTER`] seconds in a row, the lighter one's
//!   filters join the other.
//!
//! At most one move a second, and the band between half the threshold and
//! the threshold is hysteresis: nothing moves there. The kernel swaps the
//! fanout program atomically ([`hvnet_port::UplinkPort::set_filters`]).
//! Decisions are logged and shown under `hvnet stats /uplinks/U/filters`.

use hvnet_datapath::Switch;
use hvnet_port::netqueue::{Filter, Filters};
use hvnet_wire::MacAddr;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Decisions kept for the view.
const KEPT: usize = 16;

/// Steps (seconds) the pack condition must hold in a row before filters
/// are packed: a pause between bursts does not undo a spread.
pub const PACK_AFTER: u32 = 5;

/// One move of a filter (or of a queue's filters, when packing).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decision {
    /// Seconds since the balancer started.
    pub at_s: u64,
    /// `spread` or `pack`.
    pub action: &'static str,
    /// The filters moved.
    pub macs: Vec<String>,
    /// From queue.
    pub from: u32,
    /// To queue.
    pub to: u32,
    /// The loads that made it (share of a core).
    pub reason: String,
}

/// The balancer's state: where each filter is, and what it did.
#[derive(Debug)]
pub struct Balancer {
    /// A queue's thread may use this share of a core before its filters
    /// are spread.
    pub threshold: f64,
    /// Receive queues, the default queue 0 included.
    queues: u32,
    tunnel: Option<u16>,
    assign: BTreeMap<MacAddr, u32>,
    moves: u64,
    /// Steps in a row the two least busy queues were quiet enough to pack.
    quiet: u32,
    decisions: VecDeque<Decision>,
    last_queue_load: Vec<f64>,
    last_filter_load: BTreeMap<MacAddr, f64>,
    /// The VMs filtered, by port name (VMs added and removed at run time
    /// join and leave).
    vms: Vec<(String, MacAddr)>,
}

impl Balancer {
    /// Every filter on queue 1: packed, as the balancer starts.
    pub fn new(macs: &[MacAddr], queues: u32, tunnel: Option<u16>, threshold: f64) -> Balancer {
        Balancer {
            threshold,
            queues,
            tunnel,
            assign: macs.iter().map(|&m| (m, 1)).collect(),
            moves: 0,
            quiet: 0,
            decisions: VecDeque::new(),
            last_queue_load: vec![0.0; queues as usize],
            last_filter_load: BTreeMap::new(),
            vms: Vec::new(),
        }
    }

    /// A VM added at run time gets a filter, on the least loaded of the
    /// filtered queues at the last step (packed on queue 1 when all are
    /// idle); the caller installs [`Balancer::filters`].
    pub fn join(&mut self, name: &str, mac: MacAddr) {
        if self.queues < 2 || self.assign.contains_key(&mac) {
            return;
        }
        let q = (1..self.queues)
            .min_by(|a, b| {
                let load = |q: &u32| {
                    self.last_queue_load
                        .get(*q as usize)
                        .copied()
                        .unwrap_or(0.0)
                };
                load(a).total_cmp(&load(b))
            })
            .unwrap_or(1);
        self.assign.insert(mac, q);
        self.vms.push((name.to_string(), mac));
    }

    /// A VM removed at run time loses its filter (its frames, if any
    /// still come, go to the default queue); true if it had one.
    pub fn leave(&mut self, mac: MacAddr) -> bool {
        self.vms.retain(|(_, m)| *m != mac);
        self.last_filter_load.remove(&mac);
        self.assign.remove(&mac).is_some()
    }

    /// The filter table now.
    pub fn filters(&self) -> Filters {
        Filters {
            tunnel: self.tunnel,
            entries: self
                .assign
                .iter()
                .map(|(&mac, &queue)| Filter { mac, queue })
                .collect(),
        }
    }

    /// The queue of each filter.
    pub fn queue_of(&self, mac: &MacAddr) -> Option<u32> {
        self.assign.get(mac).copied()
    }

    /// One step. `queue_load[q]`: the share of a core queue `q`'s thread
    /// used; `frames[mac]`: frames each filter's VM received. Returns the
    /// move made, if any (the caller installs [`Balancer::filters`]).
    pub fn step(
        &mut self,
        at_s: u64,
        queue_load: &[f64],
        frames: &BTreeMap<MacAddr, u64>,
    ) -> Option<Decision> {
        // Each filter's share of its queue's CPU, by its share of the
        // queue's frames.
        let mut on_queue: BTreeMap<u32, u64> = BTreeMap::new();
        for (mac, &q) in &self.assign {
            *on_queue.entry(q).or_default() += frames.get(mac).copied().unwrap_or(0);
        }
        let load_of = |mac: &MacAddr, q: u32| {
            let total = on_queue.get(&q).copied().unwrap_or(0);
            let cpu = queue_load.get(q as usize).copied().unwrap_or(0.0);
            if total == 0 {
                0.0
            } else {
                cpu * frames.get(mac).copied().unwrap_or(0) as f64 / total as f64
            }
        };
        let filter_load: BTreeMap<MacAddr, f64> = self
            .assign
            .iter()
            .map(|(m, &q)| (*m, load_of(m, q)))
            .collect();
        self.last_queue_load = (0..self.queues)
            .map(|q| queue_load.get(q as usize).copied().unwrap_or(0.0))
            .collect();
        self.last_filter_load = filter_load.clone();
        let mut load = vec![0.0f64; self.queues as usize];
        for (m, &q) in &self.assign {
            load[q as usize] += filter_load[m];
        }
        let used = self.queues_used();
        let (mut d, moved) = match self.spread(&load, &filter_load) {
            Some(s) => {
                self.quiet = 0;
                s
            }
            None => match self.pack(&load, &used) {
                Some(p) => {
                    self.quiet += 1;
                    if self.quiet < PACK_AFTER {
                        return None;
                    }
                    self.quiet = 0;
                    p
                }
                None => {
                    self.quiet = 0;
                    return None;
                }
            },
        };
        d.at_s = at_s;
        for mac in &moved {
            self.assign.insert(*mac, d.to);
        }
        self.moves += moved.len() as u64;
        if self.decisions.len() == KEPT {
            self.decisions.pop_front();
        }
        self.decisions.push_back(d.clone());
        Some(d)
    }

    /// The busiest queue above the threshold gives one filter to the least
    /// busy queue, when that lowers the busiest load.
    fn spread(
        &self,
        load: &[f64],
        filter_load: &BTreeMap<MacAddr, f64>,
    ) -> Option<(Decision, Vec<MacAddr>)> {
        let (from, &busiest) = load
            .iter()
            .enumerate()
            .skip(1)
            .max_by(|a, b| a.1.total_cmp(b.1))?;
        let from = from as u32;
        let mine: Vec<(MacAddr, f64)> = self
            .assign
            .iter()
            .filter(|(_, &q)| q == from)
            .map(|(m, _)| (*m, filter_load[m]))
            .collect();
        if busiest <= self.threshold || mine.len() < 2 {
            return None;
        }
        let (to, &spare) = load
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(q, _)| *q as u32 != from)
            .min_by(|a, b| a.1.total_cmp(b.1))?;
        // The filter that evens the two queues best without overshooting:
        // the largest at most half the difference, else the lightest.
        let half = (busiest - spare) / 2.0;
        let pick = mine
            .iter()
            .filter(|(_, l)| *l <= half)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .or_else(|| mine.iter().min_by(|a, b| a.1.total_cmp(&b.1)))?;
        // Only a move that lowers the busiest load: never one that just
        // moves the hot spot.
        if spare + pick.1 >= busiest {
            return None;
        }
        let d = Decision {
            at_s: 0,
            action: "spread",
            macs: vec![pick.0.to_string()],
            from,
            to: to as u32,
            reason: format!(
                "queue {from} at {:.0}% of a core, above {:.0}%; queue {to} at {:.0}%",
                busiest * 100.0,
                self.threshold * 100.0,
                spare * 100.0
            ),
        };
        Some((d, vec![pick.0]))
    }

    /// The two least busy queues in use, together under half the
    /// threshold: the lighter one's filters join the other.
    fn pack(&self, load: &[f64], used: &[u32]) -> Option<(Decision, Vec<MacAddr>)> {
        if used.len() < 2 {
            return None;
        }
        let mut by_load: Vec<u32> = used.to_vec();
        by_load.sort_by(|a, b| load[*a as usize].total_cmp(&load[*b as usize]));
        let (light, other) = (by_load[0], by_load[1]);
        let together = load[light as usize] + load[other as usize];
        if together >= self.threshold / 2.0 {
            return None;
        }
        let moved: Vec<MacAddr> = self
            .assign
            .iter()
            .filter(|(_, &q)| q == light)
            .map(|(m, _)| *m)
            .collect();
        let d = Decision {
            at_s: 0,
            action: "pack",
            macs: moved.iter().map(MacAddr::to_string).collect(),
            from: light,
            to: other,
            reason: format!(
                "queues {light} and {other} together at {:.0}% of a core, under {:.0}%",
                together * 100.0,
                self.threshold * 50.0
            ),
        };
        Some((d, moved))
    }

    /// The queues that hold a filter, in order.
    fn queues_used(&self) -> Vec<u32> {
        let mut used: Vec<u32> = self.assign.values().copied().collect();
        used.sort_unstable();
        used.dedup();
        used
    }

    /// What `hvnet stats /uplinks/U/filters` shows of the balancer.
    pub fn view(&self) -> Value {
        json!({
            "mode": "dynamic",
            "threshold_pct": self.threshold * 100.0,
            "queues_used": self.queues_used().len(),
            "moves": self.moves,
            "queue_load_pct": self.last_queue_load.iter().map(|l| (l * 1000.0).round() / 10.0).collect::<Vec<_>>(),
            "filter_load_pct": self.last_filter_load.iter()
                .map(|(m, l)| (m.to_string(), (l * 1000.0).round() / 10.0))
                .collect::<BTreeMap<_, _>>(),
            "decisions": self.decisions,
        })
    }
}

/// A balancer shared between its thread and the control socket's views.
pub type Shared = Arc<Mutex<Balancer>>;

/// Runs the balancer of uplink `uplink` (its filters: the VMs `vms`, by
/// name and MAC) once a second until the switch stops or the uplink's
/// port leaves it (an uplink removed at run time; one added again under
/// its name is a port of its own, with a balancer of its own).
pub fn spawn(
    sw: Arc<Switch>,
    uplink: String,
    vms: Vec<(String, MacAddr)>,
    threshold_pct: u32,
) -> std::io::Result<(std::thread::JoinHandle<()>, Shared)> {
    let port = sw.port(&uplink).expect("the uplink is a port");
    let (queues, tunnel) = (
        port.dev.num_queues() as u32,
        port.dev.filters().and_then(|f| f.tunnel),
    );
    let macs: Vec<MacAddr> = vms.iter().map(|(_, m)| *m).collect();
    let mut balancer = Balancer::new(&macs, queues, tunnel, f64::from(threshold_pct) / 100.0);
    balancer.vms = vms;
    let shared = Arc::new(Mutex::new(balancer));
    let b = shared.clone();
    let handle = std::thread::Builder::new()
        .name(format!("{uplink}_balancer"))
        .spawn(move || {
            let start = Instant::now();
            let frames_now = || -> BTreeMap<MacAddr, u64> {
                let vms = b.lock().expect("balancer lock").vms.clone();
                vms.iter()
                    .filter_map(|(name, mac)| Some((*mac, sw.port(name)?.egress_stats().offered)))
                    .collect()
            };
            let cpu_now = || -> Vec<u64> {
                (0..queues as usize)
                    .map(|q| port.ingress.get(q).map_or(0, |c| c.busy_ns.load(Ordering::Relaxed)))
                    .collect()
            };
            let (mut frames0, mut cpu0, mut t0) = (frames_now(), cpu_now(), Instant::now());
            let present = || sw.port(&uplink).is_some_and(|p| Arc::ptr_eq(&p, &port));
            while !sw.stopping() {
                std::thread::sleep(INTERVAL);
                if !present() {
                    break;
                }
                let (frames1, cpu1, t1) = (frames_now(), cpu_now(), Instant::now());
                let wall = t1.duration_since(t0).as_nanos().max(1) as f64;
                let load: Vec<f64> = cpu1
                    .iter()
                    .zip(&cpu0)
                    .map(|(a, b)| a.saturating_sub(*b) as f64 / wall)
                    .collect();
                let delta: BTreeMap<MacAddr, u64> = frames1
                    .iter()
                    .map(|(m, n)| (*m, n.saturating_sub(frames0.get(m).copied().unwrap_or(0))))
                    .collect();
                let mut bal = b.lock().expect("balancer lock");
                if let Some(d) = bal.step(start.elapsed().as_secs(), &load, &delta) {
                    match port.dev.set_filters(bal.filters()) {
                        Ok(()) => tracing::info!(
                            uplink = %uplink, action = d.action, filters = ?d.macs,
                            from = d.from, to = d.to, reason = %d.reason, "netqueue balancer"
                        ),
                        Err(e) => tracing::warn!(uplink = %uplink, error = %e, "netqueue balancer: filters not installed"),
                    }
                }
                drop(bal);
                (frames0, cpu0, t0) = (frames1, cpu1, t1);
            }
        })?;
    Ok((handle, shared))
}

/// Starts the balancer of uplink `u` of `topo` where it asks for one
/// (Dynamic NetQueue over two queues or more), over the VMs of its VLAN:
/// at `hvnet up`, and for an uplink added at run time.
pub(crate) fn start(
    sw: &Arc<Switch>,
    topo: &crate::topology::Topology,
    u: &crate::topology::Uplink,
) -> std::io::Result<Option<(std::thread::JoinHandle<()>, Shared)>> {
    if u.netqueue != crate::topology::NetQueueMode::Dynamic || u.queues < 2 {
        return Ok(None);
    }
    let vms = topo.vms_on(u).map(|v| (v.name.clone(), v.mac)).collect();
    spawn(sw.clone(), u.name.clone(), vms, u.netqueue_threshold).map(Some)
}

/// A VM added (`joined`) or removed at run time on the uplink of
/// `shared`: its filter installed or taken away now, not at the next
/// step.
pub fn vm_changed(
    sw: &Switch,
    uplink: &str,
    shared: &Shared,
    vm: &str,
    mac: MacAddr,
    joined: bool,
) {
    let Some(port) = sw.port(uplink) else {
        return;
    };
    let mut bal = shared.lock().expect("balancer lock");
    let changed = if joined {
        bal.join(vm, mac);
        true
    } else {
        bal.leave(mac)
    };
    if changed {
        if let Err(e) = port.dev.set_filters(bal.filters()) {
            tracing::warn!(uplink = %uplink, vm = %vm, error = %e, "netqueue: filters not installed");
        }
    }
}

/// How often the balancer looks.
const INTERVAL: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(i: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, i])
    }

    fn frames(v: &[(u8, u64)]) -> BTreeMap<MacAddr, u64> {
        v.iter().map(|&(i, n)| (mac(i), n)).collect()
    }

    #[test]
    fn starts_packed_and_spreads_a_busy_queue() {
        let mut b = Balancer::new(&[mac(1), mac(2)], 3, None, 0.6);
        assert!(b.filters().entries.iter().all(|f| f.queue == 1));
        // Queue 1 at 90 % of a core, the two VMs equally.
        let d = b
            .step(1, &[0.0, 0.9, 0.0], &frames(&[(1, 1000), (2, 1000)]))
            .expect("a spread");
        assert_eq!((d.action, d.from, d.to), ("spread", 1, 2));
        assert_ne!(b.queue_of(&mac(1)), b.queue_of(&mac(2)));
        assert_eq!(b.view()["queues_used"], 2);
    }

    #[test]
    fn a_vm_added_joins_the_least_loaded_queue_and_a_removed_one_leaves() {
        let mut b = Balancer::new(&[mac(1), mac(2)], 3, None, 0.6);
        b.step(1, &[0.0, 0.9, 0.0], &frames(&[(1, 1000), (2, 1000)]));
        b.step(2, &[0.0, 0.5, 0.1], &frames(&[(1, 10), (2, 10)]));
        b.join("v3", mac(3));
        assert_eq!(b.queue_of(&mac(3)), Some(2), "queue 2 was the less loaded");
        assert_eq!(b.vms, [("v3".to_string(), mac(3))]);
        assert!(b.leave(mac(3)));
        assert!(!b.leave(mac(3)), "once");
        assert_eq!(b.queue_of(&mac(3)), None);
        assert!(b.filters().entries.iter().all(|f| f.mac != mac(3)));
        // One queue only (the default): no filters at all.
        let mut one = Balancer::new(&[], 1, None, 0.6);
        one.join("v4", mac(4));
        assert!(one.filters().entries.is_empty());
    }

    #[test]
    fn the_band_between_half_and_the_threshold_moves_nothing() {
        let mut b = Balancer::new(&[mac(1), mac(2)], 3, None, 0.6);
        b.step(1, &[0.0, 0.9, 0.0], &frames(&[(1, 1000), (2, 1000)]));
        // Two queues at 20 % each: 40 %, above half the threshold.
        assert_eq!(
            b.step(2, &[0.0, 0.2, 0.2], &frames(&[(1, 10), (2, 10)])),
            None
        );
        // A queue at 50 %: below the threshold, no spread either.
        assert_eq!(
            b.step(3, &[0.0, 0.5, 0.1], &frames(&[(1, 10), (2, 10)])),
            None
        );
    }

    #[test]
    fn quiet_queues_are_packed_again() {
        let mut b = Balancer::new(&[mac(1), mac(2), mac(3)], 4, None, 0.6);
        b.step(
            1,
            &[0.0, 0.9, 0.0, 0.0],
            &frames(&[(1, 10), (2, 10), (3, 10)]),
        );
        let quiet = |b: &mut Balancer, at| {
            b.step(
                at,
                &[0.0, 0.05, 0.05, 0.0],
                &frames(&[(1, 1), (2, 1), (3, 1)]),
            )
        };
        // Quiet for fewer than PACK_AFTER steps in a row (a busy step
        // between): nothing moves.
        for at in 2..1 + u64::from(PACK_AFTER) {
            assert_eq!(quiet(&mut b, at), None);
        }
        let busy = b.step(9, &[0.0, 0.2, 0.2, 0.0], &frames(&[(1, 1), (2, 1), (3, 1)]));
        assert_eq!(busy, None);
        for at in 10..9 + u64::from(PACK_AFTER) {
            assert_eq!(quiet(&mut b, at), None);
        }
        let d = quiet(&mut b, 20).expect("a pack");
        assert_eq!(d.action, "pack");
        assert_eq!(b.view()["queues_used"], 1);
        assert_eq!(
            b.view()["moves"],
            3,
            "one spread, then the two left packed onto it"
        );
    }

    #[test]
    fn no_spread_that_only_moves_the_hot_spot() {
        let mut b = Balancer::new(&[mac(1), mac(2)], 2, None, 0.6);
        // Only queue 1 besides the default: nowhere to go.
        assert_eq!(b.step(1, &[0.0, 0.95], &frames(&[(1, 5), (2, 5)])), None);
        // Queue 2 as busy as queue 1: a move would not lower the busiest.
        let mut c = Balancer::new(&[mac(1), mac(2), mac(3)], 3, None, 0.6);
        c.step(1, &[0.0, 0.9, 0.0], &frames(&[(1, 10), (2, 10), (3, 10)]));
        let on_2 = [1, 2, 3]
            .iter()
            .filter(|&&i| c.queue_of(&mac(i)) == Some(2))
            .count();
        assert_eq!(on_2, 1);
        assert_eq!(
            c.step(2, &[0.0, 0.9, 0.9], &frames(&[(1, 10), (2, 10), (3, 10)])),
            None
        );
        // A single filter on a busy queue stays: moving it helps nobody.
        let mut one = Balancer::new(&[mac(1)], 3, None, 0.6);
        assert_eq!(one.step(1, &[0.0, 0.95, 0.0], &frames(&[(1, 5)])), None);
    }

    #[test]
    fn the_move_evens_the_queues_without_overshooting() {
        let mut b = Balancer::new(&[mac(1), mac(2), mac(3)], 3, None, 0.6);
        // 1 carries most of queue 1's load: moving it would only move the
        // hot spot, so a lighter one goes.
        let d = b
            .step(1, &[0.0, 1.0, 0.0], &frames(&[(1, 800), (2, 150), (3, 50)]))
            .unwrap();
        assert_eq!(d.macs, vec![mac(2).to_string()]);
    }
}
