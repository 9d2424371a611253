//! The operator views, after vSphere's: `net-stats -l` (ports), the
//! `vsish` tree of per-port client stats, rx summary and rx queue status,
//! `ethtool -g/-k`-style port settings, and the FDB. Each is plain JSON;
//! the CLI prints it as a table or, with `--json`, as is.

use crate::proto::CtlError;
use hvnet_datapath::{Port, Switch};
use serde_json::{json, Value};

/// `hvnet ports`: one row per port.
pub fn ports(sw: &Switch, switch_name: &str) -> Value {
    Value::Array(
        sw.ports()
            .iter()
            .map(|p| {
                json!({
                    "port": p.id,
                    "name": p.name,
                    "type": p.dev.kind(),
                    "switch": switch_name,
                    "mac": if p.is_uplink() { "-".to_string() } else { p.mac.to_string() },
                    "client": if p.is_uplink() { p.dev.name() } else { &p.name },
                    "device": p.dev.name(),
                    "queues": p.dev.num_queues(),
                    "vlan": p.vlan,
                    "link": p.state().name(),
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
                })
            })
            .collect(),
    )
}

fn client_stats(p: &Port) -> Value {
    let i = p.ingress_stats();
    let e = p.egress_stats();
    json!({
        "pkts_tx_ok": i.forwarded,
        "bytes_tx_ok": i.bytes,
        "dropped_tx": i.drops(),
        "pkts_tx_gso": i.gso_frames,
        "pkts_rx_ok": e.delivered_frames,
        "bytes_rx_ok": e.delivered_bytes,
        "dropped_rx": e.drops(),
        "pkts_rx_lro": e.lro_frames,
        "bytes_rx_lro": e.lro_bytes,
    })
}

fn rx_summary(p: &Port) -> Value {
    let e = p.egress_stats();
    let mut v = serde_json::to_value(e).expect("counters serialize");
    v["in_flight"] = json!(e.in_flight());
    v["avg_frame_bytes"] = json!(e
        .delivered_bytes
        .checked_div(e.delivered_frames)
        .unwrap_or(0));
    v["ring_memory_bytes"] = json!(p.ring_memory());
    v
}

fn rx_queue_status(p: &Port, q: usize) -> Option<Value> {
    let rx = p.rxq.get(q)?;
    let mut v = json!({
        "rings": rx.rings.status(),
        "counters": rx.counters(),
    });
    // A real guest's receive virtqueue is the last ring a frame meets.
    if let Some((rx, _)) = p.dev.status().virtqueue_sizes(q) {
        v["virtqueue_size"] = json!(rx);
    }
    Some(v)
}

/// Every frame accounted for: the identities of `counters.rs`.
pub fn accounting(p: &Port) -> Value {
    let i = p.ingress_stats();
    let e = p.egress_stats();
    json!({
        "ingress": { "frames_in": i.frames, "forwarded": i.forwarded, "drops": i.drops(),
                     "tunnel_control": i.tunnel_control, "arp_suppressed": i.arp_suppressed,
                     "nd_suppressed": i.nd_suppressed,
                     "lro_merged": i.lro_merged(),
                     "balanced": i.balanced() },
        // In flight is what the identity leaves: never negative (nothing
        // delivered or dropped that was not offered), 0 once idle.
        "egress": { "offered": e.offered, "delivered_source_frames": e.delivered_source_frames,
                    "drops": e.drops(), "in_flight": e.in_flight(),
                    "balanced": e.in_flight() >= 0 },
    })
}

/// The settings of a port (`ethtool -g` and `-k` in one).
pub fn port_settings(sw: &Switch, p: &Port) -> Value {
    let s = p.settings();
    let mut v = serde_json::to_value(&s).expect("settings serialize");
    v["queues"] = json!(p.dev.num_queues());
    v["ring_max"] = json!(hvnet_datapath::ring::MAX_RING);
    v["ring_memory_bytes"] = json!(p.ring_memory());
    v["link"] = json!(p.state().name());
    v["buffers"] = json!(p.buffers());
    v["thread_failures"] = json!(p.thread_failures.load(std::sync::atomic::Ordering::Relaxed));
    v["threads"] = json!(sw.port_threads(p));
    if let Some(vu) = p.dev.status().vhost_user {
        v["vhost_user"] = serde_json::to_value(vu).expect("status serializes");
        // What the datapath applies: LRO and checksum offload only where
        // the guest's driver accepted them.
        let e = p.effective_settings();
        v["effective"] = json!({"lro": e.lro, "csum": e.csum});
    }
    v
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
            Ok(json!([
                &summary[..],
                &["rxqueues/", "txqueues/", "filters"],
                tunnel
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
        ["uplinks", p, "vxlan"] => {
            let port = uplink(p)?;
            let v = sw.endpoint(port.id).ok_or_else(|| {
                CtlError::refused(format!("uplink {p} is not a VXLAN tunnel endpoint"))
            })?;
            Ok(serde_json::to_value(v.view(std::time::Instant::now())).expect("serialize"))
        }
        ["ports" | "uplinks", p, "client_stats"] => Ok(client_stats(&*port(p)?)),
        ["ports" | "uplinks", p, "tx_summary"] => {
            Ok(serde_json::to_value(port(p)?.ingress_stats()).expect("serialize"))
        }
        ["ports" | "uplinks", p, "rx_summary"] => Ok(rx_summary(&*port(p)?)),
        ["ports" | "uplinks", p, "accounting"] => Ok(accounting(&*port(p)?)),
        ["ports", p, "rxqueues"] | ["uplinks", p, "txqueues"] => Ok(queues(port(p)?.rxq.len())),
        ["uplinks", p, "rxqueues"] => Ok(queues(uplink(p)?.ingress.len())),
        ["ports", p, "rxqueues", q] | ["uplinks", p, "rxqueues" | "txqueues", q] => {
            queue(q, port(p)?.rxq.len())?;
            Ok(json!(["status"]))
        }
        ["ports", p, "rxqueues", q, "status"] | ["uplinks", p, "txqueues", q, "status"] => {
            let p = port(p)?;
            rx_queue_status(&p, queue(q, p.rxq.len())?)
                .ok_or_else(|| CtlError::not_found("queue", q, Vec::new()))
        }
        ["uplinks", p, "rxqueues", q, "status"] => {
            let p = uplink(p)?;
            let q = queue(q, p.ingress.len())?;
            // How the queue is read: frames per system call, at most.
            let batch = p.dev.status().frames_per_read.unwrap_or(1);
            Ok(json!({ "frames_per_read": batch, "counters": p.ingress[q].snapshot() }))
        }
        _ => Err(CtlError::NotFound {
            what: "stats node".into(),
            name: path.into(),
            choices: vec!["/ports".into(), "/uplinks".into()],
        }),
    }
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
            Some(json!({
                "name": u.name,
                "vxlan": vtep.view(now),
                "shadow": {"bridge": n.bridge, "vxlan": n.vxlan, "port": n.port},
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
        Err(e) => v["bgp_error"] = json!(e),
    }
    v
}
