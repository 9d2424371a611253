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
//! and `hvnet_uplink_rxqueue_…` for what an uplink receives). A number is
//! a gauge when its type says it is a level ([`Level`]: ring fill, sizes,
//! frames in flight, memory, the length of a table), and a counter
//! otherwise, whatever its name: the views are walked as the typed
//! structs they are, by a serializer of this module's own that sees the
//! `Level` newtype JSON does not show. `docs/metrics.md` lists them.

use crate::views;
use hvnet_datapath::{Level, Switch};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Where the endpoint listens unless told otherwise: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9100";

type Labels = Vec<(String, String)>;

mod walk;

use walk::{Family, Node};

/// Reads the whole tree, port by port, from the views `hvnet stats`
/// shows (typed, before they are JSON).
fn collect(sw: &Switch) -> BTreeMap<String, Family> {
    let mut families = BTreeMap::new();
    for p in sw.ports().iter() {
        let (dir, kind) = if p.is_uplink() {
            ("uplinks", "uplink")
        } else {
            ("ports", "vm")
        };
        // Who the port is for (a libvirt domain, its interface) labels
        // its series, as a controller finds Open vSwitch's by external_ids.
        let labels: Labels = [
            ("port".to_string(), p.name.clone()),
            ("kind".into(), kind.into()),
        ]
        .into_iter()
        .chain(p.external_ids.iter().cloned())
        .collect();
        let node = |name, path: &str, labels| Node {
            name,
            path: format!("/{dir}/{{port}}/{path}"),
            labels,
        };
        let at = |name| node(name, name, labels.clone());
        at("client_stats").add(&mut families, &views::client_stats(p));
        at("tx_summary").add(&mut families, &views::tx_summary(p));
        at("rx_summary").add(&mut families, &views::rx_summary(p));
        at("accounting").add(&mut families, &views::accounting(p));
        let queue = |q: usize| {
            let mut l = labels.clone();
            l.push(("queue".into(), q.to_string()));
            l
        };
        // What the switch sends: to a VM's receive queues, or out of an
        // uplink's transmit queues.
        let (name, path) = if p.is_uplink() {
            ("txqueue", "txqueues/{queue}/status")
        } else {
            ("rxqueue", "rxqueues/{queue}/status")
        };
        for q in 0..p.rxq.len() {
            if let Some(v) = views::rx_queue_status(p, q) {
                node(name, path, queue(q)).add(&mut families, &v);
            }
        }
        if p.is_uplink() {
            // What an uplink receives from the wire.
            for q in 0..p.ingress.len() {
                if let Some(v) = views::uplink_rx_queue_status(p, q) {
                    node("uplink_rxqueue", "rxqueues/{queue}/status", queue(q))
                        .add(&mut families, &v);
                }
            }
            uplink_extras(sw, &p.name, &labels, &mut families);
        }
    }
    families
}

/// An uplink's VXLAN endpoint in metrics: its counters, and how many
/// remotes and inner MACs it knows (levels).
#[derive(Serialize)]
struct VxlanSummary {
    /// ARP requests sent for unresolved remotes.
    arp_requests_sent: u64,
    /// ARP replies sent for the endpoint's address.
    arp_replies_sent: u64,
    /// Inner MACs not learned: the table was full.
    remote_macs_refused: u64,
    /// Remote endpoints: configured, advertised and learned.
    remotes_known: Level<usize>,
    /// Inner MACs behind remotes, learned and advertised.
    remote_macs_known: Level<usize>,
    /// Endpoints head-end replication goes to.
    flood_list_known: Level<usize>,
    /// Remote endpoints the fabric advertised.
    evpn_vteps_known: Level<usize>,
    /// Inner MACs the fabric advertised.
    evpn_macs_known: Level<usize>,
    /// Remote IPs the fabric advertised with their MACs.
    evpn_ips_known: Level<usize>,
    /// The endpoint's EVPN counters, as its view has them (counts, all).
    evpn: Value,
}

/// A NIC team in metrics: how often traffic moved, and its own drops.
#[derive(Serialize)]
struct TeamSummary {
    /// Times traffic moved off a member that stopped being usable.
    failovers: u64,
    /// Times it moved back to a member usable again.
    failbacks: u64,
    /// Announcements sent for VMs whose traffic moved.
    announcements: u64,
    /// Members usable now.
    members_usable: Level<usize>,
    /// VM addresses placed on members.
    placements_known: Level<usize>,
    /// Frames from new addresses not placed: the team had as many as it
    /// keeps.
    placements_refused: u64,
    /// The team's drops, `drop_REASON` each.
    #[serde(flatten)]
    drops: BTreeMap<String, u64>,
}

/// One team member in metrics.
#[derive(Serialize)]
struct TeamMemberSummary {
    /// 1 while the member has carrier.
    carrier: Level<u64>,
    /// 1 while frames may leave by it (active, or distributing).
    usable: Level<u64>,
    /// Frames sent by it.
    tx_frames: u64,
    /// Bytes sent by it.
    tx_bytes: u64,
    /// Frames received from it (LACPDUs aside).
    rx_frames: u64,
    /// Times it stopped being usable.
    downs: u64,
    /// LACPDUs received and taken.
    lacpdus_rx: u64,
    /// LACPDUs sent.
    lacpdus_tx: u64,
}

/// An uplink's team: its summary and each member's.
fn team_metrics(v: &Value, labels: &Labels, families: &mut BTreeMap<String, Family>) {
    let members = v["members"].as_array().cloned().unwrap_or_default();
    let usable = |m: &Value| matches!(m["state"].as_str(), Some("active" | "distributing"));
    let drops = v["drops"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, n)| (format!("drop_{k}"), n.as_u64().unwrap_or(0)))
        .collect();
    let summary = TeamSummary {
        failovers: v["failovers"].as_u64().unwrap_or(0),
        failbacks: v["failbacks"].as_u64().unwrap_or(0),
        announcements: v["announcements"].as_u64().unwrap_or(0),
        members_usable: Level(members.iter().filter(|m| usable(m)).count()),
        placements_known: Level(v["placements"].as_array().map_or(0, Vec::len)),
        placements_refused: v["placements_refused"].as_u64().unwrap_or(0),
        drops,
    };
    Node {
        name: "team",
        path: "/uplinks/{port}/team".into(),
        labels: labels.clone(),
    }
    .add(families, &summary);
    for m in &members {
        let mut l = labels.clone();
        l.push(("member".into(), m["device"].as_str().unwrap_or("").into()));
        let n = |k: &str| m[k].as_u64().unwrap_or(0);
        let lacp = |k: &str| m["lacp"][k].as_u64().unwrap_or(0);
        let member = TeamMemberSummary {
            carrier: Level(u64::from(m["carrier"].as_bool().unwrap_or(false))),
            usable: Level(u64::from(usable(m))),
            tx_frames: n("tx_frames"),
            tx_bytes: n("tx_bytes"),
            rx_frames: n("rx_frames"),
            downs: n("downs"),
            lacpdus_rx: lacp("rx"),
            lacpdus_tx: lacp("tx"),
        };
        Node {
            name: "team_member",
            path: "/uplinks/{port}/team".into(),
            labels: l,
        }
        .add(families, &member);
    }
}

/// One NetQueue queue's filters in metrics.
#[derive(Serialize)]
struct NetqueueSummary {
    /// The VM filters steering to the queue.
    filters_known: Level<u64>,
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
        let count = |k: &str| Level(v[k].as_array().map_or(0, Vec::len));
        let by_origin = |k: &str, origin: &str| {
            Level(
                v[k].as_array()
                    .map_or(0, |a| a.iter().filter(|x| x["origin"] == origin).count()),
            )
        };
        let counter = |k: &str| v[k].as_u64().unwrap_or(0);
        let summary = VxlanSummary {
            arp_requests_sent: counter("arp_requests_sent"),
            arp_replies_sent: counter("arp_replies_sent"),
            remote_macs_refused: counter("remote_macs_refused"),
            remotes_known: count("remotes"),
            remote_macs_known: count("remote_macs"),
            flood_list_known: count("flood_list"),
            evpn_vteps_known: by_origin("remotes", "evpn"),
            evpn_macs_known: by_origin("remote_macs", "evpn"),
            evpn_ips_known: count("remote_ips"),
            evpn: v["evpn"].clone(),
        };
        let node = Node {
            name: "vxlan",
            path: "/uplinks/{port}/vxlan".into(),
            labels: labels.clone(),
        };
        node.add(families, &summary);
    }
    if let Ok(v) = views::stats(sw, &format!("/uplinks/{name}/team")) {
        team_metrics(&v, labels, families);
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
            let node = Node {
                name: "netqueue",
                path: "/uplinks/{port}/filters".into(),
                labels: l,
            };
            node.add(
                families,
                &NetqueueSummary {
                    filters_known: Level(n),
                },
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

/// Why the metrics endpoint could not be served.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Its address could not be bound (in use, or not this host's).
    #[error("cannot listen on metrics endpoint {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Its thread could not be started.
    #[error("cannot start the metrics endpoint's thread")]
    Thread(#[source] std::io::Error),
}

/// Binds the endpoint.
pub fn bind(addr: SocketAddr) -> Result<Endpoint, MetricsError> {
    tiny_http::Server::http(addr)
        .map(|s| Endpoint(s, addr))
        .map_err(|source| MetricsError::Bind { addr, source })
}

/// Serves `GET /metrics` until the switch stops.
pub fn serve(ep: Endpoint, sw: Arc<Switch>) -> Result<std::thread::JoinHandle<()>, MetricsError> {
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
        .map_err(MetricsError::Thread)
}

#[cfg(test)]
mod tests {
    use super::walk::snake;
    use super::*;
    use hvnet_datapath::counters::EgressStats;

    #[derive(Serialize)]
    struct Rings {
        ring1_used: Level<usize>,
    }

    #[derive(Serialize)]
    struct View {
        #[serde(flatten)]
        counters: EgressStats,
        frames: u64,
        drop_policy: u64,
        drop_bad_frame: u64,
        rings: Rings,
        balanced: Level<bool>,
        /// A name that once made a gauge.
        buf_size: u64,
        in_flight: Level<i64>,
        name: &'static str,
        rows: Vec<u64>,
        virtqueue_size: Option<Level<u16>>,
    }

    fn walk(v: &impl Serialize) -> BTreeMap<String, Family> {
        let mut f = BTreeMap::new();
        let node = Node {
            name: "tx_summary",
            path: "/p".into(),
            labels: vec![("port".into(), "a".into())],
        };
        node.add(&mut f, v);
        f
    }

    #[test]
    fn names_follow_the_tree_and_types_say_gauge() {
        assert_eq!(snake("clientStats"), "client_stats");
        assert_eq!(snake("pktsTxOK"), "pkts_tx_ok");
        assert_eq!(snake("ring1_size"), "ring1_size");
        let f = walk(&View {
            counters: EgressStats::default(),
            frames: 3,
            drop_policy: 2,
            drop_bad_frame: 1,
            rings: Rings {
                ring1_used: Level(5),
            },
            balanced: Level(true),
            buf_size: 7,
            in_flight: Level(-1),
            name: "x",
            rows: vec![1, 2],
            virtqueue_size: Some(Level(256)),
        });
        assert_eq!(f["hvnet_tx_summary_frames"].samples[0].1, 3.0);
        assert!(!f["hvnet_tx_summary_frames"].gauge);
        let drops = &f["hvnet_tx_summary_drops"].samples;
        assert!(!f["hvnet_tx_summary_drops"].gauge);
        assert!(drops
            .iter()
            .any(|(l, x)| l.contains(&("reason".into(), "policy".into())) && *x == 2.0));
        assert!(drops
            .iter()
            .any(|(l, _)| l.contains(&("reason".into(), "ring1_full".into()))));
        assert!(f["hvnet_tx_summary_rings_ring1_used"].gauge);
        assert_eq!(f["hvnet_tx_summary_rings_ring1_used"].samples[0].1, 5.0);
        assert!(f["hvnet_tx_summary_balanced"].gauge);
        assert_eq!(f["hvnet_tx_summary_balanced"].samples[0].1, 1.0);
        assert!(
            !f["hvnet_tx_summary_buf_size"].gauge,
            "a name is not a type"
        );
        assert!(f["hvnet_tx_summary_in_flight"].gauge);
        assert_eq!(f["hvnet_tx_summary_in_flight"].samples[0].1, -1.0);
        assert!(f["hvnet_tx_summary_virtqueue_size"].gauge);
        assert!(!f["hvnet_tx_summary_offered"].gauge, "flattened counters");
        assert!(!f.keys().any(|k| k.contains("name") || k.contains("rows")));
    }

    #[test]
    fn counters_are_a_queue_s_own_and_json_values_are_counts() {
        #[derive(Serialize)]
        struct Queue {
            counters: EgressStats,
            evpn: Value,
        }
        let f = walk(&Queue {
            counters: EgressStats::default(),
            evpn: serde_json::json!({"flooded": 4, "known": 1}),
        });
        assert!(f.contains_key("hvnet_tx_summary_delivered_frames"));
        assert_eq!(f["hvnet_tx_summary_evpn_flooded"].samples[0].1, 4.0);
        assert!(!f["hvnet_tx_summary_evpn_known"].gauge);
    }

    /// `docs/metrics.md`'s families: `(hvnet_NODE_KEY, gauge)` for every
    /// key listed in a node's section, a gauge where `(gauge` follows it.
    fn documented() -> Vec<(String, bool)> {
        let doc = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/metrics.md"
        ));
        let mut out = Vec::new();
        for section in doc.split("\n### `hvnet_").skip(1) {
            let (node, body) = section.split_once("_*`").expect("a family's heading");
            let body = body.split("\n## ").next().unwrap_or_default();
            let body = body.split_once('\n').map_or("", |(_, b)| b);
            let parts: Vec<&str> = body.split('`').collect();
            for (i, key) in parts.iter().enumerate().skip(1).step_by(2) {
                let after = parts.get(i + 1).copied().unwrap_or_default();
                out.push((format!("hvnet_{node}_{key}"), after.starts_with(" (gauge")));
            }
        }
        out
    }

    #[test]
    fn a_vm_port_s_families_are_the_documented_ones_typed_as_documented() {
        use hvnet_datapath::harness::Harness;
        use hvnet_datapath::{PortSettings, SwitchConfig};
        use hvnet_wire::MacAddr;
        let h = Harness::new(
            &[
                (MacAddr([2, 0, 0, 0, 0, 1]), 2, PortSettings::default()),
                (MacAddr([2, 0, 0, 0, 0, 2]), 1, PortSettings::default()),
            ],
            SwitchConfig::default(),
        );
        let got = collect(&h.sw);
        let doc = documented();
        for (name, f) in &got {
            let d = doc.iter().find(|(n, _)| n == name);
            let Some((_, gauge)) = d else {
                panic!("{name} is not in docs/metrics.md");
            };
            assert_eq!(f.gauge, *gauge, "{name}: a gauge in one and not the other");
        }
        // Every documented key of the nodes a VM port has is served (a
        // virtqueue's size only for a vhost-user guest).
        let nodes = [
            "client_stats",
            "tx_summary",
            "rx_summary",
            "accounting",
            "rxqueue",
        ];
        for (name, _) in &doc {
            let of_vm = nodes
                .iter()
                .any(|n| name.strip_prefix(&format!("hvnet_{n}_")).is_some());
            if of_vm && name != "hvnet_rxqueue_virtqueue_size" {
                assert!(
                    got.contains_key(name),
                    "{name} is documented but not served"
                );
            }
        }
    }
}
