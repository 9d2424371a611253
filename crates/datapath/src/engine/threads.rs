//! The switch's threads, and the supervisor a delivery thread runs under.
//!
//! Threads:
//! - `worker{n}`, one per CPU of `[switch] cpus` ([`crate::engine::pool`]):
//!   each owns some receive queues of any ports, reads them in batches and
//!   carries every frame to its destination itself;
//! - `{port}_rx{n}` ([`crate::deliver`]), only for a port with `delivery =
//!   "thread"` (a lab option): the guest's "vCPU" for receive, draining
//!   receive queue `n`'s lanes into the device;
//! - `housekeeping`: sweeps the FDB and the multicast database, pins guests' addresses back, and
//!   moves queues between workers by their load, a few times a second.
//!
//! A delivery thread runs under a supervisor: a panic is logged and
//! counted, the thread starts again with fresh state, and after
//! [`MAX_RESTARTS`] failures the port is marked failed (shown in `hvnet
//! ports`), never silently dead. A worker treats a queue's panic the same
//! way, and goes on with its other queues.

use crate::engine::pool::placement::{self, QueueLoad};
use crate::engine::pool::QueueId;
use crate::engine::{Port, Switch, ThreadInfo};
use crate::settings::Delivery;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often queue loads are read and queues moved.
const REBALANCE_EVERY: Duration = Duration::from_secs(1);

impl Switch {
    /// Starts the workers, gives them every port's queues, and starts the
    /// delivery threads of ports that ask for them and the housekeeping
    /// thread.
    pub fn start(self: &Arc<Switch>) -> Vec<JoinHandle<()>> {
        let mut handles = self.workers.start(self);
        let _one = self.table_changes.lock().expect("table changes lock");
        self.running.store(true, Ordering::Release);
        for p in self.ports().iter() {
            self.workers.adopt_port(self, p);
            if p.settings().shaped().delivery == Delivery::Thread {
                handles.extend(self.start_delivery(p));
            }
        }
        let sw = Arc::clone(self);
        handles.push(
            std::thread::Builder::new()
                .name("housekeeping".into())
                .spawn(move || {
                    let mut last = (Instant::now(), HashMap::new());
                    while !sw.stopping() {
                        std::thread::sleep(Duration::from_millis(200));
                        sw.fdb.sweep(Instant::now(), None);
                        sw.mdb.sweep(Instant::now());
                        sw.tunnel_group_pruning(Instant::now());
                        if last.0.elapsed() >= REBALANCE_EVERY {
                            // A guest back from a migration is pinned again
                            // within a second (a frame from it is learned
                            // meanwhile).
                            sw.pin_present_guests();
                            last = sw.sample_loads(last);
                        }
                    }
                })
                .expect("spawn housekeeping"),
        );
        handles
    }

    /// Tells each tunnel endpoint, per VNI it carries, whether a querier
    /// keeps that segment's memberships true (its head-end replication of
    /// group frames is pruned only then), and sweeps its expired group
    /// remotes. Its own VNI carries the uplink's VLAN; `vlans` maps the
    /// others: each VLAN has its own querier, or none.
    pub(crate) fn tunnel_group_pruning(&self, now: Instant) {
        let ports = self.ports();
        for (id, vtep) in self.endpoints.read().expect("lock").iter() {
            let Some(p) = ports.get(*id) else {
                continue;
            };
            for (vlan, vni) in vtep.segments() {
                let vlan = vlan.unwrap_or(p.vlan());
                for (fam, kind) in [
                    (crate::mdb::Family::Ipv4, hvnet_wire::NetKind::Ipv4),
                    (crate::mdb::Family::Ipv6, hvnet_wire::NetKind::Ipv6),
                ] {
                    let on = self.mdb.config().enabled && self.mdb.querier_exists(vlan, fam, now);
                    vtep.set_group_pruning(vni, kind, on);
                }
            }
            vtep.sweep_groups(now);
        }
    }

    /// Starts the delivery threads of `port`'s queues, once.
    pub(crate) fn start_delivery(self: &Arc<Switch>, port: &Arc<Port>) -> Vec<JoinHandle<()>> {
        if !port.claim_delivery_threads() {
            return Vec::new();
        }
        (0..port.rxq.len())
            .map(|q| {
                supervised(
                    format!("{}_rx{q}", port.name),
                    ("delivery", q),
                    Arc::clone(self),
                    Arc::clone(port),
                    move |sw, port| crate::deliver::deliver_loop(&sw, &port, q),
                )
            })
            .collect()
    }

    /// One look at the queues' loads since `since` (when, and each
    /// queue's busy time then), kept for the views; with `rebalance` on,
    /// moves what [`placement::rebalance`] says.
    fn sample_loads(
        &self,
        (t0, busy0): (Instant, HashMap<QueueId, u64>),
    ) -> (Instant, HashMap<QueueId, u64>) {
        let now = Instant::now();
        let wall = now.duration_since(t0).as_nanos().max(1) as f64;
        let mut busy = HashMap::new();
        let mut loads = Vec::new();
        let ports = self.ports();
        for w in self.workers.all() {
            for ((p, q), _) in w.queues() {
                let Some(c) = ports.get(p).and_then(|p| p.ingress.get(q)) else {
                    continue;
                };
                let ns = c.busy_ns.load(Ordering::Relaxed);
                let was = busy0.get(&(p, q)).copied().unwrap_or(ns);
                busy.insert((p, q), ns);
                loads.push(QueueLoad {
                    id: (p, q),
                    worker: w.index,
                    load: ns.saturating_sub(was) as f64 / wall,
                });
            }
        }
        self.workers
            .set_last_loads(loads.iter().map(|l| (l.id, l.load)).collect());
        if !self.rebalance {
            return (now, busy);
        }
        for m in placement::rebalance(self.workers.all().len(), &loads) {
            if self.workers.move_queue(m.id, m.from, m.to) {
                tracing::info!(
                    port = %ports.get(m.id.0).map_or("?", |p| p.name.as_str()), queue = m.id.1, from = m.from, to = m.to,
                    "queue moved between workers by load"
                );
            }
        }
        (now, busy)
    }
}

/// Runs `body` on a named thread, again after a panic (logged and counted
/// on the port), until it returns or the port failed too often.
fn supervised(
    name: String,
    (role, queue): (&'static str, usize),
    sw: Arc<Switch>,
    port: Arc<Port>,
    body: impl Fn(Arc<Switch>, Arc<Port>) + Send + 'static,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            port.threads.lock().expect("threads lock").push(ThreadInfo {
                name: name.clone(),
                tid: hvnet_sys::gettid(),
                role,
                queue,
            });
            supervise(&name, &sw, &port, &body);
            port.threads
                .lock()
                .expect("threads lock")
                .retain(|t| t.name != name);
        })
        .expect("spawn port thread")
}

fn supervise(
    name: &str,
    sw: &Arc<Switch>,
    port: &Arc<Port>,
    body: &impl Fn(Arc<Switch>, Arc<Port>),
) {
    loop {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            body(Arc::clone(sw), Arc::clone(port))
        }));
        if r.is_ok() || sw.stopping() {
            return;
        }
        if !port.failed(&format!("thread {name}")) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{PortState, SwitchConfig};
    use crate::harness::Harness;
    use crate::settings::PortSettings;
    use crate::MAX_RESTARTS;
    use hvnet_wire::MacAddr;
    use std::sync::atomic::AtomicU64;

    /// A switch with one port, the port, and a run counter.
    fn one_port() -> (Harness, Arc<Port>, Arc<AtomicU64>) {
        let h = Harness::new(
            &[(MacAddr([2, 0, 0, 0, 0, 1]), 1, PortSettings::default())],
            SwitchConfig::default(),
        );
        let port = Arc::clone(&h.sw.ports()[0]);
        (h, port, Arc::new(AtomicU64::new(0)))
    }

    #[test]
    fn a_thread_that_keeps_failing_is_restarted_then_its_port_marked_failed() {
        let (h, port, runs) = one_port();
        let r = Arc::clone(&runs);
        let t = supervised(
            "p0_test".into(),
            ("ingress", 0),
            Arc::clone(&h.sw),
            Arc::clone(&port),
            move |_, _| {
                r.fetch_add(1, Ordering::Relaxed);
                panic!("injected failure");
            },
        );
        t.join().unwrap();
        assert_eq!(
            runs.load(Ordering::Relaxed),
            MAX_RESTARTS,
            "started again after each failure"
        );
        assert_eq!(port.thread_failures.load(Ordering::Relaxed), MAX_RESTARTS);
        assert_eq!(port.state(), PortState::Failed);
        assert!(!port.is_up());
    }

    #[test]
    fn a_thread_that_fails_once_runs_again_and_the_port_stays_up() {
        let (h, port, runs) = one_port();
        let r = Arc::clone(&runs);
        supervised(
            "p0_test".into(),
            ("ingress", 0),
            Arc::clone(&h.sw),
            Arc::clone(&port),
            move |_, _| {
                if r.fetch_add(1, Ordering::Relaxed) == 0 {
                    panic!("injected failure");
                }
            },
        )
        .join()
        .unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), 2);
        assert_eq!(port.thread_failures.load(Ordering::Relaxed), 1);
        assert_eq!(port.state(), PortState::Up);
    }
}
