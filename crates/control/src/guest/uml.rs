//! User-Mode Linux guests: each a process of the host running its own
//! kernel, whose NIC is a vhost-user device served by the VM's port
//! (`virtio_uml.device=SOCKET:1`) and whose root is the host's file
//! system through UML's `hostfs`, read-only.

use super::{console, fresh_exchange, guest_dir, socket_path, write_init, Guest};
use crate::error::{io_err, DaemonError};
use crate::topology::{Topology, Vm};
use std::path::Path;
use std::process::Command;

/// The UML kernel Debian's `user-mode-linux` package installs.
pub const UML_KERNEL: &str = "/usr/bin/linux.uml";

/// What a UML guest's init does before the common part: its own `/tmp`
/// and `/run`, the exchange directory through `hostfs`, and the modules
/// of its virtio-net driver (from the package's module tree).
fn preamble(x: &Path) -> String {
    format!(
        r#"mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
mkdir -p /run/hvnet
mount -t hostfs -o {x} hostfs /run/hvnet
M=/usr/lib/uml/modules/$(uname -r)/kernel
for m in lib/crc-ccitt net/ipv6/ipv6 net/core/failover drivers/net/net_failover drivers/net/virtio_net; do
    insmod $M/$m.ko || echo "hvnet init: insmod $m failed"
done
"#,
        x = x.display()
    )
}

/// Starts VM `vm`'s UML guest.
pub fn start(topo: &Topology, vm: &Vm, state_dir: &Path) -> Result<Guest, DaemonError> {
    if !Path::new(UML_KERNEL).exists() {
        return Err(DaemonError::Other(format!(
            "vm {}: kind = \"uml\" needs {UML_KERNEL} (Debian's user-mode-linux package; scripts/install-deps.sh installs it)",
            vm.name
        )));
    }
    let gdir = guest_dir(state_dir, &vm.name);
    let x = fresh_exchange(state_dir, &vm.name)?;
    let init = gdir.join("init");
    write_init(vm, &init, &preamble(&x))?;
    let (input, log) = console(state_dir, &vm.name)?;
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
        .stdin(input.try_clone().map_err(io_err("guest console"))?)
        .stdout(log.try_clone().map_err(io_err("guest console log"))?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(io_err(format!("start {UML_KERNEL}")))?;
    Ok(Guest {
        vm: vm.name.clone(),
        kind: vm.kind,
        pgid: child.id(),
        child: super::Process::Child(child),
        helpers: Vec::new(),
        _console: input,
        fallback: None,
    })
}
