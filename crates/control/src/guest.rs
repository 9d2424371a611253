//! Real guests hvnet starts: User-Mode Linux kernels, each a process of
//! the host with its own kernel, TCP stack and virtio-net driver, whose
//! NIC is a vhost-user device served by the VM's port
//! (`virtio_uml.device=SOCKET:1`).
//!
//! A guest's root is the host's file system, read-only (UML's `hostfs`),
//! so the tools a test or a user runs inside are the host's; `/tmp` and
//! `/run` are the guest's own. Its init (a shell script written here) loads
//! the virtio-net driver, gives `eth0` the VM's MAC, MTU and addresses, and
//! then serves `hvnet exec`: a request names a command file in an exchange
//! directory both sides see (a writable `hostfs` mount), arrives as one line
//! on the guest's console (a FIFO the daemon keeps open), and is answered
//! with the command's output and exit status in files beside it.

use crate::daemon::{io_err, run, DaemonError};
use crate::topology::{Topology, Vm};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The UML kernel Debian's `user-mode-linux` package installs.
pub const UML_KERNEL: &str = "/usr/bin/linux.uml";

/// How long a guest may take from start to a configured `eth0` (about 2 s
/// on these machines; a cold first boot reads the kernel's modules from
/// disk).
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

/// A running guest: its process (the leader of its own process group,
/// which UML's helper processes join).
pub struct Guest {
    /// The VM.
    pub vm: String,
    child: Child,
    /// Kept open for writing so the guest's console never reads an end of
    /// file.
    _console: File,
}

impl Guest {
    /// The guest's process id (its main thread runs the guest's one
    /// vCPU).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the process runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Ends the guest: its whole process group, by id.
    pub fn kill(&mut self) {
        kill_group(self.child.id());
        let _ = self.child.wait();
    }

    /// Ends the guest and closes its exec channel (a waiting `hvnet exec`
    /// returns, a new one is refused).
    pub fn stop(&mut self, state_dir: &Path) {
        self.kill();
        let _ = std::fs::remove_file(ready_marker(state_dir, &self.vm));
    }
}

/// Kills process group `pgid` (a guest and its helpers).
pub fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// Kills the process groups of guests a daemon left behind (it died or
/// stopped), those that still exist.
pub fn kill_groups_left(pgids: &[u32]) {
    for &pgid in pgids {
        if Path::new(&format!("/proc/{pgid}")).exists() {
            kill_group(pgid);
        }
    }
}

/// The guest's init script.
fn init_script(vm: &Vm, x: &Path) -> String {
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
# hvnet: init of VM {name} (User-Mode Linux). Written by hvnet up.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
mkdir -p /run/hvnet
mount -t hostfs -o {x} hostfs /run/hvnet
hostname {name}
stty -echo 2>/dev/null
M=/usr/lib/uml/modules/$(uname -r)/kernel
for m in lib/crc-ccitt net/ipv6/ipv6 net/core/failover drivers/net/net_failover drivers/net/virtio_net; do
    insmod $M/$m.ko || echo "hvnet init: insmod $m failed"
done
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
        x = x.display(),
        mac = vm.mac,
        mtu = vm.settings.mtu,
    )
}

/// Starts VM `vm`'s guest on its port's socket (which must be listening).
/// Returns at once; [`wait_ready`] waits for its `eth0`.
pub fn start_uml(topo: &Topology, vm: &Vm, state_dir: &Path) -> Result<Guest, DaemonError> {
    if !Path::new(UML_KERNEL).exists() {
        return Err(DaemonError::Other(format!(
            "vm {}: kind = \"uml\" needs {UML_KERNEL} (Debian's user-mode-linux package; scripts/install-deps.sh installs it)",
            vm.name
        )));
    }
    let gdir = guest_dir(state_dir, &vm.name);
    let x = exchange_dir(state_dir, &vm.name);
    // A restart starts from a clean exchange directory.
    let _ = std::fs::remove_dir_all(&x);
    std::fs::create_dir_all(&x).map_err(io_err(format!("create {}", x.display())))?;
    let init = gdir.join("init");
    std::fs::write(&init, init_script(vm, &x)).map_err(io_err("write the guest's init"))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))
        .map_err(io_err("chmod the guest's init"))?;
    let fifo = gdir.join("console");
    if !fifo.exists() {
        run(&["mkfifo", "-m", "0600", &fifo.to_string_lossy()])?;
    }
    // Read and write: neither side ever sees an end of file or blocks on
    // open.
    let console = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .map_err(io_err("open the guest's console"))?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(gdir.join("console.log"))
        .map_err(io_err("open the guest's console log"))?;
    let sock = socket_path(state_dir, &vm.name);
    let umid = format!("{}-{}", topo.name, vm.name);
    use std::os::unix::process::CommandExt;
    // `setarch -R`: without address randomization the back end's mapping
    // of the guest's memory file is quick (REFERENCE.md: up to 3.9 s
    // otherwise).
    let child = Command::new("setarch")
        .args(["x86_64", "-R", UML_KERNEL])
        .arg(format!("umid={umid}"))
        .arg(format!("uml_dir={}", gdir.display()))
        .args([
            "root=/dev/root",
            "rootfstype=hostfs",
            "rootflags=/",
            "ro",
            "quiet",
            "con=null",
            "con0=fd:0,fd:1",
        ])
        .arg(format!("init={}", init.display()))
        .arg(format!("mem={}M", vm.memory_mib))
        .arg(format!("virtio_uml.device={}:1", sock.display()))
        .stdin(console.try_clone().map_err(io_err("guest console"))?)
        .stdout(log.try_clone().map_err(io_err("guest console log"))?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(io_err(format!("start {UML_KERNEL}")))?;
    Ok(Guest {
        vm: vm.name.clone(),
        child,
        _console: console,
    })
}

/// Waits until the guest's init has configured `eth0`.
pub fn wait_ready(g: &mut Guest, state_dir: &Path) -> Result<(), DaemonError> {
    let ready = ready_marker(state_dir, &g.vm);
    let deadline = Instant::now() + BOOT_TIMEOUT;
    while !ready.exists() {
        if !g.alive() {
            return Err(DaemonError::Other(format!(
                "vm {}: the guest exited while booting; its console: {}",
                g.vm,
                guest_dir(state_dir, &g.vm).join("console.log").display()
            )));
        }
        if Instant::now() > deadline {
            return Err(DaemonError::Other(format!(
                "vm {}: the guest did not configure eth0 within {} s; its console: {}",
                g.vm,
                BOOT_TIMEOUT.as_secs(),
                guest_dir(state_dir, &g.vm).join("console.log").display()
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

/// The processes of a guest (its process group): a UML kernel runs in its
/// main process and its user space in helper processes it traces; all of
/// them are the guest's CPU (for `top`, a CPU limit and its wait time).
pub fn processes(pgid: u32) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command (which may hold spaces): state, ppid,
        // pgrp.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid) {
            let role = if pid == pgid { "kernel" } else { "user" };
            out.push(serde_json::json!({"pid": pid, "role": role}));
        }
    }
    out
}
