//! The switch: ports, their threads, and settings.
//!
//! Threads, per port and queue `n` (named as cloud-hypervisor names them):
//! - `{port}_q{n}` ([`crate::worker`]) reads what the guest sends on TAP
//!   queue `n` in batches, forwards each frame and runs the offload stage
//!   for each destination (software LRO, ring placement), and at the end of
//!   the batch publishes what it staged for each destination queue — or,
//!   when that queue is idle and its port allows it, delivers it itself
//!   (run to completion);
//! - `{port}_rx{n}` ([`crate::deliver`]) is the guest's "vCPU" for
//!   receive: it drains receive queue `n`'s lanes into the TAP, segmenting
//!   GSO frames for a guest that does not take them whole and completing
//!   partial checksums for a guest without checksum offload;
//! - `fdb-aging` sweeps the FDB once a second.
//!
//! Every thread runs under a supervisor: a panic is logged and counted,
//! the thread starts again with fresh state, and after
//! [`MAX_RESTARTS`] failures the port is marked failed (shown in
//! `hvnet ports`), never silently dead.

use crate::counters::{EgressStats, IngressCounters, IngressStats};
use crate::fdb::{Fdb, FdbLimits};
use crate::ring::{self, RingStatus, RxRing};
use hvnet_offload::gro::Coalesced;
use hvnet_offload::rss::{Rss, DEFAULT_KEY};
use hvnet_offload::GsoInfo;
use hvnet_port::{Device, Home, Packet, PoolCaps, PoolStatus};
use hvnet_wire::MacAddr;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Frames read per batch before the GRO tables are flushed and staged
/// frames published (a NAPI budget).
pub const BATCH: usize = 64;

/// Failures after which a port's thread is not started again.
pub const MAX_RESTARTS: u64 = 5;

/// What a sender does when a destination's receive ring is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RxOverflow {
    /// Drop the frame and count it (`ring 1 full` / `ring 2 full`), as
    /// VMXNET3 does: what seed 002 measures.
    Drop,
    /// Stop reading the sender's queue until the ring has room (up to
    /// [`BACKPRESSURE_WAIT`], then drop), so the sender's own queue fills
    /// and its TCP slows down. A slow receiver then holds up the sender's
    /// traffic to everyone else too.
    Backpressure,
}

/// Longest a sender waits for ring space under `rx_overflow =
/// "backpressure"` before it drops after all (a receiver that stopped
/// altogether must not stop its senders for good).
pub const BACKPRESSURE_WAIT: Duration = Duration::from_millis(100);

/// Who writes frames into a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// The sender's worker delivers a batch itself when the queue is idle
    /// (run to completion: no hand-off, no wake-up); otherwise the queue's
    /// delivery thread does.
    Auto,
    /// Always the queue's delivery thread, the VM's "vCPU" (what the lab
    /// holds to a CPU share).
    Thread,
}

/// A switch, on or off: `true`/`false`, or the words the CLI takes,
/// `"on"`/`"off"` — one vocabulary in topology files and `port set`.
pub fn on_off<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OnOff {
        Bool(bool),
        Word(String),
    }
    match OnOff::deserialize(d) {
        Ok(OnOff::Bool(b)) => Ok(b),
        Ok(OnOff::Word(w)) if w == "on" => Ok(true),
        Ok(OnOff::Word(w)) if w == "off" => Ok(false),
        Ok(OnOff::Word(w)) => Err(serde::de::Error::custom(format!("{w:?} is not on or off"))),
        Err(_) => Err(serde::de::Error::custom("expected on or off")),
    }
}

/// A port's settings, changeable at run time (`hvnet port PORT set …`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSettings {
    /// Software LRO for frames to this guest; also whether it takes GSO
    /// frames whole. Default on, as in vSphere. At an uplink: software LRO
    /// of what arrives from the wire, before switching (`lro =
    /// "software"`).
    #[serde(deserialize_with = "on_off")]
    pub lro: bool,
    /// The guest may hand us TSO frames (its `ethtool -k` shows TSO on).
    #[serde(deserialize_with = "on_off")]
    pub tso: bool,
    /// Checksum offload both ways: the guest may send partial checksums and
    /// takes frames with partial checksums.
    #[serde(deserialize_with = "on_off")]
    pub csum: bool,
    /// MTU, 68..=9000.
    pub mtu: u16,
    /// Ring 1 size per receive queue (buffers).
    pub ring1: usize,
    /// Ring 2 size per receive queue (buffers).
    pub ring2: usize,
    /// Accept frames whose source MAC is not the port's (forged transmits).
    #[serde(deserialize_with = "on_off")]
    pub allow_forged_transmits: bool,
    /// What a sender does when this port's ring is full.
    pub rx_overflow: RxOverflow,
    /// Who writes frames into this guest.
    pub delivery: Delivery,
}

impl Default for PortSettings {
    fn default() -> Self {
        PortSettings {
            lro: true,
            tso: true,
            csum: true,
            mtu: 1500,
            ring1: 256,
            ring2: 256,
            allow_forged_transmits: false,
            rx_overflow: RxOverflow::Backpressure,
            delivery: Delivery::Auto,
        }
    }
}

/// What a frame in a guest receive ring is.
#[allow(clippy::large_enum_variant)]
pub enum RingItem {
    /// A frame as received (possibly a GSO frame).
    Frame {
        /// The packet.
        pkt: Packet,
        /// Segment it on delivery (the guest does not take it whole).
        segment: Option<GsoInfo>,
    },
    /// A coalesced frame.
    Coalesced(Coalesced<Packet>),
}

impl RingItem {
    /// Offered frames this item accounts for.
    pub fn sources(&self) -> u64 {
        match self {
            RingItem::Coalesced(c) => c.count as u64,
            RingItem::Frame { .. } => 1,
        }
    }
}

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
    /// A thread of the port failed more than [`MAX_RESTARTS`] times.
    Failed = 2,
}

impl PortState {
    /// As shown in `hvnet ports`.
    pub fn name(self) -> &'static str {
        match self {
            PortState::Up => "up",
            PortState::Down => "down",
            PortState::Failed => "failed",
        }
    }
}

/// A port: a VM's NIC on the switch, or an uplink.
pub struct Port {
    /// Index in the switch.
    pub id: usize,
    /// VM / client name, or the uplink's name.
    pub name: String,
    /// Its device: the VM's TAP, or the uplink's interface.
    pub dev: Device,
    /// The VM's MAC address (an uplink has none of its own: all zeros).
    pub mac: MacAddr,
    /// Access VLAN (0: untagged).
    pub vlan: u16,
    /// The VXLAN tunnel endpoint an uplink is, if it is one.
    pub tunnel: Option<crate::tunnel::Vtep>,
    settings: RwLock<PortSettings>,
    /// Guest receive queues, one per TAP queue.
    pub rxq: Vec<RxQueue>,
    /// Per TAP queue, what the guest sent.
    pub ingress: Vec<IngressCounters>,
    /// The port's buffer account: every buffer its guest's frames occupy,
    /// wherever they are, counts against its cap.
    pub home: Arc<Home>,
    state: AtomicU8,
    /// Thread failures (panics) so far.
    pub thread_failures: AtomicU64,
    threads: Mutex<Vec<ThreadInfo>>,
}

/// One of a port's threads, for the views (`hvnet port VM --json`): what
/// `top -H`, a CPU group or schedstat needs to find it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Its name (`{vm}_q{n}`, `{vm}_rx{n}`).
    pub name: String,
    /// Kernel thread id.
    pub tid: i32,
    /// "ingress" (reads what the guest sends) or "delivery" (the VM's
    /// "vCPU" for receive).
    pub role: &'static str,
    /// Its queue.
    pub queue: usize,
}

impl Port {
    /// The settings now.
    pub fn settings(&self) -> PortSettings {
        self.settings.read().expect("settings lock").clone()
    }
    /// The settings as the datapath applies them: for a vhost-user guest,
    /// LRO (GSO frames whole) and checksum offload only where its driver
    /// accepted them.
    pub fn effective_settings(&self) -> PortSettings {
        let mut s = self.settings();
        if let Some(v) = self.dev.vhost_user() {
            let g = v.guest_offloads();
            s.lro &= g.tso;
            s.csum &= g.csum;
        }
        s
    }
    /// True for an uplink (the physical side), false for a VM's port.
    pub fn is_uplink(&self) -> bool {
        self.dev.uplink().is_some()
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
            _ => PortState::Failed,
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
    /// The port's threads now running.
    pub fn threads(&self) -> Vec<ThreadInfo> {
        self.threads.lock().expect("threads lock").clone()
    }
    /// The port's buffers: allocated, idle, and the cap.
    pub fn buffers(&self) -> PoolStatus {
        self.home.status()
    }
}

/// Everything needed to add a port.
pub struct PortSpec {
    /// VM or uplink name.
    pub name: String,
    /// Its opened device.
    pub dev: Device,
    /// Its MAC (all zeros for an uplink).
    pub mac: MacAddr,
    /// Access VLAN (0: none).
    pub vlan: u16,
    /// For an uplink that is a VXLAN tunnel endpoint: its settings.
    pub tunnel: Option<crate::tunnel::VtepConfig>,
    /// Settings.
    pub settings: PortSettings,
}

/// How the delivery threads write into the TAPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct IoMode {
    /// io_uring for writes: a batch of deliveries in one system call.
    /// Otherwise one `writev(2)` per delivery.
    pub uring_write: bool,
}

impl IoMode {
    /// From `HVNET_IO_WRITE` (`uring` or `syscall`). The default is what
    /// measured best on this machine (`docs/perf/live-switch.md`): plain
    /// system calls; io_uring TAP writes go through the kernel's worker
    /// threads, which on two cores costs more than it saves.
    pub fn from_env() -> IoMode {
        IoMode {
            uring_write: std::env::var("HVNET_IO_WRITE").as_deref() == Ok("uring"),
        }
    }
}

/// Switch-wide settings.
#[derive(Clone, Debug)]
pub struct SwitchConfig {
    /// FDB aging time.
    pub fdb_aging: Duration,
    /// FDB limits on learned entries.
    pub fdb_limits: FdbLimits,
    /// Buffer caps per port.
    pub pool_caps: PoolCaps,
    /// TAP write mode.
    pub io: IoMode,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            fdb_aging: Duration::from_secs(300),
            fdb_limits: FdbLimits::default(),
            pool_caps: PoolCaps::DEFAULT,
            io: IoMode::from_env(),
        }
    }
}

/// The switch.
pub struct Switch {
    /// Ports, by index.
    pub ports: Vec<Arc<Port>>,
    /// Learned and static addresses.
    pub fdb: Fdb,
    pub(crate) rss: Rss,
    stop: AtomicBool,
    started: Instant,
    pub(crate) io: IoMode,
    /// Bumped on every settings change, so workers re-read settings only
    /// when they changed.
    pub(crate) settings_gen: Arc<AtomicU64>,
}

/// Why a setting change was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingError {
    /// No such port.
    #[error("no port named {0}")]
    NoPort(String),
    /// A value outside what the setting takes.
    #[error("{setting} {value} is outside {min}..{max}")]
    Range {
        /// The setting.
        setting: &'static str,
        /// The value refused.
        value: u64,
        /// Its smallest value.
        min: u64,
        /// Its largest value.
        max: u64,
    },
    /// A setting this port does not let change.
    #[error("{0}")]
    Fixed(String),
    /// The device refused the change.
    #[error("{0}")]
    Device(String),
}

impl Switch {
    /// Builds a switch over opened ports (not yet running).
    pub fn new(specs: Vec<PortSpec>, cfg: SwitchConfig) -> Arc<Switch> {
        let ports: Vec<Arc<Port>> = specs
            .into_iter()
            .enumerate()
            .map(|(id, s)| {
                let nq = s.dev.num_queues();
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
                    vlan: s.vlan,
                    tunnel: s.tunnel.map(crate::tunnel::Vtep::new),
                    settings: RwLock::new(s.settings),
                    home: Home::new(cfg.pool_caps),
                    state: AtomicU8::new(PortState::Up as u8),
                    thread_failures: AtomicU64::new(0),
                    threads: Mutex::new(Vec::new()),
                })
            })
            .collect();
        let settings_gen = Arc::new(AtomicU64::new(0));
        for p in &ports {
            if let Some(v) = p.dev.vhost_user() {
                v.notify_changes(Arc::clone(&settings_gen));
            }
        }
        let fdb = Fdb::new(cfg.fdb_aging, cfg.fdb_limits);
        for p in ports.iter().filter(|p| !p.is_uplink()) {
            fdb.add_static(p.vlan, p.mac, p.id);
        }
        Arc::new(Switch {
            ports,
            fdb,
            rss: Rss::new(&DEFAULT_KEY, 1).expect("default RSS key"),
            stop: AtomicBool::new(false),
            started: Instant::now(),
            io: cfg.io,
            settings_gen,
        })
    }

    /// Starts every worker and delivery thread, and the FDB aging thread.
    pub fn start(self: &Arc<Switch>) -> Vec<JoinHandle<()>> {
        let mut handles = Vec::new();
        for p in &self.ports {
            for q in 0..p.dev.num_queues() {
                let (sw, port) = (Arc::clone(self), Arc::clone(p));
                handles.push(supervised(
                    format!("{}_q{q}", p.name),
                    ("ingress", q),
                    sw,
                    port,
                    move |sw, port| crate::worker::Worker::new(sw, port, q).run(),
                ));
                let (sw, port) = (Arc::clone(self), Arc::clone(p));
                handles.push(supervised(
                    format!("{}_rx{q}", p.name),
                    ("delivery", q),
                    sw,
                    port,
                    move |sw, port| crate::deliver::deliver_loop(&sw, &port, q),
                ));
            }
        }
        let sw = Arc::clone(self);
        handles.push(
            std::thread::Builder::new()
                .name("fdb-aging".into())
                .spawn(move || {
                    while !sw.stopping() {
                        std::thread::sleep(Duration::from_millis(200));
                        sw.fdb.sweep(Instant::now(), None);
                    }
                })
                .expect("spawn fdb-aging"),
        );
        handles
    }

    /// Asks every thread to stop (they notice within 100 ms).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// True once [`Switch::stop`] was called.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Time since the switch was built.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// A port by name.
    pub fn port(&self, name: &str) -> Option<&Arc<Port>> {
        self.ports.iter().find(|p| p.name == name)
    }

    /// Checks new settings for a port without applying them.
    pub fn check_settings(&self, name: &str, new: &PortSettings) -> Result<(), SettingError> {
        let p = self
            .port(name)
            .ok_or_else(|| SettingError::NoPort(name.into()))?;
        validate_settings(new)?;
        let fixed = |s: &PortSettings| (s.tso, s.csum, s.lro, s.mtu, s.allow_forged_transmits);
        if p.is_uplink() && fixed(&p.settings()) != fixed(new) {
            return Err(SettingError::Fixed(
                "an uplink's lro, tso, csum, mtu and allow_forged_transmits are set in its topology; ring1, ring2, rx_overflow and delivery may change".into(),
            ));
        }
        Ok(())
    }

    /// Applies new settings to a port at run time. Everything is checked
    /// before anything changes.
    pub fn set_port(&self, name: &str, new: PortSettings) -> Result<PortSettings, SettingError> {
        self.check_settings(name, &new)?;
        let p = self.port(name).expect("checked above");
        let old = p.settings();
        if (old.tso, old.csum) != (new.tso, new.csum) {
            if let Device::Tap(tap) = &p.dev {
                tap.set_offload(hvnet_port::tap_offload_flags(new.csum, new.tso))
                    .map_err(|e| SettingError::Device(format!("cannot change offloads: {e}")))?;
            }
        }
        for q in &p.rxq {
            q.rings.resize(new.ring1, new.ring2);
        }
        *p.settings.write().expect("settings lock") = new.clone();
        self.settings_gen.fetch_add(1, Ordering::Release);
        Ok(new)
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
        let n = port.thread_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= MAX_RESTARTS {
            tracing::error!(port = %port.name, thread = %name, failures = n, "thread failed again; the port is marked failed");
            port.set_state(PortState::Failed);
            return;
        }
        tracing::error!(port = %port.name, thread = %name, failures = n, "thread failed; starting it again");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The values a numeric setting takes, `(min, max)`; `None` for a setting
/// that is not a number.
pub fn setting_range(setting: &str) -> Option<(u64, u64)> {
    match setting {
        "mtu" => Some((68, 9000)),
        "ring1" | "ring2" => Some((32, ring::MAX_RING as u64)),
        _ => None,
    }
}

/// Checks settings ranges (also used for topology files).
pub fn validate_settings(s: &PortSettings) -> Result<(), SettingError> {
    for (setting, value) in [
        ("mtu", u64::from(s.mtu)),
        ("ring1", s.ring1 as u64),
        ("ring2", s.ring2 as u64),
    ] {
        let (min, max) = setting_range(setting).expect("a numeric setting");
        if !(min..=max).contains(&value) {
            return Err(SettingError::Range {
                setting,
                value,
                min,
                max,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Harness;

    /// A switch with one port, the port, and a run counter.
    fn one_port() -> (Harness, Arc<Port>, Arc<AtomicU64>) {
        let h = Harness::new(
            &[(MacAddr([2, 0, 0, 0, 0, 1]), 1, PortSettings::default())],
            SwitchConfig::default(),
        );
        let port = Arc::clone(&h.sw.ports[0]);
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
