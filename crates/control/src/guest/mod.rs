//! Real guests hvnet starts, each with its own kernel, TCP stack and
//! virtio-net driver on the VM's vhost-user port: User-Mode Linux kernels
//! ([`uml`]) and QEMU machines ([`qemu`]).
//!
//! Either way the guest's root is the host's file system, read-only, so
//! the tools a test or a user runs inside are the host's; `/tmp` and `/run`
//! are the guest's own. Its init (a shell script written here) gives `eth0`
//! the VM's MAC, MTU and addresses and then serves `hvnet exec`: a request
//! names a command file in an exchange directory both sides see (a
//! writable share), arrives as one line on the guest's console (a FIFO the
//! daemon keeps open), and is answered with the command's output and exit
//! status in files beside it.

pub mod qemu;
pub mod uml;

use crate::error::{io_err, run, DaemonError};
use crate::state::{KeptGuest, State};
use crate::topology::{Accel, Topology, Vm, VmKind};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a guest may take from start to a configured `eth0` (about 2 s
/// for UML and 4 s for QEMU under TCG on these machines; a cold first boot
/// reads the kernel's modules from disk).
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(90);

/// Where VM `vm`'s guest files live: its init, console FIFO, console log
/// and exchange directory.
pub fn guest_dir(state_dir: &Path, vm: &str) -> PathBuf {
    state_dir.join("guests").join(vm)
}

/// The directory shared with the guest for `hvnet exec`.
pub fn exchange_dir(state_dir: &Path, vm: &str) -> PathBuf {
    guest_dir(state_dir, vm).join("x")
}

/// The marker the guest's init leaves once `eth0` is configured; `exec`
/// reads it as "the guest runs", so it goes when the guest does.
fn ready_marker(state_dir: &Path, vm: &str) -> PathBuf {
    exchange_dir(state_dir, vm).join("ready")
}

/// The vhost-user socket of VM `vm`.
pub fn socket_path(state_dir: &Path, vm: &str) -> PathBuf {
    state_dir.join(format!("{vm}.sock"))
}

/// A guest's kernel process: started by this daemon, or taken over from
/// a daemon that stopped or died (it ran on; its parent is init now).
enum Process {
    Child(Child),
    Adopted(u32),
}

/// A running guest: its kernel's process (`linux.uml`, or QEMU), and the
/// processes serving its devices, all in one process group.
pub struct Guest {
    /// The VM.
    pub vm: String,
    kind: VmKind,
    child: Process,
    /// QEMU's virtiofsd processes.
    helpers: Vec<Child>,
    pgid: u32,
    /// Kept open for writing so the guest's console never reads an end of
    /// file.
    _console: File,
    /// A QEMU guest started on KVM under `accel = "auto"`: started again
    /// under TCG if KVM cannot run it.
    fallback: Option<Vm>,
}

impl Guest {
    /// The process of the guest's kernel: UML's main process (which runs
    /// its one vCPU), or QEMU's.
    pub fn pid(&self) -> u32 {
        match &self.child {
            Process::Child(c) => c.id(),
            Process::Adopted(pid) => *pid,
        }
    }

    /// The guest's process group (all its processes).
    pub fn pgid(&self) -> u32 {
        self.pgid
    }

    /// True while the guest's kernel runs.
    pub fn alive(&mut self) -> bool {
        match &mut self.child {
            Process::Child(c) => matches!(c.try_wait(), Ok(None)),
            Process::Adopted(pid) => running(*pid),
        }
    }

    /// True for a guest that runs on when its daemon stops and reconnects
    /// to its port when a daemon is back: QEMU's (its socket chardev
    /// reconnects). A User-Mode Linux guest cannot: its vhost-user driver
    /// removes its NIC when the connection ends, so its daemon stops it.
    pub fn outlives_daemon(&self) -> bool {
        self.kind == VmKind::Qemu
    }

    /// Ends the guest: its whole process group, by id.
    pub fn kill(&mut self) {
        kill_group(self.pgid);
        match &mut self.child {
            Process::Child(c) => {
                let _ = c.wait();
            }
            // Not ours to wait for: init reaps it.
            Process::Adopted(pid) => {
                let deadline = Instant::now() + Duration::from_secs(5);
                while running(*pid) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        for h in &mut self.helpers {
            let _ = h.wait();
        }
    }

    /// Ends the guest and closes its exec channel (a waiting `hvnet exec`
    /// returns, a new one is refused).
    pub fn stop(&mut self, state_dir: &Path) {
        self.kill();
        let _ = std::fs::remove_file(ready_marker(state_dir, &self.vm));
    }

    /// The guest's processes (all of them its CPU: for `top`, a CPU limit
    /// and `diagnose`).
    pub fn pids(&self) -> Vec<u32> {
        group_members(self.pgid)
    }

    /// The guest's processes with their roles: UML's kernel process and
    /// the user-space helpers it traces; QEMU and its virtiofsd's. All of
    /// them are the guest's CPU (for `top` and a CPU limit).
    pub fn processes(&self) -> Vec<serde_json::Value> {
        self.pids()
            .into_iter()
            .map(|pid| {
                let role = match (self.kind, pid == self.pid()) {
                    (VmKind::Qemu, true) => "qemu",
                    (VmKind::Qemu, false) => "virtiofsd",
                    (_, true) => "kernel",
                    (_, false) => "user",
                };
                serde_json::json!({"pid": pid, "role": role})
            })
            .collect()
    }

    /// The threads that run the guest's vCPUs (their run-queue wait is
    /// the VM's %RDY): UML's kernel process; QEMU's `CPU N/TCG` or
    /// `CPU N/KVM` threads.
    pub fn vcpus(&self) -> Vec<serde_json::Value> {
        let pid = self.pid();
        if self.kind != VmKind::Qemu {
            return vec![serde_json::json!({"tid": pid, "name": "kernel"})];
        }
        let mut out = Vec::new();
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return out;
        };
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let comm =
                std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
            let comm = comm.trim();
            if comm.starts_with("CPU ") {
                out.push(serde_json::json!({"tid": tid, "name": comm}));
            }
        }
        out.sort_by_key(|v| v["tid"].as_u64());
        out
    }
}

/// Starts VM `vm`'s guest on its port's socket (which must be listening).
/// Returns at once; [`wait_ready`] waits for its `eth0`.
pub fn start(topo: &Topology, vm: &Vm, state_dir: &Path) -> Result<Guest, DaemonError> {
    match vm.kind {
        VmKind::Uml => uml::start(topo, vm, state_dir),
        VmKind::Qemu => {
            let kvm = match vm.accel {
                Accel::Tcg => false,
                Accel::Kvm => true,
                Accel::Auto => qemu::kvm_opens(),
            };
            let mut g = qemu::start(vm, state_dir, kvm)?;
            if kvm && vm.accel == Accel::Auto {
                g.fallback = Some(vm.clone());
            }
            Ok(g)
        }
        k => Err(DaemonError::Other(format!(
            "vm {}: a {} VM is not started by hvnet",
            vm.name,
            k.name()
        ))),
    }
}

/// Starts VM `vm`'s guest ([`start`]), waits until it is up
/// ([`wait_ready`]), and adds it to `guests`, recorded in the topology's
/// state (a guest that did not come up is kept there too, to be stopped);
/// its process id.
pub fn boot(
    topo: &Topology,
    vm: &Vm,
    state_dir: &Path,
    guests: &mut Vec<Guest>,
) -> Result<u32, DaemonError> {
    let mut g = start(topo, vm, state_dir)?;
    let ready = wait_ready(&mut g, state_dir);
    let pid = g.pid();
    guests.push(g);
    if let Some(mut s) = crate::state::read_state(state_dir) {
        record(&mut s, guests);
        let _ = crate::state::write_state(state_dir, &s);
    }
    ready.map(|()| pid)
}

/// Takes over VM `vm`'s guest, left running by a daemon that stopped or
/// died, if it is still that guest: its process runs, leads or belongs to
/// the recorded group, and is a QEMU serving this VM's port socket (a
/// recycled PID is not). Its console and exchange directory are as it
/// left them; nothing is booted.
pub fn adopt(vm: &Vm, kept: &KeptGuest, state_dir: &Path) -> Option<Guest> {
    if vm.kind != VmKind::Qemu || kept.vm != vm.name || !running(kept.pid) {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", kept.pid)).ok()?;
    let sock = socket_path(state_dir, &vm.name);
    let cmdline = String::from_utf8_lossy(&cmdline);
    if !cmdline.contains(&*sock.to_string_lossy()) || process_group(kept.pid) != Some(kept.pgid) {
        return None;
    }
    let (input, _) = console(state_dir, &vm.name).ok()?;
    tracing::info!(vm = %vm.name, pid = kept.pid, "QEMU guest kept running: taken over, not booted");
    Some(Guest {
        vm: vm.name.clone(),
        kind: vm.kind,
        child: Process::Adopted(kept.pid),
        helpers: Vec::new(),
        pgid: kept.pgid,
        _console: input,
        fallback: None,
    })
}

/// Writes `guests` into the topology's state: every guest's process
/// group (for a `down`), and those that outlive the daemon (for the next
/// one to take over).
pub fn record(state: &mut State, guests: &[Guest]) {
    state.guests = guests.iter().map(Guest::pgid).collect();
    state.kept_guests = guests
        .iter()
        .filter(|g| g.outlives_daemon())
        .map(|g| KeptGuest {
            vm: g.vm.clone(),
            pid: g.pid(),
            pgid: g.pgid,
        })
        .collect();
}

/// True while process `pid` runs (exists and is not a zombie).
fn running(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first() != Some(&"Z".to_string()))
}

/// The process group of `pid`.
fn process_group(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(2)?.parse().ok()
}

/// The fields of `/proc/PID/stat` after the command (which may hold
/// spaces): state, ppid, pgrp, …
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rfind(')').map(|i| &stat[i + 2..])?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Kills process group `pgid` (a guest and its helpers).
pub fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// Kills the process groups of guests a daemon left behind (it died or
/// stopped), those that still have a process (a group's leader may be
/// gone while others run).
/// Returns once they are gone (5 s at most).
pub fn kill_groups_left(pgids: &[u32]) {
    let live = |pgid: u32| group_members(pgid).into_iter().any(running);
    for &pgid in pgids {
        if live(pgid) {
            kill_group(pgid);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pgids.iter().any(|&g| live(g)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The guest's init script: `preamble` (the kind's own mounts and
/// drivers, ending with the exchange directory at `/run/hvnet`), then what
/// every guest does.
fn init_script(vm: &Vm, preamble: &str) -> String {
    let mut addrs = String::new();
    if let Some((a, len)) = vm.ipv4 {
        addrs.push_str(&format!("ip addr add {a}/{len} dev eth0\n"));
    }
    if let Some((a, len)) = vm.ipv6 {
        addrs.push_str(&format!("ip -6 addr add {a}/{len} dev eth0 nodad\n"));
    }
    let ipv6_off = if vm.ipv6.is_none() {
        "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 2>/dev/null\n"
    } else {
        ""
    };
    format!(
        r#"#!/bin/sh
# hvnet: init of VM {name} ({kind}). Written by hvnet up.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp
{preamble}hostname {name}
stty -echo 2>/dev/null
n=0
while [ ! -e /sys/class/net/eth0 ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done
ip link set lo up
{ipv6_off}ip link set eth0 address {mac} mtu {mtu}
ip link set eth0 up
{addrs}echo up > /run/hvnet/ready
# hvnet exec: one request id per console line.
while read -r id; do
    case "$id" in *[!0-9a-z-]*|"") continue;; esac
    (
        cd /tmp
        if [ -e /run/hvnet/$id.in ]; then in=/run/hvnet/$id.in; else in=/dev/null; fi
        sh /run/hvnet/$id.cmd < $in > /run/hvnet/$id.out 2> /run/hvnet/$id.err
        echo $? > /run/hvnet/$id.rc.tmp
        mv /run/hvnet/$id.rc.tmp /run/hvnet/$id.rc
    ) &
done
"#,
        name = vm.name,
        kind = vm.kind.name(),
        mac = vm.mac,
        mtu = vm.settings.mtu,
    )
}

/// Writes the guest's init to `path`.
fn write_init(vm: &Vm, path: &Path, preamble: &str) -> Result<(), DaemonError> {
    std::fs::write(path, init_script(vm, preamble)).map_err(io_err("write the guest's init"))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(io_err("chmod the guest's init"))
}

/// A clean exchange directory for a guest that starts (or starts again).
fn fresh_exchange(state_dir: &Path, vm: &str) -> Result<PathBuf, DaemonError> {
    let x = exchange_dir(state_dir, vm);
    let _ = std::fs::remove_dir_all(&x);
    std::fs::create_dir_all(&x).map_err(io_err(format!("create {}", x.display())))?;
    Ok(x)
}

/// The guest's console: its input, a FIFO opened for reading and writing
/// (neither side ever sees an end of file or blocks on open), and its
/// output, appended to `console.log`.
fn console(state_dir: &Path, vm: &str) -> Result<(File, File), DaemonError> {
    let gdir = guest_dir(state_dir, vm);
    let fifo = gdir.join("console");
    if !fifo.exists() {
        run(&["mkfifo", "-m", "0600", &fifo.to_string_lossy()])?;
    }
    let input = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .map_err(io_err("open the guest's console"))?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(gdir.join("console.log"))
        .map_err(io_err("open the guest's console log"))?;
    Ok((input, log))
}

/// Waits until the guest's init has configured `eth0`. A QEMU guest that
/// KVM cannot run (under `accel = "auto"`) is started again under TCG.
pub fn wait_ready(g: &mut Guest, state_dir: &Path) -> Result<(), DaemonError> {
    let ready = ready_marker(state_dir, &g.vm);
    let log = guest_dir(state_dir, &g.vm).join("console.log");
    let mut deadline = Instant::now() + BOOT_TIMEOUT;
    let mut polls = 0u32;
    while !ready.exists() {
        polls += 1;
        let exited = !g.alive();
        // QEMU stops (or aborts) a guest KVM cannot run and says why on
        // its standard error, which is the console's log.
        let kvm_failed = g.fallback.is_some()
            && (exited
                || (polls.is_multiple_of(25)
                    && std::fs::read_to_string(&log)
                        .is_ok_and(|t| t.contains("KVM internal error"))));
        if kvm_failed {
            let vm = g.fallback.take().expect("checked");
            tracing::warn!(vm = %vm.name, "KVM cannot run this guest here; starting it under TCG (accel = \"auto\")");
            g.kill();
            *g = qemu::start(&vm, state_dir, false)?;
            deadline = Instant::now() + BOOT_TIMEOUT;
            continue;
        }
        if exited {
            return Err(DaemonError::Other(format!(
                "vm {}: the guest exited while booting; its console: {}",
                g.vm,
                log.display()
            )));
        }
        if Instant::now() > deadline {
            return Err(DaemonError::Other(format!(
                "vm {}: the guest did not configure eth0 within {} s; its console: {}",
                g.vm,
                BOOT_TIMEOUT.as_secs(),
                log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Quotes `s` for the guest's shell.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// What `hvnet exec` ran in a guest.
pub struct ExecOutput {
    /// Exit status.
    pub status: i32,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
}

/// Runs `argv` in VM `vm`'s guest, with `stdin` as its input if given,
/// and waits for it to end.
pub fn exec(
    state_dir: &Path,
    vm: &str,
    argv: &[String],
    stdin: Option<&[u8]>,
) -> Result<ExecOutput, DaemonError> {
    let x = exchange_dir(state_dir, vm);
    let ready = ready_marker(state_dir, vm);
    if !ready.exists() {
        return Err(DaemonError::Other(format!(
            "vm {vm}: its guest is not running (or not booted yet)"
        )));
    }
    let id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let cmd: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
    std::fs::write(
        x.join(format!("{id}.cmd")),
        format!("exec {}\n", cmd.join(" ")),
    )
    .map_err(io_err("write the command file"))?;
    if let Some(input) = stdin {
        std::fs::write(x.join(format!("{id}.in")), input).map_err(io_err("write stdin"))?;
    }
    let mut console = OpenOptions::new()
        .write(true)
        .open(guest_dir(state_dir, vm).join("console"))
        .map_err(io_err("open the guest's console"))?;
    console
        .write_all(format!("{id}\n").as_bytes())
        .map_err(io_err("write to the guest's console"))?;
    let rc = x.join(format!("{id}.rc"));
    // The guest answers with a file; wait for it (the command may run
    // long: no deadline, as with ssh).
    while !rc.exists() {
        if !ready.exists() {
            return Err(DaemonError::Other(format!("vm {vm}: the guest went away")));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let read = |ext: &str| std::fs::read(x.join(format!("{id}.{ext}"))).unwrap_or_default();
    let status = String::from_utf8_lossy(&read("rc"))
        .trim()
        .parse()
        .unwrap_or(255);
    let out = ExecOutput {
        status,
        stdout: read("out"),
        stderr: read("err"),
    };
    for ext in ["cmd", "in", "out", "err", "rc"] {
        let _ = std::fs::remove_file(x.join(format!("{id}.{ext}")));
    }
    Ok(out)
}

/// The processes of process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if process_group(pid) == Some(pgid) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}
