//! The control socket's server: its own accept thread, one thread per
//! client (at most [`MAX_CLIENTS`] at once), requests of at most
//! [`MAX_REQUEST`] bytes, and timeouts both ways, so that a client that
//! floods it or stops reading holds only its own thread and every other
//! client keeps getting answers.

use crate::ctl::Ctl;
use crate::guest::{self, Guest};
use crate::proto::{CtlError, Reply, Request};
use crate::state::state_dir;
use crate::topology::Topology;
use crate::views;
use hvnet_datapath::Switch;
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
            handle(sw, topo, Request::PortShow { name: name.clone() }).map(|mut v| {
                v["sources"] = crate::reconcile::port_set::sources(topo, &name, &v);
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
        Ok(Request::PortSet { name, changes }) => {
            crate::reconcile::port_set::set(cx, &name, changes)
        }
        Ok(Request::VmAdd { table }) => crate::reconcile::add_vm(cx, &table),
        Ok(Request::VmDel { name }) => crate::reconcile::del_vm(cx, &name),
        Ok(Request::Apply { text }) => crate::reconcile::apply(cx, &text),
        Ok(Request::LibvirtHook { op, xml }) => crate::libvirt::hook::hook(cx, &op, &xml),
        Ok(req) => handle(sw, topo, req),
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

/// Parses one request line (what a client sent, at most [`MAX_REQUEST`]
/// bytes).
pub fn parse_request(line: &str) -> Result<Request, CtlError> {
    serde_json::from_str(line).map_err(|e| CtlError::BadRequest {
        reason: e.to_string(),
    })
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

fn handle(sw: &Arc<Switch>, topo: &Topology, req: Request) -> Result<Value, CtlError> {
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
        | Request::PortSet { .. }
        | Request::VmAdd { .. }
        | Request::VmDel { .. }
        | Request::Apply { .. }
        | Request::LibvirtHook { .. } => Err(CtlError::refused("served by the daemon")),
    }
}
