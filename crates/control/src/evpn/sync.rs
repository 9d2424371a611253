//! The thread that keeps an EVPN uplink's shadows (one per segment) and
//! its tunnel endpoint in step: each present VM's MAC and IPs written to the shadow (zebra
//! advertises them), and what zebra installs there from the fabric read
//! back over rtnetlink into the endpoint (remote MACs, the flood list,
//! remote IPs for ARP and ND suppression). Remote MACs are those BGP still
//! backs, not every entry the kernel keeps ([`super::remote`]).

use super::remote::RemoteMacs;
use super::shadow::{self, ShadowNames};
use crate::rtnl::Rtnl;
use hvnet_datapath::Switch;
use hvnet_wire::MacAddr;
use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket};
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `RTNLGRP_NEIGH`: neighbour and FDB changes.
const RTNLGRP_NEIGH: u32 = 3;
/// `RTNLGRP_IPV4_ROUTE`: IPv4 route changes (an L3 VNI's remote routes).
const RTNLGRP_IPV4_ROUTE: u32 = 7;
/// How often the local VMs' presence is looked at (the longest a VM that
/// arrives waits before it is written to the shadow).
const LOCAL_EVERY: Duration = Duration::from_millis(10);
/// How soon a write to the shadow that failed is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// The VMs an EVPN uplink advertises, shared with the control socket:
/// VMs added at run time join it, removed ones are marked gone (withdrawn,
/// then forgotten). The sync copies it only when its generation moved.
#[derive(Default)]
pub struct LocalVms {
    list: std::sync::Mutex<Vec<LocalVm>>,
    gen: std::sync::atomic::AtomicU64,
}

impl LocalVms {
    /// A list of `vms`.
    pub fn new(vms: Vec<LocalVm>) -> Arc<LocalVms> {
        Arc::new(LocalVms {
            list: std::sync::Mutex::new(vms),
            gen: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// A VM added at run time.
    pub fn add(&self, vm: LocalVm) {
        let mut l = self.list.lock().expect("local vms lock");
        l.retain(|v| v.mac != vm.mac);
        l.push(vm);
        self.gen.fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// The VM with `mac` removed at run time: withdrawn, then forgotten.
    pub fn remove(&self, mac: MacAddr) {
        let mut l = self.list.lock().expect("local vms lock");
        for v in l.iter_mut().filter(|v| v.mac == mac) {
            v.gone = true;
        }
        self.gen.fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    fn forget(&self, mac: MacAddr) {
        self.list
            .lock()
            .expect("local vms lock")
            .retain(|v| !(v.mac == mac && v.gone));
    }

    fn generation(&self) -> u64 {
        self.gen.load(std::sync::atomic::Ordering::Acquire)
    }

    fn snapshot(&self) -> Vec<LocalVm> {
        self.list.lock().expect("local vms lock").clone()
    }
}

/// A VM on the uplink's segment, as advertised.
#[derive(Clone, Debug)]
pub struct LocalVm {
    /// Its port.
    pub port: usize,
    /// Its MAC.
    pub mac: MacAddr,
    /// Its addresses (MAC/IP routes).
    pub ips: Vec<IpAddr>,
    /// Removed from the switch (`hvnet vm del`): withdrawn, then forgotten.
    pub gone: bool,
}

/// One segment of an uplink, as the sync is given it.
pub struct Segment {
    /// Its VNI.
    pub vni: u32,
    /// A tenant's L3 VNI: the routes zebra installs through its bridge
    /// are followed into the router too.
    pub l3: bool,
    /// Its shadow's devices (created already).
    pub names: ShadowNames,
    /// The VMs it advertises.
    pub vms: Arc<LocalVms>,
}

/// A segment of the uplink added or removed at run time, as the sync is
/// told of it.
pub enum Change {
    /// A segment added, its shadow created already.
    Add(Segment),
    /// The segment of this VNI removed: no longer followed (its shadow is
    /// deleted by the caller).
    Remove(u32),
}

/// Starts the sync of uplink port `uplink` (named `name`) with the shadows
/// of its `segments`: one thread for all of them, one socket of
/// notifications (each entry goes to the segment whose device it is on);
/// segments added and removed at run time come through `changes`. The
/// thread ends with the switch.
pub fn spawn(
    sw: Arc<Switch>,
    (uplink, name): (usize, &str),
    segments: Vec<Segment>,
    changes: mpsc::Receiver<Change>,
) -> io::Result<JoinHandle<()>> {
    let mut monitor = Socket::new(NETLINK_ROUTE)?;
    monitor.bind_auto()?;
    monitor.add_membership(RTNLGRP_NEIGH)?;
    if segments.iter().any(|g| g.l3) {
        monitor.add_membership(RTNLGRP_IPV4_ROUTE)?;
    }
    // A burst of thousands of routes fits; past that, an overflow makes a
    // fresh dump.
    let _ = monitor.set_rx_buf_sz(8 << 20);
    monitor.set_non_blocking(true)?;
    let rtnl = Rtnl::new().map_err(io::Error::other)?;
    let segs = segments.into_iter().map(Seg::of).collect();
    let mut s = Sync {
        sw,
        uplink,
        rtnl,
        monitor,
        segs,
        changes,
    };
    std::thread::Builder::new()
        .name(format!("evpn-{name}"))
        .spawn(move || s.run())
}

#[derive(Default, Clone, Copy)]
struct Indices {
    bridge: u32,
    vxlan: u32,
    port: u32,
}

struct Sync {
    sw: Arc<Switch>,
    uplink: usize,
    rtnl: Rtnl,
    monitor: Socket,
    segs: Vec<Seg>,
    changes: mpsc::Receiver<Change>,
}

/// What the sync keeps of one segment.
struct Seg {
    vni: u32,
    /// For an L3 VNI, the remote routes zebra installed, as the router
    /// has them.
    routes: Option<super::routes::Routes>,
    names: ShadowNames,
    /// The VMs, as copied from `shared` at generation `vms_gen`.
    vms: Vec<LocalVm>,
    vms_gen: u64,
    shared: Arc<LocalVms>,
    /// Per VM (by MAC: a removed VM's port index may be another's since),
    /// whether the shadow has it now (none yet: written either way, as
    /// after a daemon restart the shadow may hold a VM that left
    /// meanwhile).
    advertised: HashMap<MacAddr, bool>,
    /// Per VM whose write failed, when to try again.
    retry_at: HashMap<MacAddr, Instant>,
    /// The shadow's remote MAC entries, and which BGP backs.
    remote: RemoteMacs,
    idx: Indices,
}

impl Seg {
    fn of(g: Segment) -> Seg {
        Seg {
            vni: g.vni,
            routes: g.l3.then(super::routes::Routes::default),
            names: g.names,
            vms: g.vms.snapshot(),
            vms_gen: g.vms.generation(),
            shared: g.vms,
            advertised: HashMap::new(),
            retry_at: HashMap::new(),
            remote: RemoteMacs::default(),
            idx: Indices::default(),
        }
    }
}

/// What a segment's work needs of the sync besides the segment.
struct Cx<'a> {
    sw: &'a Switch,
    uplink: usize,
    rtnl: &'a mut Rtnl,
}

impl Sync {
    fn run(&mut self) {
        let mut buf = vec![0u8; 1 << 16];
        let mut need_dump = true;
        while !self.sw.stopping() {
            // A segment added is read afresh with the others (the tables
            // of all are dumped at once); one removed is let go.
            while let Ok(c) = self.changes.try_recv() {
                match c {
                    Change::Add(g) => {
                        self.segs.retain(|x| x.vni != g.vni);
                        self.segs.push(Seg::of(g));
                        need_dump = true;
                    }
                    Change::Remove(vni) => self.segs.retain(|x| x.vni != vni),
                }
            }
            if need_dump {
                need_dump = !self.resync();
                if need_dump {
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
            }
            for g in &mut self.segs {
                let mut cx = Cx {
                    sw: &self.sw,
                    uplink: self.uplink,
                    rtnl: &mut self.rtnl,
                };
                g.advertise_local(&mut cx);
                if let Some(r) = &mut g.routes {
                    r.follow_router(&self.sw, g.vni);
                }
            }
            if let Ok(false) =
                hvnet_sys::poll_readable(self.monitor.as_raw_fd(), LOCAL_EVERY.as_millis() as i32)
            {
                continue;
            }
            loop {
                match self.monitor.recv(&mut &mut buf[..], 0) {
                    Ok(n) => self.apply_all(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        // ENOBUFS: changes were lost; read the tables again.
                        tracing::warn!(error = %e, "EVPN: changes lost; reading the shadows' tables again");
                        need_dump = true;
                        break;
                    }
                }
            }
        }
    }

    /// Forgets what was installed and reads every shadow's tables afresh
    /// (one dump each, shared out by device); false if a shadow cannot be
    /// read now.
    fn resync(&mut self) -> bool {
        for g in &mut self.segs {
            let idx = (|| -> Result<Indices, crate::rtnl::NetlinkError> {
                Ok(Indices {
                    bridge: self.rtnl.index(&g.names.bridge)?,
                    vxlan: self.rtnl.index(&g.names.vxlan)?,
                    port: self.rtnl.index(&g.names.port)?,
                })
            })();
            match idx {
                Ok(i) => g.idx = i,
                Err(e) => {
                    tracing::warn!(error = %e, vni = g.vni, "EVPN: the shadow devices are not there");
                    return false;
                }
            }
        }
        let Some(vtep) = self.sw.endpoint(self.uplink) else {
            return true;
        };
        let mut on_vxlan = vec![HashSet::new(); self.segs.len()];
        for g in &mut self.segs {
            for mac in vtep.evpn_clear(g.vni) {
                let _ = self.sw.evpn_mac(self.uplink, g.vni, mac, None);
            }
            // What this thread wrote is written again.
            g.advertised.clear();
            g.remote.clear();
        }
        for family in [
            AddressFamily::Bridge,
            AddressFamily::Inet,
            AddressFamily::Inet6,
        ] {
            let list = match shadow::dump(&mut self.rtnl, family) {
                Ok(list) => list,
                Err(e) => {
                    tracing::warn!(error = %e, "EVPN: cannot read the shadows' tables");
                    return false;
                }
            };
            for m in list {
                let Some(i) = self.segment_of(m.header.ifindex) else {
                    continue;
                };
                let g = &mut self.segs[i];
                match g.entry(&m) {
                    Entry::Remote(mac, vtep) => {
                        g.remote.vxlan_entry(mac, Some(vtep));
                    }
                    Entry::Bridge(mac, true) => {
                        on_vxlan[i].insert(mac);
                    }
                    _ => g.apply(&self.sw, self.uplink, &m, true),
                }
            }
        }
        let routes = if self.segs.iter().any(|g| g.routes.is_some()) {
            match super::routes::dump(&mut self.rtnl) {
                Ok(list) => list,
                Err(e) => {
                    tracing::warn!(error = %e, "EVPN: cannot read the L3 VNI's routes");
                    return false;
                }
            }
        } else {
            Vec::new()
        };
        for (g, on_vxlan) in self.segs.iter_mut().zip(&on_vxlan) {
            g.remote.settle(on_vxlan);
            if let Some(r) = &mut g.routes {
                r.replace(&self.sw, g.vni, g.idx.bridge, &routes);
            }
            let backed: Vec<_> = g.remote.backed().collect();
            for (mac, vtep) in backed {
                g.install(&self.sw, self.uplink, mac, Some(vtep));
            }
        }
        true
    }

    /// The segment whose shadow device `ifindex` is.
    fn segment_of(&self, ifindex: u32) -> Option<usize> {
        self.segs.iter().position(|g| {
            let i = g.idx;
            ifindex == i.bridge || ifindex == i.vxlan || ifindex == i.port
        })
    }

    fn apply_all(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let Ok(m) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes) else {
                return;
            };
            let len = (m.header.length as usize + 3) & !3;
            if len == 0 || len > bytes.len() {
                return;
            }
            bytes = &bytes[len..];
            let (n, new) = match m.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNeighbour(n)) => (n, true),
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelNeighbour(n)) => (n, false),
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(r)) => {
                    self.route(&r, true);
                    continue;
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelRoute(r)) => {
                    self.route(&r, false);
                    continue;
                }
                _ => continue,
            };
            if let Some(i) = self.segment_of(n.header.ifindex) {
                self.segs[i].apply(&self.sw, self.uplink, &n, new);
            }
        }
    }

    /// A route change, for the L3 VNIs' segments.
    fn route(&mut self, r: &netlink_packet_route::route::RouteMessage, new: bool) {
        for g in &mut self.segs {
            if let Some(routes) = &mut g.routes {
                routes.apply(&self.sw, g.vni, g.idx.bridge, r, new);
            }
        }
    }
}

impl Seg {
    /// Writes each VM that is present (its port up and connected, its
    /// guest here) to the shadow, and removes each that is not.
    fn advertise_local(&mut self, cx: &mut Cx<'_>) {
        let gen = self.shared.generation();
        if gen != self.vms_gen {
            self.vms = self.shared.snapshot();
            self.vms_gen = gen;
        }
        let ports = cx.sw.ports();
        let mut forgotten = Vec::new();
        for i in 0..self.vms.len() {
            let vm = &self.vms[i];
            let present = !vm.gone
                && ports
                    .get(vm.port)
                    .is_some_and(|p| p.mac == vm.mac && p.is_up() && p.present());
            let (mac, gone) = (vm.mac, vm.gone);
            let was = self.advertised.get(&mac).copied();
            if was == Some(present) || self.retry_at.get(&mac).is_some_and(|t| Instant::now() < *t)
            {
                if gone && was == Some(false) {
                    forgotten.push(mac);
                }
                continue;
            }
            let ips = vm.ips.clone();
            let mut ok = shadow::set_local_mac(cx.rtnl, self.idx.port, mac, present)
                .map_err(|e| tracing::warn!(error = %e, %mac, "EVPN: cannot write the VM's MAC to the shadow"))
                .is_ok();
            for ip in ips {
                ok &= shadow::set_local_ip(cx.rtnl, self.idx.bridge, ip, mac, present)
                    .map_err(|e| tracing::warn!(error = %e, %ip, "EVPN: cannot write the VM's address to the shadow"))
                    .is_ok();
            }
            // Withdrawn entries that were already gone are fine; a write
            // that failed is tried again a second later.
            if present && !ok {
                self.retry_at.insert(mac, Instant::now() + RETRY_EVERY);
                continue;
            }
            self.retry_at.remove(&mac);
            self.advertised.insert(mac, present);
            tracing::info!(%mac, present, vni = self.vni, "EVPN: VM advertised (present) or withdrawn");
            if !present {
                // Where the VM went (another host), the fabric may have
                // said already, and been refused while it was here.
                self.recheck(cx.sw, cx.uplink, mac);
            }
        }
        // A removed VM, withdrawn: forgotten.
        for mac in forgotten {
            self.shared.forget(mac);
            self.advertised.remove(&mac);
            self.vms.retain(|v| !(v.mac == mac && v.gone));
        }
    }

    /// Installs again what BGP says of `mac`.
    fn recheck(&mut self, sw: &Switch, uplink: usize, mac: MacAddr) {
        self.install(sw, uplink, mac, self.remote.remote(mac));
    }

    /// Installs `mac` behind `vtep`, or withdraws it (`None`).
    fn install(&mut self, sw: &Switch, uplink: usize, mac: MacAddr, vtep: Option<IpAddr>) {
        if let Err(e) = sw.evpn_mac(uplink, self.vni, mac, vtep) {
            tracing::debug!(%mac, ?vtep, vni = self.vni, reason = %e, "EVPN: advertisement refused");
        }
    }

    /// What one bridge-family entry of the shadow is.
    fn entry(&self, n: &NeighbourMessage) -> Entry {
        let h = &n.header;
        if h.family != AddressFamily::Bridge {
            return Entry::Other;
        }
        let Some(mac) = lladdr(n) else {
            return Entry::Other;
        };
        let own = h.flags.contains(NeighbourFlags::Own);
        if own && h.ifindex == self.idx.vxlan {
            match destination(n) {
                Some(vtep) if mac.0 == [0; 6] => Entry::Flood(vtep),
                Some(vtep) => Entry::Remote(mac, vtep),
                None => Entry::Other,
            }
        } else if !own && (h.ifindex == self.idx.vxlan || h.ifindex == self.idx.port) {
            Entry::Bridge(mac, h.ifindex == self.idx.vxlan)
        } else {
            Entry::Other
        }
    }

    /// Installs or withdraws what one entry of the shadow says.
    fn apply(&mut self, sw: &Switch, uplink: usize, n: &NeighbourMessage, new: bool) {
        let Some(vtep) = sw.endpoint(uplink) else {
            return;
        };
        match self.entry(n) {
            // The vxlan device's own entries: `00:00:00:00:00:00 dst VTEP`
            // (the flood list) and `MAC dst VTEP` (a remote MAC).
            Entry::Flood(remote) => {
                if let Err(e) = vtep.evpn_vtep(self.vni, remote, new) {
                    tracing::debug!(%remote, reason = %e, "EVPN: advertisement refused");
                }
            }
            Entry::Remote(mac, remote) => {
                let now = self.remote.vxlan_entry(mac, new.then_some(remote));
                self.install(sw, uplink, mac, now);
            }
            // The bridge's entry for a MAC moved (a deletion changes
            // nothing: the entry is where it was until written elsewhere).
            Entry::Bridge(mac, on_vxlan) => {
                if new && self.remote.bridge_entry(mac, on_vxlan) {
                    if !on_vxlan {
                        tracing::info!(%mac, "EVPN: the MAC is local again; its remote entry on the shadow is left over, withdrawn");
                    }
                    self.recheck(sw, uplink, mac);
                }
            }
            Entry::Other => {
                let h = &n.header;
                // Remote IPs zebra installs on the SVI (extern_learn).
                // (A withdrawal is taken whatever its flags say: an IP not
                // installed is not there to remove.)
                if matches!(h.family, AddressFamily::Inet | AddressFamily::Inet6)
                    && h.ifindex == self.idx.bridge
                    && (!new || h.flags.contains(NeighbourFlags::ExtLearned))
                {
                    let Some(ip) = destination(n) else { return };
                    let usable = new
                        && !matches!(h.state, NeighbourState::Failed | NeighbourState::Incomplete);
                    let _ = vtep.evpn_neighbour(self.vni, ip, lladdr(n).filter(|_| usable));
                }
            }
        }
    }
}

/// What one entry of the shadow's tables is to the sync.
enum Entry {
    /// The vxlan device's `00:00:00:00:00:00 dst VTEP`: a flood-list entry.
    Flood(IpAddr),
    /// The vxlan device's `MAC dst VTEP`: a remote MAC.
    Remote(MacAddr, IpAddr),
    /// The bridge's entry for a MAC, on the vxlan device (true: zebra's
    /// remote MAC) or on the shadow port (a local VM's).
    Bridge(MacAddr, bool),
    /// Anything else (IP neighbours, other devices' entries).
    Other,
}

/// An entry's link-layer address, if a MAC.
fn lladdr(n: &NeighbourMessage) -> Option<MacAddr> {
    n.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::LinkLayerAddress(b) if b.len() == 6 => {
            Some(MacAddr(b[..6].try_into().expect("6 bytes")))
        }
        _ => None,
    })
}

/// An entry's destination: a neighbour's IP, or a vxlan entry's VTEP.
fn destination(n: &NeighbourMessage) -> Option<IpAddr> {
    n.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)) => Some(IpAddr::V4(*ip)),
        NeighbourAttribute::Destination(NeighbourAddress::Inet6(ip)) => Some(IpAddr::V6(*ip)),
        // A bridge FDB entry's `dst` comes undecoded (its family is
        // AF_BRIDGE): 4 bytes, an IPv4 VTEP.
        NeighbourAttribute::Destination(NeighbourAddress::Other(b)) if b.len() == 4 => {
            Some(IpAddr::V4(std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3])))
        }
        _ => None,
    })
}
