//! VMs added and removed while the switch runs (`hvnet vm add|del`), as
//! `ovs-vsctl add-port`/`del-port` do: the VM is created (its namespace
//! and NIC, or its vhost-user socket, or its real guest booted), its port
//! joins the switch, and the change is written to the topology's state so
//! that a restarted daemon re-attaches to what runs, and `hvnet down`
//! removes it. No other VM is touched. Uplinks come and go the same way
//! through `hvnet up FILE` of an edited file ([`apply`]): the file
//! applied becomes the state's topology text, so a restarted daemon opens
//! the uplinks that run.

use crate::ctl_server::Ctl;
use crate::guest;
use crate::proto::CtlError;
use crate::provision;
use crate::state::{netns_marker, read_state, state_dir, write_state, State};
use crate::topology::{NetQueueMode, Topology, Uplink, Vm, VmKind};
use hvnet_datapath::{PortSettings, PortSpec};
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
    write_state(&dir, &state).map_err(CtlError::failed)?;
    let mut next = Topology::clone(&topo);
    next.vms.remove(i);
    cx.set_topology(next);
    Ok(reply)
}

/// `hvnet up FILE` on a running topology: what runs is made what the file
/// says, as `kubectl apply` or `netplan apply` do — its new VMs and
/// uplinks added, the VMs and uplinks it no longer has removed, changed
/// port settings applied; what it keeps as it is untouched. Everything is
/// checked before anything changes: only `[[vm]]` and `[[uplink]]` tables
/// may differ, a kept VM or uplink only in what `hvnet port NAME set`
/// changes, and an uplink comes or goes only where no `[[host]]` is on its
/// wire and it has no BGP EVPN (`plan_uplinks`).
///
/// An uplink added is opened as at `hvnet up` (its device's GRO set, its
/// receive queues spread by its NetQueue filters for the VMs of its VLAN,
/// its balancer started), after the VMs the file adds, so that its filters
/// are made once, for every VM. One removed leaves the switch with its
/// queues, FDB entries and place in the flood lists; its device, which
/// hvnet did not create, stays as it is (as at `hvnet down`).
pub(crate) fn apply(cx: &Ctl, text: &str) -> Result<Value, CtlError> {
    let _one = cx.changes.lock().expect("changes lock");
    let now = cx.topology();
    let file = crate::topology::parse(text)
        .map_err(|(line, reason)| CtlError::refused(format!("line {line}: {reason}")))?;
    let uplinks = plan_uplinks(&now, &file).map_err(CtlError::refused)?;
    let sections = [
        ("name", now.name == file.name),
        ("[[host]]", now.hosts == file.hosts),
        ("[frr]", now.frr == file.frr),
        ("netns", now.netns == file.netns),
        ("[switch]", now.switch == file.switch),
        ("fdb_aging_secs", now.fdb_aging_secs == file.fdb_aging_secs),
    ];
    if let Some((what, _)) = sections.iter().find(|(_, same)| !same) {
        return Err(CtlError::refused(format!(
            "{what} differs from what runs: while the topology runs only its [[vm]] and [[uplink]] tables may change (`hvnet down {}` first)",
            now.name
        )));
    }
    let mut changed = Vec::new();
    for v in file.vms.iter() {
        let Some(r) = now.vms.iter().find(|r| r.name == v.name) else {
            continue;
        };
        let mut as_running = v.clone();
        as_running.settings = r.settings.clone();
        if as_running != *r {
            let why = if v.mac != r.mac {
                format!(" (its MAC would become {}, its place in the file having moved: give it mac = \"{}\")", v.mac, r.mac)
            } else {
                String::new()
            };
            return Err(CtlError::refused(format!(
                "vm {}: changed beyond its port settings (kind, addresses, MAC, queues, VLAN or socket){why}; `hvnet vm del {}` and add it again",
                v.name, v.name
            )));
        }
        if v.settings != r.settings {
            if v.settings.mtu != r.settings.mtu {
                return Err(CtlError::refused(format!(
                    "vm {}: its mtu changes with `hvnet port {} set mtu={}`",
                    v.name, v.name, v.settings.mtu
                )));
            }
            cx.sw
                .check_settings(&v.name, &v.settings)
                .map_err(|e| CtlError::refused(format!("vm {}: {e}", v.name)))?;
            changed.push((v.name.clone(), v.settings.clone()));
        }
    }
    for (name, s) in &uplinks.changed {
        cx.sw
            .check_settings(name, s)
            .map_err(|e| CtlError::refused(format!("uplink {name}: {e}")))?;
    }
    changed.extend(uplinks.changed.iter().cloned());
    // The new uplinks' devices are opened before anything of the switch
    // changes: one that is missing or will not open refuses the file.
    let mut opened = Vec::new();
    for &i in &uplinks.added {
        let u = &file.uplinks[i];
        if hvnet_sys::packet::ifindex(&u.device).is_none() {
            return Err(CtlError::refused(format!(
                "uplink {}: no network interface named {} here",
                u.name, u.device
            )));
        }
        let spec =
            provision::open_uplink(&file, u).map_err(|e| CtlError::refused(e.to_string()))?;
        opened.push((i, spec));
    }
    let dir = state_dir(&now.name);
    let mut state =
        read_state(&dir).ok_or_else(|| CtlError::failed("the topology's state is gone"))?;
    let mut removed = Vec::new();
    let mut running = Topology::clone(&now);
    while let Some(i) = running
        .vms
        .iter()
        .position(|r| !file.vms.iter().any(|v| v.name == r.name))
    {
        del_port(cx, &running, i, &mut state)?;
        removed.push(running.vms.remove(i).name);
    }
    for name in &uplinks.removed {
        del_uplink(cx, name)?;
    }
    let mut added = Vec::new();
    for (i, v) in file.vms.iter().enumerate() {
        if !now.vms.iter().any(|r| r.name == v.name) {
            add_port(cx, &file, i, &mut state)?;
            added.push((i, v.name.clone()));
        }
    }
    for (i, spec) in opened {
        add_uplink(cx, &file, i, spec)?;
    }
    for (name, s) in &changed {
        cx.sw
            .set_port(name, s.clone())
            .map_err(|e| CtlError::failed(format!("{name}: {e}")))?;
    }
    state.topology_text = text.to_string();
    state.added_vms.clear();
    state.removed_vms.clear();
    write_state(&dir, &state).map_err(CtlError::failed)?;
    cx.set_topology(file.clone());
    for &(i, _) in &added {
        start_guest(cx, &file, i)?;
    }
    let uplinks_added: Vec<&str> = uplinks
        .added
        .iter()
        .map(|&i| file.uplinks[i].name.as_str())
        .collect();
    tracing::info!(
        added = ?added.iter().map(|a| &a.1).collect::<Vec<_>>(), removed = ?removed,
        uplinks_added = ?uplinks_added, uplinks_removed = ?uplinks.removed,
        changed = changed.len(), "topology file applied"
    );
    Ok(json!({
        "added": added.into_iter().map(|a| a.1).collect::<Vec<_>>(),
        "removed": removed,
        "uplinks_added": uplinks_added,
        "uplinks_removed": uplinks.removed,
        "changed": changed.into_iter().map(|c| c.0).collect::<Vec<_>>(),
        "vms": file.vms.len(),
        "uplinks": file.uplinks.len(),
    }))
}

/// What applying a file does to the uplinks: those it adds (their indices
/// in the file), those it removes (by name), and the kept ones whose port
/// settings change.
#[derive(Debug, Default, PartialEq)]
struct UplinkPlan {
    added: Vec<usize>,
    removed: Vec<String>,
    changed: Vec<(String, PortSettings)>,
}

/// Compares the file's uplinks with those that run, by name, and refuses,
/// with the reason, what does not change at run time: an uplink with an
/// external host on its wire (`[[host]]` tables stay as they are), one
/// with BGP EVPN (its shadow devices and FRR are made and removed with
/// the topology), a new uplink on the device of one the file removes (one
/// change at a time), and a kept uplink changed beyond the settings
/// `hvnet port NAME set` changes on an uplink (ring1, ring2, rx_usecs).
fn plan_uplinks(now: &Topology, file: &Topology) -> Result<UplinkPlan, String> {
    let down = format!("`hvnet down {}` first", now.name);
    let evpn = |u: &Uplink| u.vxlan.as_ref().is_some_and(|v| v.evpn);
    let mut plan = UplinkPlan::default();
    for r in &now.uplinks {
        if file.uplinks.iter().any(|u| u.name == r.name) {
            continue;
        }
        if let Some(h) = now.hosts.iter().find(|h| h.uplink == r.name) {
            return Err(format!(
                "uplink {}: host {} is on its wire, and [[host]] tables do not change while the topology runs ({down})",
                r.name, h.name
            ));
        }
        if evpn(r) {
            return Err(format!(
                "uplink {}: it has BGP EVPN ([uplink.vxlan] evpn = true), whose shadow devices and FRR come and go with the topology only ({down})",
                r.name
            ));
        }
        plan.removed.push(r.name.clone());
    }
    for (i, u) in file.uplinks.iter().enumerate() {
        let Some(r) = now.uplinks.iter().find(|r| r.name == u.name) else {
            if let Some(h) = file.hosts.iter().find(|h| h.uplink == u.name) {
                return Err(format!(
                    "uplink {}: host {} would be on its wire, and [[host]] tables do not change while the topology runs ({down})",
                    u.name, h.name
                ));
            }
            if evpn(u) {
                return Err(format!(
                    "uplink {}: it has BGP EVPN ([uplink.vxlan] evpn = true), whose shadow devices and FRR come and go with the topology only ({down})",
                    u.name
                ));
            }
            if let Some(o) = now.uplinks.iter().find(|o| o.device == u.device) {
                return Err(format!(
                    "uplink {}: device {} is uplink {}'s, which the file removes: remove {} first (`hvnet up` of a file without either), then add {}",
                    u.name, u.device, o.name, o.name, u.name
                ));
            }
            plan.added.push(i);
            continue;
        };
        let mut as_running = u.clone();
        as_running.settings = r.settings.clone();
        let again = format!(
            "remove it (`hvnet up` of the file without it) and add it again, or `hvnet down {}` first",
            now.name
        );
        if as_running != *r {
            return Err(format!(
                "uplink {}: changed beyond its port settings (device, queues, lro, VLAN, netqueue, rss, batch or [uplink.vxlan]); {again}",
                u.name
            ));
        }
        if u.settings != r.settings {
            let fixed = |s: &PortSettings| (s.tso, s.csum, s.mtu);
            if fixed(&u.settings) != fixed(&r.settings) {
                return Err(format!(
                    "uplink {}: its tso, csum and mtu are set when it is added (ring1, ring2 and rx_usecs change at run time); {again}",
                    u.name
                ));
            }
            plan.changed.push((u.name.clone(), u.settings.clone()));
        }
    }
    Ok(plan)
}

/// Adds uplink `i` of `topo`, its device opened (`spec`), as at `hvnet
/// up`: its port joins the switch, and Dynamic NetQueue's balancer starts
/// for it (its thread, not joined, ends when the port leaves or the
/// switch stops).
fn add_uplink(cx: &Ctl, topo: &Topology, i: usize, spec: PortSpec) -> Result<(), CtlError> {
    let u = &topo.uplinks[i];
    let port = cx
        .sw
        .add_port(spec)
        .map_err(|e| CtlError::failed(format!("uplink {}: {e}", u.name)))?;
    match crate::balancer::start(&cx.sw, topo, u) {
        Ok(Some((_thread, b))) => cx
            .balancers
            .lock()
            .expect("balancers lock")
            .push((u.name.clone(), b)),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(uplink = %u.name, error = %e, "netqueue: the balancer did not start")
        }
    }
    tracing::info!(uplink = %u.name, device = %u.device, port = port.id, "uplink added");
    Ok(())
}

/// Removes uplink `name`'s port (its queues, FDB entries and place in the
/// flood lists with it) and its balancer.
fn del_uplink(cx: &Ctl, name: &str) -> Result<(), CtlError> {
    let port = cx
        .sw
        .remove_port(name)
        .map_err(|e| CtlError::failed(format!("uplink {name}: {e}")))?;
    cx.balancers
        .lock()
        .expect("balancers lock")
        .retain(|(n, _)| n != name);
    tracing::info!(uplink = %name, port = port.id, "uplink removed");
    Ok(())
}

/// Creates VM `i` of `topo` and adds its port.
fn add_port(cx: &Ctl, topo: &Topology, i: usize, state: &mut State) -> Result<Value, CtlError> {
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
    if vm.kind == VmKind::Netns {
        let ns = topo.netns(vm);
        cx.netns_watch
            .lock()
            .expect("netns watch lock")
            .add(&vm.name, &ns);
    }
    for (vlan, vms) in &cx.advertised {
        if *vlan == vm.vlan {
            vms.add(crate::evpn::local_vm(vm, port.id));
        }
    }
    netqueue_filters(cx, topo, vm, true);
    tracing::info!(vm = %vm.name, port = port.id, "vm added");
    Ok(json!({"vm": vm.name, "port": port.id, "mac": vm.mac.to_string(), "kind": vm.kind.name()}))
}

/// NetQueue at the uplinks of `vm`'s VLAN, for a VM added (`joined`) or
/// removed: with Dynamic NetQueue its balancer gives it a filter on the
/// least loaded queue (or takes it away); with a static table it gets the
/// next queue in turn, as the file's VMs got theirs (or loses its filter).
/// The other filters stay where they are.
fn netqueue_filters(cx: &Ctl, topo: &Topology, vm: &Vm, joined: bool) {
    for u in topo.uplinks.iter().filter(|u| u.vlan == vm.vlan) {
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
fn start_guest(cx: &Ctl, topo: &Topology, i: usize) -> Result<Option<u32>, CtlError> {
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

/// Removes VM `i` of `topo`'s port, stops its guest and deletes what hvnet
/// made for it.
fn del_port(cx: &Ctl, topo: &Topology, i: usize, state: &mut State) -> Result<Value, CtlError> {
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
    for (_, vms) in &cx.advertised {
        vms.remove(vm.mac);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A VM, an uplink with an external host on its wire, and one without.
    const RUNS: &str = r#"
name = "t1"

[[vm]]
name = "vm1"
ipv4 = "198.18.0.1/24"

[[uplink]]
name = "up0"
device = "hvx0"

[[uplink]]
name = "up1"
device = "hvx1"
queues = 2

[[host]]
name = "ext"
uplink = "up0"
ipv4 = "198.18.0.100/24"
"#;

    const UP2: &str = "\n[[uplink]]\nname = \"up2\"\ndevice = \"hvx2\"\n";

    fn plan(file: &str) -> Result<UplinkPlan, String> {
        let now = crate::topology::parse(RUNS).unwrap();
        let file = crate::topology::parse(file).unwrap_or_else(|e| panic!("{e:?}"));
        plan_uplinks(&now, &file)
    }

    fn without_up1() -> String {
        RUNS.replace(
            "[[uplink]]\nname = \"up1\"\ndevice = \"hvx1\"\nqueues = 2\n",
            "",
        )
    }

    #[test]
    fn uplinks_the_file_adds_and_removes_are_found_by_name() {
        assert_eq!(plan(RUNS), Ok(UplinkPlan::default()));
        let added = plan(&format!("{RUNS}{UP2}")).unwrap();
        assert_eq!((added.added, added.removed), (vec![2], vec![]));
        let removed = plan(&without_up1()).unwrap();
        assert_eq!(
            (removed.added, removed.removed),
            (vec![], vec!["up1".to_string()])
        );
        // The host stays on up0 though up0's place in the file moved: hosts
        // name their uplink.
        let moved = RUNS
            .replace(
                "name = \"up0\"\ndevice = \"hvx0\"",
                "name = \"up9\"\ndevice = \"hvx9\"",
            )
            .replace(
                "name = \"up1\"\ndevice = \"hvx1\"",
                "name = \"up0\"\ndevice = \"hvx0\"",
            )
            .replace(
                "name = \"up9\"\ndevice = \"hvx9\"",
                "name = \"up1\"\ndevice = \"hvx1\"",
            );
        assert_eq!(
            crate::topology::parse(&moved).unwrap().hosts,
            crate::topology::parse(RUNS).unwrap().hosts
        );
        // Rings and wake-up coalescing change at run time, as with `hvnet
        // port up1 set`.
        let rings =
            plan(&RUNS.replace("queues = 2", "queues = 2\nring1 = 1024\nrx_usecs = 50")).unwrap();
        assert_eq!(rings.changed.len(), 1);
        assert_eq!(rings.changed[0].0, "up1");
        assert_eq!(
            (rings.changed[0].1.ring1, rings.changed[0].1.rx_usecs),
            (1024, 50)
        );
    }

    #[test]
    fn what_does_not_change_at_run_time_is_refused_with_the_reason() {
        // The host and its uplink both gone: the host is named.
        let no_host = RUNS
            .replace(
                "[[host]]\nname = \"ext\"\nuplink = \"up0\"\nipv4 = \"198.18.0.100/24\"\n",
                "",
            )
            .replace("[[uplink]]\nname = \"up0\"\ndevice = \"hvx0\"\n", "");
        let e = plan(&no_host).unwrap_err();
        assert!(e.contains("uplink up0: host ext is on its wire"), "{e}");
        // A new uplink with a host of its own.
        let hosted = format!("{RUNS}{UP2}\n[[host]]\nname = \"ext2\"\nuplink = \"up2\"\n");
        let e = plan(&hosted).unwrap_err();
        assert!(
            e.contains("uplink up2: host ext2 would be on its wire"),
            "{e}"
        );
        // EVPN, added.
        let evpn = format!(
            "{RUNS}{UP2}\n[uplink.vxlan]\nvni = 7\nlocal = \"198.18.60.1/24\"\nevpn = true\n"
        );
        let e = plan(&evpn).unwrap_err();
        assert!(e.contains("uplink up2: it has BGP EVPN"), "{e}");
        // A removed uplink's device taken by a new one in the same file.
        let e = plan(&format!("{}{}", without_up1(), UP2.replace("hvx2", "hvx1"))).unwrap_err();
        assert!(e.contains("device hvx1 is uplink up1's"), "{e}");
        for (from, to, why) in [
            (
                "queues = 2",
                "queues = 4",
                "changed beyond its port settings",
            ),
            (
                "device = \"hvx1\"",
                "device = \"hvx7\"",
                "changed beyond its port settings",
            ),
            (
                "queues = 2",
                "queues = 2\nlro = \"software\"",
                "changed beyond its port settings",
            ),
            (
                "queues = 2",
                "queues = 2\nmtu = 9000",
                "its tso, csum and mtu are set when it is added",
            ),
            (
                "queues = 2",
                "queues = 2\ntso = \"software\"",
                "its tso, csum and mtu",
            ),
        ] {
            let e = plan(&RUNS.replace(from, to)).unwrap_err();
            assert!(
                e.starts_with("uplink up1: ") && e.contains(why),
                "{to}: {e}"
            );
        }
    }
}
