//! One receive queue as its worker ([`crate::engine::pool`]) runs it: read a
//! burst, take it through the port's ingress arc (its [`stages`], each
//! over the whole burst), each frame to its destinations through theirs,
//! and at the end of the burst flush the GRO tables and write each
//! destination queue what was staged for it, from the worker itself (run
//! to completion) — or, for a port whose `delivery = "thread"`, publish
//! it to that queue's delivery thread.

mod batch;
mod burst;
pub(crate) mod egress;
pub(crate) mod forward;
pub(crate) mod learn;
mod staging;
mod tunnel_trace;
mod turn;
pub(crate) mod view;
pub(crate) mod vlan;

use crate::arc::FeatureArc;
use crate::capture::Way;
use crate::counters::{add, DropReason};
use crate::deliver::Scratch;
use crate::engine::{Port, PortState, Switch};
use crate::item::{RingItem, BATCH};
use crate::port_table::PortTable;
use crate::ring::{Lane, Slot};
use crate::settings::PortSettings;
use crate::stages::lro::IngressLro;
pub(crate) use burst::Burst;
use hvnet_offload::gro::{GroOutput, GroTable};
use hvnet_port::{Link, Packet, Pool, Receiver, RecvError, Transmitter};
use hvnet_wire::MacAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A GRO table with no held run for this long is freed.
const GRO_IDLE: Duration = Duration::from_secs(1);

/// How often the kernel's drops at a port's queue are read (a system
/// call, so not per batch).
const KERNEL_DROPS_EVERY: Duration = Duration::from_millis(100);

/// Where the watch starts again after it found nothing.
const BUSY_POLL_MIN: Duration = Duration::from_micros(2);

/// Batches a queue may read in one turn on its worker before the
/// worker looks at its other queues (64 frames each: 1,024 frames).
pub(crate) const TURN_BATCHES: usize = 16;

/// Where a queue stands after a turn on its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Emptied and asked to notify again: the worker waits for its
    /// notification.
    Cold,
    /// Frames may remain (its notifications may be off): the worker comes
    /// back to it without waiting.
    Hot,
    /// The port's buffer cap stopped the reading: the worker comes back
    /// after a short pause.
    Stalled,
}

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
pub(crate) struct Dest {
    pub(crate) lane: Option<Lane<RingItem>>,
    pub(crate) gro: Option<GroTable<Packet>>,
    pub(crate) gro_used: Option<Instant>,
    pub(crate) active: bool,
    /// Its transmitter, for batches this worker delivers itself.
    pub(crate) tx: Option<Box<dyn Transmitter>>,
}

/// A destination's transmitter (`Dest::tx`), made on first use for queue
/// `q` of `port`.
pub(crate) fn transmitter<'a>(
    tx: &'a mut Option<Box<dyn Transmitter>>,
    port: &Port,
    q: usize,
) -> &'a mut dyn Transmitter {
    &mut **tx.get_or_insert_with(|| {
        Arc::clone(&port.dev).transmitter(q, hvnet_port::TxOptions::default())
    })
}

/// What a worker works for: the switch, its port and queue (shared,
/// read-only; kept apart from the worker's state so that no reference
/// count is touched per frame).
pub(crate) struct Ctx {
    pub(crate) sw: Arc<Switch>,
    pub(crate) port: Arc<Port>,
    pub(crate) q: usize,
    /// The port table as this worker last read it (again when the
    /// switch's generation moves: [`Rxq::poll_batch`]).
    pub(crate) ports: Arc<PortTable>,
    /// The burst being switched is a synthetic frame's, traced only: it
    /// is learned, counted and delivered nowhere ([`Rxq::inject`]).
    pub(crate) synthetic: std::cell::Cell<bool>,
}

/// An ingress stage's entry: the whole burst.
pub(crate) type InRun = fn(&mut State, &Ctx, &mut Burst);

/// An egress stage's entry: one frame to one destination queue; an
/// error drops it, counted there under the reason.
pub(crate) type OutRun = fn(&mut State, &Ctx, &mut Out<'_>) -> Result<(), DropReason>;

/// A frame on its way to one destination.
pub(crate) struct Out<'a> {
    /// The destination port.
    pub(crate) dst: usize,
    /// Its receive queue (the `queue` stage's choice).
    pub(crate) q: usize,
    /// The frame.
    pub(crate) pkt: &'a mut Packet,
}

pub(crate) struct Rxq {
    cx: Ctx,
    st: State,
    burst: Burst,
}

impl Ctx {
    /// True while a synthetic frame is switched (traced, never delivered).
    #[inline]
    pub(crate) fn synthetic(&self) -> bool {
        self.synthetic.get()
    }

    /// Adds `n` to one of the port's counters of what became of a frame,
    /// unless the frame is synthetic (counted nowhere).
    #[inline]
    pub(crate) fn count(&self, counter: &std::sync::atomic::AtomicU64, n: u64) {
        if !self.synthetic() {
            add(counter, n);
        }
    }

    /// A frame from the port dropped: counted under its reason, and
    /// copied for the port's `drop` captures.
    pub(crate) fn drop_frame(&self, reason: DropReason, pkt: &Packet) {
        if self.synthetic() {
            return;
        }
        self.port.ingress[self.q].count_drop(reason, 1);
        self.port.taps.dropped(Way::Inbound, self.q, reason, pkt);
    }

    /// Frame `i` of the burst dropped ([`Ctx::drop_frame`]), and gone
    /// from the burst.
    pub(crate) fn drop_from(&self, b: &mut Burst, i: usize, reason: DropReason) {
        self.drop_frame(reason, &b[i]);
        b.trace(&self.port.tracer, i, "drop", || reason.name().into());
        b.release(i);
    }
}

/// A worker's own state.
pub(crate) struct State {
    pub(crate) pool: Pool,
    pub(crate) rx: Box<dyn Receiver>,
    /// When the kernel's drops at this queue were last read.
    pub(crate) kernel_drops_read: Instant,
    /// When the queue's thread last woke to read.
    pub(crate) last_wake: Instant,
    /// How long an emptied queue is watched next ([`Rxq::busy_poll`]).
    pub(crate) poll_budget: Duration,
    /// Frames were read since the queue was last found empty.
    pub(crate) read: bool,
    /// Destinations holding frames a full receiver did not take
    /// (`rx_overflow = "backpressure"`), and since when.
    pub(crate) kept: Vec<(usize, usize)>,
    pub(crate) kept_since: Option<Instant>,
    /// Every port's settings, security groups, mirrors and egress arc,
    /// read again when the switch's generation moves: each a field of the
    /// view every queue shares ([`view`]), held here as its own `Arc`, so
    /// that reaching an element takes the loads a `Vec` of its own took.
    pub(crate) gen: u64,
    pub(crate) settings: Arc<[PortSettings]>,
    pub(crate) acls: Arc<[Option<Arc<crate::acl::PortAcl>>]>,
    pub(crate) mirrors: Arc<crate::stages::mirror::view::MirrorView>,
    pub(crate) out_arcs: Arc<[FeatureArc<OutRun>]>,
    /// Per destination port and queue, made on first use.
    pub(crate) dests: Vec<Vec<Dest>>,
    /// The port each entry of `dests` was made for (an index given to
    /// another port gets fresh state).
    pub(crate) dest_ports: Vec<Option<Arc<Port>>>,
    pub(crate) active: Vec<(usize, usize)>,
    /// The source address learned last, and its VLAN (learning it again
    /// would only take the FDB lock).
    pub(crate) learned: Option<(u16, MacAddr)>,
    /// The last destination looked up, its VLAN, and its port.
    pub(crate) route: Option<(u16, MacAddr, Option<usize>)>,
    pub(crate) gro_out: Vec<GroOutput<Packet>>,
    pub(crate) inline: Vec<Slot<RingItem>>,
    pub(crate) scratch: Scratch,
    pub(crate) last_sweep: Instant,
    /// When the current batch began.
    pub(crate) now: Instant,
    /// An uplink's software LRO (`lro = "software"`), made on first use,
    /// and the frames it made ready to switch.
    pub(crate) ingress_lro: Option<IngressLro>,
    pub(crate) lro_ready: Vec<Packet>,
    /// A mirror's copy is on its way (it is not mirrored again).
    pub(crate) mirroring: bool,
    /// The mirrors that copied the frame being switched.
    pub(crate) mirrored: u64,
    /// The trace number of the frame being switched, if it is traced.
    pub(crate) tracing: Option<u64>,
    /// The last read's frames a far tunnel endpoint marked for a trace,
    /// and those traced here whose lines go back after the burst
    /// (`tunnel_trace.rs`).
    pub(crate) marks: Vec<hvnet_port::TraceMark>,
    pub(crate) reports_due: Vec<(u64, u16)>,
    /// This queue's port's ingress arc (built with the view).
    pub(crate) in_arc: FeatureArc<InRun>,
    /// An ERSPAN copy's headers and bytes.
    pub(crate) erspan_out: Vec<u8>,
    /// The stages' own state at this queue, by type.
    pub(crate) locals: crate::engine::services::Locals,
    /// At a tunnel endpoint's queue: its address and UDP port (the outer
    /// destination of what it decapsulates), read with the settings.
    pub(crate) endpoint: Option<(std::net::IpAddr, u16)>,
}

/// True if port `p` takes a frame of `vlan`: it is up and connected,
/// carries the VLAN, and is no mirror's output (which takes its copies
/// alone).
pub(crate) fn takes(
    ports: &PortTable,
    settings: &[PortSettings],
    mirror_output: &[bool],
    p: usize,
    vlan: u16,
) -> bool {
    ports.get(p).zip(settings.get(p)).is_some_and(|(x, s)| {
        x.is_up()
            && s.connected
            && s.vlans_of(x.vlan()).carries(vlan)
            && mirror_output.get(p) != Some(&true)
    })
}

impl Rxq {
    pub(crate) fn new(sw: Arc<Switch>, port: Arc<Port>, q: usize) -> Rxq {
        let st = State {
            pool: Pool::new(Arc::clone(&port.home)),
            rx: Arc::clone(&port.dev).receiver(q),
            kernel_drops_read: Instant::now(),
            last_wake: Instant::now(),
            poll_budget: BUSY_POLL_MIN,
            read: false,
            kept: Vec::new(),
            kept_since: None,
            gen: u64::MAX,
            settings: Arc::new([]),
            acls: Arc::new([]),
            mirrors: Arc::default(),
            out_arcs: Arc::new([]),
            dests: Vec::new(),
            dest_ports: Vec::new(),
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
            mirroring: false,
            mirrored: 0,
            tracing: None,
            marks: Vec::new(),
            reports_due: Vec::new(),
            in_arc: FeatureArc::default(),
            erspan_out: Vec::new(),
            locals: Default::default(),
            endpoint: None,
        };
        Rxq {
            cx: Ctx {
                ports: sw.ports(),
                sw,
                port,
                q,
                synthetic: Default::default(),
            },
            st,
            burst: Burst::default(),
        }
    }

    /// What the worker polls for readability to know the queue has work.
    pub(crate) fn wait_fd(&self) -> std::os::fd::RawFd {
        self.st.rx.wait_fd()
    }

    /// The queue's port.
    pub(crate) fn port(&self) -> &Arc<Port> {
        &self.cx.port
    }

    /// The queue's index in its port.
    pub(crate) fn queue(&self) -> usize {
        self.cx.q
    }
}

impl State {
    /// After the switch's generation moved: every port's settings read
    /// again; a destination whose port left (or whose index another port
    /// took) loses what was held for it.
    pub(super) fn refresh(&mut self, cx: &Ctx, gen: u64) {
        self.gen = gen;
        let t = &cx.ports;
        let view = cx.sw.views.at(&cx.sw, gen, t);
        self.settings = Arc::clone(&view.settings);
        self.acls = Arc::clone(&view.acls);
        self.mirrors = Arc::clone(&view.mirrors);
        self.out_arcs = Arc::clone(&view.out_arcs);
        // A stage's own state is read with the settings: one off the arc
        // keeps nothing (an exporter that was replaced).
        self.locals.clear();
        self.endpoint = cx.sw.endpoint_address(cx.port.id);
        self.in_arc = view.in_arc(cx.port.id);
        let own = self.out_arcs.get(cx.port.id).map(FeatureArc::names);
        cx.port
            .set_arcs(self.in_arc.names(), own.unwrap_or_default());
        self.dests.resize_with(t.len(), Vec::new);
        self.dest_ports.resize(t.len(), None);
        for i in 0..t.len() {
            let now = t.get(i);
            let same = match (now, &self.dest_ports[i]) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            if !same {
                self.dests[i] = Vec::new();
                self.dest_ports[i] = now.cloned();
            }
        }
    }

    /// A line from egress stage `stage` for the frame being switched, if
    /// it is traced (`text` is made only then).
    #[inline]
    pub(crate) fn trace_out(&self, cx: &Ctx, stage: &'static str, text: impl FnOnce() -> String) {
        if let Some(id) = self.tracing {
            cx.port.tracer.line(id, stage, text());
        }
    }

    /// The traced frame being switched dropped, by the counters' name:
    /// on its way in (`dst` None), or its copy to port `dst`.
    pub(crate) fn trace_drop(&self, cx: &Ctx, dst: Option<usize>, why: DropReason) {
        self.trace_out(cx, "drop", || match dst {
            Some(d) => format!("to {}: {}", cx.ports[d].name, why.name()),
            None => why.name().into(),
        });
    }

    /// The state for destination `(dst, q)`, made on first use.
    pub(super) fn dest(&mut self, cx: &Ctx, dst: usize, q: usize) -> &mut Dest {
        let v = &mut self.dests[dst];
        if v.is_empty() {
            v.resize_with(cx.ports[dst].rxq.len(), Dest::default);
        }
        &mut v[q]
    }
}
