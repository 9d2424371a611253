//! BGP EVPN for a VXLAN uplink, through FRR.
//!
//! hvnet speaks no BGP of its own. FRR's zebra learns a host's local MACs
//! from a kernel bridge's forwarding database and its VTEP and VNI from a
//! kernel `vxlan` device, and installs what the fabric advertises on that
//! device (remote MACs as `MAC dst VTEP extern_learn`, the flood list as
//! `00:00:00:00:00:00 dst VTEP`) and on the bridge (remote IPs as
//! neighbours). So each EVPN uplink gets a *shadow* of itself in the
//! kernel, as SONiC's `fdbsyncd` and OVN keep one:
//!
//! - a bridge `hvb-VNI`, the VNI's SVI to zebra, with each VM's IP as a
//!   static neighbour (advertised as MAC/IP, route type 2);
//! - a `vxlan` device `hvx-VNI` on the VNI with hvnet's VTEP address as
//!   its local address (advertised as the VTEP, route type 3), on UDP port
//!   [`SHADOW_PORT`](crate::topology::SHADOW_PORT) with learning off, so that the kernel never takes the
//!   real VXLAN traffic (hvnet does, on the uplink);
//! - a veth pair `hvp-VNI`/`hvq-VNI`, `hvp` a port of the bridge carrying
//!   each present VM's MAC as a static entry (advertised as a MAC).
//!
//! Nothing is ever sent through the shadow: its devices have no addresses
//! (IPv6 off but on the bridge, which holds IPv6 neighbours without an
//! address of its own). A thread per uplink keeps
//! it in step with the switch (a VM's MAC while its guest is there and its
//! port connected) and follows the shadow's tables over rtnetlink into the
//! tunnel endpoint's ([`sync`]).
//!
//! Why this and not the alternatives: FRR's FPM interface carries routes
//! but not the flood list; GoBGP's gRPC API would do, but its EVPN is
//! marked experimental and it is one more BGP speaker for operators to run
//! beside the FRR they have. Through the shadow, hvnet works with the FRR
//! a host already runs, configured as FRR documents EVPN for Linux VTEPs
//! (`advertise-all-vni`), and with every VTEP FRR interoperates with.
//!
//! BGP runs on the host's own IP stack, from the host's own address on the
//! underlay; hvnet's VTEP has an address of its own on the same subnet
//! (the uplink device is shared: the kernel keeps its address and BGP,
//! hvnet carries the VXLAN traffic to its VTEP address).

mod frr;
mod remote;
mod routes;
mod shadow;
mod sync;

pub use frr::{bgp_summary, FrrError, FrrKeeper, FrrRun};
pub use shadow::{shadow_names, ShadowNames};

use crate::error::DaemonError;
use crate::state::{device_marker, write_state, State};
use crate::topology::Topology;
use hvnet_datapath::Switch;
use std::net::IpAddr;
use std::path::Path;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// Brings EVPN up for every uplink that asks for it: its shadow created
/// (or, after a daemon restart, found again), its sync started, and FRR
/// started if the topology has `[frr]`. Shadow devices and FRR are
/// recorded in the state first, so that `hvnet down` removes them even
/// after a crash.
pub fn start(
    sw: &Arc<Switch>,
    topo: &Topology,
    dir: &Path,
    state: &mut State,
) -> Result<(Vec<JoinHandle<()>>, Segments), DaemonError> {
    let mut threads = Vec::new();
    let mut segs = Segments::default();
    for u in &topo.uplinks {
        let Some(v) = u.vxlan.as_ref().filter(|v| v.evpn) else {
            continue;
        };
        let uplink = sw
            .port(&u.name)
            .map(|p| p.id)
            .expect("the uplink is a port");
        // Each segment its own shadow, as FRR expects a Linux VTEP of
        // several VNIs (a bridge and a vxlan device per VNI); one sync
        // thread for them all.
        let mut synced = Vec::new();
        for (vlan, vni) in std::iter::once((u.vlan, v.vni)).chain(v.vlans.iter().copied()) {
            let (g, advert) = segment(sw, topo, (u, v), (vlan, vni), dir, state)?;
            segs.advertised.push(advert);
            synced.push(g);
        }
        let (tx, rx) = mpsc::channel();
        let t = sync::spawn(sw.clone(), (uplink, &u.name), synced, rx).map_err(|e| {
            DaemonError::Other(format!("uplink {}: start the EVPN sync: {e}", u.name))
        })?;
        segs.syncs.push((u.name.clone(), tx));
        threads.push(t);
    }
    if let Some(frr) = FrrKeeper::of(topo) {
        // (error.rs imports nothing of evpn: FRR's error becomes words here.)
        frr.start()
            .map_err(|e| DaemonError::Other(crate::error::chain(&e)))?;
    }
    Ok((threads, segs))
}

/// Segment (`vlan`, `vni`) of EVPN uplink `u` (endpoint `v`): its shadow
/// made (or found again), and the VMs of its VLAN it advertises.
fn segment(
    sw: &Switch,
    topo: &Topology,
    (u, v): (&crate::topology::Uplink, &crate::topology::Vxlan),
    (vlan, vni): (u16, u32),
    dir: &Path,
    state: &mut State,
) -> Result<(sync::Segment, Advert), DaemonError> {
    let names = shadow_names(vni);
    // A tenant's L3 VNI: its bridge has this host's router MAC, which FRR
    // advertises with the tenant's routes.
    let l3 = topo.tenant_of_l3(vni).is_some();
    let rmac = l3.then(|| topo.router_mac());
    let marker = state.marker();
    make_shadow(&u.name, v, (vni, rmac), &names, dir, state, &marker)?;
    let vms = topo
        .vms
        .iter()
        .filter(|vm| vm.vlans().carries(vlan))
        .filter_map(|vm| Some(local_vm(vm, sw.port(&vm.name)?.id)))
        .collect();
    let vms = sync::LocalVms::new(vms);
    let advert = Advert {
        uplink: u.name.clone(),
        vlan,
        vni,
        vms: Arc::clone(&vms),
    };
    Ok((
        sync::Segment {
            vni,
            l3,
            names,
            vms,
        },
        advert,
    ))
}

/// Adds segment (`vlan`, `vni`) to EVPN uplink `uplink` of `topo` (the
/// topology it is added in) while it runs: its shadow made and recorded
/// in `state`, its sync told; FRR (`advertise-all-vni`) finds the new
/// vxlan device itself and advertises the VNI. The endpoint carries the
/// VNI already ([`Switch::set_tunnel_vlans`]).
pub fn add_segment(
    sw: &Switch,
    topo: &Topology,
    uplink: &str,
    (vlan, vni): (u16, u32),
    segs: &mut Segments,
    dir: &Path,
    state: &mut State,
) -> Result<(), DaemonError> {
    let Some((u, v)) = topo
        .uplinks
        .iter()
        .find(|u| u.name == uplink)
        .and_then(|u| Some((u, u.vxlan.as_ref().filter(|v| v.evpn)?)))
    else {
        return Ok(());
    };
    let (g, advert) = segment(sw, topo, (u, v), (vlan, vni), dir, state)?;
    if let Some((_, tx)) = segs.syncs.iter().find(|(n, _)| n == uplink) {
        let _ = tx.send(sync::Change::Add(g));
    }
    segs.advertised.push(advert);
    tracing::info!(%uplink, vlan, vni, "EVPN segment added");
    Ok(())
}

/// Removes segment `vni` from EVPN uplink `uplink` while it runs: its sync
/// lets it go and its shadow is deleted (FRR withdraws the VNI's routes
/// with its vxlan device) and forgotten by `state`. What the fabric
/// advertised in it leaves the endpoint with the segment
/// ([`Switch::set_tunnel_vlans`]).
pub fn remove_segment(uplink: &str, vni: u32, segs: &mut Segments, state: &mut State) {
    let Some((_, tx)) = segs.syncs.iter().find(|(n, _)| n == uplink) else {
        return;
    };
    let _ = tx.send(sync::Change::Remove(vni));
    segs.advertised
        .retain(|a| !(a.uplink == uplink && a.vni == vni));
    let names = shadow_names(vni);
    match crate::rtnl::Rtnl::new() {
        Ok(mut rtnl) => {
            for d in names.all() {
                if let Err(e) = rtnl.del_link(d) {
                    tracing::warn!(device = d, error = %e, "EVPN: cannot delete a shadow device");
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "EVPN: cannot delete the shadow devices"),
    }
    state.devices.retain(|d| !names.all().contains(&d.as_str()));
    tracing::info!(%uplink, vni, "EVPN segment removed");
}

/// The shadow of segment `vni` of uplink `uplink` (endpoint `v`): found
/// again after a daemon restart, else made. Its devices are recorded in
/// the state first, so that `hvnet down` removes them even after a crash;
/// a shadow of another topology's is refused.
fn make_shadow(
    uplink: &str,
    v: &crate::topology::Vxlan,
    (vni, rmac): (u32, Option<hvnet_wire::MacAddr>),
    names: &ShadowNames,
    dir: &Path,
    state: &mut State,
    marker: &str,
) -> Result<(), DaemonError> {
    let mut rtnl = crate::rtnl::Rtnl::new()?;
    let present: Vec<Option<String>> = names
        .all()
        .iter()
        .map(|d| {
            rtnl.index(d)
                .ok()
                .map(|_| device_marker(d).unwrap_or_default())
        })
        .collect();
    if let Some((d, m)) = names
        .all()
        .iter()
        .zip(&present)
        .find(|(_, m)| m.as_ref().is_some_and(|m| m != marker))
    {
        return Err(DaemonError::Other(format!(
            "uplink {uplink}: EVPN shadow device {d} exists already and is not this topology's (marker {:?}): another switch has VNI {vni} here",
            m.as_deref().unwrap_or_default(),
        )));
    }
    for d in names.all() {
        if !state.devices.iter().any(|x| x == d) {
            state.devices.push(d.to_string());
        }
    }
    write_state(dir, state)?;
    if present.iter().any(Option::is_none) {
        for d in names.all() {
            let _ = rtnl.del_link(d);
        }
        // The topology refuses EVPN over an IPv6 underlay.
        let IpAddr::V4(local) = v.local.0 else {
            return Err(DaemonError::Other(format!(
                "uplink {uplink}: EVPN needs an IPv4 underlay"
            )));
        };
        shadow::create(&mut rtnl, names, vni, local, marker)?;
        if let Some(mac) = rmac {
            rtnl.set_link(
                &names.bridge,
                &crate::rtnl::LinkChange {
                    mac: Some(mac.0),
                    ..Default::default()
                },
            )?;
        }
        tracing::info!(%uplink, vni, bridge = %names.bridge, vxlan = %names.vxlan, "EVPN shadow devices created");
    }
    Ok(())
}

/// The EVPN uplinks' segments while they run: what each advertises, and
/// how each uplink's sync is told of segments added and removed.
#[derive(Default)]
pub struct Segments {
    /// Per segment, the VMs it advertises (VMs added and removed at run
    /// time join and leave them).
    pub advertised: Vec<Advert>,
    /// Per EVPN uplink (by name), its sync's changes.
    syncs: Vec<(String, mpsc::Sender<sync::Change>)>,
}

/// A segment of an EVPN uplink and the VMs it advertises.
pub struct Advert {
    /// The uplink.
    pub uplink: String,
    /// The switch's VLAN the segment carries.
    pub vlan: u16,
    /// Its VNI.
    pub vni: u32,
    /// The VMs of that VLAN.
    pub vms: Arc<sync::LocalVms>,
}

/// What an EVPN uplink advertises of a VM: its port, MAC and addresses.
pub fn local_vm(vm: &crate::topology::Vm, port: usize) -> sync::LocalVm {
    sync::LocalVm {
        port,
        mac: vm.mac,
        ips: vm
            .ipv4
            .map(|(a, _)| IpAddr::V4(a))
            .into_iter()
            .chain(vm.ipv6.map(|(a, _)| IpAddr::V6(a)))
            .collect(),
        gone: false,
    }
}
