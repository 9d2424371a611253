//! One batch of a queue: the read, the counting of what it gave, the
//! burst through the port's ingress arc, and the end-of-batch flush and
//! hand-over.

use super::*;
use hvnet_port::pool::{SizeClass, SMALL_FRAME};

impl State {
    /// The first half of a batch: up to [`BATCH`] frames from the
    /// receiver.
    pub(super) fn read_batch(&mut self, cx: &Ctx, b: &mut Burst) -> Result<(), RecvError> {
        let now = self.begin_batch(cx);
        if now.duration_since(self.kernel_drops_read) >= KERNEL_DROPS_EVERY {
            self.count_kernel_drops(cx, now);
        }
        b.frames.clear();
        let end = self.rx.recv_batch(&mut self.pool, BATCH, &mut b.frames);
        self.marks.clear();
        self.rx.trace_marks(&mut self.marks);
        end
    }

    /// The second half of a batch: the frames [`State::read_batch`] read,
    /// counted, taken through the port's ingress arc as one burst, then
    /// the end-of-batch flush and hand-over.
    pub(super) fn switch_batch(
        &mut self,
        cx: &Ctx,
        b: &mut Burst,
        end: Result<(), RecvError>,
    ) -> Batch {
        let mut result = if b.frames.is_empty() {
            Batch::Empty
        } else {
            Batch::Frames
        };
        let mut any = false;
        for r in &b.frames {
            match r {
                Ok(pkt) => {
                    self.count_in(cx, pkt);
                    any = true;
                }
                Err(e) => self.count_refused(cx, e),
            }
        }
        if any {
            // A read may give more than a burst holds (a guest's pending
            // announcements come before its frames): the rest go through
            // the arc as bursts of their own, in order.
            let mut rest = match b.frames.len() > BATCH {
                true => b.frames.split_off(BATCH),
                false => Vec::new(),
            };
            loop {
                b.begin(&cx.port.tracer);
                if !self.marks.is_empty() {
                    self.begin_marked(cx, b);
                }
                self.run_in_arc(cx, b);
                if !self.reports_due.is_empty() {
                    self.report_marked(cx);
                }
                b.frames.clear();
                if rest.is_empty() {
                    break;
                }
                b.frames.extend(rest.drain(..rest.len().min(BATCH)));
            }
        }
        b.frames.clear();
        match end {
            Err(RecvError::NoBuffer) => {
                add(&cx.port.ingress[cx.q].no_buffer_stalls, 1);
                result = Batch::Stalled;
            }
            Err(RecvError::Gone | RecvError::LinkDown) => self.port_gone(cx),
            _ => {}
        }
        self.end_batch(cx);
        // Everything read was written or copied out: the guest's chains
        // whose payloads were left in place go back.
        self.rx.end_batch();
        result
    }

    /// The burst through the port's ingress arc, stage by stage.
    fn run_in_arc(&mut self, cx: &Ctx, b: &mut Burst) {
        for k in 0..self.in_arc.len() {
            let (_, run) = self.in_arc.stage(k);
            run(self, cx, b);
        }
    }

    /// Switches a synthetic frame handed to the port's tracer, traced
    /// from its first stage: without `deliver`, every decision runs but
    /// nothing is learned, counted, copied or written ([`Ctx::synthetic`]);
    /// with it, the frame goes on as the guest's own.
    pub(super) fn inject(&mut self, cx: &Ctx, b: &mut Burst) {
        let tracer = &cx.port.tracer;
        let Some(inj) = tracer.take_injection() else {
            return;
        };
        self.begin_batch(cx);
        let class = if inj.frame.len() <= SMALL_FRAME {
            SizeClass::Small
        } else {
            SizeClass::Large
        };
        let parsed = self.pool.take(class).map(|mut buf| {
            buf.fill(&inj.frame);
            Packet::parse(buf, Default::default())
        });
        match parsed {
            Some(Ok(pkt)) => {
                b.frames.clear();
                b.frames.push(Ok(pkt));
                b.begin_synthetic(inj.id);
                if inj.deliver {
                    self.count_in(cx, &b[0]);
                }
                cx.synthetic.set(!inj.deliver);
                self.run_in_arc(cx, b);
                cx.synthetic.set(false);
                b.frames.clear();
                self.end_batch(cx);
                if let Some(token) = inj.report {
                    self.report(cx, inj.id, token);
                }
            }
            Some(Err((_, e))) => tracer.line(inj.id, "drop", format!("malformed: {e}")),
            None => tracer.line(
                inj.id,
                "drop",
                "no buffer: every one of the port's is in flight".into(),
            ),
        }
        tracer.injected(inj.id);
    }

    /// Flushes what is held and gives the spare buffers back.
    pub(crate) fn finish(&mut self, cx: &Ctx) {
        self.end_batch(cx);
        self.rx.end_batch();
        self.count_kernel_drops(cx, Instant::now());
        self.rx.release(&mut self.pool);
    }

    /// Frames the kernel dropped at this queue before hvnet could read
    /// them (an uplink socket's full buffer, or a frame it could not hand
    /// over): they arrived, and are counted in and dropped.
    pub(super) fn count_kernel_drops(&mut self, cx: &Ctx, now: Instant) {
        self.kernel_drops_read = now;
        let n = self.rx.kernel_drops();
        if n > 0 {
            let c = &cx.port.ingress[cx.q];
            add(&c.frames, n);
            c.count_drop(DropReason::Kernel, n);
        }
    }

    pub(super) fn count_refused(&self, cx: &Ctx, e: &RecvError) {
        // An error about the queue ends the batch (`end`), never is a frame.
        let c = &cx.port.ingress[cx.q];
        if let Some(why) = DropReason::of_refused(e) {
            add(&c.frames, 1);
            c.count_drop(why, 1);
            cx.port.taps.refused(cx.q, why);
        } else if matches!(e, RecvError::Consumed) {
            add(&c.frames, 1);
            add(&c.tunnel_control, 1);
        }
    }

    /// Per-batch preparation: fresh caches, idle GRO tables freed now and
    /// then.
    pub(super) fn begin_batch(&mut self, _cx: &Ctx) -> Instant {
        self.learned = None;
        self.route = None;
        let now = Instant::now();
        self.now = now;
        if now.duration_since(self.last_sweep) >= GRO_IDLE {
            self.last_sweep = now;
            for d in self.dests.iter_mut().flatten() {
                let idle = d
                    .gro_used
                    .is_some_and(|t| now.duration_since(t) >= GRO_IDLE);
                if idle && d.gro.as_ref().is_some_and(|g| g.held() == 0) {
                    d.gro = None;
                    d.gro_used = None;
                }
            }
        }
        now
    }

    /// The guest disappeared, or the uplink's link went down: the port
    /// goes down, the switch goes on.
    pub(super) fn port_gone(&self, cx: &Ctx) {
        cx.port.set_state_if(PortState::Up, PortState::Down);
        cx.sw.fdb.sweep(Instant::now(), Some(cx.port.id));
        cx.sw.mdb.forget_port(cx.port.id);
    }

    pub(super) fn count_in(&self, cx: &Ctx, pkt: &Packet) {
        let c = &cx.port.ingress[cx.q];
        add(&c.frames, 1);
        // A decapsulated frame counts as it arrived, outer headers on.
        let outer = pkt.meta.tunnel.map_or(0, |t| {
            add(&c.decapsulated, 1);
            u64::from(t.outer_len.get())
        });
        add(&c.bytes, pkt.len() as u64 + outer);
        if pkt.meta.offload.gso.is_some() {
            add(&c.gso_frames, 1);
        }
        if pkt.buf.pending().is_some() {
            add(&c.payloads_left, 1);
        }
    }

    /// End of a batch: flush the LRO tables, then hand each destination
    /// queue its frames.
    pub(crate) fn end_batch(&mut self, cx: &Ctx) {
        for i in 0..self.active.len() {
            let (dst, q) = self.active[i];
            self.flush_gro(cx, dst, q);
        }
        let active = std::mem::take(&mut self.active);
        for &(dst, q) in &active {
            self.dests[dst][q].active = false;
            self.hand_over(cx, dst, q);
        }
        self.active = active;
        self.active.clear();
    }
}
