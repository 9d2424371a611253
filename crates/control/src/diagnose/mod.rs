//! `hvnet diagnose VM`: the studies' troubleshooting done by the switch.
//! Over a short window it reads the VM's port counters before and after,
//! its guest's CPU (%RDY and its quota), the frames it sends (through its
//! port's trace filter, which marks none), the MTUs of its VLAN and its
//! teams; [`findings`] turns that into causes, each with its evidence,
//! the setting behind it and the command that changes it.

pub mod findings;
pub mod guest_cpu;
pub mod observe;

use crate::proto::CtlError;
use crate::topology::{Topology, VmKind};
use crate::views;
use findings::{change, Degraded, PeerMtu, Window};
use hvnet_datapath::{Port, Switch};
use observe::Seen;
use serde_json::{json, Map, Value};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest window.
pub const MAX_WINDOW: Duration = Duration::from_secs(300);

/// A port's counters as `tx_summary` and `rx_summary` give them.
fn counters(p: &Port) -> (Map<String, Value>, Map<String, Value>) {
    let obj = |v: Value| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    (
        obj(serde_json::to_value(views::tx_summary(p)).unwrap_or_default()),
        obj(serde_json::to_value(views::rx_summary(p)).unwrap_or_default()),
    )
}

/// Diagnoses VM `vm` over `window`; `guest_pids` are a real guest's
/// processes (a namespace VM's are found in its namespace).
pub fn diagnose(
    sw: &Switch,
    topo: &Topology,
    vm: &str,
    guest_pids: Option<Vec<u32>>,
    window: Duration,
) -> Result<Value, CtlError> {
    let p = sw
        .port(vm)
        .ok_or_else(|| CtlError::not_found("VM", vm, views::port_names(sw, false)))?;
    if p.is_uplink() {
        return Err(CtlError::refused(format!(
            "{vm} is an uplink: diagnose takes a VM (hvnet team and hvnet port {vm} show an uplink)"
        )));
    }
    if window.is_zero() || window > MAX_WINDOW {
        return Err(CtlError::refused(format!(
            "window {} ms: more than 0, at most {} s",
            window.as_millis(),
            MAX_WINDOW.as_secs()
        )));
    }
    let spec = topo.vms.iter().find(|v| v.name == vm);
    let pids = || -> Vec<u32> {
        match (&guest_pids, spec) {
            (Some(p), _) => p.clone(),
            (None, Some(v)) if v.kind == VmKind::Netns => {
                guest_cpu::processes_in(&topo.netns_path(v))
            }
            _ => Vec::new(),
        }
    };
    let own: Vec<IpAddr> = spec
        .map(|v| {
            let mut a: Vec<IpAddr> = v.ipv4.map(|x| IpAddr::V4(x.0)).into_iter().collect();
            a.extend(v.ipv6.map(|x| IpAddr::V6(x.0)));
            a
        })
        .unwrap_or_default();
    let settings = p.settings();
    let own_ok = {
        let (own, addresses) = (own.clone(), settings.addresses.clone());
        move |ip: IpAddr| own.contains(&ip) || addresses.contains(ip)
    };
    let peers: Vec<Arc<Port>> = sw
        .ports()
        .iter()
        .filter(|q| q.id != p.id && !q.is_uplink() && q.vlan() == p.vlan())
        .cloned()
        .collect();
    let peer_mtu_drops = |q: &Port| {
        serde_json::to_value(views::rx_summary(q))
            .ok()
            .and_then(|v| v["drop_mtu_exceeded"].as_u64())
            .unwrap_or(0)
    };

    let start = Instant::now();
    let (tx0, rx0) = counters(&p);
    let peers0: Vec<u64> = peers.iter().map(|q| peer_mtu_drops(q)).collect();
    let cpu0 = guest_cpu::sample(&pids());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let observing = p.tracer.hold_for_reader().inspect(|_| {
        p.tracer
            .arm_matching(u32::MAX, Some(observe::observer(Arc::clone(&seen), own_ok)));
    });
    let observed = observing.is_some();
    while start.elapsed() < window && !sw.stopping() {
        std::thread::sleep((window - start.elapsed()).min(Duration::from_millis(50)));
    }
    drop(observing);
    let (tx1, rx1) = counters(&p);
    let cpu1 = guest_cpu::sample(&pids());
    let secs = start.elapsed().as_secs_f64();

    let peers_mtu = peers
        .iter()
        .zip(peers0)
        .map(|(q, before)| PeerMtu {
            name: q.name.clone(),
            mtu: q.settings().mtu,
            dropped: peer_mtu_drops(q).saturating_sub(before),
        })
        .collect();
    // Only a team that carries the VM's VLAN is on its way out.
    let degraded = sw
        .ports()
        .iter()
        .filter(|up| up.is_uplink() && up.settings().vlans_of(up.vlan()).carries(p.vlan()))
        .filter_map(|up| {
            let members = up.dev.status().team?.members;
            let down: Vec<String> = members
                .iter()
                .filter(|m| !m.carrier || m.state == "down")
                .map(|m| m.device.clone())
                .collect();
            (!down.is_empty()).then(|| Degraded {
                team: up.name.clone(),
                down,
                members: members.len(),
            })
        })
        .collect();
    let known = |ip: IpAddr| crate::trace_resolve::mac_of(topo, ip).is_some();
    let tunnels = topo
        .uplinks
        .iter()
        .filter_map(|u| Some((u.name.clone(), u.vxlan.as_ref()?.remotes.len())))
        .collect();
    let seen = seen.lock().expect("observer lock");
    let cpu = (cpu1.threads > 0).then_some((cpu0, cpu1));
    let w = Window {
        vm,
        secs,
        link: p.state().name(),
        settings: &settings,
        vlan: p.vlan(),
        from_port: change(&tx0, &tx1),
        to_port: change(&rx0, &rx1),
        cpu,
        seen: observed.then_some(&*seen),
        peers_mtu,
        degraded,
        known: &known,
        tunnels,
    };
    let found = findings::findings(&w);
    Ok(json!({
        "vm": vm,
        "window_secs": (secs * 100.0).round() / 100.0,
        "findings": found,
        "healthy": found.is_empty(),
        "figures": findings::figures(&w),
        "frames_looked_at": observed.then_some(seen.frames),
        "guest_threads": w.cpu.as_ref().map(|c| c.1.threads),
    }))
}
