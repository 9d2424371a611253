//! A worker thread: its loop over the queues it owns — turns for the
//! ready and hot ones, its inbox of queues to adopt and give up, the
//! periodic look at idle queues and at ports that are down, and its sleep
//! in `epoll`.

use super::*;

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
pub(super) fn run(me: &WorkerShared, sw: &Arc<Switch>) {
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

    /// Queues whose hold is over (its time is up, or its port's limit
    /// was lifted or has been earned back): watched again and given a turn.
    fn resume_held(&mut self, now: Instant) {
        for (t, slot) in self.slots.iter_mut().enumerate() {
            let Some(o) = slot.as_mut() else { continue };
            let over = |until: Instant| until <= now || o.rxq.port().cpu.held_until(now).is_none();
            if matches!(o.standing, Standing::Held(until) if over(until)) {
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
            if o.standing != Standing::Down && o.rxq.injection_pending() {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| o.rxq.inject()));
                if r.is_err() {
                    self.failed(t);
                    continue;
                }
            }
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
