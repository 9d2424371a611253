//! `hvnet port P set KEY=VALUE…` and the store of run-time changes, as
//! Open vSwitch keeps `ovs-vsctl set` in its database: each change is
//! written to the topology's state (`State::port_changes`) with its
//! value, so a restarted daemon makes the port as it ran (whoever
//! declared it: the file, libvirt, the CNI plugin, `hvnet vm add`), and
//! `hvnet up FILE` sets a port the file owns back to the file's
//! settings. `hvnet port P` says where each setting comes from.

use super::merge::{read_changes, setting_error, VLAN};
use crate::ctl::Ctl;
use crate::proto::CtlError;
use crate::rtnl::{LinkChange, Rtnl};
use crate::state::{read_state, state_dir, write_state};
use crate::topology::{Topology, Vm};
use hvnet_datapath::PortSettings;
use serde_json::{json, Map, Value};

/// The run-time change `hvnet up FILE` keeps on a port the file owns:
/// its MTU (the guest's link's too, set inside it).
const KEPT_BY_APPLY: &str = "mtu";

/// Whose VM `vm` is when it is not a topology's: a CNI plugin's
/// container's (`cni`) or a libvirt guest's (`libvirt`, its socket in the
/// `[libvirt]` directory). `hvnet up FILE` leaves such ports alone.
pub(crate) fn declared_elsewhere(topo: &Topology, vm: &Vm) -> Option<&'static str> {
    if vm.container.is_some() {
        Some("cni")
    } else if topo.libvirt.as_ref().is_some_and(|lv| {
        vm.vhost
            .path
            .as_deref()
            .is_some_and(|p| crate::libvirt::in_directory(lv, p))
    }) {
        Some("libvirt")
    } else {
        None
    }
}

/// Who declared a port: what a setting that was not changed at run time
/// comes from, when it is not hvnet's default.
pub(crate) fn declared_by(topo: &Topology, added: &[String], name: &str) -> &'static str {
    let Some(vm) = topo.vms.iter().find(|v| v.name == name) else {
        return "file";
    };
    if let Some(who) = declared_elsewhere(topo, vm) {
        who
    } else if added
        .iter()
        .any(|t| topo.parse_vm_name(t).as_deref() == Some(name))
    {
        "vm add"
    } else {
        "file"
    }
}

/// Where each of a port's settings (as `view` shows them) comes from:
/// `run-time` (`hvnet port P set`, kept in the state), its declarer
/// ([`declared_by`]) where it differs from hvnet's default, else
/// `default`.
pub(crate) fn sources(topo: &Topology, name: &str, view: &Value) -> Value {
    let state = read_state(&state_dir(&topo.name)).unwrap_or_default();
    let changed = state.port_changes.get(name);
    let declarer = declared_by(topo, &state.added_vms, name);
    let mut defaults = serde_json::to_value(PortSettings::default()).expect("settings serialize");
    defaults[VLAN] = json!(0);
    let mut out = Map::new();
    for (k, d) in defaults.as_object().into_iter().flatten() {
        let src = if changed.is_some_and(|c| c.contains_key(k)) {
            "run-time"
        } else if view.get(k) != Some(d) {
            declarer
        } else {
            "default"
        };
        out.insert(k.clone(), json!(src));
    }
    Value::Object(out)
}

/// `hvnet port NAME set`: checks every change before any applies, applies
/// them (the guest's link's MTU, the access VLAN and the rest), records
/// them in the state, and answers the port's settings as they are now.
pub(crate) fn set(cx: &Ctl, name: &str, changes: Value) -> Result<Value, CtlError> {
    let _one = cx.changes.lock().expect("changes lock");
    let topo = cx.topology();
    let sw = &cx.sw;
    let p = sw
        .port(name)
        .ok_or_else(|| CtlError::not_found("port", name, crate::views::port_names(sw, false)))?;
    let tunnel_of_vlans = topo
        .uplinks
        .iter()
        .any(|u| u.name == name && u.vxlan.as_ref().is_some_and(|v| !v.vlans.is_empty()));
    let vlan_keys = ["vlan_mode", "vlans", "native_vlan"];
    if tunnel_of_vlans && vlan_keys.iter().any(|k| changes.get(k).is_some()) {
        return Err(CtlError::refused(format!(
            "uplink {name}: its VLANs are its tunnel's ([uplink.vxlan] vlans, each with its VNI): change them in the topology file"
        )));
    }
    let old = p.settings();
    let (new, vlan) = read_changes(&old, changes.clone())?;
    let vm = topo.vms.iter().find(|v| v.name == name);
    if vlan.is_some() && vm.is_none() {
        return Err(CtlError::refused(format!(
            "uplink {name}: its VLAN is set in its topology file (a VM's access VLAN changes with `hvnet port VM set vlan=N`)"
        )));
    }
    // Checked before anything changes: a refused value leaves the guest's
    // MTU as it was.
    sw.check_settings(name, &new).map_err(setting_error)?;
    let mtu_changes = new.mtu != old.mtu;
    if mtu_changes && p.dev.other_side_sets_mtu() {
        return Err(CtlError::refused("a real guest sets its own MTU (ip link set eth0 mtu … inside it); its port's mtu is what the switch takes"));
    }
    if mtu_changes && !p.is_uplink() && cx.unprivileged {
        return Err(CtlError::refused(format!("the daemon gave up root after bring-up (--drop-privileges): {name}'s MTU is set in its topology file, not at run time")));
    }
    // A daemon that gave up root cannot write the state (root's): its
    // changes hold until it stops, and say so.
    let dir = state_dir(&topo.name);
    let mut state = match (cx.unprivileged, read_state(&dir)) {
        (true, _) => None,
        (false, Some(s)) => Some(s),
        (false, None) => return Err(CtlError::failed("the topology's state is gone")),
    };
    if mtu_changes && !p.is_uplink() {
        let change = LinkChange {
            mtu: Some(new.mtu),
            ..Default::default()
        };
        let (path, ifname) = match vm {
            Some(v) => (topo.netns_path(v), v.ifname().to_string()),
            None => (hvnet_sys::netns::path(&topo.netns_of(name)), "eth0".into()),
        };
        let handle = std::fs::File::open(&path).map_err(|e| {
            CtlError::failed(format!("open network namespace {}: {e}", path.display()))
        })?;
        Rtnl::in_netns_of(&handle)
            .and_then(|mut rtnl| rtnl.set_link(&ifname, &change))
            .map_err(CtlError::failed)?;
    }
    sw.set_port(name, new.clone()).map_err(setting_error)?;
    let mut next = Topology::clone(&topo);
    if let Some(v) = next.vms.iter_mut().find(|v| v.name == name) {
        v.settings = new.clone();
    }
    if let (Some(to), Some(vm)) = (vlan, vm) {
        move_vlan(cx, &topo, vm, to)?;
        if let Some(v) = next.vms.iter_mut().find(|v| v.name == name) {
            v.vlan = to;
        }
    }
    if let Some(u) = next.uplinks.iter_mut().find(|u| u.name == name) {
        u.settings = new.clone();
    }
    // What changed, in the settings' own form (a rate turned off took its
    // burst with it: both recorded).
    let (was, now) = (json!(old), json!(new));
    if let Some(state) = state.as_mut() {
        let record = state.port_changes.entry(name.to_string()).or_default();
        for (k, v) in now.as_object().into_iter().flatten() {
            if changes.get(k).is_some() || was.get(k) != Some(v) {
                record.insert(k.clone(), v.clone());
            }
        }
        if let Some(to) = vlan {
            record.insert(VLAN.into(), json!(to));
        }
        write_state(&dir, state).map_err(CtlError::failed)?;
    } else {
        tracing::warn!(port = %name, "the daemon gave up root (--drop-privileges): this change is not kept in the state, and a restarted daemon makes the port as declared");
    }
    cx.set_topology(next);
    tracing::info!(port = %name, from = %was, to = %json!(p.settings()), vlan = ?vlan, "settings changed");
    let mut view = crate::views::port_settings(sw, &p);
    view["kept"] = json!(state.is_some());
    Ok(view)
}

/// Moves VM `vm`'s port to access VLAN `to`: the switch first, then what
/// follows its VLAN — the EVPN segments that advertise it and the
/// NetQueue filters of the uplinks that carry it.
pub(super) fn move_vlan(cx: &Ctl, topo: &Topology, vm: &Vm, to: u16) -> Result<(), CtlError> {
    if vm.vlan == to {
        return Ok(());
    }
    cx.sw.set_access_vlan(&vm.name, to).map_err(setting_error)?;
    let moved = Vm {
        vlan: to,
        ..vm.clone()
    };
    let port = cx.sw.port(&vm.name).map(|p| p.id).unwrap_or_default();
    super::advertise(cx, vm, port, false);
    super::advertise(cx, &moved, port, true);
    super::netqueue_filters(cx, topo, vm, false);
    super::netqueue_filters(cx, topo, &moved, true);
    Ok(())
}

/// A port's run-time changes that `hvnet up FILE` keeps for a port the
/// file owns: only its MTU ([`KEPT_BY_APPLY`]).
pub(crate) fn kept_by_apply(c: &mut Map<String, Value>) {
    c.retain(|k, _| k == KEPT_BY_APPLY);
}

/// Whether `hvnet up FILE` sets back a run-time change of a port the file
/// owns (one of anything but its MTU).
pub(crate) fn reverted_by_apply(c: &Map<String, Value>) -> bool {
    c.keys().any(|k| k != KEPT_BY_APPLY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{overlay, PortChanges};

    #[test]
    fn run_time_changes_are_made_again_on_the_ports_they_were_made_to() {
        let mut t = crate::topology::parse(
            "name = \"t\"\n[[vm]]\nname = \"a\"\ntx_rate = \"500mbit\"\n[[vm]]\nname = \"b\"\n",
        )
        .unwrap();
        let mut changes = PortChanges::new();
        let mut a = Map::new();
        a.insert("rx_rate".into(), json!(300_000_000u64));
        a.insert(VLAN.into(), json!(7));
        changes.insert("a".into(), a);
        let mut gone = Map::new();
        gone.insert("shares".into(), json!(5));
        changes.insert("gone".into(), gone);
        overlay(&mut t, &changes).unwrap();
        let a = &t.vms[0];
        assert_eq!(a.vlan, 7);
        assert_eq!(a.settings.rx_rate.map(|r| r.0), Some(300_000_000));
        assert_eq!(
            a.settings.tx_rate.map(|r| r.0),
            Some(500_000_000),
            "what the file says is kept where no change was made"
        );
        assert_eq!(t.vms[1].settings, PortSettings::default());
        let mut c = changes["a"].clone();
        c.insert("mtu".into(), json!(9000));
        kept_by_apply(&mut c);
        assert_eq!(c.keys().collect::<Vec<_>>(), ["mtu"]);
    }
}
