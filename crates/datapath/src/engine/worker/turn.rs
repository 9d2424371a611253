//! A queue's turn on its worker: a burst at a time up to the turn's
//! budget, the adaptive watch before sleeping, wake-up coalescing, the
//! idle look (the kernel's drops, the link, the port table) and the
//! port's link while it is down.

use super::*;

impl Rxq {
    /// One turn of the queue on its worker: after a notification
    /// (`woken`), or again while it is hot. Reads up to
    /// [`TURN_BATCHES`] batches, so that one busy queue cannot keep its
    /// worker from the others; a queue found empty after frames is watched
    /// a little first ([`Rxq::busy_poll`]), then asked to notify again.
    pub(crate) fn turn(&mut self, woken: bool) -> Turn {
        if woken {
            self.coalesce_wake_up();
            self.st.rx.woken();
        }
        for _ in 0..TURN_BATCHES {
            if self.cx.sw.stopping() || !self.cx.port.is_up() {
                self.st.read = false;
                return Turn::Cold;
            }
            match self.poll_batch() {
                Batch::Frames => self.st.read = true,
                // Every buffer the port may have is in flight: come back
                // once deliveries gave some back, instead of spinning.
                Batch::Stalled => return Turn::Stalled,
                Batch::Empty => {
                    if self.st.read && self.busy_poll() {
                        continue;
                    }
                    self.st.read = false;
                    if !self.st.rx.rearm() {
                        return Turn::Cold;
                    }
                }
            }
        }
        Turn::Hot
    }

    /// True for a queue with periodic work of its own (a tunnel
    /// endpoint's first queue, which resolves the endpoint's peers),
    /// looked at every tick.
    pub(crate) fn ticks(&self) -> bool {
        self.st.rx.ticks()
    }

    /// The worker's periodic look at an idle queue: the receiver's own
    /// periodic work where it has some (every [`crate::engine::pool::TICK`]: a
    /// tunnel endpoint's resolution of its peers); with `look` (the worker's idle look, once
    /// a second), the kernel's drops at it and its link (a device going
    /// away is seen at once by its reads; carrier lost on an idle uplink,
    /// at the next look).
    pub(crate) fn tick(&mut self, now: Instant, look: bool) {
        if self.st.rx.ticks() {
            self.st.rx.tick(now);
        }
        if look {
            self.st.count_kernel_drops(&self.cx, now);
            if self.cx.port.is_up() {
                self.check_link();
            }
            self.read_table();
            self.st.send_queries(&self.cx, now);
        }
    }

    /// The synthetic frame waiting at the port's tracer, switched now
    /// with the current table and settings (the worker looks for one
    /// every tick, at the port's first queue).
    pub(crate) fn inject(&mut self) {
        self.read_table();
        self.st.inject(&self.cx, &mut self.burst);
    }

    /// True if a synthetic frame waits for this queue.
    pub(crate) fn injection_pending(&self) -> bool {
        self.cx.q == 0 && self.cx.port.tracer.injection_pending()
    }

    /// The port table read again if the switch's generation moved. A port
    /// removed lives on in the table an idle or parked queue read last
    /// (its guest's memory mapped, its transmitters) until that queue's
    /// next batch: the worker's idle look lets it go within a second, not
    /// at the next frame, which may never come.
    pub(crate) fn read_table(&mut self) {
        let gen = self.cx.sw.settings_gen.load(Ordering::Acquire);
        if gen != self.st.gen {
            self.reread(gen);
        }
    }

    /// The port table and the settings read again, unless this queue's
    /// own port has left the table: its last frames are switched with
    /// the table it has (as they would have been a moment earlier), and
    /// its worker lets it go.
    fn reread(&mut self, gen: u64) {
        let table = self.cx.sw.ports();
        if !table
            .get(self.cx.port.id)
            .is_some_and(|p| Arc::ptr_eq(p, &self.cx.port))
        {
            return;
        }
        self.cx.ports = table;
        self.st.refresh(&self.cx, gen);
    }

    /// Wake-up coalescing (`rx_usecs`, as a NIC moderates its interrupts):
    /// a wake-up within `rx_usecs` of the last one waits out the rest, so
    /// that what arrives meanwhile is read in the same batch. The first
    /// frame after a quiet spell is read at once. (The wait holds the
    /// queue's worker: a lab setting, off by default.)
    pub(super) fn coalesce_wake_up(&mut self) {
        // The settings as the last batch read them (a change applies from
        // the next wake-up on).
        let usecs = self
            .st
            .settings
            .get(self.cx.port.id)
            .map_or(0, |s| s.rx_usecs);
        let now = Instant::now();
        if usecs > 0 {
            let window = Duration::from_micros(u64::from(usecs));
            let since = now.duration_since(self.st.last_wake);
            if since < window {
                std::thread::sleep(window - since);
            }
        }
        self.st.last_wake = Instant::now();
        add(&self.cx.port.ingress[self.cx.q].wakeups, 1);
    }

    /// Under load, a short adaptive poll before sleeping: a queue that
    /// just gave frames and can be watched without a system call (a
    /// guest's virtqueue) is watched for up to `poll_budget`, which
    /// doubles (to the switch's `busy_poll_max`) while watching finds frames and
    /// halves when it does not — so a steady stream costs no kicks or
    /// wake-ups, and a queue that went quiet costs next to nothing. Never
    /// while idle: only after a drain that read frames.
    pub(super) fn busy_poll(&mut self) -> bool {
        let max = self.cx.sw.busy_poll_max;
        let budget = self.st.poll_budget.min(max);
        if budget.is_zero() {
            self.st.poll_budget = BUSY_POLL_MIN;
            return false;
        }
        let found = self.st.rx.poll(budget);
        self.st.poll_budget = if found {
            (budget * 2).min(max)
        } else {
            budget / 2
        };
        if found {
            add(&self.cx.port.ingress[self.cx.q].busy_poll_hits, 1);
        }
        found
    }

    /// An idle queue notices a device that went down (an uplink's
    /// sockets report only an administrative down; a guest's front end
    /// that disconnected sends nothing).
    pub(super) fn check_link(&self) {
        if self.cx.port.dev.link() != Link::Up {
            self.st.port_gone(&self.cx);
        }
    }

    /// While the port is down: [`Link::Up`] once its device is up again
    /// (the port is up again too), [`Link::Down`] while it may still come
    /// back, [`Link::Gone`] when it will not (its device is gone, or the
    /// port failed).
    pub(crate) fn link_while_down(&self) -> Link {
        let port = &self.cx.port;
        if matches!(port.state(), PortState::Failed | PortState::Removed) {
            return Link::Gone;
        }
        let link = port.dev.link();
        if link == Link::Up {
            port.set_state_if(PortState::Down, PortState::Up);
        }
        link
    }

    /// One batch (see [`State::poll_batch`]), the port table and every
    /// port's settings read again first if the switch's generation moved
    /// (a port added or removed, a setting changed).
    pub(crate) fn poll_batch(&mut self) -> Batch {
        if self.st.retry_kept(&self.cx) {
            return Batch::Stalled;
        }
        let end = self.st.read_batch(&self.cx, &mut self.burst);
        // Read after the frames: a frame sent to a port added just before
        // it was sent is switched with a table that has the port.
        self.read_table();
        self.st.switch_batch(&self.cx, &mut self.burst, end)
    }

    /// Flushes what is held and gives the spare buffers back.
    pub(crate) fn finish(&mut self) {
        self.st.finish(&self.cx)
    }
}
