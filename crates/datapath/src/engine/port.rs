//! A port: a VM's NIC on the switch, or an uplink — its device (as the
//! port interface, `hvnet_port::Device`), its guest receive queues with
//! their rings, its counters, buffer account, settings, rates, captures
//! and trace. Every thread shares it through the port table.

use crate::counters::{EgressStats, IngressCounters, IngressStats};
use crate::cpu_limit::CpuLimit;
use crate::item::RingItem;
use crate::lease::Leases;
use crate::nioc::UplinkShares;
use crate::rate::PortRates;
use crate::ring::{self, RingStatus, RxRing};
use crate::settings::PortSettings;
use hvnet_port::vxlan::Vtep;
use hvnet_port::{Device, Home, PoolCaps, PoolStatus};
use hvnet_wire::MacAddr;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

/// Failures after which a port's thread is not started again.
pub const MAX_RESTARTS: u64 = 5;

/// A guest receive queue.
pub struct RxQueue {
    /// Its rings and the lanes into them.
    pub rings: RxRing<RingItem>,
}

impl RxQueue {
    /// What was offered, delivered and dropped, over every sender.
    pub fn counters(&self) -> EgressStats {
        let mut s = EgressStats::default();
        for c in self.rings.counter_sets() {
            s += c.snapshot();
        }
        s
    }
}

/// A port's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PortState {
    /// Forwarding.
    Up = 0,
    /// The guest's device is gone.
    Down = 1,
    /// A thread of the port failed more than [`MAX_RESTARTS`](crate::MAX_RESTARTS) times.
    Failed = 2,
    /// Removed from the switch (`hvnet vm del`): it never comes back.
    Removed = 3,
}

impl PortState {
    /// As shown in `hvnet ports`.
    pub fn name(self) -> &'static str {
        match self {
            PortState::Up => "up",
            PortState::Down => "down",
            PortState::Failed => "failed",
            PortState::Removed => "removed",
        }
    }
}

/// A port: a VM's NIC on the switch, or an uplink.
pub struct Port {
    /// Index in the switch.
    pub id: usize,
    /// VM / client name, or the uplink's name.
    pub name: String,
    /// Its device: the VM's TAP or virtqueues, or the uplink's interface
    /// (the datapath never asks which).
    pub dev: Arc<dyn Device>,
    /// The VM's MAC address (an uplink has none of its own: all zeros).
    pub mac: MacAddr,
    /// Access VLAN (0: untagged); changed at run time only through
    /// [`crate::Switch::set_access_vlan`], which moves its FDB entries.
    access_vlan: AtomicU16,
    pub(crate) settings: RwLock<PortSettings>,
    /// Guest receive queues, one per TAP queue.
    pub rxq: Vec<RxQueue>,
    /// Per TAP queue, what the guest sent.
    pub ingress: Vec<IngressCounters>,
    /// The port's buffer account: every buffer its guest's frames occupy,
    /// wherever they are, counts against its cap.
    pub home: Arc<Home>,
    state: AtomicU8,
    /// Failures (panics) of its queues' turns and threads so far.
    pub thread_failures: AtomicU64,
    /// Its queues' delivery threads run (`delivery = "thread"`, now or
    /// earlier).
    delivery_threads: AtomicBool,
    pub(crate) threads: Mutex<Vec<ThreadInfo>>,
    /// Its policer and shaper (`tx_rate`, `rx_rate`).
    pub rates: PortRates,
    /// Its limit on the workers' time (`cpu_limit`).
    pub cpu: CpuLimit,
    /// At an uplink: its capacity's shares among the VMs (`capacity`).
    pub shares: UplinkShares,
    /// Its live captures (`hvnet capture`).
    pub taps: crate::capture::Taps,
    /// Its trace: frames marked as read, a line from each stage they pass.
    pub tracer: crate::trace::Tracer,
    /// Who it is for ([`PortSpec::external_ids`]).
    pub external_ids: Vec<(String, String)>,
    /// DHCP leases snooped for its guest (docs/guide/guards.md).
    leases: Mutex<Leases>,
    arcs: Mutex<PortArcs>,
}

/// One of a port's threads, for the views (`hvnet port VM --json`): what
/// `top -H`, a CPU group or schedstat needs to find it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Its name (`worker{n}`, `{vm}_rx{n}`).
    pub name: String,
    /// Kernel thread id.
    pub tid: i32,
    /// "worker" (the datapath worker that owns the queue: reads what the
    /// guest sends and writes what others send it) or "delivery" (the VM's
    /// "vCPU" for receive, with `delivery = "thread"`).
    pub role: &'static str,
    /// Its queue.
    pub queue: usize,
}

impl Port {
    /// A port at index `id` of the switch, from its spec.
    pub(crate) fn new(
        id: usize,
        s: PortSpec,
        pool_caps: PoolCaps,
        gen: &Arc<AtomicU64>,
    ) -> Arc<Port> {
        let nq = s.dev.num_queues();
        s.dev.notify_changes(Arc::clone(gen));
        let rates = PortRates::default();
        rates.apply(&s.settings, Instant::now());
        let cpu = CpuLimit::default();
        cpu.apply(s.settings.cpu_limit, Instant::now());
        let shares = UplinkShares::default();
        shares.apply(s.settings.capacity.map(|r| r.0 / 8), Instant::now());
        Arc::new(Port {
            id,
            rxq: (0..nq)
                .map(|_| RxQueue {
                    rings: RxRing::new(s.settings.ring1, s.settings.ring2),
                })
                .collect(),
            ingress: (0..nq).map(|_| IngressCounters::default()).collect(),
            name: s.name,
            dev: s.dev,
            mac: s.mac,
            access_vlan: AtomicU16::new(s.vlan),
            settings: RwLock::new(s.settings),
            home: Home::new(pool_caps),
            state: AtomicU8::new(PortState::Up as u8),
            thread_failures: AtomicU64::new(0),
            delivery_threads: AtomicBool::new(false),
            rates,
            cpu,
            shares,
            taps: crate::capture::Taps::new(Arc::clone(gen)),
            tracer: Default::default(),
            external_ids: s.external_ids,
            threads: Mutex::new(Vec::new()),
            leases: Mutex::new(Leases::default()),
            arcs: Mutex::default(),
        })
    }

    /// Its access VLAN (0: untagged).
    #[inline]
    pub fn vlan(&self) -> u16 {
        self.access_vlan.load(Ordering::Relaxed)
    }

    pub(crate) fn set_vlan(&self, vlan: u16) {
        self.access_vlan.store(vlan, Ordering::Relaxed);
    }

    /// The settings now.
    pub fn settings(&self) -> PortSettings {
        self.settings.read().expect("settings lock").clone()
    }
    /// The settings as the datapath applies them: LRO (GSO frames whole)
    /// and checksum offload only where the other side takes them (a
    /// vhost-user guest's driver may have refused them).
    pub fn effective_settings(&self) -> PortSettings {
        let mut s = self.settings().shaped();
        let caps = self.dev.caps();
        s.lro &= caps.gso;
        s.csum &= caps.csum;
        if s.dhcp_snooping {
            s.leases = self.leases();
        }
        s
    }
    /// The DHCP leases snooped for its guest.
    pub fn leases(&self) -> Leases {
        self.leases.lock().expect("leases lock").clone()
    }
    /// Records a lease an ACK gave its guest ([`crate::lease`]).
    pub(crate) fn learn_lease(&self, ip: std::net::Ipv4Addr, until: Instant) {
        self.leases.lock().expect("leases lock").learn(ip, until);
    }
    /// True while the port's guest is here: its port connected and its
    /// guest not gone (migrated away). Its address is pinned to it and
    /// advertised to the fabric only then.
    pub fn present(&self) -> bool {
        self.settings().connected && self.dev.guest_present()
    }
    /// True for an uplink (the physical side), false for a VM's port.
    pub fn is_uplink(&self) -> bool {
        self.dev.faces_wire()
    }
    /// Link state: false once the guest's TAP is gone or the port failed.
    pub fn is_up(&self) -> bool {
        self.state() == PortState::Up
    }
    /// The port's state.
    pub fn state(&self) -> PortState {
        match self.state.load(Ordering::Relaxed) {
            0 => PortState::Up,
            1 => PortState::Down,
            2 => PortState::Failed,
            _ => PortState::Removed,
        }
    }
    pub(crate) fn set_state(&self, s: PortState) {
        self.state.store(s as u8, Ordering::Relaxed);
    }
    /// Moves the port from `from` to `to` if it is in `from` (several
    /// queue threads may notice one change; the change is logged once).
    pub(crate) fn set_state_if(&self, from: PortState, to: PortState) {
        if self
            .state
            .compare_exchange(from as u8, to as u8, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            tracing::info!(port = %self.name, link = to.name(), "link state");
        }
    }
    /// Ingress counters summed over queues.
    pub fn ingress_stats(&self) -> IngressStats {
        let mut s = IngressStats::default();
        for c in &self.ingress {
            s += c.snapshot();
        }
        s
    }
    /// Egress counters summed over queues.
    pub fn egress_stats(&self) -> EgressStats {
        let mut s = EgressStats::default();
        for q in &self.rxq {
            s += q.counters();
        }
        s
    }
    /// Ring status per receive queue.
    pub fn ring_status(&self) -> Vec<RingStatus> {
        self.rxq.iter().map(|q| q.rings.status()).collect()
    }
    /// Bytes of buffers the rings hold when full.
    pub fn ring_memory(&self) -> usize {
        let s = self.settings();
        self.rxq.len() * (s.ring1 * ring::ring1_buf_size(s.mtu) + s.ring2 * ring::RING2_BUF)
    }
    /// Counts a failure (a panic) of `what` — one of its threads, or one
    /// of its queues' turns — and says whether `what` may start again:
    /// after [`crate::MAX_RESTARTS`] the port is marked failed instead,
    /// never silently dead.
    pub(crate) fn failed(&self, what: &str) -> bool {
        let n = self.thread_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= MAX_RESTARTS {
            tracing::error!(port = %self.name, what, failures = n, "failed again; the port is marked failed");
            self.set_state(PortState::Failed);
            return false;
        }
        tracing::error!(port = %self.name, what, failures = n, "failed; starting it again");
        true
    }

    /// Marks the port's delivery threads started; false if they were.
    pub(crate) fn claim_delivery_threads(&self) -> bool {
        !self.delivery_threads.swap(true, Ordering::AcqRel)
    }
    /// The port's delivery threads now running (its workers:
    /// [`Switch::port_threads`]).
    pub fn delivery_threads(&self) -> Vec<ThreadInfo> {
        self.threads.lock().expect("threads lock").clone()
    }
    /// The port's buffers: allocated, idle, and the cap.
    pub fn buffers(&self) -> PoolStatus {
        self.home.status()
    }

    /// The stages its frames pass, as its workers built them last.
    pub fn arcs(&self) -> PortArcs {
        self.arcs.lock().expect("arcs lock").clone()
    }

    /// Its workers' arcs, as built (written only when they changed).
    pub(crate) fn set_arcs(&self, ingress: Vec<&'static str>, egress: Vec<&'static str>) {
        let mut a = self.arcs.lock().expect("arcs lock");
        if a.ingress != ingress || a.egress != egress {
            *a = PortArcs { ingress, egress };
        }
    }
}

/// A port's stages in each direction, in order (`hvnet port P`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PortArcs {
    /// What its frames pass as they come in.
    pub ingress: Vec<&'static str>,
    /// What frames to it pass on their way (then the write).
    pub egress: Vec<&'static str>,
}

/// Everything needed to add a port.
pub struct PortSpec {
    /// VM or uplink name.
    pub name: String,
    /// Its opened device.
    pub dev: Arc<dyn Device>,
    /// Its MAC (all zeros for an uplink).
    pub mac: MacAddr,
    /// Access VLAN (0: none).
    pub vlan: u16,
    /// For a VXLAN tunnel endpoint (its device a
    /// [`hvnet_port::VxlanPort`]): the endpoint's tables, which the
    /// control plane (BGP EVPN), the views and ARP suppression read and
    /// write. Frames reach the endpoint only through the device.
    pub endpoint: Option<Arc<Vtep>>,
    /// Settings.
    pub settings: PortSettings,
    /// Who the port is for, in the control plane's words (a libvirt
    /// domain's name and UUID, its interface's alias), as Open vSwitch's
    /// `external_ids`: shown by the views, the metrics' labels and
    /// captures; the datapath never reads them.
    pub external_ids: Vec<(String, String)>,
}
