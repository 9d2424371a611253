//! VMs added and removed while the switch runs (`hvnet vm add|del`), as
//! `ovs-vsctl add-port`/`del-port` do: the VM is created (its namespace
//! and NIC, or its vhost-user socket, or its real guest booted), its port
//! joins the switch, and the change is written to the topology's state so
//! that a restarted daemon re-attaches to what runs, and `hvnet down`
//! removes it. No other VM is touched.

use crate::ctl_server::Ctl;
use crate::guest;
use crate::proto::CtlError;
use crate::provision;
use crate::state::{netns_marker, read_state, state_dir, write_state, State};
use crate::topology::{Topology, VmKind};
use hvnet_port::SocketMode;
use serde_json::{json, Value};
use std::sync::Arc;

/// `hvnet vm add`: `table` is one `[[vm]]` table, as in a topology file.
pub(crate) fn add_vm(cx: &Ctl, table: &str) -> Result<Value, CtlError> {
    let _one = cx.changes.lock().expect("changes lock");
    let topo = cx.topology();
    let dir = state_dir(&topo.name);
    let mut state =
        read_state(&dir).ok_or_else(|| CtlError::failed("the topology's state is gone"))?;
    let vm = topo
        .parse_vm(table)
        .map_err(|reason| CtlError::Refused { reason })?;
    // Written with its MAC, so that it never depends on where it stands.
    let mut stored = table.trim_end().to_string();
    if !stored.lines().any(|l| l.trim_start().starts_with("mac")) {
        stored.push_str(&format!("\nmac = \"{}\"", vm.mac));
    }
    let mut next = Topology::clone(&topo);
    next.vms.push(vm.clone());
    let i = next.vms.len() - 1;
    let spec = provision::create_vm(&next, i, &dir, &mut state, false).map_err(CtlError::failed)?;
    let port = match cx.sw.add_port(spec) {
        Ok(p) => p,
        Err(e) => {
            undo_netns(&next, i, &mut state);
            let _ = write_state(&dir, &state);
            return Err(CtlError::refused(e.to_string()));
        }
    };
    state.added_vms.push(stored);
    write_state(&dir, &state).map_err(CtlError::failed)?;
    cx.set_topology(next.clone());
    let mut reply =
        json!({"vm": vm.name, "port": port.id, "mac": vm.mac.to_string(), "kind": vm.kind.name()});
    if vm.kind.started_by_hvnet() {
        let mut g = guest::start(&next, &vm, &dir).map_err(CtlError::failed)?;
        let ready = guest::wait_ready(&mut g, &dir);
        reply["pid"] = json!(g.pid());
        let mut all = cx.guests.lock().expect("guests lock");
        all.push(g);
        if let Some(mut s) = read_state(&dir) {
            guest::record(&mut s, &all);
            let _ = write_state(&dir, &s);
        }
        ready.map_err(CtlError::failed)?;
    }
    tracing::info!(vm = %vm.name, port = port.id, "vm added");
    Ok(reply)
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
    let vm = topo.vms[i].clone();
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
        guest::record(&mut state, &all);
    }
    undo_netns(&topo, i, &mut state);
    if vm.kind.is_vhost_user() && vm.vhost.mode == SocketMode::Server {
        let sock = vm
            .vhost
            .path
            .clone()
            .unwrap_or_else(|| guest::socket_path(&dir, name));
        let _ = std::fs::remove_file(sock);
    }
    let _ = std::fs::remove_dir_all(guest::guest_dir(&dir, name));
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
    write_state(&dir, &state).map_err(CtlError::failed)?;
    let mut next = Topology::clone(&topo);
    next.vms.remove(i);
    cx.set_topology(next);
    tracing::info!(vm = %name, "vm removed");
    Ok(json!({"vm": name, "removed": true, "frames_from_it": frames}))
}

/// Deletes VM `i`'s namespace if hvnet made it (its marker is this
/// topology's), and forgets it.
fn undo_netns(topo: &Topology, i: usize, state: &mut State) {
    let vm = &topo.vms[i];
    if vm.kind != VmKind::Netns {
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

impl Ctl {
    /// The topology as it runs now.
    pub(crate) fn topology(&self) -> Arc<Topology> {
        Arc::clone(&self.topo.lock().expect("topology lock"))
    }

    fn set_topology(&self, t: Topology) {
        *self.topo.lock().expect("topology lock") = Arc::new(t);
    }
}
