//! VMs added and removed while the switch runs (`hvnet vm add|del`, and
//! the VMs `hvnet up FILE` adds and removes): the VM made or undone, its
//! port joined to the switch or taken away, its EVPN advertisement and
//! NetQueue filters with it, the state written.

use crate::ctl::Ctl;
use crate::guest;
use crate::proto::CtlError;
use crate::provision;
use crate::state::{netns_marker, read_state, state_dir, write_state, State};
use crate::topology::{NetQueueMode, Topology, Vm, VmKind};
use hvnet_port::SocketMode;
use serde_json::{json, Value};

/// `hvnet vm add`: `table` is one `[[vm]]` table, as in a topology file.
pub(crate) fn add_vm(cx: &Ctl, table: &str) -> Result<Value, CtlError> {
    let _one = cx.changes.lock().expect("changes lock");
    let topo = cx.topology();
    let dir = state_dir(&topo.name);
    let mut state =
        read_state(&dir).ok_or_else(|| CtlError::failed("the topology's state is gone"))?;
    let vm = topo
        .parse_vm(table)
        .map_err(|e| CtlError::refused(e.to_string()))?;
    // Written with its MAC, so that it never depends on where it stands.
    let mut stored = table.trim_end().to_string();
    if !stored.lines().any(|l| l.trim_start().starts_with("mac")) {
        stored.push_str(&format!("\nmac = \"{}\"", vm.mac));
    }
    let mut next = Topology::clone(&topo);
    next.vms.push(vm);
    let i = next.vms.len() - 1;
    let port = add_port(cx, &next, i, &mut state)?;
    state.added_vms.push(stored);
    write_state(&dir, &state).map_err(CtlError::failed)?;
    cx.set_topology(next.clone());
    let mut reply = port;
    if let Some(pid) = start_guest(cx, &next, i)? {
        reply["pid"] = json!(pid);
    }
    Ok(reply)
}

/// The removals the CNI plugin asked for while the daemon did not answer
/// (`state::PENDING_DEL`, one file per port), done: looked at once a
/// second, so that one asked for while a daemon was starting is not lost.
/// Only containers' ports are removed this way.
pub(crate) fn pending_dels(cx: &Ctl) {
    let d = state_dir(&cx.topology().name).join(crate::state::PENDING_DEL);
    let Ok(entries) = std::fs::read_dir(&d) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let container = cx
            .topology()
            .vms
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.container.is_some());
        let done = match container {
            None => true,
            Some(false) => {
                tracing::warn!(vm = %name, "a CNI removal names a VM that is not a container's: ignored");
                true
            }
            Some(true) => match del_vm(cx, &name) {
                Ok(_) | Err(CtlError::NotFound { .. }) => {
                    tracing::info!(vm = %name, "a container's port removed as the CNI plugin asked while the switch did not answer");
                    true
                }
                Err(err) => {
                    tracing::warn!(vm = %name, error = %err, "a CNI removal failed; tried again in a second");
                    false
                }
            },
        };
        if done {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// `hvnet vm del`: the VM's port leaves the switch (its counters, FDB
/// entries and queues with it), its guest is stopped, and what hvnet
/// created for it is deleted.
pub(crate) fn del_vm(cx: &Ctl, name: &str) -> Result<Value, CtlError> {
    let _one = cx.changes.lock().expect("changes lock");
    let topo = cx.topology();
    let Some(i) = topo.vms.iter().position(|v| v.name == name) else {
        let names = topo.vms.iter().map(|v| v.name.clone()).collect();
        return Err(CtlError::not_found("VM", name, names));
    };
    let dir = state_dir(&topo.name);
    let mut state =
        read_state(&dir).ok_or_else(|| CtlError::failed("the topology's state is gone"))?;
    let reply = del_port(cx, &topo, i, &mut state)?;
    let added = state
        .added_vms
        .iter()
        .position(|t| topo.parse_vm_name(t).as_deref() == Some(name));
    match added {
        Some(a) => {
            state.added_vms.remove(a);
        }
        None => state.removed_vms.push(name.into()),
    }
    state.port_changes.remove(name);
    write_state(&dir, &state).map_err(CtlError::failed)?;
    let mut next = Topology::clone(&topo);
    next.vms.remove(i);
    cx.set_topology(next);
    Ok(reply)
}

/// Creates VM `i` of `topo` and adds its port.
pub(super) fn add_port(
    cx: &Ctl,
    topo: &Topology,
    i: usize,
    state: &mut State,
) -> Result<Value, CtlError> {
    let dir = state_dir(&topo.name);
    let vm = &topo.vms[i];
    let spec = provision::create_vm(topo, i, &dir, state, false).map_err(CtlError::failed)?;
    let port = match cx.sw.add_port(spec) {
        Ok(p) => p,
        Err(e) => {
            undo_netns(topo, i, state);
            let _ = write_state(&dir, state);
            return Err(CtlError::refused(e.to_string()));
        }
    };
    if let Some((ns, nic)) = topo.watched_netns(vm) {
        cx.netns_watch
            .lock()
            .expect("netns watch lock")
            .add(&vm.name, ns, &nic);
    }
    advertise(cx, vm, port.id, true);
    netqueue_filters(cx, topo, vm, true);
    tracing::info!(vm = %vm.name, port = port.id, "vm added");
    Ok(json!({"vm": vm.name, "port": port.id, "mac": vm.mac.to_string(), "kind": vm.kind.name()}))
}

/// The EVPN segments of `vm`'s VLANs advertise it (on port `port`), for a
/// VM added (`joined`), or withdraw it. (The same MAC may be another
/// tenant's VM in another segment: only its own segments are touched.)
pub(super) fn advertise(cx: &Ctl, vm: &Vm, port: usize, joined: bool) {
    for a in &cx.evpn.lock().expect("evpn lock").advertised {
        if !vm.vlans().carries(a.vlan) {
            continue;
        }
        if joined {
            a.vms.add(crate::evpn::local_vm(vm, port));
        } else {
            a.vms.remove(vm.mac);
        }
    }
}

/// NetQueue at the uplinks of `vm`'s VLAN, for a VM added (`joined`) or
/// removed: with Dynamic NetQueue its balancer gives it a filter on the
/// least loaded queue (or takes it away); with a static table it gets the
/// next queue in turn, as the file's VMs got theirs (or loses its filter).
/// The other filters stay where they are.
pub(super) fn netqueue_filters(cx: &Ctl, topo: &Topology, vm: &Vm, joined: bool) {
    for u in topo.uplinks.iter().filter(|u| u.shares_vlan_with(vm)) {
        match u.netqueue {
            NetQueueMode::Off => {}
            NetQueueMode::Dynamic => {
                let all = cx.balancers.lock().expect("balancers lock");
                if let Some((_, b)) = all.iter().find(|(n, _)| *n == u.name) {
                    crate::balancer::vm_changed(&cx.sw, &u.name, b, &vm.name, vm.mac, joined);
                }
            }
            NetQueueMode::Static => {
                let Some(port) = cx.sw.port(&u.name) else {
                    continue;
                };
                let Some(mut f) = port.dev.filters() else {
                    continue;
                };
                f.entries.retain(|e| e.mac != vm.mac);
                if joined {
                    let queue = provision::static_queue(u, f.entries.len());
                    f.entries
                        .push(hvnet_port::filters::Filter { mac: vm.mac, queue });
                }
                if let Err(e) = port.dev.set_filters(f) {
                    tracing::warn!(uplink = %u.name, vm = %vm.name, error = %e, "netqueue: filters not installed");
                }
            }
        }
    }
}

/// Starts VM `i`'s real guest, if hvnet starts it, and waits until it is
/// up; its process id.
pub(super) fn start_guest(cx: &Ctl, topo: &Topology, i: usize) -> Result<Option<u32>, CtlError> {
    let vm = &topo.vms[i];
    if !vm.kind.started_by_hvnet() {
        return Ok(None);
    }
    let dir = state_dir(&topo.name);
    let mut all = cx.guests.lock().expect("guests lock");
    guest::boot(topo, vm, &dir, &mut all)
        .map(Some)
        .map_err(CtlError::failed)
}

/// Each tenant's L3 VNI, by name.
pub(super) fn l3_vnis(t: &Topology) -> Vec<(&str, u32)> {
    t.tenants
        .iter()
        .filter_map(|x| Some((x.name.as_str(), x.l3?.vni)))
        .collect()
}

/// Removes VM `i` of `topo`'s port, stops its guest and deletes what hvnet
/// made for it.
pub(super) fn del_port(
    cx: &Ctl,
    topo: &Topology,
    i: usize,
    state: &mut State,
) -> Result<Value, CtlError> {
    let dir = state_dir(&topo.name);
    let vm = &topo.vms[i];
    let name = vm.name.as_str();
    let port = cx
        .sw
        .remove_port(name)
        .map_err(|e| CtlError::failed(e.to_string()))?;
    let frames = port.ingress_stats().frames;
    {
        let mut all = cx.guests.lock().expect("guests lock");
        if let Some(g) = all.iter().position(|g| g.vm == name) {
            all.remove(g).stop(&dir);
        }
        guest::record(state, &all);
    }
    advertise(cx, vm, port.id, false);
    netqueue_filters(cx, topo, vm, false);
    cx.netns_watch
        .lock()
        .expect("netns watch lock")
        .remove(name);
    undo_netns(topo, i, state);
    if vm.kind.is_vhost_user() && vm.vhost.mode == SocketMode::Server {
        let sock = vm
            .vhost
            .path
            .clone()
            .unwrap_or_else(|| guest::socket_path(&dir, name));
        let _ = std::fs::remove_file(sock);
    }
    let _ = std::fs::remove_dir_all(guest::guest_dir(&dir, name));
    tracing::info!(vm = %name, "vm removed");
    Ok(json!({"vm": name, "removed": true, "frames_from_it": frames}))
}

/// Deletes VM `i`'s namespace if hvnet made it (its marker is this
/// topology's), and forgets it.
pub(super) fn undo_netns(topo: &Topology, i: usize, state: &mut State) {
    let vm = &topo.vms[i];
    if vm.kind != VmKind::Netns {
        return;
    }
    if let Some(a) = &vm.attach {
        crate::provision::detach_vm(a, state);
        return;
    }
    let ns = topo.netns(vm);
    if netns_marker(&ns).as_deref() == Some(state.marker().as_str()) {
        if let Err(e) = hvnet_sys::netns::delete(&ns) {
            tracing::warn!(netns = %ns, error = %e, "cannot delete the VM's namespace");
        }
    }
    state.namespaces.retain(|n| *n != ns);
}
