//! The datapath's workers: a fixed pool of threads, one per CPU the switch
//! may use (`[switch] cpus`), each pinned to its CPU, as Open vSwitch's
//! poll-mode threads, VPP's workers and Linux's per-CPU NAPI. Every receive
//! queue of every port — a TAP's, a guest's virtqueue, an uplink's socket,
//! a tunnel endpoint's — belongs to one worker, which reads a burst from it
//! and carries each frame to its destination itself (run to completion:
//! forward, offloads, the write; [`crate::engine::worker`]). The thread count does
//! not depend on the number of ports or queues.
//!
//! A worker sleeps in `epoll` on its queues' notifications (a TAP or
//! socket readable, a guest's kick) and so costs nothing while idle.
//! Woken, it gives each ready queue a turn of up to
//! [`crate::engine::worker::TURN_BATCHES`] batches; a queue left with work, or one
//! whose notifications it turned off while it polls (a guest's virtqueue),
//! stays hot and gets the next turn without a wait. Every [`TICK`] it looks
//! at its idle queues (the kernel's drops, links) and at its ports that
//! are down (one that comes back is read again).
//!
//! Queues join and leave a worker between turns (its inbox, behind an
//! eventfd), which is how they are placed at start and moved by load
//! ([`placement`]). The time each turn takes is the queue's load
//! (`busy_ns`, as `ovs-appctl dpif-netdev/pmd-rxq-show` shows cycles).

pub mod placement;
mod thread;
pub mod weight;

use crate::counters::add;
use crate::engine::worker::{Rxq, Turn};
use crate::engine::{Port, Switch, ThreadInfo};
use hvnet_port::Link;
use hvnet_sys::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use hvnet_sys::{EventFd, EFD_NONBLOCK};
use serde::Serialize;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use weight::{Weight, WorkerNice};

/// How often a worker looks at its idle queues and its ports that are
/// down, and wakes from `epoll` at the latest.
pub const TICK: Duration = Duration::from_millis(100);

/// How often the idle queues are looked at (the kernel's drops, links).
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// Pause before a queue stopped by its port's buffer cap is read again.
const STALL_PAUSE_MS: i32 = 1;

/// The `epoll` token of a worker's own wake-up (its inbox).
const INBOX: u64 = u64::MAX;

/// A queue of a port: (port index, queue index).
pub type QueueId = (usize, usize);

/// A request to a worker, taken between turns.
enum Command {
    /// Take this queue (a new port's, or one moved here).
    Adopt(Box<Rxq>),
    /// Give up queue `id` at the end of its current turn; the queue, with
    /// its state, is sent back (to move it to another worker).
    Release(QueueId, mpsc::Sender<Box<Rxq>>),
}

/// A worker's counters (its thread is their one writer).
#[derive(Default, Debug)]
pub struct WorkerCounters {
    /// Nanoseconds spent in queue turns (its load).
    pub busy_ns: AtomicU64,
    /// Times it slept in `epoll` with no queue hot.
    pub sleeps: AtomicU64,
    /// Times a sleep ended with a queue's notification.
    pub wakeups: AtomicU64,
    /// Queue turns given.
    pub turns: AtomicU64,
}

/// What the pool shares with one worker thread.
pub struct WorkerShared {
    /// Index in the pool.
    pub index: usize,
    /// The CPU it is pinned to.
    pub cpu: usize,
    tid: AtomicI32,
    /// Its nice value now ([`weight`]).
    nice: AtomicI32,
    wake: EventFd,
    inbox: Mutex<Vec<Command>>,
    /// Its counters.
    pub counters: WorkerCounters,
    /// The queues it owns or is about to, by port name and index (kept
    /// by the pool as it places and moves them, so that a placement is
    /// seen at once).
    owned: Mutex<Vec<(QueueId, String)>>,
}

impl WorkerShared {
    /// The thread's name (`top -H`, `/proc/PID/task/TID/comm`).
    pub fn name(&self) -> String {
        format!("worker{}", self.index)
    }

    /// Its kernel thread id (0 until it runs).
    pub fn tid(&self) -> i32 {
        self.tid.load(Ordering::Relaxed)
    }

    /// The queues it owns now.
    pub fn queues(&self) -> Vec<(QueueId, String)> {
        self.owned.lock().expect("owned lock").clone()
    }

    /// Takes queue `id` from this worker at the end of its current turn,
    /// with its state; `None` if the worker does not give it within
    /// `wait`.
    fn take(&self, id: QueueId, wait: Duration) -> Option<Box<Rxq>> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Release(id, tx));
        rx.recv_timeout(wait).ok()
    }

    fn send(&self, c: Command) {
        self.inbox.lock().expect("inbox lock").push(c);
        let _ = self.wake.write(1);
    }
}

/// The pool.
pub struct Workers {
    workers: Vec<Arc<WorkerShared>>,
    /// Each queue's share of a CPU over the last interval the
    /// housekeeping thread measured.
    last: Mutex<HashMap<QueueId, f64>>,
}

/// One queue in a worker's view (`hvnet workers --json`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct QueueView {
    /// Its port.
    pub port: String,
    /// Its index in the port.
    pub queue: usize,
    /// Nanoseconds its worker spent on it, in all.
    pub busy_ns: u64,
    /// Its share of a CPU over the last second, in %.
    pub load_pct: f64,
    /// Its share of its worker's busy time over the last second, in %.
    pub share_pct: f64,
}

/// One worker, for the views.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WorkerView {
    /// Index in the pool.
    pub index: usize,
    /// Its thread's name.
    pub name: String,
    /// Its CPU.
    pub cpu: usize,
    /// Its kernel thread id.
    pub tid: i32,
    /// Nanoseconds spent in queue turns, in all.
    pub busy_ns: u64,
    /// Its CPU's share spent in queue turns over the last second, in %.
    pub busy_pct: f64,
    /// Sleeps in `epoll` with nothing to do.
    pub sleeps: u64,
    /// Wake-ups by a queue's notification.
    pub wakeups: u64,
    /// Queue turns given.
    pub turns: u64,
    /// Its nice value now (`[switch] nice`; with `auto`, as its queues
    /// with traffic weigh).
    pub nice: i32,
    /// Its queues.
    pub queues: Vec<QueueView>,
}

impl Workers {
    /// A pool of one worker per CPU of `cpus` (not yet running).
    pub fn new(cpus: &[usize]) -> std::io::Result<Workers> {
        let mut workers = Vec::with_capacity(cpus.len());
        for (index, &cpu) in cpus.iter().enumerate() {
            workers.push(Arc::new(WorkerShared {
                index,
                cpu,
                tid: AtomicI32::new(0),
                nice: AtomicI32::new(0),
                wake: EventFd::new(EFD_NONBLOCK)?,
                inbox: Mutex::new(Vec::new()),
                counters: WorkerCounters::default(),
                owned: Mutex::new(Vec::new()),
            }));
        }
        Ok(Workers {
            workers,
            last: Mutex::new(HashMap::new()),
        })
    }

    /// The workers.
    pub fn all(&self) -> &[Arc<WorkerShared>] {
        &self.workers
    }

    /// Starts every worker's thread.
    pub(crate) fn start(&self, sw: &Arc<Switch>) -> Vec<JoinHandle<()>> {
        self.workers
            .iter()
            .map(|w| {
                let (w, sw) = (Arc::clone(w), Arc::clone(sw));
                std::thread::Builder::new()
                    .name(w.name())
                    .spawn(move || thread::run(&w, &sw))
                    .expect("spawn a worker")
            })
            .collect()
    }

    /// Gives every receive queue of `port` to a worker: each to the one
    /// with the least load now ([`placement::least_loaded`]).
    pub(crate) fn adopt_port(&self, sw: &Arc<Switch>, port: &Arc<Port>) {
        for q in 0..port.rxq.len() {
            let loads = self.loads();
            let w = &self.workers[placement::least_loaded(&loads)];
            w.owned
                .lock()
                .expect("owned lock")
                .push(((port.id, q), port.name.clone()));
            w.send(Command::Adopt(Box::new(Rxq::new(
                Arc::clone(sw),
                Arc::clone(port),
                q,
            ))));
        }
    }

    /// Load of each worker now, as the placement reads it: its queues'
    /// count and their busy time.
    fn loads(&self) -> Vec<placement::WorkerLoad> {
        self.workers
            .iter()
            .map(|w| placement::WorkerLoad {
                queues: w.owned.lock().expect("owned lock").len(),
                busy_ns: w.counters.busy_ns.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Moves queue `id` from worker `from` to worker `to` at the end of its
    /// current turn: no frame is lost, and the queue is read by one worker
    /// at a time, so none is reordered. False if `from` does not own it.
    pub fn move_queue(&self, id: QueueId, from: usize, to: usize) -> bool {
        let (Some(src), Some(dst)) = (self.workers.get(from), self.workers.get(to)) else {
            return false;
        };
        if from == to {
            return false;
        }
        match src.take(id, Duration::from_secs(5)) {
            Some(rxq) => {
                // Both lists at once, locked in index order (as the views
                // lock them), so a view sees the queue on one worker.
                let (mut a, mut b) = if from < to {
                    let a = src.owned.lock().expect("owned lock");
                    (a, dst.owned.lock().expect("owned lock"))
                } else {
                    let b = dst.owned.lock().expect("owned lock");
                    (src.owned.lock().expect("owned lock"), b)
                };
                if let Some(i) = a.iter().position(|(q, _)| *q == id) {
                    b.push(a.remove(i));
                }
                drop((a, b));
                dst.send(Command::Adopt(rxq));
                true
            }
            None => false,
        }
    }

    /// The workers that own `port`'s queues, as its threads (`hvnet port
    /// VM --json`): one entry per queue.
    pub fn threads_of(&self, port: usize) -> Vec<ThreadInfo> {
        let owned: Vec<_> = self
            .workers
            .iter()
            .map(|w| w.owned.lock().expect("owned lock"))
            .collect();
        let mut out = Vec::new();
        for (w, list) in self.workers.iter().zip(&owned) {
            for ((_, q), _) in list.iter().filter(|((p, _), _)| *p == port) {
                out.push(ThreadInfo {
                    name: w.name(),
                    tid: w.tid(),
                    role: "worker",
                    queue: *q,
                });
            }
        }
        out
    }

    /// Takes every queue of `port` from its worker, each at the end of its
    /// current turn, and lets it go (what it holds flushed, its buffers
    /// given back). Waits up to `wait` for each.
    pub(crate) fn release_port(&self, port: &Port, wait: Duration) {
        for q in 0..port.rxq.len() {
            let id = (port.id, q);
            let Some(w) = self.owner(id) else {
                continue;
            };
            let w = &self.workers[w];
            match w.take(id, wait) {
                Some(mut rxq) => rxq.finish(),
                None => {
                    tracing::warn!(port = %port.name, queue = q, "a worker did not let the queue go in time")
                }
            }
            w.owned
                .lock()
                .expect("owned lock")
                .retain(|(x, _)| *x != id);
        }
    }

    /// Which worker owns queue `id`, if any.
    pub fn owner(&self, id: QueueId) -> Option<usize> {
        self.workers.iter().position(|w| {
            w.owned
                .lock()
                .expect("owned lock")
                .iter()
                .any(|(q, _)| *q == id)
        })
    }

    /// Records each queue's load over the last interval (for the views).
    pub(crate) fn set_last_loads(&self, loads: HashMap<QueueId, f64>) {
        *self.last.lock().expect("loads lock") = loads;
    }

    /// Every worker with its queues, for `hvnet workers`.
    pub fn view(&self, sw: &Switch) -> Vec<WorkerView> {
        let last = self.last.lock().expect("loads lock").clone();
        let ports = sw.ports();
        let load_of = |id: QueueId| last.get(&id).copied().unwrap_or(0.0);
        let pct = |x: f64| (x.max(0.0) * 1000.0).round() / 10.0;
        self.workers
            .iter()
            .map(|w| {
                let c = &w.counters;
                let queues = w.queues();
                let busy: f64 = queues.iter().map(|(id, _)| load_of(*id)).sum();
                WorkerView {
                    index: w.index,
                    name: w.name(),
                    cpu: w.cpu,
                    tid: w.tid(),
                    busy_ns: c.busy_ns.load(Ordering::Relaxed),
                    busy_pct: pct(busy),
                    sleeps: c.sleeps.load(Ordering::Relaxed),
                    wakeups: c.wakeups.load(Ordering::Relaxed),
                    turns: c.turns.load(Ordering::Relaxed),
                    nice: w.nice.load(Ordering::Relaxed),
                    queues: queues
                        .into_iter()
                        .map(|((p, q), name)| QueueView {
                            busy_ns: ports
                                .get(p)
                                .and_then(|p| p.ingress.get(q))
                                .map_or(0, |c| c.busy_ns.load(Ordering::Relaxed)),
                            load_pct: pct(load_of((p, q))),
                            share_pct: if busy > 0.0 {
                                pct(load_of((p, q)) / busy)
                            } else {
                                0.0
                            },
                            port: name,
                            queue: q,
                        })
                        .collect(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
