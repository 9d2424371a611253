//! The control socket's server: its own accept thread, one thread per
//! client (at most [`MAX_CLIENTS`] at once), requests of at most
//! [`MAX_REQUEST`] bytes, and timeouts both ways, so that a client that
//! floods it or stops reading holds only its own thread and every other
//! client keeps getting answers.

use crate::ctl::Ctl;
use crate::guest::{self, Guest};
use crate::proto::{CtlError, Reply, Request};
use crate::rtnl::{LinkChange, Rtnl};
use crate::state::state_dir;
use crate::topology::Topology;
use crate::views;
use hvnet_datapath::rate::{parse_burst, parse_rate};
use hvnet_datapath::settings::{setting_range, SettingError};
use hvnet_datapath::{PortSettings, Switch, VlanSet};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest request line accepted.
pub const MAX_REQUEST: usize = 64 * 1024;
/// Clients served at once; one more is told the daemon is busy.
pub const MAX_CLIENTS: usize = 32;
/// How long a client may take to send its request or read its reply.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `listener` until the switch stops.
pub(crate) fn spawn(
    listener: UnixListener,
    cx: Arc<Ctl>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("ctl-accept".into())
        .spawn(move || {
            while !cx.sw.stopping() {
                if !hvnet_sys::poll_readable(listener.as_raw_fd(), 200).unwrap_or(false) {
                    continue;
                }
                let conn = match listener.accept() {
                    Ok((conn, _)) => conn,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "control socket: accept failed");
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                };
                let _ = conn.set_nonblocking(false);
                if active.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
                    active.fetch_sub(1, Ordering::AcqRel);
                    let _ = conn.set_write_timeout(Some(IO_TIMEOUT));
                    answer(
                        &conn,
                        Err(CtlError::refused(format!(
                            "busy: {MAX_CLIENTS} clients are being served; try again"
                        ))),
                    );
                    continue;
                }
                let (cx, active) = (cx.clone(), active.clone());
                let spawned =
                    std::thread::Builder::new()
                        .name("ctl-client".into())
                        .spawn(move || {
                            serve(&cx, conn);
                            active.fetch_sub(1, Ordering::AcqRel);
                        });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "control socket: cannot start a client thread");
                }
            }
        })
}

/// `hvnet restart VM` and `hvnet kill VM`.
fn restart_guest(
    topo: &Topology,
    guests: &Mutex<Vec<Guest>>,
    vm: &str,
    start: bool,
) -> Result<Value, CtlError> {
    let spec = topo.vms.iter().find(|v| v.name == vm).ok_or_else(|| {
        let names = topo.vms.iter().map(|v| v.name.clone()).collect();
        CtlError::not_found("VM", vm, names)
    })?;
    if !spec.kind.started_by_hvnet() {
        return Err(CtlError::refused(format!(
            "vm {vm} is a {} VM; only uml and qemu guests are started by hvnet",
            spec.kind.name()
        )));
    }
    let dir = state_dir(&topo.name);
    let mut all = guests.lock().expect("guests lock");
    if let Some(i) = all.iter().position(|g| g.vm == vm) {
        all.remove(i).stop(&dir);
    }
    if !start {
        return Ok(json!({"vm": vm, "running": false}));
    }
    let pid = guest::boot(topo, spec, &dir, &mut all).map_err(CtlError::failed)?;
    Ok(json!({"vm": vm, "running": true, "pid": pid}))
}

/// One client's request, read with a size limit and timeouts both ways,
/// answered on the connection's own thread.
fn serve(cx: &Ctl, conn: UnixStream) {
    let _ = conn.set_read_timeout(Some(IO_TIMEOUT));
    let _ = conn.set_write_timeout(Some(IO_TIMEOUT));
    let mut reader = BufReader::new((&conn).take(MAX_REQUEST as u64 + 1));
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(_) if line.len() > MAX_REQUEST => {
            return answer(&conn, Err(CtlError::TooLarge { limit: MAX_REQUEST }))
        }
        Ok(_) => {}
        Err(_) => return,
    }
    let topo = cx.topology();
    let (sw, topo, guests) = (&cx.sw, &*topo, &*cx.guests);
    let reply = match parse_request(&line).map(|r| by_name(sw, r)) {
        Ok(Request::Capture {
            port,
            points,
            filter,
            snaplen,
            count,
        }) => {
            use crate::capture_stream as capture;
            return match capture::plan(sw, &port, &points, &filter, snaplen, count) {
                Ok((plan, filter)) => {
                    capture::stream(&conn, plan, filter, |v| answer(&conn, Ok(v)));
                }
                Err(e) => answer(&conn, Err(e)),
            };
        }
        Ok(Request::PortShow { name }) => {
            handle(
                sw,
                topo,
                Request::PortShow { name: name.clone() },
                cx.unprivileged,
            )
            .map(|mut v| {
                // A real guest hvnet started: its processes.
                let all = guests.lock().expect("guests lock");
                if let Some(g) = all.iter().find(|g| g.vm == name) {
                    v["guest"] =
                        json!({"pid": g.pid(), "processes": g.processes(), "vcpus": g.vcpus()});
                }
                v
            })
        }
        Ok(Request::Trace {
            port,
            filter,
            count,
            timeout_ms,
        }) => {
            // A client that hangs up makes its socket readable (end of
            // file): the trace ends and frees the port.
            let fd = conn.as_raw_fd();
            let gone = || hvnet_sys::poll_readable(fd, 0).unwrap_or(true);
            crate::trace_view::trace(
                sw,
                &port,
                &filter,
                count,
                Duration::from_millis(timeout_ms),
                gone,
            )
        }
        Ok(Request::Diagnose { vm, window_ms }) => {
            // A real guest hvnet started: its processes' CPU.
            let pids = {
                let all = guests.lock().expect("guests lock");
                all.iter().find(|g| g.vm == vm).map(|g| g.pids())
            };
            crate::diagnose::diagnose(sw, topo, &vm, pids, Duration::from_millis(window_ms))
        }
        Ok(Request::Counters) => Ok({
            let mut v = views::counters(sw);
            // A real guest's processes are its vCPUs, for `hvnet top`.
            let all = guests.lock().expect("guests lock");
            for p in v.as_array_mut().into_iter().flatten() {
                if let Some(g) = all.iter().find(|g| p["name"] == g.vm.as_str()) {
                    p["guest_pids"] = json!(g.pids());
                }
            }
            v
        }),
        Ok(Request::Stats { path }) => views::stats(sw, &path).map(|mut v| {
            // An uplink's filters: its balancer too, when it has one.
            let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
            if let ["uplinks", u, "filters"] = parts.as_slice() {
                let all = cx.balancers.lock().expect("balancers lock");
                if let Some((_, b)) = all.iter().find(|(n, _)| n == u) {
                    v["balancer"] = b.lock().expect("balancer lock").view();
                }
            }
            v
        }),
        Ok(Request::Evpn) => Ok(views::evpn(sw, topo)),
        Ok(Request::Restart { vm }) => restart_guest(topo, guests, &vm, true),
        Ok(Request::Kill { vm }) => restart_guest(topo, guests, &vm, false),
        Ok(Request::VmAdd { table }) => crate::reconcile::add_vm(cx, &table),
        Ok(Request::VmDel { name }) => crate::reconcile::del_vm(cx, &name),
        Ok(Request::Apply { text }) => crate::reconcile::apply(cx, &text),
        Ok(Request::LibvirtHook { op, xml }) => crate::libvirt::hook::hook(cx, &op, &xml),
        Ok(req) => handle(sw, topo, req, cx.unprivileged),
        Err(e) => Err(e),
    };
    answer(&conn, reply);
}

fn answer(conn: &UnixStream, reply: Result<Value, CtlError>) {
    let reply = Reply::new(reply);
    let mut out = serde_json::to_string(&reply).expect("reply serializes");
    out.push('\n');
    let _ = (&*conn).write_all(out.as_bytes());
}

/// Ports are addressable by name or by number (`hvnet ports`' PORT
/// column) everywhere: a number that is not also a port's name becomes
/// that port's name.
fn by_name(sw: &Switch, req: Request) -> Request {
    let name_of = |n: String| match n.parse::<usize>() {
        Ok(i) if sw.port(&n).is_none() && sw.ports().get(i).is_some() => sw.ports()[i].name.clone(),
        _ => n,
    };
    match req {
        Request::PortShow { name } => Request::PortShow {
            name: name_of(name),
        },
        Request::Capture {
            port,
            points,
            filter,
            snaplen,
            count,
        } => Request::Capture {
            port: name_of(port),
            points,
            filter,
            snaplen,
            count,
        },
        Request::PortSet { name, changes } => Request::PortSet {
            name: name_of(name),
            changes,
        },
        Request::Trace {
            port,
            filter,
            count,
            timeout_ms,
        } => Request::Trace {
            port: name_of(port),
            filter,
            count,
            timeout_ms,
        },
        Request::Diagnose { vm, window_ms } => Request::Diagnose {
            vm: name_of(vm),
            window_ms,
        },
        Request::TraceFlow { port, flow, inject } => Request::TraceFlow {
            port: name_of(port),
            flow,
            inject,
        },
        Request::Stats { path } => {
            let mut parts: Vec<String> = path.split('/').map(str::to_string).collect();
            if let Some(p) = parts.iter().position(|s| !s.is_empty()) {
                if let Some(port) = parts.get_mut(p + 1) {
                    *port = name_of(std::mem::take(port));
                }
            }
            Request::Stats {
                path: parts.join("/"),
            }
        }
        other => other,
    }
}

/// A port's settings with `changes` (a `port set` request's, JSON) applied:
/// every key known, every value of its setting's kind, or an error that
/// names the field and what it takes. Nothing is applied here; the caller
/// checks ranges against the switch before changing anything.
pub fn merge_settings(cur: &PortSettings, changes: Value) -> Result<PortSettings, CtlError> {
    let mut cur = serde_json::to_value(cur).expect("settings serialize");
    let Value::Object(ch) = changes else {
        return Err(CtlError::BadRequest {
            reason: "changes must be an object".into(),
        });
    };
    let asked: Vec<String> = ch.keys().cloned().collect();
    for (k, v) in ch {
        let Some(now) = cur.get(&k) else {
            let allowed = cur.as_object().map(|o| o.keys().cloned().collect());
            return Err(CtlError::UnknownSetting {
                setting: k,
                allowed: allowed.unwrap_or_default(),
            });
        };
        // Each value's kind checked here, named in the CLI's words.
        let shown = match &v {
            Value::Bool(b) => if *b { "on" } else { "off" }.to_string(),
            Value::String(w) => w.clone(),
            other => other.to_string(),
        };
        let bad = |allowed: String| CtlError::BadValue {
            setting: k.clone(),
            value: shown.clone(),
            allowed,
        };
        // A trunk's VLANs: a list as an operator writes it (one number
        // is a list too); its native VLAN: a number, or none.
        match (k.as_str(), &v) {
            ("vlans", Value::Number(_) | Value::String(_)) => {
                VlanSet::parse(&shown)
                    .map_err(|e| bad(format!("VLAN ids and low-high ranges ({e})")))?;
                cur[&k] = json!(shown);
                continue;
            }
            ("vlans", _) => return Err(bad(allowed(&k))),
            ("native_vlan", Value::String(w)) if w == "none" => {
                cur[&k] = Value::Null;
                continue;
            }
            ("native_vlan", Value::Number(n)) if n.as_u64() == Some(0) => {
                cur[&k] = Value::Null;
                continue;
            }
            ("native_vlan", Value::Number(_)) => {
                if let (Some((_, max)), Some(n)) = (setting_range(&k), v.as_u64()) {
                    if n > max {
                        return Err(bad(allowed(&k)));
                    }
                }
                cur[&k] = v;
                continue;
            }
            ("native_vlan", _) => return Err(bad(allowed(&k))),
            // Rates and bursts: as tc writes them, or off.
            (
                "tx_rate" | "rx_rate" | "tx_burst" | "rx_burst" | "reservation" | "capacity",
                Value::Bool(false),
            ) => {
                cur[&k] = Value::Null;
                continue;
            }
            (
                "tx_rate" | "rx_rate" | "tx_burst" | "rx_burst" | "reservation" | "capacity",
                Value::String(w),
            ) if w == "none" => {
                cur[&k] = Value::Null;
                continue;
            }
            (
                "tx_rate" | "rx_rate" | "reservation" | "capacity",
                Value::String(_) | Value::Number(_),
            ) => {
                let r = parse_rate(&shown).map_err(|_| bad(allowed(&k)))?;
                cur[&k] = json!(r);
                continue;
            }
            ("tx_burst" | "rx_burst", Value::String(_) | Value::Number(_)) => {
                let b = parse_burst(&shown).map_err(|_| bad(allowed(&k)))?;
                cur[&k] = json!(b);
                continue;
            }
            ("tx_rate" | "rx_rate" | "tx_burst" | "rx_burst" | "reservation" | "capacity", _) => {
                return Err(bad(allowed(&k)))
            }
            // The guards' addresses: a list, or one string of them.
            ("addresses", Value::String(_) | Value::Array(_)) => {
                let a: hvnet_datapath::guard::Addresses = serde_json::from_value(v.clone())
                    .map_err(|e| bad(format!("{} ({e})", allowed(&k))))?;
                cur[&k] = serde_json::to_value(a).expect("addresses serialize");
                continue;
            }
            ("addresses", _) => return Err(bad(allowed(&k))),
            _ => {}
        }
        // Past the top of its range before its type could overflow.
        if let (Some((_, max)), Some(n)) = (setting_range(&k), v.as_u64()) {
            if n > max {
                return Err(bad(allowed(&k)));
            }
        }
        match (now, &v) {
            (Value::Bool(_), Value::Bool(_)) | (Value::Number(_), Value::Number(_)) => {}
            (Value::String(_), Value::String(w)) if words_of(&k).contains(&w.as_str()) => {}
            (Value::Bool(_), _) => return Err(bad("on or off".into())),
            _ => return Err(bad(allowed(&k))),
        }
        cur[&k] = v;
    }
    // A rate turned off takes its burst with it (unless the same change
    // says what the burst is).
    let has = |k: &str| asked.iter().any(|a| a == k);
    for (rate, burst) in [("tx_rate", "tx_burst"), ("rx_rate", "rx_burst")] {
        if has(rate) && !has(burst) && cur[rate].is_null() {
            cur[burst] = Value::Null;
        }
    }
    serde_json::from_value(cur).map_err(|e| CtlError::BadRequest {
        reason: format!("bad value: {e}"),
    })
}

/// Parses one request line (what a client sent, at most [`MAX_REQUEST`]
/// bytes).
pub fn parse_request(line: &str) -> Result<Request, CtlError> {
    serde_json::from_str(line).map_err(|e| CtlError::BadRequest {
        reason: e.to_string(),
    })
}

/// The words a setting that takes a word accepts.
fn words_of(k: &str) -> &'static [&'static str] {
    match k {
        "rx_overflow" => &["drop", "backpressure"],
        "delivery" => &["auto", "thread"],
        "vlan_mode" => &["access", "trunk"],
        _ => &[],
    }
}

/// What a number or word setting takes, for errors: its range, or its
/// words.
fn allowed(k: &str) -> String {
    match k {
        "vlans" => return "VLAN ids and low-high ranges, 1..4094 (10,20,100-199)".into(),
        "native_vlan" => return format!("{} or none", number_in(1, 4094)),
        "tx_rate" | "rx_rate" | "reservation" | "capacity" => {
            return "a rate as tc writes it (1gbit, 500mbit, 64kbit), 1bit..1tbit, or off".into()
        }
        "tx_burst" | "rx_burst" => {
            return "a burst in bytes as tc writes it (256kb, 2mb), 65kb..1gb, or off".into()
        }
        "addresses" => {
            return "addresses and prefixes, comma-separated (198.18.0.5,fd00::5,198.18.7.0/24), or none".into()
        }
        _ => {}
    }
    match (setting_range(k), words_of(k)) {
        (Some((min, max)), _) => number_in(min, max),
        (None, []) => "see `hvnet port PORT`".into(),
        (None, words) => format!("a word ({})", words.join(" or ")),
    }
}

fn number_in(min: u64, max: u64) -> String {
    format!("a number ({min}..{max})")
}

/// The switch's refusal of a setting, typed.
fn setting_error(e: SettingError) -> CtlError {
    match e {
        SettingError::NoPort(name) => CtlError::not_found("port", &name, Vec::new()),
        SettingError::Range {
            setting,
            value,
            min,
            max,
        } => CtlError::BadValue {
            setting: setting.into(),
            value: value.to_string(),
            allowed: number_in(min, max),
        },
        SettingError::Fixed(reason) | SettingError::Conflict(reason) => {
            CtlError::Refused { reason }
        }
        SettingError::Device(reason) => CtlError::Failed { reason },
    }
}

/// A port view of a VM in a namespace hvnet did not make, with where its
/// interface is, and of any port with the container it was made for.
fn with_attachment(row: &mut Value, name: &str, topo: &Topology) {
    let Some(v) = topo.vms.iter().find(|v| v.name == name) else {
        return;
    };
    if let Some(a) = &v.attach {
        row["netns"] = json!(a.netns);
        row["ifname"] = json!(a.ifname);
    }
    if let Some(c) = &v.container {
        row["container"] = json!(c);
    }
}

fn handle(
    sw: &Arc<Switch>,
    topo: &Topology,
    req: Request,
    unprivileged: bool,
) -> Result<Value, CtlError> {
    let port = |name: &str| {
        sw.port(name)
            .ok_or_else(|| CtlError::not_found("port", name, views::port_names(sw, false)))
    };
    match req {
        Request::Ports => {
            let mut rows = views::ports(sw, &topo.name);
            if let Value::Array(rows) = &mut rows {
                for r in rows.iter_mut() {
                    let name = r["name"].as_str().unwrap_or_default().to_string();
                    with_attachment(r, &name, topo);
                }
            }
            Ok(rows)
        }
        Request::Stats { path } => views::stats(sw, &path),
        Request::PortShow { name } => {
            let p = port(&name)?;
            let mut v = views::port_settings(sw, &p);
            with_attachment(&mut v, &name, topo);
            v["drops"] = views::drops_by_reason(&p);
            v["traced"] = json!(p.tracer.is_held());
            Ok(v)
        }
        Request::PortSet { name, changes } => {
            let p = port(&name)?;
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
            let new = merge_settings(&old, changes)?;
            // Checked before anything changes: a refused value leaves the
            // guest's MTU as it was.
            sw.check_settings(&name, &new).map_err(setting_error)?;
            let mtu_changes = new.mtu != old.mtu;
            if mtu_changes && p.dev.other_side_sets_mtu() {
                return Err(CtlError::refused("a real guest sets its own MTU (ip link set eth0 mtu … inside it); its port's mtu is what the switch takes"));
            }
            if mtu_changes && !p.is_uplink() && unprivileged {
                return Err(CtlError::refused(format!("the daemon gave up root after bring-up (--drop-privileges): {name}'s MTU is set in its topology file, not at run time")));
            }
            if mtu_changes && !p.is_uplink() {
                let change = LinkChange {
                    mtu: Some(new.mtu),
                    ..Default::default()
                };
                let vm = topo.vms.iter().find(|v| v.name == name);
                let (path, ifname) = match vm {
                    Some(v) => (topo.netns_path(v), v.ifname().to_string()),
                    None => (hvnet_sys::netns::path(&topo.netns_of(&name)), "eth0".into()),
                };
                let handle = std::fs::File::open(&path).map_err(|e| {
                    CtlError::failed(format!("open network namespace {}: {e}", path.display()))
                })?;
                Rtnl::in_netns_of(&handle)
                    .and_then(|mut rtnl| rtnl.set_link(&ifname, &change))
                    .map_err(CtlError::failed)?;
            }
            sw.set_port(&name, new).map_err(setting_error)?;
            tracing::info!(port = %name, from = %json!(old), to = %json!(p.settings()), "settings changed");
            Ok(views::port_settings(sw, &p))
        }
        Request::Fdb => Ok(Value::Array(
            sw.fdb
                .rows(Instant::now())
                .into_iter()
                .map(|r| {
                    let mut v = json!(r);
                    // The port by name too, as every other view names it.
                    v["port_name"] = json!(sw.ports().get(r.port).map(|p| p.name.clone()));
                    v
                })
                .collect(),
        )),
        Request::Mdb => Ok(crate::mdb_view::mdb(sw)),
        Request::Route { tenant } => crate::views::route(sw, tenant.as_deref()),
        Request::Mirror => Ok(views::mirrors(sw)),
        Request::Ipfix => Ok(views::ipfix(sw)),
        Request::Team => Ok(views::teams(sw)),
        Request::Workers => Ok(json!(sw.workers.view(sw))),
        Request::Shutdown => {
            sw.stop();
            Ok(json!("stopping"))
        }
        Request::Counters => Ok(views::counters(sw)),
        Request::TraceFlow { port, flow, inject } => {
            crate::trace_view::trace_flow(sw, topo, &port, &flow, inject)
        }
        Request::Acl { port, conntrack } => crate::acl_view::acl(sw, port.as_deref(), conntrack),
        Request::AclReapply { port, flush } => crate::acl_view::reapply(sw, port.as_deref(), flush),
        Request::Restart { .. }
        | Request::Capture { .. }
        | Request::Trace { .. }
        | Request::Diagnose { .. }
        | Request::Kill { .. }
        | Request::Evpn
        | Request::VmAdd { .. }
        | Request::VmDel { .. }
        | Request::Apply { .. }
        | Request::LibvirtHook { .. } => Err(CtlError::refused("served by the daemon")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvnet_datapath::VlanMode;

    #[test]
    fn port_set_takes_a_trunk_s_vlans_as_an_operator_writes_them() {
        let cur = PortSettings::default();
        let new = merge_settings(
            &cur,
            json!({"vlan_mode": "trunk", "vlans": "10,20,100-199", "native_vlan": 5}),
        )
        .unwrap();
        assert_eq!(new.vlan_mode, VlanMode::Trunk);
        assert_eq!(new.vlans.to_string(), "10,20,100-199");
        assert_eq!(new.native_vlan, Some(5));
        // One VLAN comes as a number; native_vlan=none (or 0) clears it.
        let one = merge_settings(&new, json!({"vlans": 30, "native_vlan": "none"})).unwrap();
        assert_eq!(
            (one.vlans.to_string(), one.native_vlan),
            ("30".into(), None)
        );
        let zero = merge_settings(&new, json!({"native_vlan": 0})).unwrap();
        assert_eq!(zero.native_vlan, None);
        let back = merge_settings(&new, json!({"vlan_mode": "access"})).unwrap();
        assert_eq!(back.vlan_mode, VlanMode::Access);
        for (changes, why) in [
            (json!({"vlans": "10,5000"}), "vlan 5000 is outside 1..4094"),
            (json!({"vlans": true}), "VLAN ids and low-high ranges"),
            (json!({"native_vlan": 5000}), "a number (1..4094) or none"),
            (json!({"native_vlan": "five"}), "or none"),
            (json!({"vlan_mode": "hybrid"}), "access or trunk"),
        ] {
            let e = merge_settings(&cur, changes.clone()).unwrap_err();
            let CtlError::BadValue { allowed, .. } = &e else {
                panic!("{changes}: {e:?}");
            };
            assert!(allowed.contains(why), "{changes}: {allowed}");
        }
    }

    #[test]
    fn port_set_takes_a_ports_addresses_and_guards_or_refuses_the_whole_change() {
        let cur = PortSettings::default();
        let new = merge_settings(
            &cur,
            json!({"addresses": "198.18.0.5, fd00::5,198.18.8.0/24", "ra_guard": false}),
        )
        .unwrap();
        let shown: Vec<String> = new
            .addresses
            .entries()
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(shown, ["198.18.0.5", "fd00::5", "198.18.8.0/24"]);
        assert!(!new.ra_guard && new.dhcp_guard);
        let none = merge_settings(&new, json!({"addresses": "none"})).unwrap();
        assert!(none.addresses.entries().is_empty());
        for (changes, why) in [
            (
                json!({"ra_guard": false, "addresses": "198.18.0.5,nonsense"}),
                "not an IP address",
            ),
            (json!({"addresses": 5}), "comma-separated"),
            (json!({"source_guard": "maybe"}), "on or off"),
        ] {
            let e = merge_settings(&cur, changes.clone()).unwrap_err();
            let CtlError::BadValue { allowed, .. } = &e else {
                panic!("{changes}: {e:?}");
            };
            assert!(allowed.contains(why), "{changes}: {allowed}");
        }
    }
}
