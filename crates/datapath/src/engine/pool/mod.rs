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
                    .spawn(move || run(&w, &sw))
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

/// Where a queue stands on its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Waiting for its notification.
    Cold,
    /// Gets a turn without waiting.
    Hot,
    /// Read again after a short pause.
    Stalled,
    /// Its port is down: not in `epoll`, its link looked at every tick.
    Down,
    /// Its port is over its `cpu_limit`: not in `epoll` until then
    /// ([`crate::cpu_limit`]).
    Held(Instant),
}

impl Standing {
    /// True while the queue's descriptor is in the worker's `epoll`.
    fn watched(self) -> bool {
        !matches!(self, Standing::Down | Standing::Held(_))
    }
}

/// A queue on its worker.
struct Owned {
    rxq: Box<Rxq>,
    fd: RawFd,
    standing: Standing,
    /// A tunnel endpoint's resolver, looked at every tick (kept here: a
    /// tick reads this slot array only, not each queue's state).
    ticks: bool,
    /// The tick at which it last had traffic (for the worker's weight).
    active_at: u64,
}

/// A worker's own state.
struct Worker<'a> {
    me: &'a WorkerShared,
    sw: &'a Arc<Switch>,
    epoll: Epoll,
    /// Queues by token (index); freed slots are reused.
    slots: Vec<Option<Owned>>,
    /// Tokens of queues to give a turn to next, woken ones flagged.
    ready: Vec<(usize, bool)>,
    /// When the idle queues are looked at next.
    next_look: Instant,
    /// Its weight, where it follows the queues with traffic
    /// (`nice = "auto"`).
    weight: Option<Weight>,
    /// Ticks so far.
    ticks: u64,
    /// Queues held by their port's `cpu_limit` now.
    held: usize,
}

/// A worker thread's life.
fn run(me: &WorkerShared, sw: &Arc<Switch>) {
    me.tid.store(hvnet_sys::gettid(), Ordering::Relaxed);
    if let Err(e) = hvnet_sys::pin_to_cpu(me.cpu) {
        tracing::warn!(worker = me.index, cpu = me.cpu, error = %e, "worker not pinned to its CPU");
    }
    match sw.worker_nice {
        WorkerNice::Fixed(0) | WorkerNice::Auto => {}
        WorkerNice::Fixed(nice) => set_nice(me, nice),
    }
    let epoll = Epoll::new().expect("epoll_create");
    epoll
        .ctl(
            ControlOperation::Add,
            me.wake.as_raw_fd(),
            EpollEvent::new(EventSet::IN, INBOX),
        )
        .expect("epoll_ctl of the worker's eventfd");
    let mut w = Worker {
        me,
        sw,
        epoll,
        slots: Vec::new(),
        ready: Vec::new(),
        next_look: Instant::now(),
        weight: (sw.worker_nice == WorkerNice::Auto).then(Weight::default),
        ticks: 1,
        held: 0,
    };
    w.serve();
    for o in w.slots.iter_mut().flatten() {
        o.rxq.finish();
    }
}

/// Sets the calling worker's nice value.
fn set_nice(me: &WorkerShared, nice: i32) {
    if let Err(e) = hvnet_sys::set_thread_nice(nice) {
        tracing::warn!(worker = me.index, nice, error = %e, "worker's nice value not set");
    }
    me.nice.store(nice, Ordering::Relaxed);
}

impl Worker<'_> {
    fn serve(&mut self) {
        let mut events = vec![EpollEvent::default(); 64];
        let mut next_tick = Instant::now() + TICK;
        let mut hot = Vec::new();
        while !self.sw.stopping() {
            let stalled = self.ready.is_empty()
                && self
                    .slots
                    .iter()
                    .flatten()
                    .any(|o| o.standing == Standing::Stalled);
            let timeout = if !self.ready.is_empty() {
                0
            } else if stalled {
                STALL_PAUSE_MS
            } else {
                let wake = self.held_until().map_or(next_tick, |h| h.min(next_tick));
                let left = wake.saturating_duration_since(Instant::now());
                // Rounded up: a held queue is not looked at early in vain.
                (left.as_micros().div_ceil(1000)).clamp(1, TICK.as_millis()) as i32
            };
            if timeout > 0 {
                add(&self.me.counters.sleeps, 1);
            }
            let n = match self.epoll.wait(timeout, &mut events) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
                Err(e) => {
                    tracing::error!(worker = self.me.index, error = %e, "epoll_wait failed");
                    std::thread::sleep(TICK);
                    0
                }
            };
            if timeout > 0 && n > 0 {
                add(&self.me.counters.wakeups, 1);
            }
            for ev in &events[..n] {
                if ev.data() == INBOX {
                    let _ = self.me.wake.read();
                    self.take_inbox();
                } else {
                    self.ready.push((ev.data() as usize, true));
                }
            }
            if self.held > 0 {
                self.resume_held(Instant::now());
            }
            if stalled {
                for (t, o) in self.slots.iter().enumerate() {
                    if o.as_ref().is_some_and(|o| o.standing == Standing::Stalled) {
                        self.ready.push((t, false));
                    }
                }
            }
            // Each queue once a round, woken if any reason said so.
            self.ready.sort_unstable_by_key(|(t, _)| *t);
            self.ready.dedup_by(|a, b| {
                let same = a.0 == b.0;
                b.1 |= same && a.1;
                same
            });
            let ready = std::mem::take(&mut self.ready);
            for &(t, woken) in &ready {
                if self.turn(t, woken) {
                    hot.push((t, false));
                }
            }
            self.ready = ready;
            self.ready.clear();
            self.ready.append(&mut hot);
            let now = Instant::now();
            if now >= next_tick {
                next_tick = now + TICK;
                self.tick(now);
            }
        }
    }

    /// The earliest time a queue held by its port's `cpu_limit` may be
    /// read again.
    fn held_until(&self) -> Option<Instant> {
        if self.held == 0 {
            return None;
        }
        self.slots
            .iter()
            .flatten()
            .filter_map(|o| match o.standing {
                Standing::Held(until) => Some(until),
                _ => None,
            })
            .min()
    }

    /// Queues whose hold is over: watched again and given a turn.
    fn resume_held(&mut self, now: Instant) {
        for (t, slot) in self.slots.iter_mut().enumerate() {
            let Some(o) = slot.as_mut() else { continue };
            if matches!(o.standing, Standing::Held(until) if until <= now) {
                o.standing = Standing::Hot;
                self.held -= 1;
                let ev = EpollEvent::new(EventSet::IN, t as u64);
                let _ = self.epoll.ctl(ControlOperation::Add, o.fd, ev);
                self.ready.push((t, true));
            }
        }
    }

    /// Gives queue `t` a turn; true if it is hot afterwards.
    fn turn(&mut self, t: usize, woken: bool) -> bool {
        let Some(o) = self.slots.get_mut(t).and_then(Option::as_mut) else {
            return false;
        };
        if !o.standing.watched() {
            return false;
        }
        let start = Instant::now();
        if let Some(until) = o.rxq.port().cpu.held_until(start) {
            let _ = self
                .epoll
                .ctl(ControlOperation::Delete, o.fd, EpollEvent::default());
            o.standing = Standing::Held(until);
            self.held += 1;
            add(&o.rxq.port().ingress[o.rxq.queue()].cpu_limit_holds, 1);
            return false;
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| o.rxq.turn(woken)));
        let ns = start.elapsed().as_nanos() as u64;
        let (p, q) = (Arc::clone(o.rxq.port()), o.rxq.queue());
        p.cpu.spent(ns, start + Duration::from_nanos(ns));
        add(&p.ingress[q].busy_ns, ns);
        add(&self.me.counters.busy_ns, ns);
        add(&self.me.counters.turns, 1);
        match r {
            Ok(turn) => {
                if let Some(w) = self.weight.as_mut().filter(|_| woken || turn == Turn::Hot) {
                    w.active(o.active_at != self.ticks);
                    o.active_at = self.ticks;
                }
                o.standing = match turn {
                    Turn::Cold => Standing::Cold,
                    Turn::Hot => Standing::Hot,
                    Turn::Stalled => Standing::Stalled,
                };
                if !p.is_up() {
                    self.park(t);
                    return false;
                }
                turn == Turn::Hot
            }
            Err(_) => {
                self.failed(t);
                false
            }
        }
    }

    /// A queue's turn panicked: counted on its port; the queue starts again
    /// with fresh state, or after [`MAX_RESTARTS`] its port is marked
    /// failed and the queue leaves the worker.
    fn failed(&mut self, t: usize) {
        let Some(o) = self.slots[t].take() else {
            return;
        };
        let (port, q) = (Arc::clone(o.rxq.port()), o.rxq.queue());
        let _ = self
            .epoll
            .ctl(ControlOperation::Delete, o.fd, EpollEvent::default());
        drop(o);
        if !port.failed(&format!("queue {q}")) {
            self.forget(&port, q);
            return;
        }
        self.adopt(Box::new(Rxq::new(Arc::clone(self.sw), port, q)));
    }

    /// The port of queue `t` went down: out of `epoll` (a gone device's
    /// descriptor may report an error for ever), looked at every tick.
    fn park(&mut self, t: usize) {
        if let Some(o) = self.slots[t].as_mut() {
            if matches!(o.standing, Standing::Held(_)) {
                self.held -= 1;
            }
            o.standing = Standing::Down;
            let _ = self
                .epoll
                .ctl(ControlOperation::Delete, o.fd, EpollEvent::default());
        }
    }

    /// Every [`TICK`]: idle queues' periodic duties; a down port's queue
    /// read again once its link is back, let go once its device is gone.
    fn tick(&mut self, now: Instant) {
        self.ticks += 1;
        if let Some(nice) = self.weight.as_mut().and_then(Weight::look) {
            set_nice(self.me, nice);
        }
        let look = now >= self.next_look;
        if look {
            self.next_look = now + IDLE_LOOK;
        }
        for t in 0..self.slots.len() {
            let Some(o) = self.slots[t].as_mut() else {
                continue;
            };
            if o.standing != Standing::Down {
                // An idle queue is looked at once a second (its struct not
                // touched in between: thousands of queues stay cheap), a
                // tunnel endpoint's resolver every tick.
                if look || o.ticks {
                    o.rxq.tick(now, look);
                    if !o.rxq.port().is_up() {
                        self.park(t);
                    }
                }
                continue;
            }
            if look {
                o.rxq.read_table();
            }
            match o.rxq.link_while_down() {
                Link::Up => {
                    o.standing = Standing::Hot;
                    let ev = EpollEvent::new(EventSet::IN, t as u64);
                    let _ = self.epoll.ctl(ControlOperation::Add, o.fd, ev);
                    self.ready.push((t, true));
                }
                Link::Down => {}
                Link::Gone => {
                    let mut o = self.slots[t].take().expect("looked at above");
                    o.rxq.finish();
                    let (port, q) = (Arc::clone(o.rxq.port()), o.rxq.queue());
                    self.forget(&port, q);
                }
            }
        }
    }

    fn take_inbox(&mut self) {
        let commands = std::mem::take(&mut *self.me.inbox.lock().expect("inbox lock"));
        for c in commands {
            match c {
                Command::Adopt(rxq) => self.adopt(rxq),
                Command::Release(id, back) => {
                    if let Some(rxq) = self.release(id) {
                        let _ = back.send(rxq);
                    }
                }
            }
        }
    }

    /// Takes a queue: in `epoll`, given a first turn (frames may wait).
    fn adopt(&mut self, rxq: Box<Rxq>) {
        let t = match self.slots.iter().position(Option::is_none) {
            Some(t) => t,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let fd = rxq.wait_fd();
        let (port, q) = (Arc::clone(rxq.port()), rxq.queue());
        let ev = EpollEvent::new(EventSet::IN, t as u64);
        let standing = if port.is_up() {
            if let Err(e) = self.epoll.ctl(ControlOperation::Add, fd, ev) {
                tracing::warn!(port = %port.name, queue = q, error = %e, "queue not watched; looked at every tick");
            }
            self.ready.push((t, true));
            Standing::Hot
        } else {
            Standing::Down
        };
        let ticks = rxq.ticks();
        self.slots[t] = Some(Owned {
            rxq,
            fd,
            standing,
            ticks,
            active_at: 0,
        });
    }

    /// Gives up queue `id` between turns, its state kept.
    fn release(&mut self, id: QueueId) -> Option<Box<Rxq>> {
        let t = self.slots.iter().position(|o| {
            o.as_ref()
                .is_some_and(|o| (o.rxq.port().id, o.rxq.queue()) == id)
        })?;
        let o = self.slots[t].take()?;
        if matches!(o.standing, Standing::Held(_)) {
            self.held -= 1;
        }
        if o.standing.watched() {
            let _ = self
                .epoll
                .ctl(ControlOperation::Delete, o.fd, EpollEvent::default());
        }
        self.ready.retain(|(r, _)| *r != t);
        Some(o.rxq)
    }

    /// Queue `q` of `port` is no longer any worker's.
    fn forget(&self, port: &Port, q: usize) {
        self.me
            .owned
            .lock()
            .expect("owned lock")
            .retain(|((p, x), _)| !(*p == port.id && *x == q));
    }
}

#[cfg(test)]
mod tests;
