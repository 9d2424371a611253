//! The switch: ports, their queue workers and delivery threads, forwarding,
//! and the offload stage between them.
//!
//! Threads, per port and queue `n` (named as cloud-hypervisor names them):
//! - `{port}_q{n}` reads what the guest sends on TAP queue `n`, in batches,
//!   learns source addresses, picks destinations, and runs the offload stage
//!   for each: software LRO (the GRO engine, one table per destination
//!   queue, flushed at the end of every batch) for frames bound for a guest
//!   with LRO on, and ring placement;
//! - `{port}_rx{n}` is the guest's "vCPU" for receive: it drains receive
//!   queue `n`'s rings into the TAP, segmenting GSO frames for a guest that
//!   does not take them whole and completing partial checksums for a guest
//!   without checksum offload.

use crate::counters::{add, EgressCounters, EgressStats, IngressCounters, IngressStats};
use crate::fdb::Fdb;
use crate::ring::{self, Full, RingStatus, Rings};
use hvnet_offload::gro::{Coalesced, GroConfig, GroOutput, GroTable};
use hvnet_offload::gso::{self, CsumMode};
use hvnet_offload::rss::{Rss, DEFAULT_KEY};
use hvnet_offload::{csum, CsumState, GsoInfo, OffloadInfo};
use hvnet_port::{Buf, Pool, RecvError, TapPort};
use hvnet_wire::{EtherType, EthernetFrame, MacAddr};
use serde::Serialize;
use std::collections::HashMap;
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Frames read per batch before the GRO tables are flushed (a NAPI budget).
pub const BATCH: usize = 64;

/// A port's settings, changeable at run time (`hvnet port PORT set …`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSettings {
    /// Software LRO for frames to this guest; also whether it takes GSO
    /// frames whole. Default on, as in vSphere.
    pub lro: bool,
    /// The guest may hand us TSO frames (its `ethtool -k` shows TSO on).
    pub tso: bool,
    /// Checksum offload both ways: the guest may send partial checksums and
    /// takes frames with partial checksums.
    pub csum: bool,
    /// MTU, 68..=9000.
    pub mtu: u16,
    /// Ring 1 size per receive queue (buffers).
    pub ring1: usize,
    /// Ring 2 size per receive queue (buffers).
    pub ring2: usize,
    /// Accept frames whose source MAC is not the port's (forged transmits).
    pub allow_forged_transmits: bool,
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
        }
    }
}

/// What a frame in a guest receive ring is. (The coalesced variant keeps
/// its rewritten header inline, as `GroOutput` does: no allocation per
/// coalesced frame.)
#[allow(clippy::large_enum_variant)]
pub enum RingItem {
    /// A frame as received (possibly a GSO frame, possibly to be segmented
    /// on delivery).
    Frame {
        /// The buffer.
        buf: Buf,
        /// Its metadata.
        info: OffloadInfo,
        /// Segment it on delivery (the guest does not take it whole).
        segment: Option<GsoInfo>,
    },
    /// A coalesced frame.
    Coalesced(Coalesced<Buf>),
}

/// A guest receive queue: its rings and counters.
pub struct RxQueue {
    /// The rings.
    pub rings: Rings<RingItem>,
    /// What was delivered or dropped.
    pub counters: EgressCounters,
}

/// A port: a VM's NIC on the switch.
pub struct Port {
    /// Index in the switch.
    pub id: usize,
    /// VM / client name.
    pub name: String,
    /// The TAP device.
    pub tap: TapPort,
    /// The VM's MAC address.
    pub mac: MacAddr,
    /// Access VLAN (0: untagged).
    pub vlan: u16,
    settings: RwLock<PortSettings>,
    /// Guest receive queues, one per TAP queue.
    pub rxq: Vec<RxQueue>,
    /// Per TAP queue, what the guest sent.
    pub ingress: Vec<IngressCounters>,
    up: AtomicBool,
}

impl Port {
    /// The settings now.
    pub fn settings(&self) -> PortSettings {
        self.settings.read().expect("settings lock").clone()
    }
    /// Link state: false once the guest's TAP is gone.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
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
            s += q.counters.snapshot();
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
}

/// Everything needed to add a port.
pub struct PortSpec {
    /// VM name.
    pub name: String,
    /// Its opened TAP.
    pub tap: TapPort,
    /// Its MAC.
    pub mac: MacAddr,
    /// Access VLAN (0: none).
    pub vlan: u16,
    /// Settings.
    pub settings: PortSettings,
}

/// How the queue threads move frames through the TAPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct IoMode {
    /// io_uring for reads: several reads armed per queue, completions and
    /// re-arms in one system call. Otherwise `poll`, then `read(2)` until
    /// the queue is empty or a batch is full.
    pub uring_read: bool,
    /// io_uring for writes: a batch of deliveries in one system call.
    /// Otherwise one `writev(2)` per delivery.
    pub uring_write: bool,
}

impl IoMode {
    /// From `HVNET_IO_READ` and `HVNET_IO_WRITE` (`uring` or `syscall`).
    /// The default is what measured best on this machine
    /// (`docs/perf/live-switch.md`): system calls both ways. Reads until the
    /// queue is empty give LRO larger batches than io_uring completions do,
    /// and io_uring TAP writes go through the kernel's worker threads,
    /// which on two cores costs more than it saves.
    pub fn from_env() -> IoMode {
        let get = |k: &str| std::env::var(k).as_deref() == Ok("uring");
        IoMode {
            uring_read: get("HVNET_IO_READ"),
            uring_write: get("HVNET_IO_WRITE"),
        }
    }
}

/// Switch-wide settings.
#[derive(Clone, Debug)]
pub struct SwitchConfig {
    /// FDB aging time.
    pub fdb_aging: Duration,
    /// TAP I/O mode.
    pub io: IoMode,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            fdb_aging: Duration::from_secs(300),
            io: IoMode::from_env(),
        }
    }
}

/// The switch.
pub struct Switch {
    /// Ports, by index.
    pub ports: Vec<Arc<Port>>,
    /// Learned addresses.
    pub fdb: Fdb,
    pool: Pool,
    rss: Rss,
    stop: AtomicBool,
    started: Instant,
    io: IoMode,
}

/// Why a setting change was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingError {
    /// No such port.
    #[error("no port named {0}")]
    NoPort(String),
    /// Out of range.
    #[error("{0}")]
    Range(String),
}

impl Switch {
    /// Builds a switch over opened ports (not yet running).
    pub fn new(specs: Vec<PortSpec>, cfg: SwitchConfig) -> Arc<Switch> {
        let ports = specs
            .into_iter()
            .enumerate()
            .map(|(id, s)| {
                let nq = s.tap.num_queues();
                Arc::new(Port {
                    id,
                    rxq: (0..nq)
                        .map(|_| RxQueue {
                            rings: Rings::new(s.settings.ring1, s.settings.ring2),
                            counters: EgressCounters::default(),
                        })
                        .collect(),
                    ingress: (0..nq).map(|_| IngressCounters::default()).collect(),
                    name: s.name,
                    tap: s.tap,
                    mac: s.mac,
                    vlan: s.vlan,
                    settings: RwLock::new(s.settings),
                    up: AtomicBool::new(true),
                })
            })
            .collect();
        Arc::new(Switch {
            ports,
            fdb: Fdb::new(cfg.fdb_aging),
            pool: Pool::new(16384),
            rss: Rss::new(&DEFAULT_KEY, 1).expect("default RSS key"),
            stop: AtomicBool::new(false),
            started: Instant::now(),
            io: cfg.io,
        })
    }

    /// Starts every worker and delivery thread.
    pub fn start(self: &Arc<Switch>) -> Vec<JoinHandle<()>> {
        let mut handles = Vec::new();
        for p in &self.ports {
            for q in 0..p.tap.num_queues() {
                let (sw, port) = (Arc::clone(self), Arc::clone(p));
                handles.push(
                    std::thread::Builder::new()
                        .name(format!("{}_q{q}", p.name))
                        .spawn(move || Worker::new(sw, port, q).run())
                        .expect("spawn worker"),
                );
                let (sw, port) = (Arc::clone(self), Arc::clone(p));
                handles.push(
                    std::thread::Builder::new()
                        .name(format!("{}_rx{q}", p.name))
                        .spawn(move || deliver_loop(&sw, &port, q))
                        .expect("spawn delivery"),
                );
            }
        }
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

    /// Applies new settings to a port at run time.
    pub fn set_port(&self, name: &str, new: PortSettings) -> Result<PortSettings, SettingError> {
        let p = self
            .port(name)
            .ok_or_else(|| SettingError::NoPort(name.into()))?;
        validate_settings(&new)?;
        let old = p.settings();
        if (old.tso, old.csum) != (new.tso, new.csum) {
            p.tap
                .set_offload(hvnet_port::tap_offload_flags(new.csum, new.tso))
                .map_err(|e| SettingError::Range(format!("cannot change offloads: {e}")))?;
        }
        for q in &p.rxq {
            q.rings.resize(new.ring1, new.ring2);
        }
        *p.settings.write().expect("settings lock") = new.clone();
        Ok(new)
    }
}

/// Checks settings ranges (also used for topology files).
pub fn validate_settings(s: &PortSettings) -> Result<(), SettingError> {
    if !(68..=9000).contains(&s.mtu) {
        return Err(SettingError::Range(format!(
            "mtu {} is outside 68..9000",
            s.mtu
        )));
    }
    for (name, v) in [("ring1", s.ring1), ("ring2", s.ring2)] {
        if !(32..=ring::MAX_RING).contains(&v) {
            return Err(SettingError::Range(format!(
                "{name} size {v} is outside 32..{}",
                ring::MAX_RING
            )));
        }
    }
    Ok(())
}

/// One ingress worker: a port's TAP queue, read in batches.
struct Worker {
    sw: Arc<Switch>,
    port: Arc<Port>,
    q: usize,
    /// Software LRO tables, one per destination (port, queue).
    gro: HashMap<(usize, usize), GroTable<Buf>>,
    /// Destination settings, read once per batch.
    settings: Vec<PortSettings>,
    /// The source address learned last in this batch (learning it again
    /// would only take the FDB lock).
    learned: Option<MacAddr>,
    /// The last destination looked up in this batch, and its port.
    route: Option<(MacAddr, Option<usize>)>,
}

impl Worker {
    fn new(sw: Arc<Switch>, port: Arc<Port>, q: usize) -> Worker {
        Worker {
            sw,
            port,
            q,
            gro: HashMap::new(),
            settings: Vec::new(),
            learned: None,
            route: None,
        }
    }

    fn run(self) {
        if self.sw.io.uring_read {
            if let Ok(reader) =
                hvnet_sys::BatchReader::new(self.port.tap.queue(self.q).file(), read_depth())
            {
                return self.run_batched(reader);
            }
        }
        self.run_syscalls();
    }

    /// Per-batch preparation: settings snapshot and fresh caches.
    fn begin_batch(&mut self) -> Instant {
        self.settings.clear();
        self.settings
            .extend(self.sw.ports.iter().map(|p| p.settings()));
        self.learned = None;
        self.route = None;
        Instant::now()
    }

    /// One received frame (or read failure) through the switch.
    fn handle(&mut self, mut buf: Buf, n: std::io::Result<usize>, now: Instant) {
        match hvnet_port::received(&mut buf, n) {
            Ok(r) => self.forward(buf, r.info, now),
            Err(RecvError::WouldBlock) => self.sw.pool.give(buf),
            Err(RecvError::Gone) => {
                self.sw.pool.give(buf);
                self.port_gone();
            }
            Err(_) => {
                add(&self.port.ingress[self.q].frames, 1);
                add(&self.port.ingress[self.q].drop_bad_vnet_header, 1);
                self.sw.pool.give(buf);
            }
        }
    }

    /// io_uring: `read_depth()` reads stay armed; each wait returns every frame
    /// that arrived and re-arms as many reads, in one system call.
    fn run_batched(mut self, mut reader: hvnet_sys::BatchReader) {
        for _ in 0..read_depth() {
            if let Err(v) = reader.arm(self.sw.pool.take().into_storage()) {
                self.sw.pool.give(Buf::from_storage(v));
                break;
            }
        }
        let mut done = Vec::with_capacity(BATCH);
        while !self.sw.stopping() && self.port.is_up() {
            if reader.wait(Duration::from_millis(100), &mut done).is_err() {
                break;
            }
            if done.is_empty() {
                continue;
            }
            let now = self.begin_batch();
            for (storage, n) in done.drain(..) {
                self.handle(Buf::from_storage(storage), n, now);
                if self.port.is_up() {
                    if let Err(v) = reader.arm(self.sw.pool.take().into_storage()) {
                        self.sw.pool.give(Buf::from_storage(v));
                    }
                }
            }
            self.flush_gro();
        }
        self.flush_gro();
    }

    /// Plain system calls: `poll`, then one `read(2)` per frame until the
    /// queue is empty or the batch is full.
    fn run_syscalls(mut self) {
        let fd = self.port.tap.queue(self.q).raw_fd();
        while !self.sw.stopping() && self.port.is_up() {
            match hvnet_sys::poll_readable(fd, 100) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => break,
            }
            let now = self.begin_batch();
            for _ in 0..BATCH {
                let mut buf = self.sw.pool.take();
                let n =
                    std::io::Read::read(&mut self.port.tap.queue(self.q).file(), buf.storage_mut());
                if matches!(&n, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
                    self.sw.pool.give(buf);
                    break;
                }
                self.handle(buf, n, now);
                if !self.port.is_up() {
                    break;
                }
            }
            self.flush_gro();
        }
        self.flush_gro();
    }

    /// The guest disappeared: its port goes down, the switch goes on.
    fn port_gone(&self) {
        self.port.up.store(false, Ordering::Relaxed);
        self.sw.fdb.sweep(Instant::now(), Some(self.port.id));
    }

    fn forward(&mut self, buf: Buf, info: OffloadInfo, now: Instant) {
        let c = &self.port.ingress[self.q];
        add(&c.frames, 1);
        add(&c.bytes, buf.len() as u64);
        if info.gso.is_some() {
            add(&c.gso_frames, 1);
        }
        let Ok(eth) = EthernetFrame::new_checked(buf.frame()) else {
            add(&c.drop_bad_frame, 1);
            self.sw.pool.give(buf);
            return;
        };
        let (src, dst) = (eth.src(), eth.dst());
        let me = &self.settings[self.port.id];
        if matches!(eth.ethertype(), EtherType::Vlan | EtherType::QinQ)
            || (src != self.port.mac && !me.allow_forged_transmits)
        {
            add(&c.drop_policy, 1);
            self.sw.pool.give(buf);
            return;
        }
        let vlan = self.port.vlan;
        if self.learned != Some(src) {
            self.sw.fdb.learn(vlan, src, self.port.id, now);
            self.learned = Some(src);
        }
        let unicast = match self.route {
            Some((mac, port)) if mac == dst => port,
            _ => {
                let port = (!dst.is_multicast())
                    .then(|| self.sw.fdb.lookup(vlan, dst, now))
                    .flatten();
                self.route = Some((dst, port));
                port
            }
        };
        match unicast {
            Some(p) if p == self.port.id => {
                add(&c.drop_no_route, 1);
                self.sw.pool.give(buf);
            }
            Some(p) if self.sw.ports[p].is_up() => {
                add(&c.forwarded, 1);
                self.egress(p, buf, info);
            }
            _ => {
                let targets: smallvec::SmallVec<[usize; 16]> = self
                    .sw
                    .ports
                    .iter()
                    .filter(|p| p.id != self.port.id && p.vlan == vlan && p.is_up())
                    .map(|p| p.id)
                    .collect();
                let Some((&last, rest)) = targets.split_last() else {
                    add(&c.drop_no_route, 1);
                    self.sw.pool.give(buf);
                    return;
                };
                add(&c.forwarded, 1);
                add(&c.flooded, 1);
                for &p in rest {
                    let mut copy = self.sw.pool.take();
                    copy.fill(buf.frame());
                    self.egress(p, copy, info);
                }
                self.egress(last, buf, info);
            }
        }
    }

    /// The offload stage for one destination.
    fn egress(&mut self, dst: usize, buf: Buf, info: OffloadInfo) {
        let sw = &*self.sw;
        let port = &*sw.ports[dst];
        let s = &self.settings[dst];
        let ring1_buf = ring::ring1_buf_size(s.mtu);
        let q = if port.rxq.len() > 1 {
            sw.rss
                .hash_frame(buf.frame())
                .map_or(0, |(h, _)| h as usize)
                % port.rxq.len()
        } else {
            0
        };
        let c = &port.rxq[q].counters;
        add(&c.offered, 1);
        match info.gso {
            Some(g) => {
                let segment = (!s.lro).then_some(g);
                enqueue(
                    sw,
                    port,
                    q,
                    RingItem::Frame { buf, info, segment },
                    1,
                    ring1_buf,
                );
            }
            None => {
                let l2 = if buf.frame().len() >= 14
                    && u16::from_be_bytes([buf.frame()[12], buf.frame()[13]]) == 0x8100
                {
                    18
                } else {
                    14
                };
                if buf.len() > s.mtu as usize + l2 {
                    add(&c.drop_mtu_exceeded, 1);
                    sw.pool.give(buf);
                    return;
                }
                if s.lro {
                    let table = self.gro.entry((dst, q)).or_insert_with(|| {
                        GroTable::new(GroConfig {
                            buckets: 64,
                            ..GroConfig::default()
                        })
                    });
                    table.receive(buf, info, 0, &mut |o| {
                        enqueue_gro(sw, port, q, o, ring1_buf)
                    });
                } else {
                    enqueue(
                        sw,
                        port,
                        q,
                        RingItem::Frame {
                            buf,
                            info,
                            segment: None,
                        },
                        1,
                        ring1_buf,
                    );
                }
            }
        }
    }

    fn flush_gro(&mut self) {
        for (&(dst, q), table) in self.gro.iter_mut() {
            if table.held() == 0 {
                continue;
            }
            let sw = &*self.sw;
            let port = &*sw.ports[dst];
            let ring1_buf = ring::ring1_buf_size(self.settings.get(dst).map_or(1500, |s| s.mtu));
            table.flush_all(&mut |o| enqueue_gro(sw, port, q, o, ring1_buf));
        }
    }
}

fn enqueue_gro(sw: &Switch, port: &Port, q: usize, o: GroOutput<Buf>, ring1_buf: usize) {
    match o {
        GroOutput::Single { frame, info } => enqueue(
            sw,
            port,
            q,
            RingItem::Frame {
                buf: frame,
                info,
                segment: None,
            },
            1,
            ring1_buf,
        ),
        GroOutput::Coalesced(c) => {
            let n = c.count as u64;
            enqueue(sw, port, q, RingItem::Coalesced(c), n, ring1_buf)
        }
    }
}

/// Places an item in a receive queue's rings, or drops it, counting
/// `sources` offered frames either way. `ring1_buf` is the queue's ring-1
/// buffer size (from its MTU).
fn enqueue(sw: &Switch, port: &Port, q: usize, item: RingItem, sources: u64, ring1_buf: usize) {
    let c = &port.rxq[q].counters;
    if !port.is_up() {
        add(&c.drop_port_down, sources);
        release_item(sw, item);
        return;
    }
    let (r1, r2) = match &item {
        RingItem::Frame {
            buf,
            segment: Some(g),
            ..
        } => {
            // Each segment takes a buffer of its own.
            let segs = (buf.len().saturating_sub(54))
                .div_ceil(g.size.max(1) as usize)
                .max(1);
            (segs, 0)
        }
        RingItem::Frame { buf, .. } => ring::buffers_for(buf.len(), ring1_buf),
        RingItem::Coalesced(c) => ring::buffers_for(c.len(), ring1_buf),
    };
    if let Err((item, full)) = port.rxq[q].rings.push(item, r1, r2) {
        match full {
            Full::Ring1 => add(&c.drop_ring1_full, sources),
            Full::Ring2 => add(&c.drop_ring2_full, sources),
        }
        release_item(sw, item);
    }
}

fn release_item(sw: &Switch, item: RingItem) {
    match item {
        RingItem::Frame { buf, .. } => sw.pool.give(buf),
        RingItem::Coalesced(c) => {
            for s in c.into_segments() {
                sw.pool.give(s.buf);
            }
        }
    }
}

/// Reads kept armed per TAP queue in batched mode (`HVNET_READ_DEPTH`,
/// default 8): every armed read waits on the queue, so each arriving frame
/// wakes them all; a few are enough to batch.
fn read_depth() -> u32 {
    std::env::var("HVNET_READ_DEPTH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
        .clamp(1, BATCH as u32)
}

/// The delivery thread of one guest receive queue.
fn deliver_loop(sw: &Switch, port: &Port, q: usize) {
    let mut batch = Vec::with_capacity(BATCH);
    let tap = port.tap.queue(q);
    let rx = &port.rxq[q];
    let mut writer = if sw.io.uring_write {
        hvnet_sys::BatchWriter::new(tap.file(), BATCH as u32).ok()
    } else {
        None
    };
    let mut results = Vec::with_capacity(BATCH);
    while !sw.stopping() {
        rx.rings
            .pop_batch(&mut batch, BATCH, Duration::from_millis(100));
        if batch.is_empty() {
            continue;
        }
        let s = port.settings();
        let (r1, r2) = batch
            .iter()
            .fold((0, 0), |(a, b), (_, x, y)| (a + x, b + y));
        let items: Vec<RingItem> = batch.drain(..).map(|(item, _, _)| item).collect();
        if port.is_up() {
            deliver_batch(
                sw,
                tap,
                writer.as_mut(),
                &rx.counters,
                &s,
                items,
                &mut results,
            );
        } else {
            for item in items {
                add(&rx.counters.drop_port_down, sources_of(&item));
                release_item(sw, item);
            }
        }
        rx.rings.release(r1, r2);
    }
    for item in rx.rings.drain() {
        release_item(sw, item);
    }
}

fn sources_of(item: &RingItem) -> u64 {
    match item {
        RingItem::Coalesced(co) => co.count as u64,
        RingItem::Frame { .. } => 1,
    }
}

/// A frame ready to write: its virtio-net header and what to count.
struct Ready {
    item: RingItem,
    vnet: [u8; hvnet_port::VNET_HDR_LEN],
    gso_intact: bool,
}

/// Delivers a batch into the guest: frames to segment go one segment at a
/// time; every other frame is prepared (checksums completed where the guest
/// needs it) and written with one vectored write each, all of them in one
/// system call when a batch writer is given.
fn deliver_batch(
    sw: &Switch,
    tap: &hvnet_sys::TapQueue,
    writer: Option<&mut hvnet_sys::BatchWriter>,
    c: &EgressCounters,
    s: &PortSettings,
    items: Vec<RingItem>,
    results: &mut Vec<std::io::Result<usize>>,
) {
    let mut ready: Vec<Ready> = Vec::with_capacity(items.len());
    for item in items {
        match item {
            RingItem::Frame {
                buf,
                segment: Some(g),
                ..
            } => deliver_segmented(sw, tap, c, s, buf, g),
            RingItem::Frame {
                mut buf,
                mut info,
                segment: None,
            } => {
                if let CsumState::Partial { start, offset } = info.csum {
                    if !s.csum
                        && info.gso.is_none()
                        && csum::complete_partial(buf.frame_mut(), start, offset).is_ok()
                    {
                        add(&c.csum_completed, 1);
                        info.csum = CsumState::Good;
                    }
                }
                if info.csum == CsumState::Good {
                    add(&c.data_valid_frames, 1);
                }
                let hdr_len = info.gso.map_or(0, |_| header_len(buf.frame()));
                let vnet = hvnet_port::vnet_bytes(&info.to_vnet(hdr_len));
                ready.push(Ready {
                    gso_intact: info.gso.is_some(),
                    item: RingItem::Frame {
                        buf,
                        info,
                        segment: None,
                    },
                    vnet,
                });
            }
            RingItem::Coalesced(mut co) => {
                if !s.csum {
                    co.fill_checksums();
                }
                let vnet = hvnet_port::vnet_bytes(&co.info.to_vnet(co.header().len() as u16));
                ready.push(Ready {
                    item: RingItem::Coalesced(co),
                    vnet,
                    gso_intact: false,
                });
            }
        }
    }
    if ready.is_empty() {
        return;
    }
    {
        let iovs: Vec<smallvec::SmallVec<[IoSlice<'_>; 64]>> = ready
            .iter()
            .map(|r| {
                let mut v = smallvec::SmallVec::new();
                v.push(IoSlice::new(&r.vnet));
                match &r.item {
                    RingItem::Frame { buf, .. } => v.push(IoSlice::new(buf.frame())),
                    RingItem::Coalesced(co) => {
                        v.push(IoSlice::new(co.header()));
                        v.extend(co.segments.iter().map(|seg| IoSlice::new(seg.bytes())));
                    }
                }
                v
            })
            .collect();
        let frames: Vec<&[IoSlice<'_>]> = iovs.iter().map(|v| &v[..]).collect();
        results.clear();
        let batched = writer.map(|w| w.write_batch(&frames, results));
        if !matches!(batched, Some(Ok(()))) {
            results.clear();
            results.extend(
                frames
                    .iter()
                    .map(|f| std::io::Write::write_vectored(&mut tap.file(), f)),
            );
        }
    }
    for (r, res) in ready.into_iter().zip(results.drain(..)) {
        let n = sources_of(&r.item);
        match (&r.item, res) {
            (RingItem::Frame { buf, .. }, Ok(_)) => {
                add(&c.delivered_frames, 1);
                add(&c.delivered_bytes, buf.len() as u64);
                add(&c.delivered_source_frames, 1);
                if r.gso_intact {
                    add(&c.gso_intact_frames, 1);
                }
            }
            (RingItem::Coalesced(co), Ok(_)) => {
                let len = co.len() as u64;
                add(&c.delivered_frames, 1);
                add(&c.delivered_bytes, len);
                add(&c.delivered_source_frames, n);
                add(&c.lro_frames, 1);
                add(&c.lro_bytes, len);
                add(&c.lro_segments, n);
            }
            (_, Err(_)) => add(&c.drop_write_error, n),
        }
        release_item(sw, r.item);
    }
}

/// A GSO frame for a guest that does not take it whole: segmented on the
/// way in, each segment written as it is made.
fn deliver_segmented(
    sw: &Switch,
    tap: &hvnet_sys::TapQueue,
    c: &EgressCounters,
    s: &PortSettings,
    buf: Buf,
    g: GsoInfo,
) {
    let mode = if s.csum {
        CsumMode::Partial
    } else {
        CsumMode::Full
    };
    let mut out = 0u64;
    let mut failed = false;
    let r = gso::segment(buf.frame(), g, mode, &mut |seg| {
        let vnet = seg.info.to_vnet(0);
        if hvnet_port::send(tap, &vnet, &[seg.header, seg.payload]).is_ok() {
            out += 1;
            add(
                &c.delivered_bytes,
                (seg.header.len() + seg.payload.len()) as u64,
            );
        } else {
            failed = true;
        }
    });
    if r.is_err() || failed {
        add(&c.drop_write_error, 1);
    } else {
        add(&c.segmented_frames, 1);
        add(&c.segments_out, out);
        add(&c.delivered_frames, out);
        add(&c.delivered_source_frames, 1);
    }
    sw.pool.give(buf);
}

/// Ethernet through L4 header length of a frame (for a GSO header's
/// `hdr_len`).
fn header_len(frame: &[u8]) -> u16 {
    hvnet_wire::Layers::parse(frame).map_or(0, |l| l.payload_offset() as u16)
}
