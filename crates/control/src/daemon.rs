//! `hvnet up` / `hvnet down` and the switch daemon between them.
//!
//! `up` validates the topology, starts `hvnet daemon` in its own process
//! group, and returns once the daemon says traffic can flow. The daemon
//! creates each VM (a network namespace whose NIC is a persistent TAP the
//! daemon holds), records everything it creates in
//! `/run/hvnet/<topology>/state.json` before creating it, runs the switch and
//! serves the control socket. A daemon that stops (a signal) or dies leaves
//! the VMs with their NICs; the next `up` of the same file re-attaches to
//! them. `down` stops the daemon and removes exactly what the state file
//! lists and what carries the topology's marker, also after a crash.

use crate::ctl::Ctl;
use crate::ctl_server;
pub use crate::error::{io_err, run, DaemonError};
use crate::guest::{self, Guest};
use crate::proto::{self, Request};
use crate::provision;
use crate::state::{
    self, create_state_dir, device_marker, lock_topology, netns_marker, read_state, write_state,
    KeptGuest, State,
};
pub use crate::state::{state_dir, topologies, RUN_DIR};
use crate::topology::{self, Topology};
use crate::watch::{NetnsWatch, Watch};
use hvnet_datapath::{Switch, SwitchConfig};
use hvnet_port::SocketMode;
use serde::Serialize;
use std::net::SocketAddr;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// True when `pid` is still the daemon of the topology whose state names
/// it: alive, and running `hvnet daemon` on that topology's file. A PID the
/// kernel has since given to another process is never signalled.
fn daemon_alive(state: &State) -> bool {
    if state.pid == 0 {
        return false;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{}/cmdline", state.pid)) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let file = state.file.as_os_str().as_encoded_bytes();
    args.contains(&&b"daemon"[..]) && args.contains(&file)
}

/// `up` and `down` create and remove namespaces and devices: say so first,
/// rather than fail half-way with "Permission denied".
fn require_root() -> Result<(), DaemonError> {
    if hvnet_sys::is_root() {
        Ok(())
    } else {
        Err(DaemonError::Other(
            "run as root: this creates and removes network namespaces and devices".into(),
        ))
    }
}

/// How a daemon finds its topology on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bringup {
    /// Nothing of it exists yet: create everything.
    Fresh,
    /// A daemon of this topology stopped or died and left its VMs (their
    /// namespaces and persistent TAPs): re-attach to them.
    Reattach,
}

/// Decides, under the topology's lock, whether `topo` can come up and how:
/// refuses a topology that is up, one whose file changed since its VMs
/// were made, and names that clash with what exists and is not its own.
pub fn prepare(topo: &Topology, text: &str) -> Result<Bringup, DaemonError> {
    let dir = state_dir(&topo.name);
    if let Some(s) = read_state(&dir) {
        if daemon_alive(&s) {
            return Err(DaemonError::Other(format!(
                "topology {} is already up (daemon pid {}); `hvnet down {}` first",
                topo.name, s.pid, topo.name
            )));
        }
        if s.instance.is_empty() || s.topology_text != text {
            return Err(DaemonError::Other(format!(
                "topology {} has VMs left from a daemon that stopped, made from {}; `hvnet down {}` removes them first",
                topo.name,
                if s.instance.is_empty() { "a bring-up that did not finish" } else { "a different version of its file" },
                topo.name
            )));
        }
        return Ok(Bringup::Reattach);
    }
    for ns in topo.namespaces() {
        if hvnet_sys::netns::path(&ns).exists() {
            return Err(DaemonError::Other(format!(
                "network namespace {ns} exists already and is not hvnet's (topology {} names it for one of its VMs or hosts)",
                topo.name
            )));
        }
    }
    for h in &topo.hosts {
        let dev = &topo.uplink_of(h).device;
        if hvnet_sys::packet::ifindex(dev).is_some() {
            return Err(DaemonError::Other(format!(
                "host {}: device {dev} exists already; an external host is joined to its uplink by a new veth pair of that name",
                h.name
            )));
        }
    }
    for u in &topo.uplinks {
        let hosted = topo.hosts.iter().any(|h| h.uplink == u.name);
        if hosted {
            continue;
        }
        let here = topo
            .netns
            .as_ref()
            .map(|ns| format!(" in network namespace {ns} (the topology's `netns`): make it or move it there first"))
            .unwrap_or_else(|| ": make it first".into());
        for d in u.devices() {
            if hvnet_sys::packet::ifindex(d).is_none() {
                return Err(DaemonError::Other(format!(
                    "uplink {}: no network interface named {d}{here}, or declare a [[host]] on it to make one",
                    u.name
                )));
            }
        }
    }
    Ok(Bringup::Fresh)
}

/// What `up` did.
pub struct UpReport {
    /// The topology.
    pub topo: Topology,
    /// Whether its VMs were created or re-attached to, or the file
    /// applied to a running topology.
    pub bringup: Bringup,
    /// What applying the file did (VMs and uplinks added, removed, their
    /// port settings changed).
    pub applied: Option<serde_json::Value>,
}

/// `hvnet up FILE`: returns once traffic can flow. Starts `hvnet daemon`
/// in its own process group, its log in the state directory.
pub fn up(
    file: &Path,
    exe: &Path,
    metrics: Option<SocketAddr>,
    drop_privileges: bool,
) -> Result<UpReport, DaemonError> {
    require_root()?;
    let text = read_topology_text(file)?;
    let topo = topology::load(file)?;
    let name = topo.name.clone();
    let lock = lock_topology(&name)?;
    if let Some(s) = read_state(&state_dir(&name)).filter(daemon_alive) {
        // Running: the file is applied to it.
        drop(lock);
        let sock = state_dir(&name).join("ctl.sock");
        let wait = Duration::from_secs(60) + guest::BOOT_TIMEOUT * topo.vms.len() as u32;
        let r = proto::call_waiting(&sock, &Request::Apply { text }, wait).map_err(io_err(
            format!("the daemon of topology {name} (pid {})", s.pid),
        ))?;
        if !r.ok {
            return Err(DaemonError::Other(format!(
                "topology {name} runs; the file was not applied: {}",
                r.error
            )));
        }
        return Ok(UpReport {
            topo,
            // Not brought up: `applied` says what changed.
            bringup: Bringup::Reattach,
            applied: Some(r.data),
        });
    }
    let report = up_locked(topo, &text, file, exe, metrics, drop_privileges);
    // Refused before anything was made, or undone: no lock file is left.
    if report.is_err() && !state_dir(&name).exists() {
        lock.remove();
    }
    report
}

fn up_locked(
    topo: Topology,
    text: &str,
    file: &Path,
    exe: &Path,
    metrics: Option<SocketAddr>,
    drop_privileges: bool,
) -> Result<UpReport, DaemonError> {
    let bringup = prepare(&topo, text)?;
    let dir = state_dir(&topo.name);
    create_state_dir(&dir)?;
    let file = file
        .canonicalize()
        .map_err(io_err("resolve topology path"))?;
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(dir.join("daemon.log"))
        .map_err(io_err("open daemon.log"))?;
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(exe);
    cmd.arg("daemon").arg("--locked");
    if let Some(a) = metrics {
        cmd.arg(format!("--metrics={a}"));
    }
    if drop_privileges {
        cmd.arg("--drop-privileges");
    }
    let mut child = cmd
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io_err("daemon log"))?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(io_err("start the daemon"))?;
    // Real guests boot before the daemon says it is ready.
    let boot = if topo.vms.iter().any(|v| v.kind.started_by_hvnet()) {
        guest::BOOT_TIMEOUT
    } else {
        Duration::ZERO
    };
    // Each VM's namespace and NIC take their time too (tens of ms each).
    let per_vm = Duration::from_millis(100) * topo.vms.len() as u32;
    let wait = Duration::from_secs(30) + boot + per_vm;
    let deadline = Instant::now() + wait;
    loop {
        if let Some(s) = read_state(&dir).filter(|s| s.ready && s.pid == child.id()) {
            // A re-attached daemon runs what ran (VMs added and removed at
            // run time included), not only what the file says.
            let topo = match bringup {
                Bringup::Reattach => s.running_topology().unwrap_or(topo),
                _ => topo,
            };
            return Ok(UpReport {
                topo,
                bringup,
                applied: None,
            });
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
            if bringup == Bringup::Fresh {
                let _ = down_locked(&topo.name);
                // Refused before it made anything: only its log was here.
                let _ = std::fs::remove_dir_all(&dir);
            }
            return Err(DaemonError::Other(format!(
                "the daemon exited ({status}) before traffic could flow:\n{}",
                log.trim()
            )));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let _ = down_locked(&topo.name);
            return Err(DaemonError::Other(format!(
                "the daemon did not get ready within {} s",
                wait.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_topology_text(file: &Path) -> Result<String, DaemonError> {
    std::fs::read_to_string(file).map_err(|e| {
        DaemonError::Topology(topology::TopologyError {
            path: file.into(),
            line: 0,
            section: None,
            reason: format!("cannot read: {e}"),
        })
    })
}

/// What `down` removed, and what it left because it was not this
/// topology's.
#[derive(Debug, Default, Serialize)]
pub struct DownReport {
    /// The daemon was running and was stopped.
    pub stopped_pid: Option<u32>,
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
    /// Interfaces taken out of namespaces hvnet did not make
    /// (containers'), as `IF in PATH`.
    pub interfaces: Vec<String>,
    /// Namespaces and devices the state names but that carry another
    /// owner's marker (or none): left untouched.
    pub left: Vec<String>,
}

/// `hvnet down NAME`: stops the daemon and removes what the state lists,
/// each thing only if it carries this topology's ownership marker.
pub fn down(name: &str) -> Result<DownReport, DaemonError> {
    topology::check_topology_name(name).map_err(DaemonError::Other)?;
    require_root()?;
    let lock = lock_topology(name)?;
    let report = down_locked(name);
    // Gone, or never there: its lock file goes too.
    if report.is_ok() || read_state(&state_dir(name)).is_none() {
        lock.remove();
    }
    report
}

fn down_locked(name: &str) -> Result<DownReport, DaemonError> {
    let dir = state_dir(name);
    let Some(state) = read_state(&dir) else {
        return Err(DaemonError::Other(format!(
            "no topology named {name} is up (nothing under {})",
            dir.display()
        )));
    };
    let mut report = DownReport::default();
    if daemon_alive(&state) {
        let _ = proto::call(&dir.join("ctl.sock"), &Request::Shutdown);
        let deadline = Instant::now() + Duration::from_secs(5);
        while daemon_alive(&state) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if daemon_alive(&state) {
            let _ = run(&["kill", "-KILL", &state.pid.to_string()]);
        }
        report.stopped_pid = Some(state.pid);
    }
    // Guests of a daemon that died: their process groups, by id.
    guest::kill_groups_left(&state.guests);
    // FRR's daemons, where `up` started them (first: BGP withdraws this
    // host's routes while the switch's devices still exist).
    crate::evpn::FrrRun::of(name).stop();
    let marker = state.marker();
    for ns in &state.namespaces {
        if !hvnet_sys::netns::path(ns).exists() {
            continue;
        }
        match netns_marker(ns) {
            Some(m) if m == marker => {
                hvnet_sys::netns::delete(ns)
                    .map_err(io_err(format!("delete network namespace {ns}")))?;
                report.namespaces.push(ns.clone());
            }
            m => report.left.push(format!(
                "network namespace {ns} (not this topology's: marker {:?})",
                m.unwrap_or_default()
            )),
        }
    }
    for i in &state.attached {
        match crate::provision::delete_attached(i, &marker) {
            Ok(true) => report
                .interfaces
                .push(format!("{} in {}", i.ifname, i.netns.display())),
            Ok(false) => {}
            Err(e) => report.left.push(format!(
                "interface {} in {}: {e}",
                i.ifname,
                i.netns.display()
            )),
        }
    }
    for dev in &state.devices {
        if hvnet_sys::packet::ifindex(dev).is_none() {
            continue;
        }
        match device_marker(dev) {
            Some(m) if m == marker => {
                crate::rtnl::Rtnl::new()?.del_link(dev)?;
            }
            m => report.left.push(format!(
                "device {dev} (not this topology's: marker {:?})",
                m.unwrap_or_default()
            )),
        }
    }
    std::fs::remove_dir_all(&dir).map_err(io_err(format!("remove {}", dir.display())))?;
    // libvirt's socket directory, where its guests have all gone (a
    // socket of a guest still running stays for the next switch).
    if let Some(lv) = state.running_topology().ok().and_then(|t| t.libvirt) {
        let _ = std::fs::remove_dir(&lv.sockets);
    }
    Ok(report)
}

/// `hvnet daemon FILE`: brings the topology up (or re-attaches to its VMs)
/// and runs the switch until `hvnet down`, SIGTERM or SIGINT. Started by
/// `up` (which holds the topology's lock for it: `locked`), or run in the
/// foreground by a service manager. On a signal it stops cleanly: ports
/// drained, socket removed, the state marked stopped, exit 0 — the VMs keep
/// their NICs and addresses for the next daemon to re-attach to.
pub fn daemon(
    file: &Path,
    locked: bool,
    metrics: Option<SocketAddr>,
    drop_privileges: bool,
) -> Result<(), DaemonError> {
    require_root()?;
    hvnet_sys::set_umask(0o077);
    let text = read_topology_text(file)?;
    let topo = Arc::new(topology::load(file)?);
    if drop_privileges {
        if let Some(vm) = topo.vms.iter().find(|v| v.kind.started_by_hvnet()) {
            return Err(DaemonError::Other(format!(
                "--drop-privileges: VM {} is a {} guest, which hvnet starts, restarts and stops as root; use kind = \"vhost-user\" for a guest started elsewhere",
                vm.name,
                vm.kind.name()
            )));
        }
    }
    if drop_privileges && topo.libvirt.is_some() {
        return Err(DaemonError::Other(
            "--drop-privileges: [libvirt] adds and removes ports as libvirt's guests come and go, which needs root".into(),
        ));
    }
    let lock = if locked {
        None
    } else {
        Some(lock_topology(&topo.name)?)
    };
    let bringup = prepare(&topo, &text)?;
    // (error.rs imports nothing of metrics, which imports the views: the
    // endpoint's error becomes words here.)
    let endpoint = metrics
        .map(crate::metrics::bind)
        .transpose()
        .map_err(|e| DaemonError::Other(crate::error::chain(&e)))?;
    let dir = state_dir(&topo.name);
    create_state_dir(&dir)?;
    let mut state = match bringup {
        Bringup::Fresh => State {
            name: topo.name.clone(),
            instance: state::new_instance(),
            topology_text: text,
            ..State::default()
        },
        Bringup::Reattach => {
            let mut s = read_state(&dir).expect("prepare read it");
            s.restarts += 1;
            s
        }
    };
    // Containers' ports whose removal waited for this daemon, or whose
    // container went meanwhile, are not re-attached to.
    if bringup == Bringup::Reattach {
        provision::forget_gone_containers(&mut state, &dir);
    }
    // VMs added and removed at run time, as the last daemon left them
    // (the text is the file's: `prepare` checked).
    let topo = if state.added_vms.is_empty()
        && state.removed_vms.is_empty()
        && state.port_changes.is_empty()
    {
        topo
    } else {
        let t = state.running_topology().map_err(|e| {
            DaemonError::Other(format!(
                "topology {}: changes made at run time: {e}",
                topo.name
            ))
        })?;
        Arc::new(t)
    };
    if bringup == Bringup::Reattach {
        provision::forget_stray_attachments(&topo, &mut state);
    }
    state.file = file
        .canonicalize()
        .map_err(io_err("resolve topology path"))?;
    state.pid = std::process::id();
    state.ready = false;
    // The last daemon's guests: those that ran on (QEMU's) are taken
    // over where they still run; the others' groups are ended.
    let kept = std::mem::take(&mut state.kept_guests);
    let stale_guests = std::mem::take(&mut state.guests);
    write_state(&dir, &state)?;
    let gone: Vec<u32> = stale_guests
        .into_iter()
        .filter(|g| !kept.iter().any(|k| k.pgid == *g))
        .collect();
    guest::kill_groups_left(&gone);
    let built = build(&topo, &dir, &mut state, bringup, &kept);
    let (sw, threads, guests) = match built {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "bring-up failed");
            if bringup == Bringup::Fresh && !locked {
                let _ = down_locked(&topo.name);
            } else {
                state.pid = 0;
                let _ = write_state(&dir, &state);
            }
            return Err(e);
        }
    };
    let sock = dir.join("ctl.sock");
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).map_err(io_err("bind the control socket"))?;
    let guests = Arc::new(Mutex::new(guests));
    // Dynamic NetQueue: a balancer per uplink that asks for one. Its
    // thread ends when its uplink is removed at run time, so it is not one
    // of the switch's threads that `watch` expects to run until the stop.
    let mut balancers = Vec::new();
    let mut balancer_threads = Vec::new();
    let mut threads = threads;
    for u in &topo.uplinks {
        let started =
            crate::balancer::start(&sw, &topo, u).map_err(io_err("start the netqueue balancer"))?;
        if let Some((t, b)) = started {
            balancer_threads.push(t);
            balancers.push((u.name.clone(), b));
        }
    }
    // BGP EVPN: the uplinks' shadows and their syncs, and FRR if asked.
    let evpn = match crate::evpn::start(&sw, &topo, &dir, &mut state) {
        Ok((t, a)) => {
            threads.extend(t);
            a
        }
        Err(e) => {
            tracing::error!(error = %e, "EVPN bring-up failed");
            sw.stop();
            for t in threads.into_iter().chain(balancer_threads) {
                let _ = t.join();
            }
            if bringup == Bringup::Fresh && !locked {
                let _ = down_locked(&topo.name);
            }
            return Err(e);
        }
    };
    let netns_watch = Arc::new(Mutex::new(NetnsWatch::new(topo.vms.iter().filter_map(
        |v| {
            let (ns, nic) = topo.watched_netns(v)?;
            Some((v.name.clone(), ns, nic))
        },
    ))));
    let cx = Arc::new(Ctl {
        sw: sw.clone(),
        netns_watch: netns_watch.clone(),
        topo: Mutex::new(topo.clone()),
        changes: Mutex::new(()),
        evpn: Mutex::new(evpn),
        guests: guests.clone(),
        unprivileged: drop_privileges,
        balancers: Mutex::new(balancers),
    });
    // libvirt's guests: their socket directory watched from here on.
    if let Some(lv) = topo.libvirt.clone() {
        crate::libvirt::agent::prepare_directory(&lv)
            .map_err(io_err(format!("create {}", lv.sockets.display())))?;
        let cx = cx.clone();
        threads.push(
            std::thread::Builder::new()
                .name("libvirt".into())
                .spawn(move || crate::libvirt::agent::run(cx, lv))
                .map_err(io_err("start the libvirt watch"))?,
        );
    }
    let pending = cx.clone();
    let ctl = ctl_server::spawn(listener, cx).map_err(io_err("serve the control socket"))?;
    let scrapes = endpoint
        .map(|ep| crate::metrics::serve(ep, sw.clone()))
        .transpose()
        .map_err(|e| DaemonError::Other(crate::error::chain(&e)))?;
    // SIGTERM and SIGINT wake the main loop at once (a restart's gap is
    // the stop's time), through a thread that waits for them.
    let term = Arc::new(AtomicBool::new(false));
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .map_err(io_err("handle signals"))?;
    let signals_handle = signals.handle();
    let signal_thread = {
        let (term, main) = (term.clone(), std::thread::current());
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                if signals.forever().next().is_some() {
                    term.store(true, Ordering::Release);
                    main.unpark();
                }
            })
            .map_err(io_err("start the signal thread"))?
    };
    state.ready = true;
    write_state(&dir, &state)?;
    drop(lock);
    if drop_privileges {
        // Every port is open: nothing the switch does from here needs root.
        // What it still writes (the state, at a stop) is best effort; a
        // daemon that is gone is seen as stopped by its PID.
        hvnet_sys::drop_to(NOBODY, NOBODY).map_err(io_err("drop privileges"))?;
        tracing::info!(
            uid = NOBODY,
            "privileges dropped: running as nobody, without capabilities"
        );
    }
    if hvnet_datapath::BARE_ARCS {
        tracing::warn!(
            "a measurement build (bare arcs): no feature stage is on any port's path, whatever the topology sets (no guards, security groups, rates, mirrors, capture, flow export, snooping, software checksums or LRO)"
        );
    }
    match bringup {
        Bringup::Fresh => tracing::info!(
            topology = %topo.name, vms = topo.vms.len(), uplinks = topo.uplinks.len(),
            "topology up"
        ),
        Bringup::Reattach => tracing::info!(
            topology = %topo.name, vms = topo.vms.len(), uplinks = topo.uplinks.len(),
            restarts = state.restarts,
            "re-attached to the topology's VMs; their counters start again from zero"
        ),
    }
    let mut watch = Watch::new(&sw);
    // FRR, where the topology has `[frr]`, started again if it goes (not
    // once privileges are dropped: nobody cannot start it).
    let mut frr_keeper = crate::evpn::FrrKeeper::of(&topo).filter(|_| !drop_privileges);
    let mut turn = 0u32;
    while !sw.stopping() {
        if term.load(Ordering::Acquire) {
            tracing::info!("signal received: stopping (the VMs keep their NICs and QEMU guests keep running; `hvnet up` re-attaches, `hvnet down` removes them)");
            sw.stop();
            break;
        }
        std::thread::park_timeout(Duration::from_millis(100));
        if term.load(Ordering::Acquire) {
            continue;
        }
        reap_guests(&dir, &guests);
        // The slower looks (every port's counters; every namespace VM's
        // namespace) once a second, not ten times: with thousands of
        // ports they are what an idle daemon spends.
        turn = turn.wrapping_add(1);
        if turn.is_multiple_of(10) {
            watch.check(&sw, &threads);
        }
        if turn.is_multiple_of(10) {
            netns_watch.lock().expect("netns watch lock").check();
            crate::reconcile::pending_dels(&pending);
            if let Some(k) = frr_keeper.as_mut() {
                k.look(Instant::now());
            }
        }
    }
    // QEMU guests run on and reconnect to the next daemon; the others
    // (User-Mode Linux's, whose NIC would not come back) stop with it.
    let kept: Vec<Guest> = {
        let mut all = guests.lock().expect("guests lock");
        for g in all.iter_mut().filter(|g| !g.outlives_daemon()) {
            g.kill();
        }
        all.drain(..).filter(Guest::outlives_daemon).collect()
    };
    // (The balancers of uplinks added at run time end with the switch too,
    // on their own.)
    for t in threads.into_iter().chain(balancer_threads) {
        let _ = t.join();
    }
    let _ = ctl.join();
    signals_handle.close();
    let _ = signal_thread.join();
    if let Some(m) = scrapes {
        let _ = m.join();
    }
    let _ = std::fs::remove_file(&sock);
    // Sockets it listened on outside its state directory go with it (the
    // next daemon binds them again); a client's socket is the hypervisor's.
    for vm in &topo.vms {
        if let (SocketMode::Server, Some(p)) = (vm.vhost.mode, &vm.vhost.path) {
            let _ = std::fs::remove_file(p);
        }
    }
    // What `down` and the next daemon need stays; the daemon's own part
    // of the state goes.
    if let Some(mut s) = read_state(&dir) {
        s.pid = 0;
        s.ready = false;
        guest::record(&mut s, &kept);
        let _ = write_state(&dir, &s);
    }
    tracing::info!("stopped");
    Ok(())
}

/// The user and group a daemon runs as after `--drop-privileges`.
const NOBODY: u32 = 65534;

type Built = (Arc<Switch>, Vec<std::thread::JoinHandle<()>>, Vec<Guest>);

/// Creates (or re-attaches to) the topology's VMs, hosts and uplinks,
/// starts the switch, then the real guests.
fn build(
    topo: &Topology,
    dir: &Path,
    state: &mut State,
    bringup: Bringup,
    kept: &[KeptGuest],
) -> Result<Built, DaemonError> {
    let reattach = bringup == Bringup::Reattach;
    for w in topo.warnings() {
        tracing::warn!("{w}");
    }
    let mut specs = Vec::new();
    for i in 0..topo.vms.len() {
        specs.push(provision::create_vm(topo, i, dir, state, reattach)?);
    }
    for h in &topo.hosts {
        provision::create_host(topo, h, dir, state, reattach)?;
    }
    for u in &topo.uplinks {
        specs.push(provision::open_uplink(topo, u)?);
    }
    let sw = Switch::new(
        specs,
        SwitchConfig {
            fdb_aging: Duration::from_secs(topo.fdb_aging_secs),
            cpus: topo.switch.cpus.clone(),
            rebalance: topo.switch.rebalance,
            busy_poll_max: Duration::from_micros(topo.switch.busy_poll_max_us.into()),
            worker_nice: topo.switch.nice,
            multicast: hvnet_datapath::mdb::SnoopConfig {
                enabled: topo.switch.multicast_snooping,
                querier: topo.switch.multicast_querier,
                flood_unknown: topo.switch.multicast_flood_unknown,
                ..Default::default()
            },
            ..SwitchConfig::default()
        },
    );
    sw.set_acl(topo.acl_config());
    sw.set_mirrors(topo.mirrors.clone()).map_err(|e| {
        DaemonError::Other(format!("[[mirror]]: cannot open an ERSPAN socket: {e}"))
    })?;
    hvnet_datapath::ipfix::set(&sw, topo.ipfix.clone()).map_err(|e| {
        DaemonError::Other(format!("[ipfix]: cannot open the exporter's socket: {e}"))
    })?;
    hvnet_datapath::route::set(&sw, topo.router_config());
    let threads = sw.start();
    match start_guests(topo, dir, state, kept) {
        Ok(g) => Ok((sw, threads, g)),
        Err(e) => {
            sw.stop();
            for t in threads {
                let _ = t.join();
            }
            Err(e)
        }
    }
}

/// Starts the topology's real guests (UML and QEMU) and waits until each
/// has its `eth0` configured (they boot in parallel); a guest the last
/// daemon left running (`kept`) is taken over instead, where it still
/// runs.
fn start_guests(
    topo: &Topology,
    dir: &Path,
    state: &mut State,
    kept: &[KeptGuest],
) -> Result<Vec<Guest>, DaemonError> {
    let mut guests = Vec::new();
    for vm in topo.vms.iter().filter(|v| v.kind.started_by_hvnet()) {
        if let Some(k) = kept.iter().find(|k| k.vm == vm.name) {
            if let Some(g) = guest::adopt(vm, k, dir) {
                guests.push(g);
                guest::record(state, &guests);
                write_state(dir, state)?;
                continue;
            }
            guest::kill_groups_left(&[k.pgid]);
        }
        let g = guest::start(topo, vm, dir);
        let g = match g {
            Ok(g) => g,
            Err(e) => {
                guests.iter_mut().for_each(Guest::kill);
                return Err(e);
            }
        };
        guests.push(g);
        guest::record(state, &guests);
        write_state(dir, state)?;
    }
    for i in 0..guests.len() {
        if let Err(e) = guest::wait_ready(&mut guests[i], dir) {
            guests.iter_mut().for_each(Guest::kill);
            return Err(e);
        }
    }
    // A QEMU guest KVM could not run was started again: a new group.
    guest::record(state, &guests);
    write_state(dir, state)?;
    Ok(guests)
}

/// A guest whose process ended on its own (crashed, or killed from
/// outside): said once, its exec channel closed (a waiting `hvnet exec`
/// returns), its port already down (its front end disconnected).
fn reap_guests(dir: &Path, guests: &Mutex<Vec<Guest>>) {
    guests.lock().expect("guests lock").retain_mut(|g| {
        if g.alive() {
            return true;
        }
        g.stop(dir);
        tracing::warn!(
            vm = %g.vm,
            "its guest exited (`hvnet restart {}` starts it again)",
            g.vm
        );
        false
    });
}
