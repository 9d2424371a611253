//! A running switch changed without a restart, as `ovs-vsctl` changes
//! Open vSwitch's: VMs added and removed (`hvnet vm add|del`, `vms`),
//! a port's settings set (`hvnet port P set`, `port_set`), and the
//! topology file applied again (`hvnet up FILE`, `apply`): its VMs and
//! uplinks (`uplinks`) added and removed, its settings and policy
//! changed. Each change is written to the topology's state, so that a
//! restarted daemon re-attaches to what runs and `hvnet down` removes it.

use crate::ctl::Ctl;
use crate::proto::CtlError;
use crate::provision;
use crate::state::{read_state, state_dir, write_state, State};
use crate::topology::{Topology, Vm};
use hvnet_datapath::PortSettings;
use serde_json::{json, Value};
use std::sync::Arc;
use uplinks::{add_uplink, del_uplink, plan_uplinks};

pub mod merge;
pub(crate) mod port_set;
mod uplinks;
mod vms;

use vms::{add_port, advertise, del_port, l3_vnis, netqueue_filters, start_guest};
pub(crate) use vms::{add_vm, del_vm, pending_dels};

/// `hvnet up FILE` on a running topology: what runs is made what the file
/// says, as `kubectl apply` or `netplan apply` do — its new VMs and
/// uplinks added, the VMs and uplinks it no longer has removed, changed
/// port settings applied; what it keeps as it is untouched. Everything is
/// checked before anything changes: only `[[vm]]` and `[[uplink]]` tables
/// may differ, a kept VM or uplink only in what `hvnet port NAME set`
/// changes (and a tunnel in its segments, `[uplink.vxlan] vlans`), and an
/// uplink comes or goes only where no `[[host]]` is on its wire and it has
/// no BGP EVPN (`plan_uplinks`).
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
        .map_err(|e| CtlError::refused(format!("line {}: {e}", e.line)))?;
    let dir = state_dir(&now.name);
    let mut state =
        read_state(&dir).ok_or_else(|| CtlError::failed("the topology's state is gone"))?;
    // What the file changes is told from what was declared; what runs
    // may have run-time changes besides (`hvnet port P set`).
    let declared = state
        .declared_topology()
        .map_err(|e| CtlError::failed(format!("the topology as declared: {e}")))?;
    let uplinks = plan_uplinks(&declared, &file).map_err(|e| CtlError::refused(e.to_string()))?;
    // An EVPN segment's shadow devices are made and deleted with it.
    if cx.unprivileged {
        if let Some((name, _)) = uplinks.segments.iter().find(|(n, _)| has_evpn(&now, n)) {
            return Err(CtlError::refused(format!(
                "uplink {name}: its EVPN segments' shadow devices are made and deleted with them, which a daemon that gave up root (--drop-privileges) cannot do (`hvnet down {}` and up again)",
                now.name
            )));
        }
    }
    // An ERSPAN socket that cannot be opened (a daemon without root)
    // refuses the file before anything changes.
    let erspan = |e: std::io::Error| {
        CtlError::failed(format!("[[mirror]]: cannot open an ERSPAN socket: {e}"))
    };
    for m in &file.mirrors {
        if let hvnet_datapath::mirror::Output::Erspan(c) = &m.output {
            hvnet_datapath::mirror::ErspanSender::open(c.clone()).map_err(erspan)?;
        }
    }
    let sections = [
        ("name", now.name == file.name),
        ("[[host]]", now.hosts == file.hosts),
        ("[frr]", now.frr == file.frr),
        ("netns", now.netns == file.netns),
        ("[switch]", now.switch == file.switch),
        ("[libvirt]", now.libvirt == file.libvirt),
        ("fdb_aging_secs", now.fdb_aging_secs == file.fdb_aging_secs),
        // A tenant's L3 VNI is FRR's and the shadow's, made at `up`.
        ("a [[tenant]]'s l3_vni", l3_vnis(&now) == l3_vnis(&file)),
    ];
    if let Some((what, _)) = sections.iter().find(|(_, same)| !same) {
        return Err(CtlError::refused(format!(
            "{what} differs from what runs: while the topology runs only its [[vm]] and [[uplink]] tables may change (`hvnet down {}` first)",
            now.name
        )));
    }
    let mut changed = Vec::new();
    // Ports the file owns that were changed at run time: the file is the
    // truth, so they are set back to its settings, and said (their MTU,
    // which is the guest's link's too, stays as set).
    let mut reverted = Vec::new();
    let runtime = |name: &str| {
        state
            .port_changes
            .get(name)
            .is_some_and(port_set::reverted_by_apply)
    };
    let mut vlan_moves = Vec::new();
    for v in file.vms.iter() {
        let Some(r) = now.vms.iter().find(|r| r.name == v.name) else {
            continue;
        };
        let d = declared.vms.iter().find(|d| d.name == v.name).unwrap_or(r);
        let mut as_running = v.clone();
        as_running.settings = r.settings.clone();
        as_running.security_groups = r.security_groups.clone();
        as_running.vlan = r.vlan;
        if as_running != *r {
            let why = if v.mac != r.mac {
                format!(" (its MAC would become {}, its place in the file having moved: give it mac = \"{}\")", v.mac, r.mac)
            } else {
                String::new()
            };
            return Err(CtlError::refused(format!(
                "vm {}: changed beyond its port settings and VLAN (kind, addresses, MAC, queues or socket){why}; `hvnet vm del {}` and add it again",
                v.name, v.name
            )));
        }
        if v.settings.mtu != d.settings.mtu {
            return Err(CtlError::refused(format!(
                "vm {}: its mtu changes with `hvnet port {} set mtu={}`",
                v.name, v.name, v.settings.mtu
            )));
        }
        if runtime(&v.name) {
            reverted.push(v.name.clone());
        }
        let target = PortSettings {
            mtu: r.settings.mtu,
            ..v.settings.clone()
        };
        if target != r.settings {
            cx.sw
                .check_settings(&v.name, &target)
                .map_err(|e| CtlError::refused(format!("vm {}: {e}", v.name)))?;
            changed.push((v.name.clone(), target));
        }
        if v.vlan != r.vlan {
            vlan_moves.push((r.clone(), v.vlan));
        }
    }
    for u in &file.uplinks {
        let Some(r) = now.uplinks.iter().find(|r| r.name == u.name) else {
            continue;
        };
        if runtime(&u.name) {
            reverted.push(u.name.clone());
        }
        if r.settings != u.settings && !uplinks.changed.iter().any(|(n, _)| *n == u.name) {
            changed.push((u.name.clone(), u.settings.clone()));
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
        if let Some(d) = u
            .devices()
            .into_iter()
            .find(|d| hvnet_sys::packet::ifindex(d).is_none())
        {
            return Err(CtlError::refused(format!(
                "uplink {}: no network interface named {d} here",
                u.name
            )));
        }
        let spec =
            provision::open_uplink(&file, u).map_err(|e| CtlError::refused(e.to_string()))?;
        opened.push((i, spec));
    }
    // libvirt's guests' ports are libvirt's, and containers' ports their
    // CNI plugin's, not the file's: kept.
    let libvirts = |v: &Vm| port_set::declared_elsewhere(&now, v).is_some();
    let kept: Vec<Vm> = now
        .vms
        .iter()
        .filter(|r| libvirts(r) && !file.vms.iter().any(|v| v.name == r.name))
        .cloned()
        .collect();
    // ... and nothing of the file may take what they have.
    for v in &file.vms {
        if let Some(k) = kept.iter().find(|k| {
            k.name == v.name
                || k.mac == v.mac
                || (k.vhost.path.is_some() && k.vhost.path == v.vhost.path)
        }) {
            return Err(CtlError::refused(format!(
                "vm {}: its name, MAC or socket is port {}'s, libvirt's guest's or a container's (`hvnet ports`)",
                v.name, k.name
            )));
        }
    }
    let mut removed = Vec::new();
    let mut running = Topology::clone(&now);
    while let Some(i) = running
        .vms
        .iter()
        .position(|r| !file.vms.iter().any(|v| v.name == r.name) && !libvirts(r))
    {
        del_port(cx, &running, i, &mut state)?;
        removed.push(running.vms.remove(i).name);
    }
    for name in &uplinks.removed {
        del_uplink(cx, name)?;
    }
    // Segments before the VMs the file adds: a VM of a new segment's VLAN
    // joins what the segment advertises.
    let segments = set_segments(cx, (&now, &file), &uplinks.segments, &mut state)?;
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
    for (vm, to) in &vlan_moves {
        port_set::move_vlan(cx, &now, vm, *to)?;
    }
    // The run-time changes of the ports the file owns are dropped (but
    // their MTU's); libvirt's and containers' ports keep theirs.
    state.port_changes.retain(|name, c| {
        if kept.iter().any(|k| k.name == *name) {
            return true;
        }
        let owned = file.vms.iter().any(|v| v.name == *name)
            || file.uplinks.iter().any(|u| u.name == *name);
        port_set::kept_by_apply(c);
        owned && !c.is_empty()
    });
    state.topology_text = text.to_string();
    state.added_vms.retain(|t| {
        kept.iter()
            .any(|k| now.parse_vm_name(t).as_deref() == Some(&k.name))
    });
    state.removed_vms.clear();
    write_state(&dir, &state).map_err(CtlError::failed)?;
    let policy = policy_changes(&now, &file);
    let mut next = file.clone();
    next.vms.extend(kept);
    crate::state::overlay(&mut next, &state.port_changes).map_err(CtlError::failed)?;
    cx.sw.set_mirrors(file.mirrors.clone()).map_err(erspan)?;
    if let Err(e) = hvnet_datapath::ipfix::set(&cx.sw, file.ipfix.clone()) {
        tracing::warn!("[ipfix]: cannot open the exporter's socket: {e}");
    }
    hvnet_datapath::route::set(&cx.sw, next.router_config());
    cx.set_topology(next);
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
        "reverted": reverted,
        "segments": segments,
        "policy": policy,
        "vms": file.vms.len(),
        "uplinks": file.uplinks.len(),
    }))
}

/// Changes the segments of the tunnels in `changes` (uplink, its VLANs
/// besides its own with their VNIs, as the file has them) from what runs
/// (`now`) to what the file says: the endpoint carries them from here on,
/// and an EVPN uplink's shadows and sync follow (FRR advertises a new
/// segment's VNI by itself, and withdraws a removed one's). What changed,
/// per uplink: the VNIs added and removed.
fn set_segments(
    cx: &Ctl,
    (now, file): (&Topology, &Topology),
    changes: &[(String, Vec<(u16, u32)>)],
    state: &mut State,
) -> Result<Vec<Value>, CtlError> {
    let dir = state_dir(&now.name);
    let mut done = Vec::new();
    for (name, vlans) in changes {
        let Some(port) = cx.sw.port(name) else {
            continue;
        };
        let change = cx.sw.set_tunnel_vlans(port.id, vlans);
        if has_evpn(now, name) {
            let mut evpn = cx.evpn.lock().expect("evpn lock");
            for &(_, vni) in &change.removed {
                crate::evpn::remove_segment(name, vni, &mut evpn, state);
            }
            for &s in &change.added {
                crate::evpn::add_segment(&cx.sw, file, name, s, &mut evpn, &dir, state)
                    .map_err(|e| CtlError::failed(format!("uplink {name}: VNI {}: {e}", s.1)))?;
            }
        }
        let vnis = |s: &[(u16, u32)]| s.iter().map(|&(_, vni)| vni).collect::<Vec<_>>();
        done.push(
            json!({"uplink": name, "added": vnis(&change.added), "removed": vnis(&change.removed)}),
        );
    }
    Ok(done)
}

/// True if uplink `name` of `t` has BGP EVPN.
fn has_evpn(t: &Topology, name: &str) -> bool {
    t.uplinks
        .iter()
        .any(|u| u.name == name && u.vxlan.as_ref().is_some_and(|v| v.evpn))
}

/// What of the policy applying `file` to what runs (`now`) changes: the
/// security groups added, removed or with other rules (by name), the
/// kept VMs whose list of groups changes, and whether the mirrors, the
/// flow export and the tenants' routing change.
fn policy_changes(now: &Topology, file: &Topology) -> Value {
    let named = |all: &[crate::topology::SecurityGroup], name: &str| {
        all.iter().find(|g| g.name == name).cloned()
    };
    let mut groups: Vec<&str> = file
        .security_groups
        .iter()
        .filter(|g| named(&now.security_groups, &g.name).as_ref() != Some(*g))
        .map(|g| g.name.as_str())
        .collect();
    groups.extend(
        now.security_groups
            .iter()
            .filter(|g| named(&file.security_groups, &g.name).is_none())
            .map(|g| g.name.as_str()),
    );
    let ports: Vec<&str> = file
        .vms
        .iter()
        .filter(|v| {
            now.vms
                .iter()
                .any(|r| r.name == v.name && r.security_groups != v.security_groups)
        })
        .map(|v| v.name.as_str())
        .collect();
    json!({
        "security_groups": groups,
        "ports_groups": ports,
        "mirrors": now.mirrors != file.mirrors,
        "ipfix": now.ipfix != file.ipfix,
        "tenants": now.tenants != file.tenants,
    })
}

impl Ctl {
    /// The topology as it runs now.
    pub(crate) fn topology(&self) -> Arc<Topology> {
        Arc::clone(&self.topo.lock().expect("topology lock"))
    }

    fn set_topology(&self, t: Topology) {
        // Security groups follow (a remote group's members too).
        self.sw.set_acl(t.acl_config());
        *self.topo.lock().expect("topology lock") = Arc::new(t);
    }
}
