//! The troubleshooting itself: what a window of a VM's counters, its
//! settings, its guest's CPU and its frames show, as findings — each
//! with its evidence (the counters and their rates), the setting that
//! causes it and the command that changes it — in the order an expert
//! would look: the link, the guest's CPU, the switch's limits on it, its
//! rings, the policy that drops its frames, its neighbours, and last the
//! offloads that only make it slower.

use super::guest_cpu::CpuSample;
use super::observe::Seen;
use hvnet_datapath::PortSettings;
use serde::Serialize;
use serde_json::{json, Map, Value};

/// One counter's change over the window.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Evidence {
    /// What was counted (`to_port.drop_ring1_full`, `guest.wait_percent`).
    pub counter: String,
    /// Its change over the window (or its level, for a percentage).
    pub value: f64,
    /// Per second.
    pub per_sec: f64,
}

/// A cause found, with what shows it and what changes it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Finding {
    /// Its short name (`ring_full`, `source_guard`, …), for tools.
    pub cause: &'static str,
    /// What is wrong, in a sentence.
    pub finding: String,
    /// The counters that show it.
    pub evidence: Vec<Evidence>,
    /// The setting that causes it, as `key=value` (none for a cause
    /// outside the port's settings).
    pub setting: Option<String>,
    /// The command (or step) that changes it.
    pub fix: String,
}

/// A port of the VM's VLAN whose MTU drops rose in the window.
#[derive(Clone, Debug)]
pub struct PeerMtu {
    /// Its name.
    pub name: String,
    /// Its MTU.
    pub mtu: u16,
    /// Frames to it dropped over its MTU in the window.
    pub dropped: u64,
}

/// A team of uplinks with a member down.
#[derive(Clone, Debug)]
pub struct Degraded {
    /// The team's uplink.
    pub team: String,
    /// Its members that are down.
    pub down: Vec<String>,
    /// Its members.
    pub members: usize,
}

/// Everything one window gathered about a VM.
pub struct Window<'a> {
    /// The VM (its port's name).
    pub vm: &'a str,
    /// The window's length.
    pub secs: f64,
    /// Its port's link (`up`, `down`, `failed`, `removed`).
    pub link: &'a str,
    /// Its port's settings.
    pub settings: &'a PortSettings,
    /// Its port's access VLAN.
    pub vlan: u16,
    /// Its port's counters' change: what it sent into the switch.
    pub from_port: Map<String, Value>,
    /// What was on its way to it.
    pub to_port: Map<String, Value>,
    /// Its guest's CPU at the window's start and end.
    pub cpu: Option<(CpuSample, CpuSample)>,
    /// Its frames, looked at (none if another trace held its port).
    pub seen: Option<&'a Seen>,
    /// Ports of its VLAN whose MTU drops rose.
    pub peers_mtu: Vec<PeerMtu>,
    /// Teams with a member down.
    pub degraded: Vec<Degraded>,
    /// The addresses the switch knows a VM or host for.
    pub known: &'a dyn Fn(std::net::IpAddr) -> bool,
    /// Its tunnel endpoints, each with its peers (static or learned).
    pub tunnels: Vec<(String, usize)>,
}

impl Window<'_> {
    fn delta(m: &Map<String, Value>, k: &str) -> u64 {
        m.get(k).and_then(Value::as_u64).unwrap_or(0)
    }
    fn sent(&self, k: &str) -> u64 {
        Self::delta(&self.from_port, k)
    }
    fn got(&self, k: &str) -> u64 {
        Self::delta(&self.to_port, k)
    }
    fn ev(&self, way: &str, k: &str, v: u64) -> Evidence {
        Evidence {
            counter: format!("{way}.{k}"),
            value: v as f64,
            per_sec: v as f64 / self.secs.max(1e-3),
        }
    }
    /// The counters of `keys` that rose, `way` one of `from_port`/`to_port`.
    fn rose(&self, way: &str, keys: &[&str]) -> Vec<Evidence> {
        keys.iter()
            .map(|k| {
                let v = if way == "from_port" {
                    self.sent(k)
                } else {
                    self.got(k)
                };
                (k, v)
            })
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| self.ev(way, k, v))
            .collect()
    }
    /// Its guest's threads' wait for a CPU, in per cent of the window
    /// (per thread, averaged: %RDY), and the quota's throttling.
    fn guest_wait(&self) -> Option<(f64, Vec<Held>)> {
        let (a, b) = self.cpu.as_ref()?;
        let threads = b.threads.max(1) as f64;
        let wait = b.wait_ns.saturating_sub(a.wait_ns) as f64 / 1e9 / self.secs / threads * 100.0;
        let quotas = b
            .quotas
            .iter()
            .map(|q| {
                let before = a
                    .quotas
                    .iter()
                    .find(|x| x.cgroup == q.cgroup)
                    .map_or(q.throttled_ns, |x| x.throttled_ns);
                let pct = q.throttled_ns.saturating_sub(before) as f64 / 1e9 / self.secs * 100.0;
                (q.cgroup.clone(), q.percent, pct)
            })
            .collect();
        Some((wait, quotas))
    }
}

/// A CPU quota over the window: its cgroup, its share of a core (per
/// cent) and the part of the window it was throttled (per cent).
type Held = (String, u64, f64);

/// A setting as `key=value`, as `hvnet port VM set` takes it.
fn setting(s: &PortSettings, key: &str) -> Option<String> {
    let v = serde_json::to_value(s).ok()?;
    let x = v.get(key)?;
    Some(match x {
        Value::String(t) => format!("{key}={t}"),
        Value::Bool(b) => format!("{key}={}", if *b { "on" } else { "off" }),
        Value::Null => format!("{key}=none"),
        other => format!("{key}={other}"),
    })
}

/// Every finding of the window, most telling first (none for a
/// healthy VM).
pub fn findings(w: &Window) -> Vec<Finding> {
    let mut out = Vec::new();
    let vm = w.vm;
    let s = w.settings;
    let set = |k: &str, v: &str| format!("hvnet port {vm} set {k}={v}");

    // Its link: nothing else matters while it is down.
    let gone = w.rose("to_port", &["drop_port_down", "drop_write_error"]);
    if w.link != "up" || !gone.is_empty() {
        out.push(Finding {
            cause: "link_down",
            finding: format!("its port's link is {}: its guest is gone or its interface is down, and frames to it are dropped", if w.link == "up" { "failing" } else { w.link }),
            evidence: gone,
            setting: None,
            fix: format!("bring the guest's interface up (ip link set eth0 up in it) or start the guest again (hvnet vm restart {vm})"),
        });
        return out;
    }
    if !s.connected {
        out.push(Finding {
            cause: "disconnected",
            finding: "its vNIC is disconnected: nothing it sends or is sent goes through".into(),
            evidence: w.rose("from_port", &["drop_disconnected"]),
            setting: setting(s, "connected"),
            fix: set("connected", "on"),
        });
    }

    // The guest's CPU: a quota that holds it, or threads waiting to run.
    if let Some((wait, quotas)) = w.guest_wait() {
        for (cg, pct, throttled) in quotas {
            if throttled >= 5.0 {
                out.push(Finding {
                    cause: "guest_cpu_quota",
                    finding: format!("its guest is held to {pct} % of a core by its CPU cgroup {cg}: throttled {throttled:.0} % of the window, its threads waiting to run {wait:.0} % (%RDY)"),
                    evidence: vec![
                        Evidence { counter: "guest.throttled_percent".into(), value: throttled, per_sec: throttled },
                        Evidence { counter: "guest.wait_percent".into(), value: wait, per_sec: wait },
                    ],
                    setting: Some(format!("cpu.cfs_quota_us={}", pct * 1000)),
                    fix: format!("raise or lift its quota: echo -1 > /sys/fs/cgroup/cpu{cg}/cpu.cfs_quota_us"),
                });
            }
        }
    }
    let holds = w.sent("cpu_limit_holds");
    if holds > 0 && s.cpu_limit > 0 {
        out.push(Finding {
            cause: "cpu_limit",
            finding: format!("its port's cpu_limit of {} % of a worker holds what it sends: its queues were left unread {holds} times", s.cpu_limit),
            evidence: vec![w.ev("from_port", "cpu_limit_holds", holds)],
            setting: setting(s, "cpu_limit"),
            fix: set("cpu_limit", "0"),
        });
    }

    // Its rings.
    let full = w.rose(
        "to_port",
        &["drop_ring1_full", "drop_ring2_full", "drop_virtqueue_full"],
    );
    if !full.is_empty() {
        let n: f64 = full.iter().map(|e| e.value).sum();
        let why = match w.guest_wait() {
            Some((wait, _)) if wait >= 20.0 => format!("; its guest's threads waited to run {wait:.0} % of the window (%RDY): it does not drain them"),
            _ => String::new(),
        };
        out.push(Finding {
            cause: "ring_full",
            finding: format!(
                "its receive ring fills: {n} frames to it dropped ({:.0}/s) with a ring of {}{why}",
                n / w.secs,
                s.ring1
            ),
            evidence: full,
            setting: setting(s, "ring1"),
            fix: set("ring1", "4096"),
        });
    }
    let waits = w.got("backpressure_waits");
    if waits > 0 {
        out.push(Finding {
            cause: "ring_small",
            finding: format!("its receive rings are too small for its rate: senders waited for room {waits} times"),
            evidence: vec![w.ev("to_port", "backpressure_waits", waits)],
            setting: setting(s, "ring1"),
            fix: set("ring1", "4096"),
        });
    }

    // Its rates.
    let policed = w.rose("from_port", &["drop_policed", "policed_cut"]);
    if !policed.is_empty() && s.tx_rate.is_some() {
        out.push(Finding {
            cause: "tx_rate",
            finding: format!(
                "its port's policer ({}) drops what it sends over the rate",
                setting(s, "tx_rate").unwrap_or_default()
            ),
            evidence: policed,
            setting: setting(s, "tx_rate"),
            fix: set("tx_rate", "none"),
        });
    }
    let shaped = w.got("shaper_waits");
    if shaped > 0 && s.rx_rate.is_some() {
        out.push(Finding {
            cause: "rx_rate",
            finding: format!(
                "its port's shaper ({}) holds what is sent to it",
                setting(s, "rx_rate").unwrap_or_default()
            ),
            evidence: vec![w.ev("to_port", "shaper_waits", shaped)],
            setting: setting(s, "rx_rate"),
            fix: set("rx_rate", "none"),
        });
    }

    // Policy that drops its frames.
    let acl_in = w.rose(
        "to_port",
        &[
            "drop_acl_in",
            "drop_acl_in_invalid",
            "drop_conntrack_full_in",
        ],
    );
    let acl_out = w.rose(
        "from_port",
        &[
            "drop_acl_out",
            "drop_acl_out_invalid",
            "drop_conntrack_full_out",
        ],
    );
    for (ev, way) in [(acl_in, "sent to it"), (acl_out, "it sends")] {
        if !ev.is_empty() {
            out.push(Finding {
                cause: if way == "it sends" { "acl_out" } else { "acl_in" },
                finding: format!("its security groups drop frames {way}: no rule allows them (hvnet acl {vm} shows each rule's hits)"),
                evidence: ev,
                setting: Some("security_groups".into()),
                fix: format!("add a rule for the service to one of its groups ([[security_group]] in the topology file, then hvnet up), or hvnet acl {vm} to see them"),
            });
        }
    }
    let foreign: Vec<String> = w
        .seen
        .map(|x| {
            x.foreign_sources
                .keys()
                .take(4)
                .map(|ip| ip.to_string())
                .collect()
        })
        .unwrap_or_default();
    for (reason, guard) in [
        ("source_guard", "the source guard"),
        ("arp_guard", "the ARP guard"),
        ("nd_guard", "the ND guard"),
        ("dhcp_guard", "the DHCP guard"),
        ("ra_guard", "the RA guard"),
    ] {
        let ev = w.rose("from_port", &[&format!("drop_{reason}")]);
        if ev.is_empty() {
            continue;
        }
        let from = if foreign.is_empty() {
            String::new()
        } else {
            format!(" from {}", foreign.join(", "))
        };
        let first = foreign.first().cloned().unwrap_or_else(|| "ADDRESS".into());
        out.push(Finding {
            cause: reason,
            finding: format!("{guard} drops what it sends{from}: an address not its own (its addresses: {})", setting(s, "addresses").unwrap_or_default()),
            evidence: ev,
            setting: setting(s, reason),
            fix: format!("give the guest back its own address, or allow this one: hvnet port {vm} set addresses=+{first}"),
        });
    }
    let forged = w.rose("from_port", &["drop_policy"]);
    if !forged.is_empty() {
        out.push(Finding {
            cause: "forged_transmits",
            finding: "it sends from a MAC address not its own, and forged transmits are refused"
                .into(),
            evidence: forged,
            setting: setting(s, "allow_forged_transmits"),
            fix: set("allow_forged_transmits", "on"),
        });
    }
    let vlan = w.rose("from_port", &["drop_vlan_not_allowed"]);
    if !vlan.is_empty() {
        let carried = s.vlans_of(w.vlan);
        let tags: Vec<u16> = w
            .seen
            .map(|x| {
                x.tags
                    .keys()
                    .copied()
                    .filter(|t| !carried.carries(*t))
                    .collect()
            })
            .unwrap_or_default();
        let which = tags
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        out.push(Finding {
            cause: "vlan_not_allowed",
            finding: format!(
                "it sends frames of VLANs its port does not carry{}",
                if which.is_empty() {
                    String::new()
                } else {
                    format!(": {which}")
                }
            ),
            evidence: vlan,
            setting: setting(s, "vlans"),
            fix: set(
                "vlans",
                &format!("+{}", tags.first().map_or("VLAN".into(), u16::to_string)),
            ),
        });
    }

    // The MTU, either side.
    let own_mtu = w.rose("to_port", &["drop_mtu_exceeded"]);
    if !own_mtu.is_empty() {
        out.push(Finding {
            cause: "mtu",
            finding: format!("frames over its MTU ({}) are dropped on their way to it: a sender of its VLAN has a larger one", s.mtu),
            evidence: own_mtu,
            setting: setting(s, "mtu"),
            fix: "give the ports of one VLAN one MTU: hvnet port SENDER set mtu=".to_string() + &s.mtu.to_string(),
        });
    }
    for p in w
        .peers_mtu
        .iter()
        .filter(|p| p.mtu < s.mtu && p.dropped > 0)
    {
        out.push(Finding {
            cause: "mtu",
            finding: format!("its MTU {} is larger than {}'s {}: its frames over {} are dropped on their way there", s.mtu, p.name, p.mtu, p.mtu),
            evidence: vec![Evidence { counter: format!("{}.to_port.drop_mtu_exceeded", p.name), value: p.dropped as f64, per_sec: p.dropped as f64 / w.secs }],
            setting: setting(s, "mtu"),
            fix: set("mtu", &p.mtu.to_string()),
        });
    }

    // Its way out: a team with a member down.
    for d in &w.degraded {
        out.push(Finding {
            cause: "team_degraded",
            finding: format!("team {} is degraded: {} of its {} members down ({}); its VMs' frames go by the others", d.team, d.down.len(), d.members, d.down.join(", ")),
            evidence: Vec::new(),
            setting: None,
            fix: format!("bring the member's link up (hvnet team shows each member; ip link set {} up)", d.down.first().map_or("MEMBER", String::as_str)),
        });
    }

    // Neighbours nobody answers for.
    if let Some(seen) = w.seen {
        let asked: Vec<(String, u64)> = seen
            .arp_asked
            .iter()
            .filter(|(ip, n)| **n >= 3 && !(w.known)(std::net::IpAddr::V4(**ip)))
            .map(|(ip, n)| (ip.to_string(), *n))
            .collect();
        if let Some((ip, n)) = asked.first() {
            let tunnels = if w.tunnels.is_empty() {
                "no tunnel endpoint".to_string()
            } else {
                w.tunnels
                    .iter()
                    .map(|(t, n)| format!("{t} with {n} peers"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push(Finding {
                cause: "neighbour_unknown",
                finding: format!("it asks for {ip} again and again ({n} ARP requests) and nothing here has it: no VM or host on this switch, and its tunnels ({tunnels}) reach none that does"),
                evidence: vec![Evidence { counter: format!("frames.arp_requests_for.{ip}"), value: *n as f64, per_sec: *n as f64 / w.secs }],
                setting: None,
                fix: "add the remote endpoint as a peer of the tunnel ([uplink.vxlan] peers in the topology file), or check its EVPN routes (hvnet evpn)".into(),
            });
        }
    }

    // Offloads that only make it slower.
    let delivered = w.got("delivered_frames");
    let bytes = w.got("delivered_bytes");
    if !s.lro && delivered as f64 / w.secs >= 2000.0 && bytes / delivered.max(1) >= 1000 {
        out.push(Finding {
            cause: "lro_off",
            finding: format!("LRO is off at its port: {:.0} wire-sized frames/s are delivered to it one by one, not coalesced", delivered as f64 / w.secs),
            evidence: vec![w.ev("to_port", "delivered_frames", delivered), w.ev("to_port", "lro_frames", w.got("lro_frames"))],
            setting: setting(s, "lro"),
            fix: set("lro", "on"),
        });
    }
    let (frames, sent_bytes) = (w.sent("frames"), w.sent("bytes"));
    if !s.tso && frames as f64 / w.secs >= 2000.0 && sent_bytes / frames.max(1) >= 1000 {
        out.push(Finding {
            cause: "tso_off",
            finding: format!(
                "TSO is off at its port: it sends {:.0} wire-sized frames/s, each switched alone",
                frames as f64 / w.secs
            ),
            evidence: vec![
                w.ev("from_port", "frames", frames),
                w.ev("from_port", "gso_frames", w.sent("gso_frames")),
            ],
            setting: setting(s, "tso"),
            fix: set("tso", "on"),
        });
    }
    if let Some(seen) = w.seen {
        let (n, re) = (seen.tcp_segments, seen.tcp_retransmitted);
        if re >= 10 && re * 100 >= n {
            out.push(Finding {
                cause: "retransmissions",
                finding: format!("{:.1} % of the TCP segments it sends are sent again ({re} of {n}): frames of its flows are lost on their way", re as f64 * 100.0 / n as f64),
                evidence: vec![Evidence { counter: "frames.tcp_retransmitted".into(), value: re as f64, per_sec: re as f64 / w.secs }],
                setting: None,
                fix: "look for drops on the path: hvnet diagnose on its peers, hvnet trace to follow one".into(),
            });
        }
    }
    out
}

/// The findings two readings of a VM's counters alone show (rows of
/// `hvnet top`'s counters view: `before`, then `now`, `secs` apart): its
/// marker there. No guest CPU, frames, peers or teams — those only
/// `hvnet diagnose` looks at.
pub fn from_counters(before: &Value, now: &Value, secs: f64) -> Vec<Finding> {
    let Ok(settings) = serde_json::from_value::<PortSettings>(now["settings"].clone()) else {
        return Vec::new();
    };
    let obj = |v: &Value| v.as_object().cloned().unwrap_or_default();
    let way = |k: &str| change(&obj(&before[k]), &obj(&now[k]));
    findings(&Window {
        vm: now["name"].as_str().unwrap_or_default(),
        secs,
        link: now["link"].as_str().unwrap_or_default(),
        settings: &settings,
        vlan: now["vlan"].as_u64().unwrap_or(0) as u16,
        from_port: way("from_port"),
        to_port: way("to_port"),
        cpu: None,
        seen: None,
        peers_mtu: Vec::new(),
        degraded: Vec::new(),
        known: &|_| true,
        tunnels: Vec::new(),
    })
}

/// Each numeric counter's change from `a` to `b`.
pub fn change(a: &Map<String, Value>, b: &Map<String, Value>) -> Map<String, Value> {
    b.iter()
        .filter_map(|(k, v)| {
            let (now, then) = (v.as_u64()?, a.get(k).and_then(Value::as_u64).unwrap_or(0));
            Some((k.clone(), json!(now.saturating_sub(then))))
        })
        .collect()
}

/// The figures that say a VM is healthy (or how busy it is).
pub fn figures(w: &Window) -> Value {
    let per = |v: u64| (v as f64 / w.secs * 10.0).round() / 10.0;
    let drops = |m: &Map<String, Value>| -> u64 {
        m.iter()
            .filter(|(k, _)| k.starts_with("drop_"))
            .filter_map(|(_, v)| v.as_u64())
            .sum()
    };
    json!({
        "sent_frames_per_sec": per(w.sent("frames")),
        "sent_bytes_per_sec": per(w.sent("bytes")),
        "received_frames_per_sec": per(w.got("delivered_frames")),
        "received_bytes_per_sec": per(w.got("delivered_bytes")),
        "drops_per_sec": per(drops(&w.from_port) + drops(&w.to_port)),
        "guest_wait_percent": w.guest_wait().map(|(x, _)| (x * 10.0).round() / 10.0),
        "tcp_retransmitted": w.seen.map(|s| s.tcp_retransmitted),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window<'a>(
        s: &'a PortSettings,
        from: Value,
        to: Value,
        known: &'a dyn Fn(std::net::IpAddr) -> bool,
    ) -> Window<'a> {
        let obj = |v: Value| v.as_object().cloned().unwrap_or_default();
        Window {
            vm: "a",
            secs: 2.0,
            link: "up",
            settings: s,
            vlan: 0,
            from_port: obj(from),
            to_port: obj(to),
            cpu: None,
            seen: None,
            peers_mtu: Vec::new(),
            degraded: Vec::new(),
            known,
            tunnels: Vec::new(),
        }
    }

    #[test]
    fn a_quiet_vm_has_no_finding_and_drops_name_their_cause_and_setting() {
        let none = |_| false;
        let s = PortSettings::default();
        assert!(findings(&window(
            &s,
            json!({"frames": 10}),
            json!({"delivered_frames": 10}),
            &none
        ))
        .is_empty());
        let s = PortSettings {
            ring1: 64,
            ..PortSettings::default()
        };
        let f = findings(&window(
            &s,
            json!({}),
            json!({"drop_ring1_full": 50}),
            &none,
        ));
        assert_eq!(
            (f[0].cause, f[0].setting.as_deref()),
            ("ring_full", Some("ring1=64"))
        );
        assert_eq!(f[0].evidence[0].per_sec, 25.0);
        assert_eq!(f[0].fix, "hvnet port a set ring1=4096");
    }

    #[test]
    fn a_link_down_is_the_only_finding() {
        let none = |_| false;
        let s = PortSettings {
            ring1: 64,
            ..PortSettings::default()
        };
        let mut w = window(&s, json!({}), json!({"drop_ring1_full": 50}), &none);
        w.link = "down";
        let f = findings(&w);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].cause, "link_down");
    }
}
