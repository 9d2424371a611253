//! `hvnet trace PORT --live FILTER`: the next real frames a port sends
//! into the switch that match a tcpdump filter, each with every stage's
//! line on its path (what it decided and why), the ports it left by or
//! its named drop. The port's tracer marks them as they are read; this
//! waits until `count` were marked and their lines written, the time is
//! up, or the port goes. `hvnet trace PORT FLOW`: a frame described in
//! words ([`crate::flow_spec`]), built as the port's guest would send it
//! and switched by the port's worker with every decision and no delivery
//! (unless injected).

use crate::capture_stream::compile;
use crate::flow_spec::{self, FlowSpec, Host, Proto, Resolved};
use crate::proto::CtlError;
use crate::topology::Topology;
use hvnet_datapath::trace::TraceLine;
use hvnet_datapath::Switch;
use hvnet_wire::MacAddr;
use serde_json::{json, Value};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most frames one trace takes.
pub const MAX_FRAMES: u32 = 64;

/// How long after the last marked frame its lines are waited for (the
/// worker writes them within the burst that read it).
const SETTLE: Duration = Duration::from_millis(100);

/// The longest a trace waits.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// Holds a port's tracer for one trace, and lets it go however the trace
/// ends.
struct Held<'a>(&'a hvnet_datapath::trace::Tracer);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Traces the next `count` frames from `port` that `filter` keeps,
/// waiting at most `timeout`; `gone()` says the client left (the trace
/// ends then, its port free for the next).
pub fn trace(
    sw: &Switch,
    port: &str,
    filter: &str,
    count: u32,
    timeout: Duration,
    gone: impl Fn() -> bool,
) -> Result<Value, CtlError> {
    let p = sw
        .port(port)
        .ok_or_else(|| CtlError::not_found("port", port, crate::views::port_names(sw, false)))?;
    if !(1..=MAX_FRAMES).contains(&count) {
        return Err(CtlError::refused(format!(
            "count {count}: 1 to {MAX_FRAMES} frames"
        )));
    }
    if timeout.is_zero() || timeout > MAX_WAIT {
        return Err(CtlError::refused(format!(
            "timeout {} ms: more than 0, at most {} s",
            timeout.as_millis(),
            MAX_WAIT.as_secs()
        )));
    }
    let compiled = compile(filter, "trace")?;
    if !p.tracer.hold() {
        return Err(CtlError::refused(format!(
            "port {port} is being traced already; one trace at a time"
        )));
    }
    let held = Held(&p.tracer);
    // Lines left from frames no reader took are not this trace's.
    let _ = p.tracer.take();
    let first = p.tracer.marked() + 1;
    p.tracer.arm_matching(count, compiled);
    let start = Instant::now();
    let ended = loop {
        std::thread::sleep(Duration::from_millis(20));
        let here = sw.port(port).is_some_and(|now| Arc::ptr_eq(&now, &p));
        if !here {
            break "the port was removed";
        }
        if p.tracer.marked() + 1 - first >= u64::from(count) {
            std::thread::sleep(SETTLE);
            break "count";
        }
        if sw.stopping() {
            break "the switch is stopping";
        }
        if gone() {
            break "the client left";
        }
        if start.elapsed() >= timeout {
            break "timeout";
        }
    };
    drop(held);
    let lines = p.tracer.take();
    let mut found = frames(&lines, first);
    follow_tunnels(sw, &mut found);
    Ok(json!({
        "port": port,
        "filter": filter,
        "asked": count,
        "frames": found,
        "ended": ended,
        "seconds": start.elapsed().as_secs_f64(),
    }))
}

/// How long a synthetic frame waits for its port's worker (which looks
/// every tick, a tenth of a second).
const INJECT_WAIT: Duration = Duration::from_secs(5);

/// Traces a synthetic frame from `port`, described by `words`: its path
/// through every stage, delivered nowhere unless `inject`.
pub fn trace_flow(
    sw: &Switch,
    topo: &Topology,
    port: &str,
    words: &str,
    inject: bool,
) -> Result<Value, CtlError> {
    let p = sw
        .port(port)
        .ok_or_else(|| CtlError::not_found("port", port, crate::views::port_names(sw, false)))?;
    let spec = flow_spec::parse(words).map_err(|e| CtlError::refused(format!("FLOW {e}")))?;
    let r = resolve(sw, topo, port, &spec).map_err(|e| CtlError::refused(format!("FLOW {e}")))?;
    let frame = flow_spec::build(&spec, &r).map_err(|e| CtlError::refused(format!("FLOW {e}")))?;
    let mut v = json!({
        "port": port,
        "flow": words,
        "synthetic": !inject,
        "injected": inject,
        "bytes": frame.len(),
        "asked": 1,
    });
    if !p.is_up() {
        // Its queues are not read: nothing it sends enters the switch.
        v["frames"] = json!([{
            "frame": 1,
            "stages": [{"stage": "port", "text": format!("{port} is {}: its frames are not read", p.state().name())}],
            "dropped": "port_down",
            "delivered": [],
            "dropped_at": [],
        }]);
        v["ended"] = json!("port down");
        return Ok(v);
    }
    if !p.tracer.hold() {
        return Err(CtlError::refused(format!(
            "port {port} is being traced already; one trace at a time"
        )));
    }
    let held = Held(&p.tracer);
    let _ = p.tracer.take();
    let start = Instant::now();
    let id = p.tracer.inject(frame, inject);
    let ended = loop {
        if p.tracer.was_injected(id) {
            break "switched";
        }
        if sw.stopping() {
            break "the switch is stopping";
        }
        if start.elapsed() >= INJECT_WAIT {
            break "timeout";
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(held);
    let lines = p.tracer.take();
    let mut found = frames(&lines, id);
    follow_tunnels(sw, &mut found);
    v["frames"] = json!(found);
    v["ended"] = json!(ended);
    v["seconds"] = json!(start.elapsed().as_secs_f64());
    Ok(v)
}

/// A VM's (or an external host's) MAC and address by name, or the MAC of
/// a port the topology does not name.
fn named(sw: &Switch, topo: &Topology, name: &str) -> Option<(MacAddr, Option<IpAddr>)> {
    let ip = |v4: Option<(std::net::Ipv4Addr, u8)>, v6: Option<(std::net::Ipv6Addr, u8)>| {
        v4.map(|a| IpAddr::V4(a.0)).or(v6.map(|a| IpAddr::V6(a.0)))
    };
    if let Some(vm) = topo.vms.iter().find(|v| v.name == name) {
        return Some((vm.mac, ip(vm.ipv4, vm.ipv6)));
    }
    if let Some(h) = topo.hosts.iter().find(|h| h.name == name) {
        return Some((h.mac, ip(h.ipv4, h.ipv6)));
    }
    sw.port(name).map(|p| (p.mac, None))
}

/// The VM or host with address `ip`: its MAC.
fn mac_of(topo: &Topology, ip: IpAddr) -> Option<MacAddr> {
    let has = |v4: Option<(std::net::Ipv4Addr, u8)>, v6: Option<(std::net::Ipv6Addr, u8)>| match ip
    {
        IpAddr::V4(a) => v4.is_some_and(|x| x.0 == a),
        IpAddr::V6(a) => v6.is_some_and(|x| x.0 == a),
    };
    let vm = topo.vms.iter().find(|v| has(v.ipv4, v.ipv6)).map(|v| v.mac);
    vm.or_else(|| {
        topo.hosts
            .iter()
            .find(|h| has(h.ipv4, h.ipv6))
            .map(|h| h.mac)
    })
}

/// A FLOW's names and defaults made addresses: the sender is the traced
/// port's VM unless `src=` says otherwise; a destination's MAC is its
/// VM's, a group's, or `dmac=`.
fn resolve(
    sw: &Switch,
    topo: &Topology,
    port: &str,
    s: &FlowSpec,
) -> Result<Resolved, flow_spec::FlowError> {
    let err = |reason: String| flow_spec::FlowError {
        word: String::new(),
        reason,
    };
    let end = |h: &Host,
               what: &str|
     -> Result<(Option<MacAddr>, Option<IpAddr>), flow_spec::FlowError> {
        Ok(match h {
            Host::Mac(m) => (Some(*m), None),
            Host::Ip(ip) => (None, Some(*ip)),
            Host::Name(n) => {
                let (m, ip) = named(sw, topo, n).ok_or_else(|| {
                    let mut names: Vec<&str> = topo.vms.iter().map(|v| v.name.as_str()).collect();
                    names.extend(topo.hosts.iter().map(|h| h.name.as_str()));
                    err(format!(
                        "{what}={n}: no VM, host or port of that name (the VMs and hosts: {})",
                        names.join(", ")
                    ))
                })?;
                (Some(m), ip)
            }
        })
    };
    let own = Host::Name(port.to_string());
    let (smac, sip) = end(s.src.as_ref().unwrap_or(&own), "src")?;
    let smac = s
        .smac
        .or(smac)
        .or_else(|| sw.port(port).map(|p| p.mac))
        .unwrap_or_default();
    let (dmac, dip) = match &s.dst {
        Some(h) => end(h, "dst")?,
        None => (None, None),
    };
    let group = dip
        .filter(|ip| ip.is_multicast())
        .map(|ip| MacAddr(hvnet_wire::membership::group_mac(ip)));
    let bcast = dip
        .filter(|ip| *ip == IpAddr::V4(std::net::Ipv4Addr::BROADCAST))
        .map(|_| MacAddr::BROADCAST);
    let arp = (s.proto == Some(Proto::Arp)).then_some(MacAddr::BROADCAST);
    let dmac = s
        .dmac
        .or(arp)
        .or(dmac)
        .or(group)
        .or(bcast)
        .or_else(|| dip.and_then(|ip| mac_of(topo, ip)))
        .or_else(|| {
            // A VM behind a tunnel the fabric advertised (EVPN).
            let ip = dip?;
            sw.ports()
                .iter()
                .find_map(|p| sw.endpoint(p.id)?.evpn_resolve(ip))
        });
    let Some(dmac) = dmac else {
        return Err(err(match dip {
            Some(ip) => format!("no VM or host here has {ip}: give its MAC with dmac="),
            None => "name the receiver: dst= (an address or a VM) or dmac=".into(),
        }));
    };
    if smac == MacAddr::default() {
        return Err(err(format!(
            "{port} has no MAC of its own (an uplink): give smac= or src="
        )));
    }
    let ips = match (sip, dip) {
        (Some(a), Some(b)) if a.is_ipv6() == b.is_ipv6() => Some((a, b)),
        (Some(_), Some(_)) => return Err(err("src and dst are of different IP versions".into())),
        (None, Some(_)) => {
            return Err(err(
                "the sender's IP address is not known: give src= an address".into(),
            ))
        }
        _ => None,
    };
    Ok(Resolved {
        smac,
        dmac,
        vlan: s.vlan,
        ips,
    })
}

/// A frame's lines (stage, text) and its verdict: dropped on its way in
/// (the counters' reason), or the ports it was written to (or sent into a
/// tunnel by) and those whose copy was dropped.
fn verdict(of: &[(String, String)]) -> Value {
    let texts = |stage: &str, to_port: bool| -> Vec<String> {
        of.iter()
            .filter(|(st, t)| st == stage && t.starts_with("to ") == to_port)
            .map(|(_, t)| t.clone())
            .collect()
    };
    // A write line that is a delivery names the queue; one over the MTU
    // does not (its drop line says so). A frame sent into a tunnel marked
    // for the far end's trace left too.
    let mut delivered: Vec<String> = texts("write", true)
        .into_iter()
        .filter(|t| t.contains(" queue "))
        .collect();
    delivered.extend(
        texts("vxlan", true)
            .into_iter()
            .filter(|t| t.contains(" goes on at the far end")),
    );
    json!({
        "stages": of.iter().map(|(st, t)| json!({"stage": st, "text": t})).collect::<Vec<_>>(),
        "dropped": texts("drop", false).first(),
        "delivered": delivered,
        "dropped_at": texts("drop", true),
    })
}

/// The lines grouped by frame, in the order the frames were read, each
/// with its verdict.
fn frames(lines: &[TraceLine], first: u64) -> Vec<Value> {
    let mut ids: Vec<u64> = lines
        .iter()
        .map(|l| l.frame)
        .filter(|f| *f >= first)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|id| {
            let of: Vec<(String, String)> = lines
                .iter()
                .filter(|l| l.frame == id)
                .map(|l| (l.stage.to_string(), l.text.clone()))
                .collect();
            let mut v = verdict(&of);
            v["frame"] = json!(id - first + 1);
            v
        })
        .collect()
}

/// How long the far ends' reports are waited for.
const FAR_WAIT: Duration = Duration::from_secs(2);

/// The trace tokens a frame was sent into tunnels with: (endpoint port,
/// token).
fn tunnel_tokens(frame: &Value) -> Vec<(String, u16)> {
    frame["stages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["stage"] == "vxlan")
        .filter_map(|s| {
            let t = s["text"].as_str()?;
            let port = t.strip_prefix("to ")?.split(':').next()?.to_string();
            let token = t.split("trace #").nth(1)?.split(' ').next()?.parse().ok()?;
            Some((port, token))
        })
        .collect()
}

/// Each frame that went into a tunnel marked for the far end's trace gets
/// the far ends' parts (`far`: host, endpoint, lines and verdict), waited
/// for up to [`FAR_WAIT`]; a far end that sends none (not hvnet, or the
/// frame never reached its switch) is said, the trace ending at the
/// tunnel with what was sent.
fn follow_tunnels(sw: &Switch, frames: &mut [Value]) {
    let deadline = Instant::now() + FAR_WAIT;
    for f in frames.iter_mut() {
        let tokens = tunnel_tokens(f);
        if tokens.is_empty() {
            continue;
        }
        let mut far = Vec::new();
        for (port, token) in tokens {
            let Some(vtep) = sw.port(&port).and_then(|p| sw.endpoint(p.id)) else {
                continue;
            };
            loop {
                let got = vtep.take_reports(token);
                far.extend(got.iter().filter_map(|r| far_part(r)));
                if !far.is_empty() || Instant::now() >= deadline || sw.stopping() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if far.is_empty() {
            f["far_silent"] = json!("no word from the far end (not hvnet, or the frame did not reach its switch): the trace ends at the tunnel with what was sent");
        }
        f["far"] = json!(far);
    }
}

/// A far end's report read: its host, endpoint, lines and verdict.
fn far_part(report: &[u8]) -> Option<Value> {
    let r: Value = serde_json::from_slice(report).ok()?;
    let of: Vec<(String, String)> = r["lines"]
        .as_array()?
        .iter()
        .filter_map(|l| Some((l[0].as_str()?.to_string(), l[1].as_str()?.to_string())))
        .collect();
    let mut v = verdict(&of);
    v["host"] = r["host"].clone();
    v["endpoint"] = r["endpoint"].clone();
    v["lines_not_sent"] = r["more"].clone();
    Some(v)
}
