//! The operator views, after vSphere's: `net-stats -l` (ports), the
//! `vsish` tree of per-port client stats, rx summary and rx queue status,
//! `ethtool -g/-k`-style port settings, and the FDB. Each is plain JSON;
//! the CLI prints it as a table or, with `--json`, as is.

use hvnet_datapath::{Port, Switch};
use serde_json::{json, Value};

/// `hvnet ports`: one row per port.
pub fn ports(sw: &Switch, switch_name: &str) -> Value {
    Value::Array(
        sw.ports
            .iter()
            .map(|p| {
                json!({
                    "port": p.id,
                    "name": p.name,
                    "type": "tap+vnet_hdr",
                    "switch": switch_name,
                    "mac": p.mac.to_string(),
                    "client": p.name,
                    "device": p.tap.name(),
                    "queues": p.tap.num_queues(),
                    "vlan": p.vlan,
                    "link": p.state().name(),
                })
            })
            .collect(),
    )
}

fn client_stats(p: &Port) -> Value {
    let i = p.ingress_stats();
    let e = p.egress_stats();
    json!({
        "pktsTxOK": i.forwarded,
        "bytesTxOK": i.bytes,
        "droppedTx": i.drops(),
        "pktsTxGSO": i.gso_frames,
        "pktsRxOK": e.delivered_frames,
        "bytesRxOK": e.delivered_bytes,
        "droppedRx": e.drops(),
        "pktsRxLRO": e.lro_frames,
        "bytesRxLRO": e.lro_bytes,
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
    Some(json!({
        "rings": rx.rings.status(),
        "counters": rx.counters(),
    }))
}

/// Every frame accounted for: the identities of `counters.rs`.
pub fn accounting(p: &Port) -> Value {
    let i = p.ingress_stats();
    let e = p.egress_stats();
    json!({
        "ingress": { "frames_in": i.frames, "forwarded": i.forwarded, "drops": i.drops(),
                     "balanced": i.frames == i.forwarded + i.drops() },
        "egress": { "offered": e.offered, "delivered_source_frames": e.delivered_source_frames,
                    "drops": e.drops(), "in_flight": e.in_flight() },
    })
}

/// The settings of a port (`ethtool -g` and `-k` in one).
pub fn port_settings(p: &Port) -> Value {
    let s = p.settings();
    let mut v = serde_json::to_value(&s).expect("settings serialize");
    v["queues"] = json!(p.tap.num_queues());
    v["ring_max"] = json!(hvnet_datapath::ring::MAX_RING);
    v["ring_memory_bytes"] = json!(p.ring_memory());
    v["link"] = json!(p.state().name());
    v["buffers"] = json!(p.buffers());
    v["thread_failures"] = json!(p.thread_failures.load(std::sync::atomic::Ordering::Relaxed));
    v["threads"] = json!(p.threads());
    v
}

/// `hvnet stats PATH`: a node of the tree
/// `/ports/<port>/{clientStats,txSummary,rxSummary,accounting,rxqueues/<n>/status}`;
/// an inner node lists its children.
pub fn stats(sw: &Switch, path: &str) -> Result<Value, String> {
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let port = |name: &str| {
        sw.port(name)
            .ok_or_else(|| format!("no port named {name:?}"))
    };
    match parts.as_slice() {
        [] => Ok(json!(["ports/"])),
        ["ports"] => Ok(Value::Array(
            sw.ports
                .iter()
                .map(|p| json!(format!("{}/", p.name)))
                .collect(),
        )),
        ["ports", p] => {
            port(p)?;
            Ok(json!([
                "clientStats",
                "txSummary",
                "rxSummary",
                "accounting",
                "rxqueues/"
            ]))
        }
        ["ports", p, "clientStats"] => Ok(client_stats(port(p)?)),
        ["ports", p, "txSummary"] => {
            Ok(serde_json::to_value(port(p)?.ingress_stats()).expect("serialize"))
        }
        ["ports", p, "rxSummary"] => Ok(rx_summary(port(p)?)),
        ["ports", p, "accounting"] => Ok(accounting(port(p)?)),
        ["ports", p, "rxqueues"] => Ok(Value::Array(
            (0..port(p)?.rxq.len())
                .map(|q| json!(format!("{q}/")))
                .collect(),
        )),
        ["ports", p, "rxqueues", q] => {
            let q: usize = q
                .parse()
                .map_err(|_| format!("{q:?} is not a queue number"))?;
            port(p)?
                .rxq
                .get(q)
                .ok_or_else(|| format!("no rx queue {q}"))?;
            Ok(json!(["status"]))
        }
        ["ports", p, "rxqueues", q, "status"] => {
            let q: usize = q
                .parse()
                .map_err(|_| format!("{q:?} is not a queue number"))?;
            rx_queue_status(port(p)?, q).ok_or_else(|| format!("no rx queue {q}"))
        }
        _ => Err(format!("no stats node {path:?}; try `hvnet stats /ports`")),
    }
}
