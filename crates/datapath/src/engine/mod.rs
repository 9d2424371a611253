//! The switch and its ports: what every thread shares. Each port holds
//! its device (as the port interface, `hvnet_port::Device`), its guest
//! receive queues with their rings, its counters, buffer account and
//! settings; the switch holds the ports, the FDB and the switch-wide
//! settings. The threads that work on them are [`threads`]'s; the
//! ports are [`port`]'s.

pub mod arc;
#[cfg(all(test, not(hvnet_bare_arcs)))]
mod arc_tests;
pub mod deliver;
pub mod forward;
#[cfg(any(test, feature = "test-utils"))]
pub mod harness;
pub mod item;
pub mod pool;
pub mod port_table;
pub mod ring;
pub mod services;
pub mod threads;
pub(crate) mod worker;

pub(crate) mod port;

use crate::engine::pool::weight::WorkerNice;
use crate::engine::pool::Workers;
use crate::fdb::{Fdb, FdbLimits};
use crate::mdb::{Mdb, SnoopConfig};
use crate::port_table::PortTable;
use crate::settings::{validate_settings, PortSettings, SettingError};
use hvnet_offload::rss::{Rss, DEFAULT_KEY};
use hvnet_port::vxlan::Vtep;
use hvnet_port::PoolCaps;
use hvnet_wire::MacAddr;
pub use port::{Port, PortArcs, PortSpec, PortState, RxQueue, ThreadInfo, MAX_RESTARTS};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

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
    /// The CPUs the workers run on, one worker each (`[switch] cpus`);
    /// empty: every CPU the process may use.
    pub cpus: Vec<usize>,
    /// Queues moved between workers by their measured load.
    pub rebalance: bool,
    /// The longest a worker watches a queue that went empty under load
    /// (zero: it never watches, it asks for notifications at once).
    pub busy_poll_max: Duration,
    /// The workers' nice value (`[switch] nice`).
    pub worker_nice: WorkerNice,
    /// IGMP/MLD snooping (`[switch] multicast_*`).
    pub multicast: SnoopConfig,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            fdb_aging: Duration::from_secs(300),
            fdb_limits: FdbLimits::default(),
            pool_caps: PoolCaps::DEFAULT,
            io: IoMode::from_env(),
            cpus: Vec::new(),
            rebalance: true,
            busy_poll_max: Duration::from_micros(50),
            worker_nice: WorkerNice::Auto,
            multicast: SnoopConfig::default(),
        }
    }
}

/// The switch.
pub struct Switch {
    /// Ports, by index: a table replaced whole when a port comes or goes
    /// ([`Switch::ports`]).
    pub(crate) table: RwLock<Arc<PortTable>>,
    /// Ports are added and removed one at a time.
    pub(crate) table_changes: Mutex<()>,
    pub(crate) pool_caps: PoolCaps,
    /// [`Switch::start`] ran: ports added from now on go to the workers
    /// at once.
    pub(crate) running: AtomicBool,
    /// Learned and static addresses.
    pub fdb: Fdb,
    /// Multicast groups' members, router ports and queriers (snooping).
    pub mdb: Mdb,
    pub(crate) rss: Rss,
    stop: AtomicBool,
    started: Instant,
    pub(crate) io: IoMode,
    /// Bumped on every settings change, so workers re-read settings only
    /// when they changed.
    pub(crate) settings_gen: Arc<AtomicU64>,
    /// The datapath's workers.
    pub workers: Workers,
    pub(crate) rebalance: bool,
    pub(crate) busy_poll_max: Duration,
    pub(crate) worker_nice: WorkerNice,
    /// The VXLAN tunnel endpoints among the ports, by port index
    /// ([`PortSpec::endpoint`]).
    pub(crate) endpoints: RwLock<BTreeMap<usize, Arc<Vtep>>>,
    /// The switch itself, for threads it starts after [`Switch::start`].
    me: std::sync::Weak<Switch>,
    /// Security groups: each port's rules and connection table.
    pub acl: crate::acl::Acl,
    /// Port mirrors (SPAN, RSPAN, ERSPAN).
    pub mirrors: crate::mirror::Mirrors,
    /// What the stages keep switch-wide (flow export's exporter), by
    /// type.
    pub services: services::Services,
    /// What every queue reads of every port, built once per generation.
    pub(crate) views: worker::view::Views,
}

impl Switch {
    /// Builds a switch over opened ports (not yet running).
    pub fn new(specs: Vec<PortSpec>, cfg: SwitchConfig) -> Arc<Switch> {
        let settings_gen = Arc::new(AtomicU64::new(0));
        let mut endpoints = BTreeMap::new();
        let ports: Vec<Arc<Port>> = specs
            .into_iter()
            .enumerate()
            .map(|(id, mut s)| {
                if let Some(e) = s.endpoint.take() {
                    endpoints.insert(id, e);
                }
                Port::new(id, s, cfg.pool_caps, &settings_gen)
            })
            .collect();
        let fdb = Fdb::new(cfg.fdb_aging, cfg.fdb_limits);
        for p in ports.iter().filter(|p| !p.is_uplink()) {
            fdb.add_static(p.vlan(), p.mac, p.id);
        }
        let cpus = if cfg.cpus.is_empty() {
            hvnet_sys::allowed_cpus().unwrap_or_else(|_| vec![0])
        } else {
            cfg.cpus.clone()
        };
        Arc::new_cyclic(|me| Switch {
            table: RwLock::new(Arc::new(PortTable::new(ports))),
            table_changes: Mutex::new(()),
            pool_caps: cfg.pool_caps,
            running: AtomicBool::new(false),
            fdb,
            mdb: Mdb::new(cfg.multicast),
            rss: Rss::new(&DEFAULT_KEY, 1).expect("default RSS key"),
            stop: AtomicBool::new(false),
            started: Instant::now(),
            io: cfg.io,
            settings_gen,
            workers: Workers::new(&cpus).expect("the workers' eventfds"),
            rebalance: cfg.rebalance,
            busy_poll_max: cfg.busy_poll_max,
            worker_nice: cfg.worker_nice,
            endpoints: RwLock::new(endpoints),
            me: me.clone(),
            acl: crate::acl::Acl::new(),
            mirrors: Default::default(),
            services: Default::default(),
            views: Default::default(),
        })
    }

    /// A frame came from `mac`, a port's own address, on another port:
    /// if that port's guest has left (migrated to another host), its
    /// address is released to be learned where it is now; true if so.
    pub fn release_address(&self, vlan: u16, mac: MacAddr) -> bool {
        let Some(owner) = self.fdb.pinned_to(vlan, mac) else {
            return false;
        };
        let Some(p) = self.ports().get(owner).cloned() else {
            return false;
        };
        if p.present() {
            return false;
        }
        self.fdb.unpin(vlan, mac, owner);
        tracing::info!(port = %p.name, %mac, "the port's guest has left: its address is learned where it shows up");
        true
    }

    /// The VXLAN tunnel endpoint port `port` is, if it is one.
    pub fn endpoint(&self, port: usize) -> Option<Arc<Vtep>> {
        self.endpoints.read().expect("lock").get(&port).cloned()
    }

    /// The tunnel endpoint carrying VLAN `vlan` and the segment (VNI) it
    /// carries it in, if there is one (the one whose advertised addresses
    /// ARP suppression answers from).
    pub(crate) fn endpoint_on(&self, vlan: u16) -> Option<(Arc<Vtep>, u32)> {
        let ports = self.ports();
        let endpoints = self.endpoints.read().expect("lock");
        endpoints.iter().find_map(|(id, e)| {
            let own = ports.get(*id)?.vlan();
            let vni = Self::segment_of(e, own, vlan)?;
            Some((Arc::clone(e), vni))
        })
    }

    /// The VNI that endpoint `e`, on an uplink of access VLAN `own`,
    /// carries VLAN `vlan` in.
    fn segment_of(e: &Vtep, own: u16, vlan: u16) -> Option<u32> {
        e.segments()
            .into_iter()
            .find(|&(v, _)| v.unwrap_or(own) == vlan)
            .map(|(_, vni)| vni)
    }

    /// The switch's VLAN that segment `vni` of uplink `uplink`'s tunnel
    /// endpoint carries.
    fn vlan_of_segment(&self, uplink: &Port, e: &Vtep, vni: u32) -> Option<u16> {
        e.segments()
            .into_iter()
            .find(|&(_, n)| n == vni)
            .map(|(v, _)| v.unwrap_or(uplink.vlan()))
    }

    /// Installs what the fabric advertises for segment `vni` of uplink
    /// `uplink`'s tunnel endpoint: `mac` behind remote endpoint `vtep`, or
    /// (`None`) its withdrawal. A MAC that is a local VM's own address in
    /// that segment's VLAN, its guest here, is refused (counted): the
    /// fabric does not take a VM away from its port; one whose guest has
    /// left (migrated) is released to it.
    pub fn evpn_mac(
        &self,
        uplink: usize,
        vni: u32,
        mac: MacAddr,
        vtep: Option<std::net::IpAddr>,
    ) -> Result<(), hvnet_port::vxlan::EvpnRefusal> {
        let Some(up) = self.ports().get(uplink).cloned() else {
            return Ok(());
        };
        let Some(tunnel) = self.endpoint(uplink) else {
            return Ok(());
        };
        let Some(vlan) = self.vlan_of_segment(&up, &tunnel, vni) else {
            return Err(hvnet_port::vxlan::EvpnRefusal::Vni);
        };
        if vtep.is_none() {
            self.fdb.remove_remote(vlan, mac, uplink);
            return tunnel.evpn_mac(vni, mac, None);
        }
        if self.fdb.pinned_to(vlan, mac).is_some() && !self.release_address(vlan, mac) {
            tunnel.evpn_local_claim();
            return Err(hvnet_port::vxlan::EvpnRefusal::LocalMac);
        }
        tunnel.evpn_mac(vni, mac, vtep)?;
        if !self.fdb.add_remote(vlan, mac, uplink) {
            tunnel.evpn_mac(vni, mac, None)?;
            tunnel.evpn_local_claim();
            return Err(hvnet_port::vxlan::EvpnRefusal::LocalMac);
        }
        Ok(())
    }

    /// Makes `vlans` the VLANs uplink `uplink`'s tunnel endpoint carries
    /// besides its own, each in its VNI, while frames cross (segments
    /// added and removed at run time): what the fabric advertised in a
    /// segment removed leaves the endpoint and the FDB with it. The port's
    /// trunk is its settings' (`set_port`), changed apart. Nothing changes
    /// where the uplink is no tunnel endpoint.
    pub fn set_tunnel_vlans(
        &self,
        uplink: usize,
        vlans: &[(u16, u32)],
    ) -> hvnet_port::vxlan::SegmentChange {
        let Some(tunnel) = self.endpoint(uplink) else {
            return Default::default();
        };
        let change = tunnel.set_vlans(vlans);
        for &(vlan, vni) in &change.removed {
            for mac in tunnel.evpn_clear(vni) {
                self.fdb.remove_remote(vlan, mac, uplink);
            }
        }
        tracing::info!(uplink, ?change, "tunnel segments changed");
        change
    }

    /// Pins each VM port's own address to it again once its guest is
    /// there (back from a migration, or arrived by one).
    pub fn pin_present_guests(&self) {
        for p in self.ports().iter().filter(|p| !p.is_uplink()) {
            if self.fdb.pinned_to(p.vlan(), p.mac) != Some(p.id) && p.present() {
                self.fdb.add_static(p.vlan(), p.mac, p.id);
            }
        }
    }

    /// Asks every thread to stop (they notice within 100 ms).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        // What the stages' services hold goes out before they end (an
        // exporter's every record), out of their lock: a worker reading
        // them is not kept waiting.
        for s in self.services.take_all() {
            s.shutdown();
        }
    }

    /// True once [`Switch::stop`] was called.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Time since the switch was built.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// A port's threads: the workers that own its queues, then its
    /// delivery threads.
    pub fn port_threads(&self, port: &Port) -> Vec<ThreadInfo> {
        let mut t = self.workers.threads_of(port.id);
        t.extend(port.delivery_threads());
        t
    }

    /// A port by name.
    pub fn port(&self, name: &str) -> Option<Arc<Port>> {
        self.ports().iter().find(|p| p.name == name).cloned()
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
                "an uplink's lro, tso, csum, mtu and allow_forged_transmits are set in its topology; ring1, ring2, rx_overflow, delivery, rx_usecs and capacity may change".into(),
            ));
        }
        if !p.is_uplink() && new.capacity.is_some() {
            return Err(SettingError::Conflict(
                "capacity is an uplink's (the rate its shares divide); a VM takes shares and reservation".into(),
            ));
        }
        Ok(())
    }

    /// Installs every port's security groups ([`crate::acl::Acl::install`]),
    /// checked before: the workers take them at their next batch.
    pub fn set_acl(&self, cfg: crate::acl::AclConfig) {
        self.acl.install(cfg);
        self.settings_gen.fetch_add(1, Ordering::Release);
    }

    /// Installs stage service `new` (None: removes the one of its type);
    /// the workers take it at their next burst, and the one it replaced
    /// is returned for the caller to shut down then.
    pub fn replace_service<T: services::Service>(&self, new: Option<Arc<T>>) -> Option<Arc<T>> {
        let old = self.services.replace(new);
        self.settings_gen.fetch_add(1, Ordering::Release);
        old
    }

    /// A tunnel endpoint port's own address and UDP port (None for any
    /// other port).
    pub(crate) fn endpoint_address(&self, port: usize) -> Option<(std::net::IpAddr, u16)> {
        let all = self.endpoints.read().expect("endpoints lock");
        all.get(&port).map(|e| (e.cfg.local, e.cfg.port))
    }

    /// Takes a new set of port mirrors (the workers read it with the
    /// settings); an ERSPAN socket that cannot be opened changes nothing.
    pub fn set_mirrors(&self, specs: Vec<crate::mirror::MirrorSpec>) -> std::io::Result<()> {
        self.mirrors.install(specs)?;
        self.settings_gen.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Applies new settings to a port at run time. Everything is checked
    /// before anything changes.
    pub fn set_port(&self, name: &str, new: PortSettings) -> Result<PortSettings, SettingError> {
        self.check_settings(name, &new)?;
        let p = self.port(name).expect("checked above");
        let old = p.settings();
        if (old.tso, old.csum) != (new.tso, new.csum) {
            p.dev
                .set_offloads(new.csum, new.tso)
                .map_err(SettingError::Device)?;
        }
        for q in &p.rxq {
            q.rings.resize(new.ring1, new.ring2);
        }
        p.rates.apply(&new, Instant::now());
        p.cpu.apply(new.cpu_limit, Instant::now());
        p.shares
            .apply(new.capacity.map(|r| r.0 / 8), Instant::now());
        *p.settings.write().expect("settings lock") = new.clone();
        self.settings_gen.fetch_add(1, Ordering::Release);
        // What the port learned in VLANs it no longer carries goes (the
        // workers see the new VLANs from their next batch on; a frame
        // switched meanwhile may learn one again, which ages out).
        if (old.vlan_mode, &old.vlans, old.native_vlan)
            != (new.vlan_mode, &new.vlans, new.native_vlan)
        {
            let n = self.forget_uncarried(&p, &new);
            tracing::info!(port = %p.name, flushed = n, "VLANs changed");
        }
        // A switch not started yet (or stepped by a test's harness) starts
        // its delivery threads with its workers, not here.
        if new.clone().shaped().delivery == crate::settings::Delivery::Thread
            && self.running.load(Ordering::Acquire)
        {
            if let Some(sw) = self.me.upgrade() {
                sw.start_delivery(&p);
            }
        }
        Ok(new)
    }

    /// Forgets what port `p` learned in the VLANs it no longer carries
    /// with settings `s` (and its access VLAN now); how many entries went.
    fn forget_uncarried(&self, p: &Port, s: &PortSettings) -> usize {
        let vlans = s.vlans_of(p.vlan());
        self.fdb.flush_vlans(p.id, |v| vlans.carries(v))
    }

    /// Moves VM port `name` to access VLAN `vlan` at run time (vSphere's
    /// port group VLAN, `ovs-vsctl set port P tag=N`): its own address is
    /// pinned in the new VLAN instead of the old, what it learned and
    /// the multicast groups it joined in the old one go, and the workers
    /// tag and switch its frames in the new one from their next burst.
    /// A trunk's and an uplink's VLANs are their settings', not this.
    pub fn set_access_vlan(&self, name: &str, vlan: u16) -> Result<u16, SettingError> {
        let p = self
            .port(name)
            .ok_or_else(|| SettingError::NoPort(name.into()))?;
        if p.is_uplink() {
            return Err(SettingError::Fixed(
                "an uplink's VLAN is set in its topology".into(),
            ));
        }
        if vlan > crate::vlan::MAX_VID {
            return Err(SettingError::Range {
                setting: "vlan",
                value: u64::from(vlan),
                min: 0,
                max: u64::from(crate::vlan::MAX_VID),
            });
        }
        let old = p.vlan();
        if old == vlan {
            return Ok(old);
        }
        let pinned = self.fdb.pinned_to(old, p.mac) == Some(p.id);
        p.set_vlan(vlan);
        self.settings_gen.fetch_add(1, Ordering::Release);
        self.fdb.unpin(old, p.mac, p.id);
        let flushed = self.forget_uncarried(&p, &p.settings());
        self.mdb.forget_port(p.id);
        if pinned {
            self.fdb.add_static(vlan, p.mac, p.id);
        }
        tracing::info!(port = %p.name, from = old, to = vlan, flushed, "access VLAN changed");
        Ok(old)
    }
}
