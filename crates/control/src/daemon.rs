//! `hvnet up` / `hvnet down` and the switch daemon between them.
//!
//! `up` validates the topology, starts `hvnet daemon` in its own process
//! group, and returns once the daemon says traffic can flow. The daemon
//! creates each VM (a network namespace whose NIC is the kernel end of a TAP
//! the daemon holds), records everything it creates in
//! `/run/hvnet/<topology>/state.json` before creating it, runs the switch and
//! serves the control socket. `down` stops the daemon and removes exactly
//! what the state file lists, also after a crash.

use crate::guest::{self, Guest};
use crate::proto::{self, Reply, Request};
use crate::topology::VmKind;
use crate::topology::{self, Topology};
use crate::topology::{Host, Uplink, UplinkLro};
use crate::views;
use hvnet_datapath::tunnel::VtepConfig;
use hvnet_datapath::{PortSettings, PortSpec, Switch, SwitchConfig};
use hvnet_port::netqueue::{Filter, Filters};
use hvnet_port::{Device, TapPort, UplinkPort, VhostUserPort};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where topologies keep their state.
pub const RUN_DIR: &str = "/run/hvnet";

/// What a running topology has created.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct State {
    /// Topology name.
    pub name: String,
    /// The topology file.
    pub file: PathBuf,
    /// Daemon PID.
    pub pid: u32,
    /// Namespaces created (the VMs and external hosts).
    pub namespaces: Vec<String>,
    /// Devices created in the daemon's namespace (the switch ends of
    /// external hosts' veth pairs; they go with their namespace, and are
    /// deleted by name if one is left).
    #[serde(default)]
    pub devices: Vec<String>,
    /// Process groups of the real guests started (each guest leads its
    /// own), for a `down` after the daemon died.
    #[serde(default)]
    pub guests: Vec<u32>,
    /// Set once traffic can flow.
    pub ready: bool,
}

/// A failure of up, down or the daemon.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The topology file is bad.
    #[error(transparent)]
    Topology(#[from] topology::TopologyError),
    /// A command the daemon runs failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed.
        stderr: String,
    },
    /// Opening a TAP failed.
    #[error(transparent)]
    Tap(#[from] hvnet_port::TapError),
    /// Opening an uplink's sockets failed.
    #[error("uplink {name}: {source}")]
    Uplink {
        /// The uplink.
        name: String,
        /// Why.
        #[source]
        source: hvnet_sys::PacketError,
    },
    /// File or socket I/O failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// Anything else, said plainly.
    #[error("{0}")]
    Other(String),
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let what = what.into();
    move |source| DaemonError::Io { what, source }
}

/// The state directory of a topology.
pub fn state_dir(name: &str) -> PathBuf {
    Path::new(RUN_DIR).join(name)
}

/// Reads a topology's state file.
pub fn read_state(dir: &Path) -> Option<State> {
    serde_json::from_slice(&std::fs::read(dir.join("state.json")).ok()?).ok()
}

fn write_state(dir: &Path, s: &State) -> Result<(), DaemonError> {
    let tmp = dir.join("state.json.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(s).expect("state serializes"),
    )
    .map_err(io_err("write state"))?;
    std::fs::rename(&tmp, dir.join("state.json")).map_err(io_err("write state"))
}

/// Runs a command, turning a failure into an error that quotes it.
pub fn run(cmd: &[&str]) -> Result<String, DaemonError> {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .map_err(io_err(format!("run {}", cmd[0])))?;
    if !out.status.success() {
        return Err(DaemonError::Command {
            cmd: cmd.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

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

/// The names of running (or crashed, not yet downed) topologies.
pub fn topologies() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(RUN_DIR)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.path().join("state.json").exists())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
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

/// `hvnet up FILE`: returns the topology once traffic can flow.
pub fn up(file: &Path, exe: &Path) -> Result<Topology, DaemonError> {
    require_root()?;
    let topo = topology::load(file)?;
    let dir = state_dir(&topo.name);
    if let Some(s) = read_state(&dir) {
        return Err(DaemonError::Other(if daemon_alive(&s) {
            format!(
                "topology {} is already up (daemon pid {}); `hvnet down {}` first",
                topo.name, s.pid, topo.name
            )
        } else {
            format!(
                "topology {} has state left from a daemon that died; `hvnet down {}` cleans it up",
                topo.name, topo.name
            )
        }));
    }
    for ns in topo.namespaces() {
        if Path::new("/run/netns").join(&ns).exists() {
            return Err(DaemonError::Other(format!(
                "network namespace {ns} exists already and is not hvnet's"
            )));
        }
    }
    for h in &topo.hosts {
        let dev = &topo.uplinks[h.uplink].device;
        if hvnet_sys::packet::ifindex(dev).is_some() {
            return Err(DaemonError::Other(format!(
                "host {}: device {dev} exists already; an external host is joined to its uplink by a new veth pair of that name",
                h.name
            )));
        }
    }
    for u in &topo.uplinks {
        let hosted = topo
            .hosts
            .iter()
            .any(|h| topo.uplinks[h.uplink].name == u.name);
        if !hosted && hvnet_sys::packet::ifindex(&u.device).is_none() {
            return Err(DaemonError::Other(format!(
                "uplink {}: no network interface named {} (declare a [[host]] on it to make one)",
                u.name, u.device
            )));
        }
    }
    std::fs::create_dir_all(&dir).map_err(io_err(format!("create {}", dir.display())))?;
    let file = file
        .canonicalize()
        .map_err(io_err("resolve topology path"))?;
    write_state(
        &dir,
        &State {
            name: topo.name.clone(),
            file: file.clone(),
            ..State::default()
        },
    )?;
    let log = std::fs::File::create(dir.join("daemon.log")).map_err(io_err("create daemon.log"))?;
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(exe)
        .arg("daemon")
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io_err("daemon log"))?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(io_err("start the daemon"))?;
    // Real guests boot before the daemon says it is ready.
    let boot = if topo.vms.iter().any(|v| v.kind == VmKind::Uml) {
        guest::BOOT_TIMEOUT
    } else {
        Duration::ZERO
    };
    let deadline = Instant::now() + Duration::from_secs(30) + boot;
    loop {
        if read_state(&dir).is_some_and(|s| s.ready) {
            return Ok(topo);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
            let _ = down(&topo.name);
            return Err(DaemonError::Other(format!(
                "the daemon exited ({status}) before traffic could flow:\n{}",
                log.trim()
            )));
        }
        if Instant::now() > deadline {
            let _ = down(&topo.name);
            return Err(DaemonError::Other(format!(
                "the daemon did not get ready within {} s",
                (30 + boot.as_secs())
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What `down` removed.
#[derive(Debug, Default, Serialize)]
pub struct DownReport {
    /// The daemon was running and was stopped.
    pub stopped_pid: Option<u32>,
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
}

/// `hvnet down NAME`: stops the daemon and removes what the state lists.
pub fn down(name: &str) -> Result<DownReport, DaemonError> {
    topology::check_topology_name(name).map_err(DaemonError::Other)?;
    require_root()?;
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
    for &pgid in &state.guests {
        if Path::new(&format!("/proc/{pgid}")).exists() {
            guest::kill_group(pgid);
        }
    }
    for ns in &state.namespaces {
        if Path::new("/run/netns").join(ns).exists() {
            run(&["ip", "netns", "del", ns])?;
            report.namespaces.push(ns.clone());
        }
    }
    for dev in &state.devices {
        if hvnet_sys::packet::ifindex(dev).is_some() {
            run(&["ip", "link", "del", dev])?;
        }
    }
    std::fs::remove_dir_all(&dir).map_err(io_err(format!("remove {}", dir.display())))?;
    Ok(report)
}

/// The TAP device name for VM `i` of a topology (unique on the host while
/// it lives in the root namespace, before it moves into the VM and is
/// renamed eth0).
fn tap_name(topo: &str, i: usize) -> String {
    let h = topo.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    });
    format!("hv{:06x}t{i}", h & 0xff_ffff)
}

/// Creates one VM: a namespace VM's namespace, TAP (moved in as eth0) and
/// addresses; a real guest's vhost-user socket (the guest is started once
/// the switch runs).
fn create_vm(
    topo: &Topology,
    i: usize,
    dir: &Path,
    state: &mut State,
) -> Result<PortSpec, DaemonError> {
    let vm = &topo.vms[i];
    if vm.kind.is_vhost_user() {
        let sock = guest::socket_path(dir, &vm.name);
        std::fs::create_dir_all(guest::guest_dir(dir, &vm.name))
            .map_err(io_err("create the guest's directory"))?;
        let port = VhostUserPort::listen(&vm.name, &sock, vm.queues, vm.mac.0, vm.settings.mtu)
            .map_err(|e| DaemonError::Other(format!("vm {}: {e}", vm.name)))?;
        return Ok(PortSpec {
            name: vm.name.clone(),
            dev: Device::VhostUser(port),
            mac: vm.mac,
            vlan: vm.vlan,
            tunnel: None,
            settings: vm.settings.clone(),
        });
    }
    let ns = topo.netns(vm);
    state.namespaces.push(ns.clone());
    write_state(dir, state)?;
    add_netns(&ns, vm.ipv6.is_some())?;
    let tap = TapPort::open(
        &tap_name(&topo.name, i),
        vm.queues,
        hvnet_port::tap_offload_flags(vm.settings.csum, vm.settings.tso),
    )?;
    let dev = tap.name().to_string();
    run(&["ip", "link", "set", &dev, "netns", &ns])?;
    run(&["ip", "-n", &ns, "link", "set", &dev, "name", "eth0"])?;
    set_eth0(&ns, vm.mac, vm.settings.mtu)?;
    add_addresses(&ns, vm.ipv4, vm.ipv6)?;
    run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
    Ok(PortSpec {
        name: vm.name.clone(),
        dev: Device::Tap(tap),
        mac: vm.mac,
        vlan: vm.vlan,
        tunnel: None,
        settings: vm.settings.clone(),
    })
}

/// Creates namespace `ns` with its loopback up. One without IPv6
/// addresses stays quiet: no router solicitations or MLD reports on its
/// NIC.
fn add_netns(ns: &str, ipv6: bool) -> Result<(), DaemonError> {
    run(&["ip", "netns", "add", ns])?;
    run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
    if !ipv6 {
        run(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])?;
    }
    Ok(())
}

/// Gives `eth0` in `ns` its MAC and MTU.
fn set_eth0(ns: &str, mac: hvnet_wire::MacAddr, mtu: u16) -> Result<(), DaemonError> {
    let (mac, mtu) = (mac.to_string(), mtu.to_string());
    run(&[
        "ip", "-n", ns, "link", "set", "eth0", "address", &mac, "mtu", &mtu,
    ])?;
    Ok(())
}

/// Gives `eth0` in `ns` its addresses; IPv6 without duplicate address
/// detection, so the address is usable as soon as `up` returns.
fn add_addresses(
    ns: &str,
    ipv4: Option<(std::net::Ipv4Addr, u8)>,
    ipv6: Option<(std::net::Ipv6Addr, u8)>,
) -> Result<(), DaemonError> {
    let addrs = [
        ipv4.map(|(a, l)| (format!("{a}/{l}"), None)),
        ipv6.map(|(a, l)| (format!("{a}/{l}"), Some("nodad"))),
    ];
    for (cidr, flag) in addrs.into_iter().flatten() {
        let mut cmd = vec!["ip", "-n", ns, "addr", "add", &cidr, "dev", "eth0"];
        cmd.extend(flag);
        run(&cmd)?;
    }
    Ok(())
}

/// Creates an external host: its namespace, and a veth pair whose host end
/// is its `eth0` and whose other end, named as its uplink's device, stays
/// here for the uplink. Its NIC sends wire-sized frames unless it has TSO.
fn create_host(
    topo: &Topology,
    h: &Host,
    dir: &Path,
    state: &mut State,
) -> Result<(), DaemonError> {
    let ns = topo.netns_of(&h.name);
    let u = &topo.uplinks[h.uplink];
    state.namespaces.push(ns.clone());
    state.devices.push(u.device.clone());
    write_state(dir, state)?;
    add_netns(&ns, h.ipv6.is_some())?;
    let mtu = u.settings.mtu.to_string();
    run(&[
        "ip", "link", "add", &u.device, "mtu", &mtu, "type", "veth", "peer", "name", "eth0",
        "netns", &ns,
    ])?;
    set_eth0(&ns, h.mac, u.settings.mtu)?;
    if !h.tso {
        run(&[
            "ip", "netns", "exec", &ns, "ethtool", "-K", "eth0", "tso", "off",
        ])?;
    }
    add_addresses(&ns, h.ipv4, h.ipv6)?;
    run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
    // The switch's end carries no addresses and sends nothing of its own.
    run(&[
        "sysctl",
        "-qw",
        &format!("net.ipv6.conf.{}.disable_ipv6=1", u.device),
    ])?;
    Ok(())
}

/// NetQueue's filters for an uplink: each VM of its VLAN to a queue of its
/// own (round robin over queues 1.., when there are more VMs than
/// queues), everything else to queue 0.
fn netqueue_filters(topo: &Topology, u: &Uplink) -> Option<Filters> {
    if !u.netqueue {
        return None;
    }
    let spare = (u.queues - 1).max(1);
    let entries = topo
        .vms
        .iter()
        .filter(|v| v.vlan == u.vlan)
        .enumerate()
        .map(|(i, v)| Filter {
            mac: v.mac,
            queue: 1 + (i % spare) as u32,
        })
        .collect();
    Some(Filters {
        tunnel: u.vxlan.is_some(),
        entries,
    })
}

/// Takes over an uplink's device: up, its GRO as the uplink's `lro`
/// says, an MTU at least the uplink's; then opens its receive queues.
fn open_uplink(topo: &Topology, u: &Uplink) -> Result<PortSpec, DaemonError> {
    let dev = &u.device;
    let mtu: u16 = std::fs::read_to_string(format!("/sys/class/net/{dev}/mtu"))
        .ok()
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(0);
    if mtu < u.settings.mtu {
        return Err(DaemonError::Other(format!(
            "uplink {}: device {dev} has MTU {mtu}, below the uplink's {}",
            u.name, u.settings.mtu
        )));
    }
    // A tunnel endpoint's device has nothing of the tunnel's to coalesce
    // (no kernel VXLAN socket on its port): its GRO stays off, and its
    // frames are read in batches into small buffers — what it takes is
    // wire-sized VXLAN (the kernel cannot hand a packet socket a tunnelled
    // GSO frame). A plain uplink may be handed GSO frames even with GRO
    // off (a peer that sends them whole, as a veth with TSO does), so it
    // reads each frame into a buffer that holds 64 KiB.
    let coalesces = u.lro == UplinkLro::Hardware && u.vxlan.is_none();
    let gro = if coalesces { "on" } else { "off" };
    let batched = u.vxlan.is_some() && usize::from(u.settings.mtu) + 18 <= hvnet_port::SMALL_FRAME;
    run(&["ethtool", "-K", dev, "gro", gro])?;
    run(&["ip", "link", "set", dev, "up"])?;
    let port =
        UplinkPort::open(dev, u.queues, netqueue_filters(topo, u), batched).map_err(|source| {
            DaemonError::Uplink {
                name: u.name.clone(),
                source,
            }
        })?;
    let tunnel = match &u.vxlan {
        None => None,
        Some(v) => {
            // The endpoint speaks with the device's own address.
            let mac = std::fs::read_to_string(format!("/sys/class/net/{dev}/address"))
                .ok()
                .and_then(|m| m.trim().parse().ok())
                .ok_or_else(|| {
                    DaemonError::Other(format!("uplink {}: cannot read {dev}'s MAC", u.name))
                })?;
            Some(VtepConfig {
                vni: v.vni,
                local: v.local.0,
                prefix: v.local.1,
                mac,
                remotes: v.remotes.clone(),
                port: v.port,
                udp_csum: v.udp_csum,
            })
        }
    };
    Ok(PortSpec {
        name: u.name.clone(),
        dev: Device::Uplink(port),
        mac: hvnet_wire::MacAddr([0; 6]),
        vlan: u.vlan,
        tunnel,
        settings: u.settings.clone(),
    })
}

/// `hvnet daemon FILE`: builds the topology and runs the switch until told
/// to stop. Runs in the background, started by `up`.
pub fn daemon(file: &Path) -> Result<(), DaemonError> {
    let topo = topology::load(file)?;
    let dir = state_dir(&topo.name);
    std::fs::create_dir_all(&dir).map_err(io_err("create state dir"))?;
    let mut state = State {
        name: topo.name.clone(),
        file: file.into(),
        pid: std::process::id(),
        ..State::default()
    };
    write_state(&dir, &state)?;
    for w in topo.warnings() {
        eprintln!("hvnet daemon: warning: {w}");
    }
    let mut specs = Vec::new();
    for i in 0..topo.vms.len() {
        specs.push(create_vm(&topo, i, &dir, &mut state)?);
    }
    for h in &topo.hosts {
        create_host(&topo, h, &dir, &mut state)?;
    }
    for u in &topo.uplinks {
        specs.push(open_uplink(&topo, u)?);
    }
    let sw = Switch::new(
        specs,
        SwitchConfig {
            fdb_aging: Duration::from_secs(topo.fdb_aging_secs),
            ..SwitchConfig::default()
        },
    );
    let threads = sw.start();
    let guests = match start_guests(&topo, &dir, &mut state) {
        Ok(g) => Mutex::new(g),
        Err(e) => {
            sw.stop();
            return Err(e);
        }
    };
    let sock = dir.join("ctl.sock");
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).map_err(io_err("bind the control socket"))?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600))
        .map_err(io_err("chmod the control socket"))?;
    listener
        .set_nonblocking(true)
        .map_err(io_err("control socket"))?;
    state.ready = true;
    write_state(&dir, &state)?;
    eprintln!(
        "hvnet daemon: topology {} up with {} VMs, {} uplinks",
        topo.name,
        topo.vms.len(),
        topo.uplinks.len()
    );
    let mut last_check = Instant::now();
    while !sw.stopping() {
        match listener.accept() {
            Ok((conn, _)) => {
                let _ = conn.set_nonblocking(false);
                serve(&sw, &topo, &guests, conn);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => eprintln!("hvnet daemon: accept: {e}"),
        }
        if last_check.elapsed() >= Duration::from_millis(200) {
            last_check = Instant::now();
            reap_guests(&dir, &guests);
        }
    }
    for g in guests.lock().expect("guests lock").iter_mut() {
        g.kill();
    }
    for t in threads {
        let _ = t.join();
    }
    let _ = std::fs::remove_file(&sock);
    eprintln!("hvnet daemon: stopped");
    Ok(())
}

/// Starts the topology's User-Mode Linux guests and waits until each has
/// its `eth0` configured (they boot in parallel).
fn start_guests(topo: &Topology, dir: &Path, state: &mut State) -> Result<Vec<Guest>, DaemonError> {
    let mut guests = Vec::new();
    for vm in topo.vms.iter().filter(|v| v.kind == VmKind::Uml) {
        let g = guest::start_uml(topo, vm, dir);
        let g = match g {
            Ok(g) => g,
            Err(e) => {
                guests.iter_mut().for_each(Guest::kill);
                return Err(e);
            }
        };
        state.guests.push(g.pid());
        write_state(dir, state)?;
        guests.push(g);
    }
    for i in 0..guests.len() {
        if let Err(e) = guest::wait_ready(&mut guests[i], dir) {
            guests.iter_mut().for_each(Guest::kill);
            return Err(e);
        }
    }
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
        eprintln!(
            "hvnet daemon: vm {}: its guest exited (`hvnet restart {}` starts it again)",
            g.vm, g.vm
        );
        false
    });
}

/// `hvnet restart VM` and `hvnet kill VM`.
fn restart_guest(
    topo: &Topology,
    guests: &Mutex<Vec<Guest>>,
    vm: &str,
    start: bool,
) -> Result<Value, String> {
    let spec = topo
        .vms
        .iter()
        .find(|v| v.name == vm)
        .ok_or_else(|| format!("no VM named {vm:?}"))?;
    if spec.kind != VmKind::Uml {
        return Err(format!(
            "vm {vm} is a {} VM; only uml guests are started by hvnet",
            spec.kind.name()
        ));
    }
    let dir = state_dir(&topo.name);
    let mut all = guests.lock().expect("guests lock");
    if let Some(i) = all.iter().position(|g| g.vm == vm) {
        all.remove(i).stop(&dir);
    }
    if !start {
        return Ok(json!({"vm": vm, "running": false}));
    }
    let mut g = guest::start_uml(topo, spec, &dir).map_err(|e| e.to_string())?;
    let pid = g.pid();
    let r = guest::wait_ready(&mut g, &dir);
    all.push(g);
    if let Some(mut s) = read_state(&dir) {
        s.guests = all.iter().map(Guest::pid).collect();
        let _ = write_state(&dir, &s);
    }
    r.map_err(|e| e.to_string())?;
    Ok(json!({"vm": vm, "running": true, "pid": pid}))
}

fn serve(
    sw: &Arc<Switch>,
    topo: &Topology,
    guests: &Mutex<Vec<Guest>>,
    conn: std::os::unix::net::UnixStream,
) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let mut reader = BufReader::new(&conn);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(Request::PortShow { name }) => {
            handle(sw, topo, Request::PortShow { name: name.clone() }).map(|mut v| {
                // A real guest hvnet started: its processes.
                let all = guests.lock().expect("guests lock");
                if let Some(g) = all.iter().find(|g| g.vm == name) {
                    v["guest"] = json!({"pid": g.pid(), "processes": guest::processes(g.pid())});
                }
                v
            })
        }
        Ok(Request::Restart { vm }) => restart_guest(topo, guests, &vm, true),
        Ok(Request::Kill { vm }) => restart_guest(topo, guests, &vm, false),
        Ok(req) => handle(sw, topo, req),
        Err(e) => Err(format!("bad request: {e}")),
    };
    let reply = match reply {
        Ok(data) => Reply {
            ok: true,
            data,
            error: String::new(),
        },
        Err(error) => Reply {
            ok: false,
            data: Value::Null,
            error,
        },
    };
    let mut out = serde_json::to_string(&reply).expect("reply serializes");
    out.push('\n');
    let _ = (&conn).write_all(out.as_bytes());
}

fn handle(sw: &Arc<Switch>, topo: &Topology, req: Request) -> Result<Value, String> {
    let port = |name: &str| {
        sw.port(name)
            .cloned()
            .ok_or_else(|| format!("no port named {name:?}"))
    };
    match req {
        Request::Ports => Ok(views::ports(sw, &topo.name)),
        Request::Stats { path } => views::stats(sw, &path),
        Request::PortShow { name } => Ok(views::port_settings(&*port(&name)?)),
        Request::PortSet { name, changes } => {
            let p = port(&name)?;
            let mut cur = serde_json::to_value(p.settings()).expect("settings serialize");
            let Value::Object(ch) = changes else {
                return Err("changes must be an object".into());
            };
            for (k, v) in ch {
                if cur.get(&k).is_none() {
                    return Err(format!("unknown setting {k:?}; settings are lro, tso, csum, mtu, ring1, ring2, allow_forged_transmits, rx_overflow, delivery"));
                }
                cur[&k] = v;
            }
            let new: PortSettings =
                serde_json::from_value(cur).map_err(|e| format!("bad value: {e}"))?;
            // Checked before anything changes: a refused value leaves the
            // guest's MTU as it was.
            sw.check_settings(&name, &new).map_err(|e| e.to_string())?;
            if new.mtu != p.settings().mtu && p.dev.vhost_user().is_some() {
                return Err("a real guest sets its own MTU (ip link set eth0 mtu … inside it); its port's mtu is what the switch takes".into());
            }
            if new.mtu != p.settings().mtu && !p.is_uplink() {
                let ns = topo.netns_of(&name);
                run(&[
                    "ip",
                    "-n",
                    &ns,
                    "link",
                    "set",
                    "eth0",
                    "mtu",
                    &new.mtu.to_string(),
                ])
                .map_err(|e| e.to_string())?;
            }
            sw.set_port(&name, new).map_err(|e| e.to_string())?;
            Ok(views::port_settings(&p))
        }
        Request::Fdb => Ok(json!(sw.fdb.rows(Instant::now()))),
        Request::Shutdown => {
            sw.stop();
            Ok(json!("stopping"))
        }
        Request::Restart { .. } | Request::Kill { .. } => Err("served by the daemon".into()),
    }
}
