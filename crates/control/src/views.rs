//! The operator views, after vSphere's: `net-stats -l` (ports), the
//! `vsish` tree of per-port client stats, rx summary and rx queue status,
//! `ethtool -g/-k`-style port settings, and the FDB. Each is plain JSON;
//! the CLI prints it as a table or, with `--json`, as is. The nodes with
//! numbers metrics export (`client_stats`, `tx_summary`, `rx_summary`,
//! `accounting`, a queue's `status`) are typed structs first, their
//! levels [`Level`]s, which `metrics` walks as they are.

use crate::proto::CtlError;
use hvnet_datapath::counters::{EgressStats, IngressStats};
use hvnet_datapath::ring::RingStatus;
use hvnet_datapath::{Level, Port, Switch};
use serde::Serialize;
use serde_json::{json, Value};

/// `hvnet ports`: one row per port.
pub fn ports(sw: &Switch, switch_name: &str) -> Value {
    Value::Array(
        sw.ports()
            .iter()
            .map(|p| {
                let s = p.settings();
                json!({
                    "port": p.id,
                    "name": p.name,
                    "type": p.dev.kind(),
                    "switch": switch_name,
                    "mac": if p.is_uplink() { "-".to_string() } else { p.mac.to_string() },
                    "client": if p.is_uplink() { p.dev.name() } else { &p.name },
                    "device": p.dev.name(),
                    "queues": p.dev.num_queues(),
                    "vlan": p.vlan(),
                    "vlan_mode": s.vlan_mode,
                    "vlans": s.vlans,
                    "native_vlan": s.native_vlan,
                    "link": p.state().name(),
                    "external_ids": external_ids(p),
                })
            })
            .collect(),
    )
}

/// `hvnet top`'s snapshot: each port's counters both ways and the fill of
/// its receive rings, read at one moment.
pub fn counters(sw: &Switch) -> Value {
    Value::Array(
        sw.ports()
            .iter()
            .map(|p| {
                let rings: Vec<Value> = p.rxq.iter().map(|q| json!(q.rings.status())).collect();
                json!({
                    "name": p.name,
                    "kind": if p.is_uplink() { "uplink" } else { "vm" },
                    "type": p.dev.kind(),
                    "link": p.state().name(),
                    "queues": p.dev.num_queues(),
                    "from_port": p.ingress_stats(),
                    "to_port": p.egress_stats(),
                    "rings": rings,
                    // For the findings `hvnet top` marks (the settings
                    // they name).
                    "vlan": p.vlan(),
                    "settings": p.settings(),
                })
            })
            .collect(),
    )
}

/// `client_stats`: vSphere's client stats, the port's traffic as its VM
/// (or the wire) sees it: its transmits are what the switch read from it.
#[derive(Debug, Serialize)]
pub struct ClientStats {
    /// Frames read from the port and forwarded.
    pkts_tx_ok: u64,
    /// Their bytes.
    bytes_tx_ok: u64,
    /// Frames read from the port and dropped.
    dropped_tx: u64,
    /// Frames read that were GSO.
    pkts_tx_gso: u64,
    /// Frames delivered to the port.
    pkts_rx_ok: u64,
    /// Their bytes.
    bytes_rx_ok: u64,
    /// Frames offered to the port and dropped.
    dropped_rx: u64,
    /// Coalesced frames delivered.
    pkts_rx_lro: u64,
    /// Their bytes.
    bytes_rx_lro: u64,
}

/// A port's client stats.
pub fn client_stats(p: &Port) -> ClientStats {
    let i = p.ingress_stats();
    let e = p.egress_stats();
    ClientStats {
        pkts_tx_ok: i.forwarded,
        bytes_tx_ok: i.bytes,
        dropped_tx: i.drops(),
        pkts_tx_gso: i.gso_frames,
        pkts_rx_ok: e.delivered_frames,
        bytes_rx_ok: e.delivered_bytes,
        dropped_rx: e.drops(),
        pkts_rx_lro: e.lro_frames,
        bytes_rx_lro: e.lro_bytes,
    }
}

/// `tx_summary`: what entered the switch from the port, summed over its
/// queues.
pub fn tx_summary(p: &Port) -> IngressStats {
    p.ingress_stats()
}

/// A port's drops by named reason, those counted at all: of what it sent
/// into the switch (`from_port`) and of what was on its way to it
/// (`to_port`), as `tx_summary` and `rx_summary` count them.
pub fn drops_by_reason(p: &Port) -> Value {
    let named = |v: Value| -> Value {
        let m: serde_json::Map<String, Value> = v
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, n)| {
                let reason = k.strip_prefix("drop_")?;
                (n.as_u64().unwrap_or(0) > 0).then(|| (reason.to_string(), n.clone()))
            })
            .collect();
        Value::Object(m)
    };
    serde_json::json!({
        "from_port": named(value(tx_summary(p))),
        "to_port": named(value(rx_summary(p))),
    })
}

/// `rx_summary`: what the switch delivered to the port, summed over its
/// queues, with the levels read beside them.
#[derive(Debug, Serialize)]
pub struct RxSummary {
    /// The counters.
    #[serde(flatten)]
    counters: EgressStats,
    /// Frames offered but neither delivered nor dropped yet.
    in_flight: Level<i64>,
    /// Bytes per delivered frame, on average (0 before the first).
    avg_frame_bytes: Level<u64>,
    /// The memory the port's receive rings may hold.
    ring_memory_bytes: Level<usize>,
}

/// A port's rx summary.
pub fn rx_summary(p: &Port) -> RxSummary {
    let e = p.egress_stats();
    RxSummary {
        counters: e,
        in_flight: Level(e.in_flight()),
        avg_frame_bytes: Level(
            e.delivered_bytes
                .checked_div(e.delivered_frames)
                .unwrap_or(0),
        ),
        ring_memory_bytes: Level(p.ring_memory()),
    }
}

/// `rxqueues/N/status` of a VM (or `txqueues/N/status` of an uplink): one
/// queue the switch delivers to.
#[derive(Debug, Serialize)]
pub struct RxQueueStatus {
    /// Its rings' sizes and fill.
    rings: RingStatus,
    /// What the switch delivered to it.
    counters: EgressStats,
    /// A real guest's receive virtqueue: the last ring a frame meets.
    #[serde(skip_serializing_if = "Option::is_none")]
    virtqueue_size: Option<Level<u16>>,
}

/// The status of queue `q` the switch delivers to, if there is one.
pub fn rx_queue_status(p: &Port, q: usize) -> Option<RxQueueStatus> {
    let rx = p.rxq.get(q)?;
    Some(RxQueueStatus {
        rings: rx.rings.status(),
        counters: rx.counters(),
        virtqueue_size: p.dev.status().virtqueue_sizes(q).map(|(rx, _)| Level(rx)),
    })
}

/// `rxqueues/N/status` of an uplink: one queue it receives from the wire.
#[derive(Debug, Serialize)]
pub struct UplinkRxQueueStatus {
    /// How the queue is read: frames per system call, at most.
    frames_per_read: Level<usize>,
    /// What it read.
    counters: IngressStats,
}

/// The status of queue `q` an uplink receives on, if there is one.
pub fn uplink_rx_queue_status(p: &Port, q: usize) -> Option<UplinkRxQueueStatus> {
    Some(UplinkRxQueueStatus {
        frames_per_read: Level(p.dev.status().frames_per_read.unwrap_or(1)),
        counters: p.ingress.get(q)?.snapshot(),
    })
}

/// `accounting`: every frame accounted for, the identities of
/// `counters.rs`.
#[derive(Debug, Serialize)]
pub struct Accounting {
    /// Frames from the port.
    ingress: IngressAccounting,
    /// Frames to the port.
    egress: EgressAccounting,
}

/// `frames_in = forwarded + drops + tunnel_control + arp_suppressed +
/// nd_suppressed + mcast_consumed + lro_merged`.
#[derive(Debug, Serialize)]
struct IngressAccounting {
    /// Frames read.
    frames_in: u64,
    /// Forwarded.
    forwarded: u64,
    /// Dropped.
    drops: u64,
    /// Consumed by a tunnel endpoint.
    tunnel_control: u64,
    /// Answered or taken by a tenant's gateway.
    gateway_answered: u64,
    /// ARP requests the switch answered.
    arp_suppressed: u64,
    /// Neighbor solicitations the switch answered.
    nd_suppressed: u64,
    /// IGMP/MLD reports no other port needed (snooping).
    mcast_consumed: u64,
    /// Merged into another by software LRO.
    lro_merged: u64,
    /// The identity holds.
    balanced: Level<bool>,
}

/// `offered = delivered_source_frames + drops + in_flight`.
#[derive(Debug, Serialize)]
struct EgressAccounting {
    /// Frames offered.
    offered: u64,
    /// Offered frames delivered (alone, or inside a coalesced one).
    delivered_source_frames: u64,
    /// Dropped.
    drops: u64,
    /// What the identity leaves: never negative (nothing delivered or
    /// dropped that was not offered), 0 once idle.
    in_flight: Level<i64>,
    /// `in_flight` is not negative.
    balanced: Level<bool>,
}

/// A port's accounting.
pub fn accounting(p: &Port) -> Accounting {
    let i = p.ingress_stats();
    let e = p.egress_stats();
    Accounting {
        ingress: IngressAccounting {
            frames_in: i.frames,
            forwarded: i.forwarded,
            drops: i.drops(),
            tunnel_control: i.tunnel_control,
            gateway_answered: i.gateway_answered,
            arp_suppressed: i.arp_suppressed,
            nd_suppressed: i.nd_suppressed,
            mcast_consumed: i.mcast_consumed,
            lro_merged: i.lro_merged(),
            balanced: Level(i.balanced()),
        },
        egress: EgressAccounting {
            offered: e.offered,
            delivered_source_frames: e.delivered_source_frames,
            drops: e.drops(),
            in_flight: Level(e.in_flight()),
            balanced: Level(e.in_flight() >= 0),
        },
    }
}

/// A view's node as JSON.
fn value(v: impl Serialize) -> Value {
    serde_json::to_value(v).expect("views serialize")
}

/// The settings of a port (`ethtool -g` and `-k` in one).
pub fn port_settings(sw: &Switch, p: &Port) -> Value {
    let s = p.settings();
    let mut v = serde_json::to_value(&s).expect("settings serialize");
    // The access VLAN (fixed in the topology), beside the settings'
    // vlan_mode, vlans and native_vlan.
    v["vlan"] = json!(p.vlan());
    v["external_ids"] = external_ids(p);
    v["queues"] = json!(p.dev.num_queues());
    v["ring_max"] = json!(hvnet_datapath::ring::MAX_RING);
    v["ring_memory_bytes"] = json!(p.ring_memory());
    v["link"] = json!(p.state().name());
    v["buffers"] = json!(p.buffers());
    v["thread_failures"] = json!(p.thread_failures.load(std::sync::atomic::Ordering::Relaxed));
    v["threads"] = json!(sw.port_threads(p));
    // Live captures running on it (`hvnet capture`).
    v["captures"] = json!(p.taps.sessions());
    // The stages its frames pass, in order (a feature off at the port is
    // not among them).
    v["arcs"] = json!(p.arcs());
    // DHCP snooping's leases (docs/guide/guards.md): address, seconds left.
    let now = std::time::Instant::now();
    v["dhcp_leases"] = p
        .leases()
        .entries()
        .iter()
        .map(|l| json!({"address": l.ip, "secs_left": l.until.saturating_duration_since(now).as_secs()}))
        .collect();
    if let Some(vu) = p.dev.status().vhost_user {
        v["vhost_user"] = serde_json::to_value(vu).expect("status serializes");
        // What the datapath applies: LRO and checksum offload only where
        // the guest's driver accepted them.
        let e = p.effective_settings();
        v["effective"] = json!({"lro": e.lro, "csum": e.csum});
    }
    v
}

/// Who a port is for (a libvirt domain's name and UUID, its interface's
/// alias), as an object: `{}` where nobody said.
fn external_ids(p: &Port) -> Value {
    Value::Object(
        p.external_ids
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect(),
    )
}

/// The names of the switch's ports (or only its uplinks), for errors.
pub fn port_names(sw: &Switch, uplinks_only: bool) -> Vec<String> {
    sw.ports()
        .iter()
        .filter(|p| !uplinks_only || p.is_uplink())
        .map(|p| p.name.clone())
        .collect()
}

/// vsish's node names (`clientStats`, `txSummary`, `rxSummary`), taken as
/// hvnet's, so that a path typed from vSphere habit finds its node.
fn vsish_alias(part: &str) -> &str {
    match part {
        "clientStats" => "client_stats",
        "txSummary" => "tx_summary",
        "rxSummary" => "rx_summary",
        other => other,
    }
}

/// `hvnet stats PATH`: a node of the tree
/// `/ports/<port>/{client_stats,tx_summary,rx_summary,accounting,rxqueues/<n>/status}`
/// (every port, as seen from its device: a VM's rx queues are what the
/// switch delivers to it) and
/// `/uplinks/<uplink>/{client_stats,tx_summary,rx_summary,accounting,rxqueues/<n>/status,txqueues/<n>/status}`
/// (an uplink's rx queues are what it receives from the wire, its tx
/// queues what the switch sends out); an inner node lists its children.
pub fn stats(sw: &Switch, path: &str) -> Result<Value, CtlError> {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(vsish_alias)
        .collect();
    let port = |name: &str| {
        sw.port(name)
            .ok_or_else(|| CtlError::not_found("port", name, port_names(sw, false)))
    };
    let uplink = |name: &str| {
        sw.port(name)
            .filter(|p| p.is_uplink())
            .ok_or_else(|| CtlError::not_found("uplink", name, port_names(sw, true)))
    };
    let queue = |q: &str, n: usize| {
        q.parse::<usize>()
            .ok()
            .filter(|&q| q < n)
            .ok_or_else(|| CtlError::not_found("queue", q, (0..n).map(|q| q.to_string()).collect()))
    };
    let list = |names: Vec<String>| Value::Array(names.into_iter().map(Value::String).collect());
    let queues = |n: usize| list((0..n).map(|q| format!("{q}/")).collect());
    let summary = ["client_stats", "tx_summary", "rx_summary", "accounting"];
    match parts.as_slice() {
        [] => Ok(json!(["ports/", "uplinks/"])),
        ["ports"] => Ok(list(
            sw.ports().iter().map(|p| format!("{}/", p.name)).collect(),
        )),
        ["uplinks"] => Ok(list(
            sw.ports()
                .iter()
                .filter(|p| p.is_uplink())
                .map(|p| format!("{}/", p.name))
                .collect(),
        )),
        ["ports", p] => {
            port(p)?;
            Ok(json!([&summary[..], &["rxqueues/"]].concat()))
        }
        ["uplinks", p] => {
            let tunnel: &[&str] = if sw.endpoint(uplink(p)?.id).is_some() {
                &["vxlan"]
            } else {
                &[]
            };
            let team: &[&str] = if uplink(p)?.dev.status().team.is_some() {
                &["team"]
            } else {
                &[]
            };
            Ok(json!([
                &summary[..],
                &["rxqueues/", "txqueues/", "filters"],
                tunnel,
                team
            ]
            .concat()))
        }
        ["uplinks", p, "filters"] => {
            let port = uplink(p)?;
            Ok(match port.dev.filters() {
                Some(f) => json!({
                    "spread": "netqueue",
                    "default_queue": 0,
                    "tunnel": f.tunnel,
                    "filters": f.entries,
                }),
                None if port.dev.status().spread == Some("rss") => json!({
                    "spread": "rss",
                    "hash": "toeplitz",
                    "key": "microsoft default",
                    "indirection_entries": 128,
                    "inner": sw.endpoint(port.id).is_some(),
                    "filters": [],
                }),
                None => json!({"spread": "flow hash", "filters": []}),
            })
        }
        ["uplinks", p, "team"] => {
            let port = uplink(p)?;
            let t = port
                .dev
                .status()
                .team
                .ok_or_else(|| CtlError::refused(format!("uplink {p} is not a team")))?;
            Ok(serde_json::to_value(t).expect("serialize"))
        }
        ["uplinks", p, "vxlan"] => {
            let port = uplink(p)?;
            let v = sw.endpoint(port.id).ok_or_else(|| {
                CtlError::refused(format!("uplink {p} is not a VXLAN tunnel endpoint"))
            })?;
            Ok(serde_json::to_value(v.view(std::time::Instant::now())).expect("serialize"))
        }
        ["ports" | "uplinks", p, "client_stats"] => Ok(value(client_stats(&*port(p)?))),
        ["ports" | "uplinks", p, "tx_summary"] => Ok(value(tx_summary(&*port(p)?))),
        ["ports" | "uplinks", p, "rx_summary"] => Ok(value(rx_summary(&*port(p)?))),
        ["ports" | "uplinks", p, "accounting"] => Ok(value(accounting(&*port(p)?))),
        ["ports", p, "rxqueues"] | ["uplinks", p, "txqueues"] => Ok(queues(port(p)?.rxq.len())),
        ["uplinks", p, "rxqueues"] => Ok(queues(uplink(p)?.ingress.len())),
        ["ports", p, "rxqueues", q] | ["uplinks", p, "rxqueues" | "txqueues", q] => {
            queue(q, port(p)?.rxq.len())?;
            Ok(json!(["status"]))
        }
        ["ports", p, "rxqueues", q, "status"] | ["uplinks", p, "txqueues", q, "status"] => {
            let p = port(p)?;
            rx_queue_status(&p, queue(q, p.rxq.len())?)
                .map(value)
                .ok_or_else(|| CtlError::not_found("queue", q, Vec::new()))
        }
        ["uplinks", p, "rxqueues", q, "status"] => {
            let p = uplink(p)?;
            uplink_rx_queue_status(&p, queue(q, p.ingress.len())?)
                .map(value)
                .ok_or_else(|| CtlError::not_found("queue", q, Vec::new()))
        }
        _ => Err(CtlError::NotFound {
            what: "stats node".into(),
            name: path.into(),
            choices: vec!["/ports".into(), "/uplinks".into()],
        }),
    }
}

/// `hvnet team`: each team uplink's status (members, their state, the LACP
/// partner, failovers, drops), its placements named by the port whose
/// address they are.
pub fn teams(sw: &Switch) -> Value {
    let ports = sw.ports();
    let owner = |mac: &str| {
        ports
            .iter()
            .find(|p| !p.is_uplink() && p.mac.to_string() == mac)
            .map(|p| p.name.clone())
    };
    let teams: Vec<Value> = ports
        .iter()
        .filter(|p| p.is_uplink())
        .filter_map(|p| Some((p, p.dev.status().team?)))
        .map(|(p, t)| {
            let mut v = json!(t);
            for (i, pl) in t.placements.iter().enumerate() {
                v["placements"][i]["port"] = json!(owner(&pl.mac));
            }
            v["name"] = json!(p.name);
            v["link"] = json!(format!("{:?}", p.dev.link()).to_lowercase());
            v
        })
        .collect();
    json!({ "teams": teams })
}

/// `hvnet evpn`: each EVPN uplink's endpoint as the fabric made it, its
/// shadow's names, and BGP's sessions as FRR reports them (the topology's
/// own FRR run, else the host's).
pub fn evpn(sw: &Switch, topo: &crate::topology::Topology) -> Value {
    let now = std::time::Instant::now();
    let uplinks: Vec<Value> = topo
        .uplinks
        .iter()
        .filter_map(|u| u.vxlan.as_ref().filter(|v| v.evpn).map(|v| (u, v)))
        .filter_map(|(u, v)| {
            let port = sw.port(&u.name)?;
            let vtep = sw.endpoint(port.id)?;
            let n = crate::evpn::shadow_names(v.vni);
            let shadows: Vec<Value> = vtep
                .segments()
                .into_iter()
                .map(|(_, vni)| {
                    let n = crate::evpn::shadow_names(vni);
                    json!({"vni": vni, "bridge": n.bridge, "vxlan": n.vxlan, "port": n.port})
                })
                .collect();
            Some(json!({
                "name": u.name,
                "vxlan": vtep.view(now),
                "shadow": {"bridge": n.bridge, "vxlan": n.vxlan, "port": n.port},
                "shadows": shadows,
            }))
        })
        .collect();
    let run = topo
        .frr
        .is_some()
        .then(|| crate::evpn::FrrRun::of(&topo.name));
    let mut v = json!({"uplinks": uplinks});
    match crate::evpn::bgp_summary(run.as_ref()) {
        Ok(b) => v["bgp"] = b,
        Err(e) => v["bgp_error"] = json!(crate::error::chain(&e)),
    }
    v
}

/// `hvnet route [TENANT]`: each tenant's gateways, routes (connected and
/// static) and neighbours, and the router's counters; a tenant not
/// configured is refused with the ones that are.
pub fn route(sw: &Switch, tenant: Option<&str>) -> Result<Value, crate::proto::CtlError> {
    let Some(r) = hvnet_datapath::route::current(sw) else {
        return Err(crate::proto::CtlError::refused(
            "no tenants: routing is off ([[tenant]] in the topology turns it on)",
        ));
    };
    if let Some(t) = tenant {
        if !r.config.tenants.iter().any(|x| x.name == t) {
            let names: Vec<&str> = r.config.tenants.iter().map(|x| x.name.as_str()).collect();
            return Err(crate::proto::CtlError::refused(format!(
                "no tenant {t:?}: the tenants are {}",
                names.join(", ")
            )));
        }
    }
    Ok(value(r.view(tenant)))
}

/// `hvnet mirror`: each mirror, what it selects, its output and counters.
pub fn mirrors(sw: &Switch) -> Value {
    use hvnet_datapath::mirror::Output;
    use std::sync::atomic::Ordering::Relaxed;
    let list = sw.mirrors.list();
    Value::Array(
        list.iter()
            .map(|m| {
                let s = &m.spec;
                let output = match &s.output {
                    Output::Port(p) => json!({"port": p}),
                    Output::Vlan(v) => json!({"vlan": v}),
                    Output::Erspan(e) => json!({"erspan": e}),
                };
                json!({
                    "name": s.name,
                    "select_all": s.select_all,
                    "select_src_port": s.select_src_port,
                    "select_dst_port": s.select_dst_port,
                    "select_vlan": s.select_vlan,
                    "output": output,
                    "copies": m.copies.load(Relaxed),
                    "bytes": m.bytes.load(Relaxed),
                    "lost": m.lost.load(Relaxed),
                })
            })
            .collect(),
    )
}

/// `hvnet ipfix`: the exporter's settings, flows cached and counters
/// (null when flow export is off).
pub fn ipfix(sw: &Switch) -> Value {
    let Some(ix) = hvnet_datapath::ipfix::current(sw) else {
        return Value::Null;
    };
    let c = &ix.config;
    json!({
        "targets": c.targets.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
        "sampling": c.sampling,
        "obs_domain_id": c.obs_domain_id,
        "cache_active_timeout": c.cache_active_timeout.as_secs(),
        "cache_idle_timeout": c.cache_idle_timeout.as_secs(),
        "cache_max_flows": c.cache_max_flows,
        "flows": ix.flows(),
        "counters": serde_json::to_value(&ix.counters).expect("counters serialize"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvnet_datapath::harness::Harness;
    use hvnet_datapath::{PortSettings, SwitchConfig};
    use hvnet_wire::MacAddr;

    #[test]
    fn typed_nodes_are_plain_json() {
        let h = Harness::new(
            &[(MacAddr([2, 0, 0, 0, 0, 1]), 1, PortSettings::default())],
            SwitchConfig::default(),
        );
        let rx = stats(&h.sw, "/ports/p0/rx_summary").unwrap();
        assert_eq!((&rx["in_flight"], &rx["offered"]), (&json!(0), &json!(0)));
        assert!(rx["ring_memory_bytes"].as_u64().unwrap() > 0, "{rx}");
        assert_eq!(rx["drop_ring1_full"], 0);
        let a = stats(&h.sw, "/ports/p0/accounting").unwrap();
        assert_eq!(a["ingress"]["balanced"], true);
        assert_eq!(a["egress"]["in_flight"], 0);
        let q = stats(&h.sw, "/ports/p0/rxqueues/0/status").unwrap();
        assert!(q["rings"]["ring1_size"].as_u64().unwrap() > 0, "{q}");
        assert_eq!(q["counters"]["delivered_frames"], 0);
        assert!(
            q.get("virtqueue_size").is_none(),
            "not a vhost-user port: {q}"
        );
        let c = stats(&h.sw, "/ports/p0/clientStats").unwrap();
        assert_eq!(c["pkts_tx_ok"], 0);
    }
}
