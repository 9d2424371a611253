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

pub use frr::{bgp_summary, FrrError, FrrRun};
pub use shadow::{shadow_names, ShadowNames};

use crate::error::DaemonError;
use crate::state::{device_marker, write_state, State};
use crate::topology::Topology;
use hvnet_datapath::Switch;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Brings EVPN up for every uplink that asks for it: its shadow created
/// (or, after a daemon restart, found again), its sync started, and FRR
/// started when the topology has `[frr]`. The shadow's devices are
/// recorded in the state first, so that `hvnet down` removes them even
/// after a crash.
pub fn start(
    sw: &Arc<Switch>,
    topo: &Topology,
    dir: &Path,
    state: &mut State,
) -> Result<(Vec<JoinHandle<()>>, Advertised), DaemonError> {
    let mut threads = Vec::new();
    let mut advertised = Vec::new();
    let marker = state.marker();
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
        let segments = std::iter::once((u.vlan, v.vni)).chain(v.vlans.iter().copied());
        let mut synced = Vec::new();
        for (vlan, vni) in segments {
            let names = shadow_names(vni);
            // A tenant's L3 VNI: its bridge has this host's router MAC,
            // which FRR advertises with the tenant's routes.
            let l3 = topo.tenant_of_l3(vni).is_some();
            let rmac = l3.then(|| topo.router_mac());
            make_shadow(&u.name, v, (vni, rmac), &names, dir, state, &marker)?;
            let vms = topo
                .vms
                .iter()
                .filter(|vm| vm.vlans().carries(vlan))
                .map(|vm| {
                    local_vm(
                        vm,
                        sw.port(&vm.name).map(|p| p.id).expect("the VM is a port"),
                    )
                })
                .collect();
            let shared = sync::LocalVms::new(vms);
            advertised.push((vlan, Arc::clone(&shared)));
            synced.push(sync::Segment {
                vni,
                l3,
                names,
                vms: shared,
            });
        }
        let t = sync::spawn(sw.clone(), (uplink, &u.name), synced).map_err(|e| {
            DaemonError::Other(format!("uplink {}: start the EVPN sync: {e}", u.name))
        })?;
        threads.push(t);
    }
    if let Some(frr) = &topo.frr {
        // (error.rs imports nothing of evpn: FRR's error becomes words here.)
        FrrRun::of(&topo.name)
            .start(
                frr,
                &topo.name,
                topo.tenants.iter().find(|t| t.l3.is_some()),
            )
            .map_err(|e| DaemonError::Other(crate::error::chain(&e)))?;
    }
    Ok((threads, advertised))
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

/// Per segment of an EVPN uplink, its VLAN and the VMs it advertises (VMs
/// added and removed at run time join and leave them).
pub type Advertised = Vec<(u16, Arc<sync::LocalVms>)>;

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
