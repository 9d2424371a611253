//! The opt-in Prometheus endpoint (`hvnet up --metrics ADDR`): every
//! counter of the stats tree, read from the same views as `hvnet stats`,
//! encoded by the Prometheus project's own Rust client
//! (`prometheus-client`) and served over HTTP by `tiny_http`.
//!
//! Names follow the tree: `/ports/P/tx_summary` key `frames` is
//! `hvnet_tx_summary_frames_total{port="P",kind="vm"}`, an uplink's the same
//! with `kind="uplink"`; every `drop_REASON` key of a node becomes one
//! family with a `reason` label (`hvnet_tx_summary_drops_total{reason=…}`);
//! queue nodes carry a `queue` label (`hvnet_rxqueue_…`, `hvnet_txqueue_…`,
//! and `hvnet_uplink_rxqueue_…` for what an uplink receives). Levels
//! (ring fill, sizes, frames in flight, memory) are gauges; the rest are
//! counters. `docs/metrics.md` lists them.

use crate::views;
use hvnet_datapath::Switch;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Where the endpoint listens unless told otherwise: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9100";

type Labels = Vec<(String, String)>;

/// One metric family: whether it is a level, and its samples.
#[derive(Default)]
struct Family {
    gauge: bool,
    help: String,
    samples: Vec<(Labels, f64)>,
}

/// Keys that are levels, not running totals (`key` is the flattened
/// path, e.g. `egress_in_flight`).
fn is_gauge(key: &str) -> bool {
    [
        "in_flight",
        "balanced",
        "lanes",
        "_memory_bytes",
        "_size",
        "_used",
        "_known",
        "_per_read",
    ]
    .iter()
    .any(|s| key.ends_with(s))
        || key.starts_with("avg_")
        || key.contains("_avg_")
}

fn snake(s: &str) -> String {
    let mut out = String::new();
    let mut prev_lower = false;
    for c in s.chars() {
        if c.is_ascii_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            prev_lower = false;
        } else {
            out.push(if c.is_ascii_alphanumeric() { c } else { '_' });
            prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        }
    }
    out
}

/// Adds every number (and boolean, as 0/1) under `v` to `families`,
/// nested keys joined with `_`.
fn flatten(
    families: &mut BTreeMap<String, Family>,
    node: &str,
    path: &str,
    prefix: &str,
    v: &Value,
    labels: &Labels,
) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                // A queue's counters are the queue's own.
                let p = if k == "counters" {
                    prefix.to_string()
                } else {
                    format!("{prefix}{}_", snake(k))
                };
                flatten(families, node, path, &p, v, labels);
            }
        }
        Value::Number(_) | Value::Bool(_) => {
            let key = prefix.trim_end_matches('_');
            let x = match v {
                Value::Bool(b) => f64::from(u8::from(*b)),
                n => n.as_f64().unwrap_or(0.0),
            };
            let mut labels = labels.clone();
            let (name, help) = match key.strip_prefix("drop_") {
                Some(reason) => {
                    labels.push(("reason".into(), reason.into()));
                    (
                        format!("hvnet_{node}_drops"),
                        format!("frames dropped, by reason (hvnet stats {path} drop_*)"),
                    )
                }
                None => (
                    format!("hvnet_{node}_{key}"),
                    format!("hvnet stats {path} {key}"),
                ),
            };
            let f = families.entry(name).or_default();
            f.gauge = is_gauge(key);
            f.help = help;
            f.samples.push((labels, x));
        }
        _ => {}
    }
}

/// Reads the whole tree, port by port.
fn collect(sw: &Switch) -> BTreeMap<String, Family> {
    let mut families = BTreeMap::new();
    for p in sw.ports().iter() {
        let (dir, kind) = if p.is_uplink() {
            ("uplinks", "uplink")
        } else {
            ("ports", "vm")
        };
        let labels: Labels = vec![
            ("port".into(), p.name.clone()),
            ("kind".into(), kind.into()),
        ];
        for node in ["client_stats", "tx_summary", "rx_summary", "accounting"] {
            let path = format!("/{dir}/{{port}}/{node}");
            if let Ok(v) = views::stats(sw, &format!("/{dir}/{}/{node}", p.name)) {
                flatten(&mut families, &snake(node), &path, "", &v, &labels);
            }
        }
        let queue_nodes: &[(&str, &str)] = if p.is_uplink() {
            &[("rxqueues", "uplink_rxqueue"), ("txqueues", "txqueue")]
        } else {
            &[("rxqueues", "rxqueue")]
        };
        for &(q_dir, node) in queue_nodes {
            let n = views::stats(sw, &format!("/{dir}/{}/{q_dir}", p.name))
                .ok()
                .and_then(|v| v.as_array().map(Vec::len))
                .unwrap_or(0);
            for q in 0..n {
                let path = format!("/{dir}/{{port}}/{q_dir}/{{queue}}/status");
                let Ok(v) = views::stats(sw, &format!("/{dir}/{}/{q_dir}/{q}/status", p.name))
                else {
                    continue;
                };
                let mut l = labels.clone();
                l.push(("queue".into(), q.to_string()));
                flatten(&mut families, node, &path, "", &v, &l);
            }
        }
        if p.is_uplink() {
            uplink_extras(sw, &p.name, &labels, &mut families);
        }
    }
    families
}

/// An uplink's VXLAN endpoint (its counters, and how many remotes and
/// inner MACs it knows) and its NetQueue filters (how many per queue).
fn uplink_extras(
    sw: &Switch,
    name: &str,
    labels: &Labels,
    families: &mut BTreeMap<String, Family>,
) {
    if let Ok(v) = views::stats(sw, &format!("/uplinks/{name}/vxlan")) {
        let count = |k: &str| v[k].as_array().map_or(0, Vec::len);
        let by_origin = |k: &str, origin: &str| {
            v[k].as_array()
                .map_or(0, |a| a.iter().filter(|x| x["origin"] == origin).count())
        };
        let summary = serde_json::json!({
            "arp_requests_sent": v["arp_requests_sent"],
            "arp_replies_sent": v["arp_replies_sent"],
            "remote_macs_refused": v["remote_macs_refused"],
            "remotes_known": count("remotes"),
            "remote_macs_known": count("remote_macs"),
            "flood_list_known": count("flood_list"),
            "evpn_vteps_known": by_origin("remotes", "evpn"),
            "evpn_macs_known": by_origin("remote_macs", "evpn"),
            "evpn_ips_known": count("remote_ips"),
            "evpn": v["evpn"],
        });
        flatten(
            families,
            "vxlan",
            "/uplinks/{port}/vxlan",
            "",
            &summary,
            labels,
        );
    }
    if let Ok(v) = views::stats(sw, &format!("/uplinks/{name}/filters")) {
        let mut per_queue: BTreeMap<u64, u64> = BTreeMap::new();
        for f in v["filters"].as_array().into_iter().flatten() {
            *per_queue
                .entry(f["queue"].as_u64().unwrap_or(0))
                .or_default() += 1;
        }
        for (q, n) in per_queue {
            let mut l = labels.clone();
            l.push(("queue".into(), q.to_string()));
            let summary = serde_json::json!({ "filters_known": n });
            flatten(
                families,
                "netqueue",
                "/uplinks/{port}/filters",
                "",
                &summary,
                &l,
            );
        }
    }
}

/// The switch, as a collector the registry asks at each scrape.
struct SwitchCollector(Arc<Switch>);

impl std::fmt::Debug for SwitchCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SwitchCollector")
    }
}

impl Collector for SwitchCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, f) in collect(&self.0) {
            if f.gauge {
                let mut fam = encoder.encode_descriptor(
                    &name,
                    &f.help,
                    None,
                    ConstGauge::new(0.0f64).metric_type(),
                )?;
                for (labels, x) in &f.samples {
                    ConstGauge::new(*x).encode(fam.encode_family(labels)?)?;
                }
            } else {
                let mut fam = encoder.encode_descriptor(
                    &name,
                    &f.help,
                    None,
                    ConstCounter::new(0u64).metric_type(),
                )?;
                for (labels, x) in &f.samples {
                    ConstCounter::new(*x as u64).encode(fam.encode_family(labels)?)?;
                }
            }
        }
        Ok(())
    }
}

/// The text a scrape gets (OpenMetrics text format).
pub fn render(sw: &Arc<Switch>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SwitchCollector(sw.clone())));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String does not fail");
    out
}

/// The endpoint's listening socket, bound before anything of the topology
/// is made (an address in use is refused up front).
pub struct Endpoint(tiny_http::Server, SocketAddr);

/// Binds the endpoint.
pub fn bind(addr: SocketAddr) -> Result<Endpoint, String> {
    tiny_http::Server::http(addr)
        .map(|s| Endpoint(s, addr))
        .map_err(|e| format!("metrics endpoint {addr}: {e}"))
}

/// Serves `GET /metrics` until the switch stops.
pub fn serve(ep: Endpoint, sw: Arc<Switch>) -> Result<std::thread::JoinHandle<()>, String> {
    let Endpoint(server, addr) = ep;
    tracing::info!(%addr, "metrics endpoint: GET /metrics");
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            while !sw.stopping() {
                let Ok(Some(req)) = server.recv_timeout(Duration::from_millis(200)) else {
                    continue;
                };
                let reply = if req.url() == "/metrics" {
                    let ct = tiny_http::Header::from_bytes(
                        &b"Content-Type"[..],
                        &b"application/openmetrics-text; version=1.0.0; charset=utf-8"[..],
                    )
                    .expect("a valid header");
                    tiny_http::Response::from_string(render(&sw)).with_header(ct)
                } else {
                    tiny_http::Response::from_string("hvnet: metrics are at /metrics\n")
                        .with_status_code(404)
                };
                let _ = req.respond(reply);
            }
        })
        .map_err(|e| format!("metrics endpoint: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_tree() {
        assert_eq!(snake("clientStats"), "client_stats");
        assert_eq!(snake("pktsTxOK"), "pkts_tx_ok");
        assert_eq!(snake("ring1_size"), "ring1_size");
        let mut f = BTreeMap::new();
        let v = serde_json::json!({"frames": 3, "drop_policy": 2, "drop_bad_frame": 1,
                                   "rings": {"ring1_used": 5}, "balanced": true, "name": "x"});
        flatten(
            &mut f,
            "tx_summary",
            "/p",
            "",
            &v,
            &vec![("port".into(), "a".into())],
        );
        assert_eq!(f["hvnet_tx_summary_frames"].samples[0].1, 3.0);
        assert!(!f["hvnet_tx_summary_frames"].gauge);
        let drops = &f["hvnet_tx_summary_drops"].samples;
        assert_eq!(drops.len(), 2);
        assert!(drops
            .iter()
            .any(|(l, x)| l.contains(&("reason".into(), "policy".into())) && *x == 2.0));
        assert!(f["hvnet_tx_summary_rings_ring1_used"].gauge);
        assert_eq!(f["hvnet_tx_summary_balanced"].samples[0].1, 1.0);
        assert!(is_gauge("egress_in_flight") && is_gauge("avg_frame_bytes") && !is_gauge("frames"));
        assert!(!f.keys().any(|k| k.contains("name")));
    }
}
