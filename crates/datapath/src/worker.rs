//! The ingress worker of one TAP queue: read a batch, forward each frame,
//! run the offload stage per destination, and at the end of the batch
//! flush the GRO tables and hand each destination queue what was staged
//! for it — published to its delivery thread, or delivered from here when
//! the queue is idle (run to completion).

use crate::counters::add;
use crate::deliver::{self, Scratch};
use crate::fdb::Learn;
use crate::forward::{self, Action, Ingress};
use crate::ingress_lro::IngressLro;
use crate::ring::{self, Full, Lane, Slot};
use crate::switch::{
    Delivery, Port, PortSettings, PortState, RingItem, RxOverflow, Switch, BACKPRESSURE_WAIT, BATCH,
};
use crate::tunnel::{Received, TunnelDrop, Vtep, SOLICIT_EVERY};
use hvnet_offload::gro::{GroConfig, GroOutput, GroTable};
use hvnet_offload::vxlan::OUTER_LEN;
use hvnet_port::{Device, LinkState, Packet, Pool, QueueReader, RecvError};
use hvnet_wire::MacAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Segments a GRO run may hold: 64 KiB of 1448-byte segments is 45; an
/// in-order stream of tiny segments stops here instead of pinning a buffer
/// per byte.
pub const GRO_MAX_SEGMENTS: usize = 64;

/// A GRO table with no held run for this long is freed.
const GRO_IDLE: Duration = Duration::from_secs(1);

/// How often the kernel's drops at a port's queue are read (a system
/// call, so not per batch).
const KERNEL_DROPS_EVERY: Duration = Duration::from_millis(100);

/// What one batch found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Batch {
    /// Nothing to read.
    Empty,
    /// Frames were read (or refused).
    Frames,
    /// The port's buffer cap stopped the reading.
    Stalled,
}

/// Per destination queue: the lane into it and the LRO table for it, both
/// made on first use.
#[derive(Default)]
struct Dest {
    lane: Option<Lane<RingItem>>,
    gro: Option<GroTable<Packet>>,
    gro_used: Option<Instant>,
    active: bool,
}

/// What a worker works for: the switch, its port and queue (shared,
/// read-only; kept apart from the worker's state so that no reference
/// count is touched per frame).
pub(crate) struct Ctx {
    sw: Arc<Switch>,
    port: Arc<Port>,
    q: usize,
}

pub(crate) struct Worker {
    cx: Ctx,
    st: State,
}

/// A worker's own state.
struct State {
    pool: Pool,
    reader: QueueReader,
    /// When the kernel's drops at this queue were last read.
    kernel_drops_read: Instant,
    /// Settings of every port, re-read when the switch's generation moves.
    gen: u64,
    settings: Vec<PortSettings>,
    dests: Vec<Vec<Dest>>,
    active: Vec<(usize, usize)>,
    /// The source address learned last (learning it again would only take
    /// the FDB lock).
    learned: Option<MacAddr>,
    /// The last destination looked up, and its port.
    route: Option<(MacAddr, Option<usize>)>,
    gro_out: Vec<GroOutput<Packet>>,
    inline: Vec<Slot<RingItem>>,
    scratch: Scratch,
    last_sweep: Instant,
    /// When the current batch began.
    now: Instant,
    /// An uplink's software LRO (`lro = "software"`), made on first use,
    /// and the frames it made ready to switch.
    ingress_lro: Option<IngressLro>,
    lro_ready: Vec<Packet>,
}

impl Worker {
    pub(crate) fn new(sw: Arc<Switch>, port: Arc<Port>, q: usize) -> Worker {
        let dests = sw
            .ports
            .iter()
            .map(|p| (0..p.rxq.len()).map(|_| Dest::default()).collect())
            .collect();
        let st = State {
            pool: Pool::new(Arc::clone(&port.home)),
            reader: port.dev.reader(),
            kernel_drops_read: Instant::now(),
            gen: u64::MAX,
            settings: Vec::new(),
            dests,
            active: Vec::with_capacity(16),
            learned: None,
            route: None,
            gro_out: Vec::with_capacity(BATCH),
            inline: Vec::with_capacity(BATCH),
            scratch: Scratch::default(),
            last_sweep: Instant::now(),
            now: Instant::now(),
            ingress_lro: None,
            lro_ready: Vec::new(),
        };
        Worker {
            cx: Ctx { sw, port, q },
            st,
        }
    }

    /// Reads until the switch stops or the port goes down for good: `poll`,
    /// then a batch. A VM's port that goes down stays down (its guest is
    /// gone); an uplink waits for its device to come back.
    pub(crate) fn run(mut self) {
        let port = Arc::clone(&self.cx.port);
        let q = self.cx.q;
        let fd = port.dev.wait_fd(q);
        let vhost = port.dev.vhost_user();
        // A tunnel endpoint's first queue thread resolves its peers.
        let solicits = port.tunnel.as_ref().filter(|_| self.cx.q == 0);
        let mut next_solicit = Instant::now();
        while !self.cx.sw.stopping() {
            if !port.is_up() {
                if !self.wait_for_link() {
                    break;
                }
                continue;
            }
            if let (Some(vtep), Some(fq)) = (solicits, port.dev.sender(0)) {
                let now = Instant::now();
                if now >= next_solicit {
                    vtep.solicit(fq);
                    next_solicit = now + SOLICIT_EVERY;
                }
            }
            match hvnet_sys::poll_readable(fd, 100) {
                Ok(true) => {}
                Ok(false) => {
                    self.st.count_kernel_drops(&self.cx, Instant::now());
                    self.check_link();
                    continue;
                }
                Err(_) => break,
            }
            if let Some(v) = vhost {
                v.consume_kicks(q);
                self.drain_virtqueue(v);
                continue;
            }
            if self.poll_batch() == Batch::Stalled {
                // Every buffer the port may have is in flight: wait for
                // deliveries to give some back instead of spinning.
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        self.finish();
    }

    /// A guest's transmit virtqueue, read with its kicks off until it is
    /// empty; kicks back on before the thread sleeps (and read on if the
    /// guest added frames meanwhile).
    fn drain_virtqueue(&mut self, v: &hvnet_port::VhostUserPort) {
        let q = self.cx.q;
        v.disable_tx_kicks(q);
        loop {
            match self.poll_batch() {
                Batch::Frames => continue,
                Batch::Stalled => std::thread::sleep(Duration::from_micros(200)),
                Batch::Empty => {
                    if !v.enable_tx_kicks(q) || self.cx.sw.stopping() {
                        return;
                    }
                    v.disable_tx_kicks(q);
                }
            }
        }
    }

    /// An idle uplink notices a device that went down or lost its carrier
    /// (its sockets report only an administrative down).
    fn check_link(&self) {
        let down = match &self.cx.port.dev {
            Device::Uplink(u) => u.link_state() != LinkState::Up,
            Device::VhostUser(v) => !v.is_connected(),
            Device::Tap(_) => false,
        };
        if down {
            self.st.port_gone(&self.cx);
        }
    }

    /// While the port is down: true once an uplink's device is up again
    /// (the port is up again too), false when the port will not come back
    /// (a VM's guest is gone, the uplink's device deleted, the port failed).
    fn wait_for_link(&self) -> bool {
        let port = &self.cx.port;
        if port.state() == PortState::Failed {
            return false;
        }
        if let Some(v) = port.dev.vhost_user() {
            // A guest that went away may come back (its hypervisor
            // restarted and reconnected).
            if v.is_connected() {
                port.set_state_if(PortState::Down, PortState::Up);
            } else {
                let _ = hvnet_sys::poll_readable(v.tx_kick_fd(self.cx.q), 100);
                v.consume_kicks(self.cx.q);
            }
            return true;
        }
        let Some(u) = port.dev.uplink() else {
            return false;
        };
        match u.link_state() {
            LinkState::Up => {
                port.set_state_if(PortState::Down, PortState::Up);
                true
            }
            LinkState::Down => {
                std::thread::sleep(Duration::from_millis(100));
                true
            }
            LinkState::Gone => false,
        }
    }

    /// One batch (see [`State::poll_batch`]).
    pub(crate) fn poll_batch(&mut self) -> Batch {
        self.st.poll_batch(&self.cx)
    }

    /// Flushes what is held and gives the spare buffers back.
    pub(crate) fn finish(&mut self) {
        self.st.finish(&self.cx)
    }
}

impl State {
    /// One batch: `read(2)` until the queue is empty or the batch is full,
    /// then the end-of-batch flush and hand-over.
    pub(crate) fn poll_batch(&mut self, cx: &Ctx) -> Batch {
        let now = self.begin_batch(cx);
        let mut result = Batch::Empty;
        if now.duration_since(self.kernel_drops_read) >= KERNEL_DROPS_EVERY {
            self.count_kernel_drops(cx, now);
        }
        for _ in 0..BATCH {
            match cx.port.dev.read(cx.q, &mut self.reader, &mut self.pool) {
                Ok(pkt) => {
                    result = Batch::Frames;
                    match &cx.port.tunnel {
                        Some(vtep) => self.receive_tunnel(cx, vtep, pkt, now),
                        None => {
                            self.count_in(cx, &pkt);
                            self.coalesce_or_switch(cx, pkt, now);
                        }
                    }
                }
                Err(RecvError::WouldBlock) => break,
                Err(RecvError::NoBuffer) => {
                    add(&cx.port.ingress[cx.q].no_buffer_stalls, 1);
                    result = Batch::Stalled;
                    break;
                }
                Err(RecvError::Gone | RecvError::LinkDown) => {
                    self.port_gone(cx);
                    break;
                }
                Err(RecvError::Read(_)) => break,
                Err(e) => {
                    result = Batch::Frames;
                    self.count_refused(cx, &e);
                }
            }
        }
        self.end_batch(cx);
        if let (Device::VhostUser(v), Batch::Frames) = (&cx.port.dev, result) {
            v.signal(cx.q, false);
        }
        result
    }

    /// Flushes what is held and gives the spare buffers back.
    pub(crate) fn finish(&mut self, cx: &Ctx) {
        self.end_batch(cx);
        self.count_kernel_drops(cx, Instant::now());
        self.reader.release(&mut self.pool);
    }

    /// Frames the kernel dropped at this queue before hvnet could read
    /// them (an uplink socket's full buffer, or a frame it could not hand
    /// over): they arrived, and are counted in and dropped.
    fn count_kernel_drops(&mut self, cx: &Ctx, now: Instant) {
        self.kernel_drops_read = now;
        let n = cx.port.dev.kernel_drops(cx.q);
        if n > 0 {
            let c = &cx.port.ingress[cx.q];
            add(&c.frames, n);
            add(&c.drop_kernel, n);
        }
    }

    fn count_refused(&self, cx: &Ctx, e: &RecvError) {
        let c = &cx.port.ingress[cx.q];
        add(&c.frames, 1);
        match e {
            RecvError::BadFrame(_) => add(&c.drop_bad_frame, 1),
            RecvError::TooManySegments => add(&c.drop_gso_segments, 1),
            RecvError::BadDescriptor => add(&c.drop_bad_descriptor, 1),
            _ => add(&c.drop_bad_vnet_header, 1),
        }
    }

    /// Per-batch preparation: settings re-read if they changed, fresh
    /// caches, idle GRO tables freed now and then.
    fn begin_batch(&mut self, cx: &Ctx) -> Instant {
        let gen = cx.sw.settings_gen.load(Ordering::Acquire);
        if gen != self.gen {
            self.gen = gen;
            self.settings.clear();
            self.settings
                .extend(cx.sw.ports.iter().map(|p| p.effective_settings()));
        }
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
    fn port_gone(&self, cx: &Ctx) {
        cx.port.set_state_if(PortState::Up, PortState::Down);
        cx.sw.fdb.sweep(Instant::now(), Some(cx.port.id));
    }

    /// A counted frame: at an uplink, its checksum checked in software
    /// when the device's is not taken, and coalesced first when its LRO is
    /// software; else switched at once.
    fn coalesce_or_switch(&mut self, cx: &Ctx, mut pkt: Packet, now: Instant) {
        if cx.port.is_uplink() && !self.settings[cx.port.id].csum {
            crate::ingress_csum::verify(&mut pkt, &cx.port.ingress[cx.q]);
        }
        if cx.port.is_uplink() && self.settings[cx.port.id].lro {
            self.ingress_lro(cx, Some(pkt), now);
        } else {
            self.switch_frame(cx, pkt, now);
        }
    }

    /// Offers `pkt` to the uplink's software LRO (or, with `None` at the
    /// end of a batch, flushes it) and switches what it made ready.
    fn ingress_lro(&mut self, cx: &Ctx, pkt: Option<Packet>, now: Instant) {
        let mut lro = match (self.ingress_lro.take(), &pkt) {
            (Some(l), _) => l,
            (None, Some(_)) => IngressLro::new(),
            (None, None) => return,
        };
        let mut ready = std::mem::take(&mut self.lro_ready);
        let (c, pool) = (&cx.port.ingress[cx.q], &mut self.pool);
        let mut out = |p| ready.push(p);
        match pkt {
            Some(p) => lro.receive(p, pool, c, &mut out),
            None => lro.flush(pool, c, &mut out),
        }
        self.ingress_lro = Some(lro);
        for p in ready.drain(..) {
            self.switch_frame(cx, p, now);
        }
        self.lro_ready = ready;
    }

    fn count_in(&self, cx: &Ctx, pkt: &Packet) {
        let c = &cx.port.ingress[cx.q];
        add(&c.frames, 1);
        add(&c.bytes, pkt.len() as u64);
        if pkt.meta.offload.gso.is_some() {
            add(&c.gso_frames, 1);
        }
    }

    /// A frame from a tunnel endpoint's underlay: its inner frame is
    /// forwarded, ARP for the endpoint answered, the rest dropped.
    fn receive_tunnel(&mut self, cx: &Ctx, vtep: &Vtep, pkt: Packet, now: Instant) {
        self.count_in(cx, &pkt);
        let c = &cx.port.ingress[cx.q];
        match vtep.receive(pkt, now) {
            Received::Inner(inner) => {
                add(&c.decapsulated, 1);
                self.coalesce_or_switch(cx, inner, now);
            }
            Received::Arp(reply) => {
                add(&c.tunnel_control, 1);
                if let Some(r) = reply {
                    // A reply that cannot be written now is asked for again.
                    if let Some(fq) = cx.port.dev.sender(cx.q) {
                        let _ = vtep.send_reply(fq, &r);
                    }
                }
            }
            Received::Drop(TunnelDrop::NotTunnel) => add(&c.drop_not_tunnel, 1),
            Received::Drop(TunnelDrop::BadVxlan) => add(&c.drop_bad_vxlan, 1),
            Received::Drop(TunnelDrop::Vni) => add(&c.drop_vni, 1),
        }
    }

    /// The switching decision for a counted frame: policy, learning,
    /// lookup, and the offload stage for each destination.
    fn switch_frame(&mut self, cx: &Ctx, pkt: Packet, now: Instant) {
        let c = &cx.port.ingress[cx.q];
        let ingress = Ingress {
            port: cx.port.id,
            mac: cx.port.mac,
            allow_forged_transmits: self.settings[cx.port.id].allow_forged_transmits,
        };
        if !forward::admit(&ingress, &pkt) {
            add(&c.drop_policy, 1);
            return;
        }
        let (src, dst) = (pkt.src(), pkt.dst());
        let vlan = cx.port.vlan;
        if self.learned != Some(src) {
            if cx.sw.fdb.learn(vlan, src, cx.port.id, now) == Learn::Refused {
                add(&c.fdb_learn_refused, 1);
            }
            self.learned = Some(src);
        }
        let learned = match self.route {
            Some((mac, port)) if mac == dst => port,
            _ => {
                let port = (!dst.is_multicast())
                    .then(|| cx.sw.fdb.lookup(vlan, dst, now))
                    .flatten();
                self.route = Some((dst, port));
                port
            }
        };
        let sw = &cx.sw;
        match forward::route(&ingress, learned, |p| sw.ports[p].is_up()) {
            Action::NoRoute => add(&c.drop_no_route, 1),
            Action::Unicast(p) => {
                add(&c.forwarded, 1);
                self.egress(cx, p, pkt);
            }
            Action::Flood => {
                let targets: smallvec::SmallVec<[usize; 16]> = sw
                    .ports
                    .iter()
                    .filter(|p| p.id != cx.port.id && p.vlan == vlan && p.is_up())
                    .map(|p| p.id)
                    .collect();
                let Some((&last, rest)) = targets.split_last() else {
                    add(&c.drop_no_route, 1);
                    return;
                };
                add(&c.forwarded, 1);
                add(&c.flooded, 1);
                for &p in rest {
                    // A copy counts against this port's buffers too; with
                    // none left, that destination does not get one.
                    if let Some(mut b) = self.pool.take(pkt.buf.class()) {
                        b.fill(pkt.frame());
                        self.egress(
                            cx,
                            p,
                            Packet {
                                buf: b,
                                meta: pkt.meta,
                            },
                        );
                    } else {
                        add(&cx.port.ingress[cx.q].no_buffer_stalls, 1);
                    }
                }
                self.egress(cx, last, pkt);
            }
        }
    }

    /// The offload stage for one destination: queue choice (RSS over the
    /// flow, hashed once), MTU, LRO, and staging into the lane.
    fn egress(&mut self, cx: &Ctx, dst: usize, mut pkt: Packet) {
        let port = &cx.sw.ports[dst];
        let nq = port.dev.active_queues().min(port.rxq.len());
        let q = if nq > 1 {
            let (sw, frame, layers) = (&cx.sw, pkt.buf.frame(), &pkt.meta.layers);
            let h = *pkt
                .meta
                .hash
                .get_or_insert_with(|| sw.rss.hash_layers(frame, layers).map_or(0, |(h, _)| h));
            h as usize % nq
        } else {
            0
        };
        let s = &self.settings[dst];
        // A guest with LRO takes GSO frames whole and gets MTU-sized ones
        // coalesced; an uplink with TSO "hardware" hands GSO frames to its
        // device whole, and nothing is coalesced toward the wire.
        let uplink = port.is_uplink();
        let (whole, lro) = if uplink {
            (s.tso, false)
        } else {
            (s.lro, s.lro)
        };
        // Longest frame the receiver takes: its MTU and this frame's link
        // header; less the outer headers a tunnel endpoint adds on the wire.
        let overhead = if port.tunnel.is_some() { OUTER_LEN } else { 0 };
        let limit = (s.mtu as usize + pkt.meta.layers.l2.header_len).saturating_sub(overhead);
        let c = &self.lane(cx, dst, q).counters;
        add(&c.offered, 1);
        match pkt.meta.offload.gso {
            Some(g) => {
                // Segments that would not fit the receiver's MTU (or the
                // wire's, whoever segments) are refused here rather than
                // written for a driver to drop.
                if (!whole || uplink) && g.size as usize + pkt.header_len() > limit {
                    add(&c.drop_mtu_exceeded, 1);
                    return;
                }
                // Segments of its flow held for coalescing go first: a
                // GSO frame must not overtake them.
                if lro {
                    self.flush_gro(cx, dst, q);
                }
                let segment = (!whole).then_some(g);
                self.stage(cx, dst, q, RingItem::Frame { pkt, segment });
            }
            None if pkt.len() > limit => {
                add(&c.drop_mtu_exceeded, 1);
            }
            None if lro => {
                let d = &mut self.dests[dst][q];
                let table = d.gro.get_or_insert_with(|| {
                    GroTable::new(GroConfig {
                        buckets: 64,
                        max_segments: GRO_MAX_SEGMENTS,
                        ..GroConfig::default()
                    })
                });
                d.gro_used = Some(self.now);
                let (layers, info) = (pkt.meta.layers, pkt.meta.offload);
                let out = &mut self.gro_out;
                table.receive_parsed(pkt, info, &layers, 0, &mut |o| out.push(o));
                self.mark_active(dst, q);
                self.stage_gro_output(cx, dst, q);
            }
            None => self.stage(cx, dst, q, RingItem::Frame { pkt, segment: None }),
        }
    }

    fn stage_gro_output(&mut self, cx: &Ctx, dst: usize, q: usize) {
        // Outputs are in the order the receiver must see them.
        let mut outs = std::mem::take(&mut self.gro_out);
        for o in outs.drain(..) {
            let item = match o {
                GroOutput::Single { mut frame, info } => {
                    frame.meta.offload = info;
                    RingItem::Frame {
                        pkt: frame,
                        segment: None,
                    }
                }
                GroOutput::Coalesced(c) => RingItem::Coalesced(c),
            };
            self.stage(cx, dst, q, item);
        }
        self.gro_out = outs;
    }

    fn mark_active(&mut self, dst: usize, q: usize) {
        let d = &mut self.dests[dst][q];
        if !d.active {
            d.active = true;
            self.active.push((dst, q));
        }
    }

    fn lane(&mut self, cx: &Ctx, dst: usize, q: usize) -> &mut Lane<RingItem> {
        let ring = &cx.sw.ports[dst].rxq[q].rings;
        let d = &mut self.dests[dst][q];
        if d.lane.as_ref().is_some_and(|l| l.stale(ring)) {
            // Publish what it holds before it is replaced.
            if let Some(mut old) = d.lane.take() {
                old.publish(ring);
            }
        }
        d.lane.get_or_insert_with(|| ring.lane())
    }

    /// Places an item in the lane to `(dst, q)` for this batch, or waits
    /// for room (backpressure), or drops it and counts why.
    fn stage(&mut self, cx: &Ctx, dst: usize, q: usize, item: RingItem) {
        let sw = &cx.sw;
        let port = &sw.ports[dst];
        let ring = &port.rxq[q].rings;
        let s = &self.settings[dst];
        let (r1, r2) = ring_buffers(&item, s.mtu);
        let sources = item.sources();
        let overflow = s.rx_overflow;
        self.mark_active(dst, q);
        let lane = self.lane(cx, dst, q);
        if !port.is_up() {
            add(&lane.counters.drop_port_down, sources);
            return;
        }
        let full = match lane.stage(ring, item, r1, r2) {
            Ok(()) => return,
            Err((item, full)) => {
                let (size1, size2) = ring.sizes();
                let could_fit = r1 <= size1 && r2 <= size2;
                if overflow == RxOverflow::Backpressure && could_fit {
                    match self.wait_for_room(cx, dst, q, item, r1, r2) {
                        Ok(()) => return,
                        Err(full) => full,
                    }
                } else {
                    full
                }
            }
        };
        let c = &self.lane(cx, dst, q).counters;
        match full {
            Full::Ring1 => add(&c.drop_ring1_full, sources),
            Full::Ring2 => add(&c.drop_ring2_full, sources),
        }
    }

    /// Publishes everything staged so far (so the receivers have work),
    /// then waits until `(dst, q)` has room for `item`.
    fn wait_for_room(
        &mut self,
        cx: &Ctx,
        dst: usize,
        q: usize,
        mut item: RingItem,
        r1: usize,
        r2: usize,
    ) -> Result<(), Full> {
        self.publish_all(cx);
        let sw = &cx.sw;
        let port = &sw.ports[dst];
        let ring = &port.rxq[q].rings;
        let deadline = Instant::now() + BACKPRESSURE_WAIT;
        let lane = self.lane(cx, dst, q);
        add(&lane.counters.backpressure_waits, 1);
        loop {
            std::thread::park_timeout(Duration::from_micros(50));
            match lane.stage(ring, item, r1, r2) {
                Ok(()) => return Ok(()),
                Err((back, full)) => {
                    if Instant::now() >= deadline || sw.stopping() || !port.is_up() {
                        return Err(full);
                    }
                    item = back;
                }
            }
        }
    }

    /// Publishes every staged lane to its delivery thread.
    fn publish_all(&mut self, cx: &Ctx) {
        for &(dst, q) in &self.active {
            if let Some(l) = self.dests[dst][q].lane.as_mut() {
                l.publish(&cx.sw.ports[dst].rxq[q].rings);
            }
        }
    }

    /// Stages what the LRO table of `(dst, q)` holds.
    fn flush_gro(&mut self, cx: &Ctx, dst: usize, q: usize) {
        if let Some(t) = self.dests[dst][q].gro.as_mut() {
            if t.held() > 0 {
                let out = &mut self.gro_out;
                t.flush_all(&mut |o| out.push(o));
                self.stage_gro_output(cx, dst, q);
            }
        }
    }

    /// End of a batch: flush the LRO tables, then hand each destination
    /// queue its frames.
    fn end_batch(&mut self, cx: &Ctx) {
        self.ingress_lro(cx, None, self.now);
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

    /// Delivers what was staged for `(dst, q)` from this thread when the
    /// queue is idle and its port allows it (nothing of ours or anyone's is
    /// waiting there, so nothing is overtaken), else publishes it.
    fn hand_over(&mut self, cx: &Ctx, dst: usize, q: usize) {
        let sw = &cx.sw;
        let port = &sw.ports[dst];
        let ring = &port.rxq[q].rings;
        let s = &self.settings[dst];
        let Some(lane) = self.dests[dst][q].lane.as_mut() else {
            return;
        };
        if lane.staged() == 0 {
            return;
        }
        if s.delivery == Delivery::Auto && ring.idle() && port.is_up() {
            lane.take_staged(&mut self.inline);
            add(&lane.counters.inline_batches, 1);
            deliver::deliver_batch(
                deliver::Out::of(&port.dev, q),
                port.tunnel.as_ref(),
                None,
                &lane.counters,
                s,
                &mut self.inline,
                &mut self.scratch,
            );
        } else {
            lane.publish(ring);
        }
    }
}

/// Ring buffers an item takes at a queue of MTU `mtu`: (ring 1, ring 2).
fn ring_buffers(item: &RingItem, mtu: u16) -> (usize, usize) {
    let ring1_buf = ring::ring1_buf_size(mtu);
    match item {
        RingItem::Frame {
            pkt,
            segment: Some(g),
        } => {
            // Each segment takes a buffer of its own.
            let segs = pkt
                .len()
                .saturating_sub(pkt.header_len())
                .div_ceil(g.size.max(1) as usize)
                .max(1);
            (segs, 0)
        }
        RingItem::Frame { pkt, .. } => ring::buffers_for(pkt.len(), ring1_buf),
        RingItem::Coalesced(c) => ring::buffers_for(c.len(), ring1_buf),
    }
}
