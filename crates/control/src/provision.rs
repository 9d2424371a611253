//! What a topology creates on the host: namespace VMs (a namespace whose
//! `eth0` is a persistent TAP the switch holds, so that it outlives a
//! daemon that stops), external hosts (a
//! namespace and a veth pair), vhost-user sockets, and uplinks taken over.
//! Everything created carries hvnet's ownership marker (the alias of the
//! namespace's loopback, or of the device) so that `down` deletes only
//! what this topology made, and a restarted daemon re-attaches only to it.

use crate::error::{io_err, run, DaemonError};
use crate::guest;
use crate::rtnl::{LinkChange, NetlinkError, Rtnl};
use crate::state::{check_owned_device, check_owned_netns, write_state, AttachedIf, State};
use crate::topology::attach::Attach;
use crate::topology::{Host, NetQueueMode, Topology, Uplink, UplinkLro, Vm};
use hvnet_datapath::PortSpec;
use hvnet_port::netqueue::{Filter, Filters};
use hvnet_port::vxlan::{PickMember, VtepConfig};
use hvnet_port::{
    Device, SocketMode, Spread, TapPort, UplinkPort, UplinkRead, VhostUserPort, VxlanPort,
};
use hvnet_port::{TeamConfig, TeamPort};
use std::path::Path;
use std::sync::Arc;

/// Creates one VM (or, after a daemon restart, re-attaches to it): a
/// namespace VM's namespace, its TAP created inside it as `eth0`, and its
/// addresses; a real guest's vhost-user socket (the guest is started once
/// the switch runs).
pub(crate) fn create_vm(
    topo: &Topology,
    i: usize,
    dir: &Path,
    state: &mut State,
    reattach: bool,
) -> Result<PortSpec, DaemonError> {
    let vm = &topo.vms[i];
    if vm.kind.is_vhost_user() {
        let v = &vm.vhost;
        let sock = v
            .path
            .clone()
            .unwrap_or_else(|| guest::socket_path(dir, &vm.name));
        std::fs::create_dir_all(guest::guest_dir(dir, &vm.name))
            .map_err(io_err("create the guest's directory"))?;
        let vm_err = |e: hvnet_port::vhost_user::VhostUserError| {
            DaemonError::Other(format!("vm {}: {e}", vm.name))
        };
        let (pairs, mac, mtu) = (vm.queues, vm.mac.0, vm.settings.mtu);
        let port = match v.mode {
            SocketMode::Server => {
                let port =
                    VhostUserPort::listen(&vm.name, &sock, pairs, mac, mtu).map_err(vm_err)?;
                port.set_socket_access(v.owner, v.group, v.perm)
                    .map_err(vm_err)?;
                port
            }
            SocketMode::Client => {
                VhostUserPort::connect(&vm.name, &sock, pairs, mac, mtu).map_err(vm_err)?
            }
        };
        port.offer_packed(vm.packed);
        return Ok(PortSpec {
            name: vm.name.clone(),
            dev: Arc::new(port),
            mac: vm.mac,
            vlan: vm.vlan,
            endpoint: None,
            settings: vm.settings.clone(),
            external_ids: vm.external_ids(),
        });
    }
    let offloads = hvnet_port::tap_offload_flags(vm.settings.csum, vm.settings.tso);
    let ns = topo.netns(vm);
    let tap = if let Some(a) = &vm.attach {
        attach_vm(vm, a, dir, state, reattach, offloads)?
    } else if reattach {
        // The VM's NIC kept its MAC, MTU and addresses while no switch
        // held it: only its queues are opened again, from inside its
        // namespace (where its name is `eth0`).
        check_owned_netns(&ns, &state.marker())?;
        TapPort::open_in(&ns, "eth0", vm.queues, offloads)?
    } else {
        state.namespaces.push(ns.clone());
        write_state(dir, state)?;
        let handle = add_netns(&ns, vm.ipv6.is_some(), &state.marker())?;
        // Created here under a name the kernel picks free (no name of ours
        // to collide with another's), then moved into the VM as `eth0`:
        // its queues' descriptors belong to this namespace, so deleting
        // the VM's namespace deletes its NIC and the port goes down.
        let tap = TapPort::open("hvtap%d", vm.queues, offloads)?;
        tap.set_persist(true)?;
        Rtnl::new()?.set_link(
            tap.name(),
            &LinkChange {
                netns: Some(&handle),
                ..Default::default()
            },
        )?;
        let mut rtnl = Rtnl::in_netns_of(&handle)?;
        rtnl.set_link(
            tap.name(),
            &LinkChange {
                rename: Some("eth0"),
                mac: Some(vm.mac.0),
                mtu: Some(vm.settings.mtu),
                ..Default::default()
            },
        )?;
        add_addresses(&mut rtnl, "eth0", vm.ipv4, vm.ipv6)?;
        rtnl.set_link("eth0", &up())?;
        // In a tenant's segment, its gateway is the VM's default route
        // (as a cloud's DHCP gives it the router).
        let gateways = [
            topo.gateway_of(vm).map(std::net::IpAddr::V4),
            topo.gateway6_of(vm).map(std::net::IpAddr::V6),
        ];
        for gw in gateways.into_iter().flatten() {
            let any = match gw {
                std::net::IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
                std::net::IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
            };
            rtnl.add_route("eth0", any, 0, Some(gw))?;
        }
        tap
    };
    Ok(PortSpec {
        name: vm.name.clone(),
        dev: Arc::new(tap),
        mac: vm.mac,
        vlan: vm.vlan,
        endpoint: None,
        settings: vm.settings.clone(),
        external_ids: vm.external_ids(),
    })
}

/// Creates namespace `ns` with its loopback up and hvnet's ownership
/// marker as the loopback's alias (what `down` checks before deleting),
/// and returns its handle. One without IPv6 addresses stays quiet: no
/// router solicitations or MLD reports on its NIC.
fn add_netns(ns: &str, ipv6: bool, marker: &str) -> Result<std::fs::File, DaemonError> {
    hvnet_sys::netns::create(ns).map_err(io_err(format!("create network namespace {ns}")))?;
    let handle = hvnet_sys::netns::open(ns).map_err(io_err(format!("open namespace {ns}")))?;
    let change = LinkChange {
        up: Some(true),
        alias: Some(marker),
        ..Default::default()
    };
    Rtnl::in_netns_of(&handle)?.set_link("lo", &change)?;
    if !ipv6 {
        let set = || -> std::io::Result<()> {
            for scope in ["all", "default"] {
                std::fs::write(format!("/proc/sys/net/ipv6/conf/{scope}/disable_ipv6"), "1")?;
            }
            Ok(())
        };
        hvnet_sys::netns::run_in(&handle, set)
            .and_then(|r| r)
            .map_err(io_err(format!("turn IPv6 off in {ns}")))?;
    }
    Ok(handle)
}

/// Administratively up.
fn up() -> LinkChange<'static> {
    LinkChange {
        up: Some(true),
        ..Default::default()
    }
}

/// Gives `dev` (of the namespace of `rtnl`) its addresses; IPv6 without
/// duplicate address detection, so the address is usable as soon as `up`
/// returns.
fn add_addresses(
    rtnl: &mut Rtnl,
    dev: &str,
    ipv4: Option<(std::net::Ipv4Addr, u8)>,
    ipv6: Option<(std::net::Ipv6Addr, u8)>,
) -> Result<(), DaemonError> {
    if let Some((a, l)) = ipv4 {
        rtnl.add_address(dev, a.into(), l, false)?;
    }
    if let Some((a, l)) = ipv6 {
        rtnl.add_address(dev, a.into(), l, true)?;
    }
    Ok(())
}

/// A namespace VM in a namespace hvnet did not make (a container's): its
/// TAP made inside it under the name asked for, marked as this
/// topology's (its alias) and given its MAC, MTU, addresses and routes —
/// or, after a daemon restart, its queues opened again where it is, if it
/// still carries the marker. An interface of that name there already
/// refuses it (CNI's rule).
///
/// A daemon that dies on the way leaves nothing behind: the state names
/// the interface before it exists (a restarted daemon deletes one no VM
/// of its topology has, [`forget_stray_attachments`]), and the TAP is
/// made persistent last, after its marker, so that until then the
/// kernel deletes it with the daemon's descriptors.
///
/// Made inside rather than moved in, as a namespace VM's is: moving a
/// device between namespaces waits for an RCU grace period (some 10 ms
/// here, a third of a container's attachment). The queues' descriptors
/// then hold the container's namespace alive, so a namespace deleted
/// without a DEL is seen by its name leaving `/run/netns` (the namespace
/// watch, which deletes the NIC) or, elsewhere, by the runtime's GC.
fn attach_vm(
    vm: &Vm,
    a: &Attach,
    dir: &Path,
    state: &mut State,
    reattach: bool,
    offloads: u32,
) -> Result<TapPort, DaemonError> {
    let label = a.netns.display().to_string();
    let handle =
        std::fs::File::open(&a.netns).map_err(io_err(format!("open network namespace {label}")))?;
    let mut rtnl = Rtnl::in_netns_of(&handle)?;
    let marker = state.marker();
    if reattach {
        if !carries(&mut rtnl, &a.ifname, &marker) {
            return Err(DaemonError::Other(format!(
                "vm {}: {} in {label} is not this topology's (no marker)",
                vm.name, a.ifname
            )));
        }
        return Ok(TapPort::open_in_handle(
            &handle, &label, &a.ifname, vm.queues, offloads,
        )?);
    }
    if rtnl.index(&a.ifname).is_ok() {
        return Err(DaemonError::Other(format!(
            "vm {}: {label} has an interface {} already",
            vm.name, a.ifname
        )));
    }
    let iface = AttachedIf {
        netns: a.netns.clone(),
        ifname: a.ifname.clone(),
    };
    if !state.attached.contains(&iface) {
        state.attached.push(iface.clone());
        write_state(dir, state)?;
    }
    let made = (|| -> Result<TapPort, DaemonError> {
        let tap = TapPort::open_in_handle(&handle, &label, &a.ifname, vm.queues, offloads)?;
        rtnl.set_link(
            &a.ifname,
            &LinkChange {
                mac: Some(vm.mac.0),
                mtu: Some(vm.settings.mtu),
                alias: Some(&marker),
                ..Default::default()
            },
        )?;
        add_addresses(&mut rtnl, &a.ifname, vm.ipv4, vm.ipv6)?;
        rtnl.set_link(&a.ifname, &up())?;
        for r in &a.routes {
            rtnl.add_route(&a.ifname, r.dst, r.prefix, r.via)?;
        }
        // Last: until now a failure (or a daemon that dies) takes the TAP
        // away with its descriptors.
        tap.set_persist(true)?;
        Ok(tap)
    })();
    if made.is_err() {
        state.attached.retain(|i| *i != iface);
        let _ = write_state(dir, state);
    }
    made
}

/// After a daemon restart: an interface the state names that no VM of
/// the running topology has (its daemon died while making it) is
/// deleted, if it carries this topology's marker, and forgotten.
pub(crate) fn forget_stray_attachments(topo: &Topology, state: &mut State) {
    let marker = state.marker();
    let owned = |i: &AttachedIf| {
        topo.vms.iter().any(|v| {
            v.attach
                .as_ref()
                .is_some_and(|a| a.netns == i.netns && a.ifname == i.ifname)
        })
    };
    let (kept, stray): (Vec<AttachedIf>, Vec<AttachedIf>) = std::mem::take(&mut state.attached)
        .into_iter()
        .partition(owned);
    for i in stray {
        if let Ok(true) = delete_attached(&i, &marker) {
            tracing::info!(netns = %i.netns.display(), ifname = %i.ifname, "an interface no VM has (its daemon died making it): deleted");
        }
    }
    state.attached = kept;
}

/// Before a daemon re-attaches: the containers' ports the CNI plugin
/// removed while no daemon answered (`state::PENDING_DEL`), and those
/// whose namespace has gone or whose interface is no longer there as
/// this topology's (renamed, deleted, its marker changed from inside the
/// container), are forgotten (their interface deleted where it is still
/// ours); the rest are re-attached to as they were. One container cannot
/// keep the switch from starting.
pub(crate) fn forget_gone_containers(state: &mut State, dir: &Path) {
    let pending_dir = dir.join(crate::state::PENDING_DEL);
    let pending: Vec<String> = std::fs::read_dir(&pending_dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let marker = state.marker();
    let mut gone = Vec::new();
    state.added_vms.retain(|table| {
        let Some((name, iface)) = container_of(table) else {
            return true;
        };
        // A vhost-user port has no interface in the container to look at.
        let there = |i: &AttachedIf| still_ours(&i.netns, &i.ifname, &marker);
        if !pending.contains(&name) && iface.as_ref().is_none_or(there) {
            return true;
        }
        gone.extend(iface);
        tracing::info!(vm = %name, "a container's port removed while the switch was down: not re-attached");
        false
    });
    for i in gone {
        let _ = delete_attached(&i, &marker);
        state.attached.retain(|a| *a != i);
    }
    // Only what was read: a removal asked for since is done by the daemon
    // once it listens (`reconcile::pending_dels`).
    for name in &pending {
        let _ = std::fs::remove_file(pending_dir.join(name));
    }
}

/// True if namespace `netns` is there with interface `ifname` carrying
/// `marker`.
fn still_ours(netns: &Path, ifname: &str, marker: &str) -> bool {
    matches!(ours(netns, ifname, marker), Ok(Some(_)))
}

/// An rtnetlink socket in namespace `netns` if it is there and its
/// interface `ifname` carries `marker` (is this topology's).
fn ours(netns: &Path, ifname: &str, marker: &str) -> Result<Option<Rtnl>, DaemonError> {
    let Ok(handle) = std::fs::File::open(netns) else {
        return Ok(None);
    };
    let mut rtnl = Rtnl::in_netns_of(&handle)?;
    Ok(carries(&mut rtnl, ifname, marker).then_some(rtnl))
}

/// True if interface `ifname` (of `rtnl`'s namespace) carries `marker`.
fn carries(rtnl: &mut Rtnl, ifname: &str, marker: &str) -> bool {
    rtnl.alias(ifname).ok().flatten().as_deref() == Some(marker)
}

/// A container's port's `[[vm]]` table: its name and, for a namespace VM,
/// its interface in the container (None: not a container's port).
fn container_of(table: &str) -> Option<(String, Option<AttachedIf>)> {
    let t: toml::Table = toml::from_str(table).ok()?;
    let vm = t.get("vm")?.as_array()?.first()?;
    let s = |k: &str| vm.get(k).and_then(|v| v.as_str()).map(str::to_string);
    vm.get("container")?;
    let iface = s("netns").map(|netns| AttachedIf {
        netns: netns.into(),
        ifname: s("ifname").unwrap_or_else(|| "eth0".into()),
    });
    Some((s("name")?, iface))
}

/// Deletes attached VM `vm`'s interface from the namespace it was put in,
/// if it is still there and still this topology's; nothing to do when
/// the namespace has gone (its devices went with it). Forgets it.
pub(crate) fn detach_vm(a: &Attach, state: &mut State) {
    let iface = AttachedIf {
        netns: a.netns.clone(),
        ifname: a.ifname.clone(),
    };
    state.attached.retain(|i| *i != iface);
    if let Err(e) = delete_attached(&iface, &state.marker()) {
        tracing::warn!(netns = %a.netns.display(), ifname = %a.ifname, error = %e, "cannot delete the VM's interface");
    }
}

/// Deletes an interface hvnet put in a namespace it did not make, if the
/// namespace is still there and the interface carries `marker`: true if
/// it was deleted.
pub(crate) fn delete_attached(i: &AttachedIf, marker: &str) -> Result<bool, DaemonError> {
    let Some(mut rtnl) = ours(&i.netns, &i.ifname, marker)? else {
        return Ok(false);
    };
    rtnl.del_link(&i.ifname)?;
    Ok(true)
}

/// Creates an external host: its namespace, and a veth pair whose host end
/// is its `eth0` and whose other end, named as its uplink's device, stays
/// here for the uplink. Its NIC sends wire-sized frames unless it has TSO.
pub(crate) fn create_host(
    topo: &Topology,
    h: &Host,
    dir: &Path,
    state: &mut State,
    reattach: bool,
) -> Result<(), DaemonError> {
    let ns = topo.netns_of(&h.name);
    let u = topo.uplink_of(h);
    if reattach {
        check_owned_netns(&ns, &state.marker())?;
        return check_owned_device(&u.device, &state.marker());
    }
    state.namespaces.push(ns.clone());
    state.devices.push(u.device.clone());
    write_state(dir, state)?;
    let handle = add_netns(&ns, h.ipv6.is_some(), &state.marker())?;
    let mut root = Rtnl::new()?;
    root.add_veth(&u.device, u.settings.mtu, "eth0", &handle)?;
    let marked = LinkChange {
        alias: Some(&state.marker()),
        ..Default::default()
    };
    root.set_link(&u.device, &marked)?;
    let mut rtnl = Rtnl::in_netns_of(&handle)?;
    let nic = LinkChange {
        mac: Some(h.mac.0),
        mtu: Some(u.settings.mtu),
        ..Default::default()
    };
    rtnl.set_link("eth0", &nic)?;
    if !h.tso {
        // Offloads are ethtool's (its ioctl), not rtnetlink's.
        run(&[
            "ip", "netns", "exec", &ns, "ethtool", "-K", "eth0", "tso", "off",
        ])?;
    }
    add_addresses(&mut rtnl, "eth0", h.ipv4, h.ipv6)?;
    rtnl.set_link("eth0", &up())?;
    // The switch's end carries no addresses and sends nothing of its own.
    let key = format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", u.device);
    std::fs::write(&key, "1").map_err(io_err(format!("write {key}")))?;
    Ok(())
}

/// NetQueue's filters for an uplink: each VM of its VLAN to a queue of its
/// own (round robin over queues 1.., when there are more VMs than
/// queues), everything else to queue 0.
pub(crate) fn netqueue_filters(topo: &Topology, u: &Uplink) -> Option<Filters> {
    if u.netqueue == NetQueueMode::Off {
        return None;
    }
    let entries = topo
        .vms_on(u)
        .enumerate()
        .map(|(i, v)| Filter {
            mac: v.mac,
            // Dynamic NetQueue starts packed, on queue 1 (its balancer
            // spreads them as load demands).
            queue: match u.netqueue {
                NetQueueMode::Dynamic => 1,
                _ => static_queue(u, i),
            },
        })
        .collect();
    Some(Filters {
        tunnel: u.vxlan.as_ref().map(|v| v.port),
        entries,
    })
}

/// Static NetQueue's queue for the `i`-th filter of uplink `u`: the queues
/// past the default one, in turn.
pub(crate) fn static_queue(u: &Uplink, i: usize) -> u32 {
    let spare = (u.queues - 1).max(1);
    1 + (i % spare) as u32
}

/// How the uplink's receive queues share what arrives.
fn spread(topo: &Topology, u: &Uplink) -> Spread {
    match netqueue_filters(topo, u) {
        Some(f) => Spread::NetQueue(f),
        None if u.rss => Spread::Rss {
            tunnel: u.vxlan.as_ref().map(|v| v.port),
        },
        None => Spread::FlowHash,
    }
}

/// Why the kernel takes no tunnelled GSO frames from an endpoint here.
#[derive(Debug, thiserror::Error)]
enum GsoTapError {
    /// A netlink request (a device's index, the TAP's link, its redirect)
    /// failed.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    /// The TAP with the tunnel header could not be opened (before Linux
    /// 6.17 its offloads are refused).
    #[error("cannot open TAP {name} with the tunnel header")]
    Tap {
        /// The TAP (a team's: its members' TAPs joined by `+`).
        name: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A device's MTU could not be read.
    #[error("cannot read {device}'s MTU")]
    Mtu {
        /// The device.
        device: String,
    },
}

/// The TAP a tunnel endpoint on `devices` hands its frames to the kernel
/// through, whole (GSO frames not segmented by hvnet): one per device (a
/// team's members, `team` picking), each made with the 24-byte
/// virtio-net header, up, with its device's MTU and no IPv6 of its own,
/// its ingress redirected to its device's egress. `None` where the kernel
/// cannot (before Linux 6.17 the tunnel offloads are refused): the
/// endpoint then segments, as with `gso = "software"`, and says why in the
/// log.
fn kernel_gso_tap(
    uplink: &str,
    devices: &[&str],
    team: Option<Arc<dyn PickMember>>,
) -> Option<hvnet_port::vxlan::TunnelTap> {
    let made = (|| -> Result<hvnet_port::vxlan::TunnelTap, GsoTapError> {
        let mut rtnl = Rtnl::new()?;
        let mut names = Vec::with_capacity(devices.len());
        for dev in devices {
            names.push(format!("hvx{}", rtnl.index(dev)?));
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let tap = hvnet_port::vxlan::TunnelTap::open_team(&refs, team).map_err(|source| {
            GsoTapError::Tap {
                name: names.join("+"),
                source,
            }
        })?;
        for (name, dev) in names.iter().zip(devices) {
            // Nothing of the kernel's own (router solicitations, MLD) is
            // to queue up on a TAP nobody reads.
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
            let mtu = hvnet_port::uplink::device_mtu(dev).ok_or_else(|| GsoTapError::Mtu {
                device: dev.to_string(),
            })?;
            rtnl.set_link(
                name,
                &LinkChange {
                    mtu: Some(mtu),
                    up: Some(true),
                    ..LinkChange::default()
                },
            )?;
            rtnl.redirect_ingress(name, dev)?;
        }
        Ok(tap)
    })();
    match made {
        Ok(tap) => {
            tracing::info!(
                uplink,
                device = tap.name(),
                "VXLAN: GSO frames go whole to the kernel"
            );
            Some(tap)
        }
        Err(e) => {
            let why = crate::error::chain(&e);
            tracing::warn!(uplink, %why, "VXLAN: the kernel takes no tunnelled GSO frames here; hvnet segments them");
            None
        }
    }
}

/// Takes over an uplink's device: up, its GRO as the uplink's `lro`
/// says, an MTU at least the uplink's; then opens its receive queues.
pub(crate) fn open_uplink(topo: &Topology, u: &Uplink) -> Result<PortSpec, DaemonError> {
    for dev in u.devices() {
        let mtu = hvnet_port::uplink::device_mtu(dev).unwrap_or(0);
        if mtu < u.settings.mtu {
            return Err(DaemonError::Other(format!(
                "uplink {}: device {dev} has MTU {mtu}, below the uplink's {}",
                u.name, u.settings.mtu
            )));
        }
    }
    // A tunnel endpoint's device has nothing of the tunnel's to coalesce
    // (no kernel VXLAN socket on its port): its GRO stays off. Its peers
    // may still hand it tunnelled GSO frames (a Linux `vxlan` device on a
    // veth does, with its default offloads), which no virtio-net header
    // can express: it reads whole frames, in batches, without one. A
    // plain uplink may be handed GSO frames even with GRO off (a peer that
    // sends them whole, as a veth with TSO does), so each frame of its
    // batch may spill into a buffer that holds 64 KiB.
    let coalesces = u.lro == UplinkLro::Hardware && u.vxlan.is_none();
    let gro = if coalesces { "on" } else { "off" };
    let read = match &u.vxlan {
        Some(v) => UplinkRead::Whole {
            tunnel: v.port,
            batch: u.batch,
        },
        None => UplinkRead::Vnet { batch: u.batch },
    };
    for dev in u.devices() {
        run(&["ethtool", "-K", dev, "gro", gro])?;
        Rtnl::new()?.set_link(dev, &up())?;
    }
    let uplink_err = |source| DaemonError::Uplink {
        name: u.name.clone(),
        source,
    };
    // The device the switch (or the tunnel endpoint) sends by: the one,
    // or a team over the members; a team's tunnel endpoint writes into a
    // TAP per member, the team picking as for its own frames.
    let (port, team): (Arc<dyn Device>, Option<Arc<dyn PickMember>>) = match &u.team {
        Some(t) => {
            let mut members = Vec::new();
            for d in &t.devices {
                members.push((d.clone(), device_mac(u, d)?));
            }
            let team = TeamPort::open(TeamConfig {
                members,
                teaming: t.teaming,
                order: t.order.clone(),
                failback: t.failback,
                lacp_rate: t.lacp_rate,
                lacp_mode: t.lacp_mode,
                queues: u.queues,
                spread: spread(topo, u),
                read,
            })
            .map_err(uplink_err)?;
            let team = Arc::new(team);
            (
                Arc::clone(&team) as Arc<dyn Device>,
                Some(team as Arc<dyn PickMember>),
            )
        }
        None => {
            let port =
                UplinkPort::open(&u.device, u.queues, spread(topo, u), read).map_err(uplink_err)?;
            (Arc::new(port) as Arc<dyn Device>, None)
        }
    };
    let (dev, endpoint) = match &u.vxlan {
        None => (port, None),
        Some(v) => {
            // The endpoint speaks with the device's own address; a team's
            // with one of its own (see `team_endpoint_mac`).
            let devices = u.devices();
            let mac = device_mac(u, devices[0])?;
            let mac = if u.team.is_some() {
                team_endpoint_mac(mac)
            } else {
                mac
            };
            let tap = v
                .kernel_gso
                .then(|| kernel_gso_tap(&u.name, &devices, team))
                .flatten();
            let vx = VxlanPort::new(
                port,
                VtepConfig {
                    vni: v.vni,
                    local: v.local.0,
                    prefix: v.local.1,
                    mac,
                    remotes: v.remotes.clone(),
                    port: v.port,
                    udp_csum: v.udp_csum,
                    vlans: v.vlans.clone(),
                },
                tap,
            );
            let endpoint = Arc::clone(vx.endpoint());
            (Arc::new(vx) as Arc<dyn Device>, Some(endpoint))
        }
    };
    Ok(PortSpec {
        name: u.name.clone(),
        dev,
        mac: hvnet_wire::MacAddr([0; 6]),
        vlan: u.vlan,
        endpoint,
        settings: u.settings.clone(),
        external_ids: Vec::new(),
    })
}

/// A team's tunnel endpoint's MAC: its first member's, locally
/// administered, its last byte's bits flipped. Not a member's own: the
/// host's stack may keep its address (BGP, the management address) on a
/// member, and once the physical switch saw that member's MAC arrive by
/// another member (the endpoint's frames go by the team's policy) it
/// would send the host's own frames there. The members are read in
/// promiscuous mode, as for the VMs' addresses.
fn team_endpoint_mac(first: hvnet_wire::MacAddr) -> hvnet_wire::MacAddr {
    let mut m = first.0;
    m[0] = (m[0] | 0x02) & !0x01;
    m[5] ^= 0xff;
    hvnet_wire::MacAddr(m)
}

/// Device `dev`'s own address (uplink `u`'s device or team member).
fn device_mac(u: &Uplink, dev: &str) -> Result<hvnet_wire::MacAddr, DaemonError> {
    Rtnl::new()
        .and_then(|mut r| r.mac(dev))
        .ok()
        .flatten()
        .ok_or_else(|| DaemonError::Other(format!("uplink {}: cannot read {dev}'s MAC", u.name)))
}
