//! QEMU guests: a machine with one vCPU (KVM, or TCG where KVM cannot
//! run it) booting Debian's cloud kernel, whose NIC is a `virtio-net-pci`
//! device on QEMU's own vhost-user front end, attached to the VM's port.
//!
//! The kernel comes from the cloud kernel package that
//! `scripts/install-deps.sh` unpacks. A small initramfs (busybox and the
//! kernel's virtio, virtio-net and virtiofs modules, built here once per
//! topology) mounts two virtiofs shares served by QEMU's `virtiofsd`: the
//! host's file system, read-only, as the guest's root (a read-only bind
//! mount in the server's own mount namespace, so the guest cannot write to
//! it whatever it mounts), and the exchange directory, writable, at
//! `/run/hvnet`; then it hands over to the VM's init there. Guest memory
//! is a shared memfd, as vhost-user and virtiofs need.

use super::{console, exchange_dir, fresh_exchange, guest_dir, socket_path, write_init, Guest};
use crate::error::{io_err, DaemonError};
use crate::topology::Vm;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where `scripts/install-deps.sh` unpacks Debian's cloud kernel package.
pub const KERNEL_ROOT: &str = "/var/cache/hvnet/qemu-guest/root";

/// The vhost-user file system server of Debian's `qemu-system-common`.
pub const VIRTIOFSD: &str = "/usr/lib/qemu/virtiofsd";

/// The cloud kernel's modules the initramfs loads, in dependency order.
const MODULES: &[&str] = &[
    "drivers/virtio/virtio_ring",
    "drivers/virtio/virtio",
    "drivers/virtio/virtio_pci_modern_dev",
    "drivers/virtio/virtio_pci_legacy_dev",
    "drivers/virtio/virtio_pci",
    "net/core/failover",
    "drivers/net/net_failover",
    "drivers/net/virtio_net",
    "fs/fuse/fuse",
    "fs/fuse/virtiofs",
];

/// The initramfs's `/init`: the first stage of the guest's boot.
const STAGE1: &str = r#"#!/bin/sh
# hvnet: first stage of a QEMU guest's boot. Loads the virtio drivers,
# mounts the host's file system (read-only) as the root and the exchange
# directory at /run/hvnet, and hands over to the VM's init there.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in MODULES; do insmod /lib/$m.ko || echo "hvnet initramfs: insmod $m failed"; done
mount -t virtiofs -o ro root /newroot || { echo "hvnet initramfs: no root share"; poweroff -f; }
mount -t tmpfs run /newroot/run
mkdir /newroot/run/hvnet
mount -t virtiofs x /newroot/run/hvnet || { echo "hvnet initramfs: no exchange share"; poweroff -f; }
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /bin/sh /run/hvnet/init
"#;

/// What the VM's init does before the common part (the initramfs loaded
/// the drivers and mounted `/run/hvnet` already).
const PREAMBLE: &str =
    "mount -t proc proc /proc\nmount -t sysfs sys /sys\nmount -t tmpfs tmp /tmp\n";

/// True if `/dev/kvm` opens: KVM may run the guest (nested KVM may still
/// fail to, which [`super::wait_ready`] sees).
pub fn kvm_opens() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

/// The cloud kernel: its `vmlinuz` and its modules' `kernel/` directory.
fn kernel() -> Result<(PathBuf, PathBuf), DaemonError> {
    let missing = || {
        DaemonError::Other(format!(
            "kind = \"qemu\" needs Debian's cloud kernel unpacked under {KERNEL_ROOT} (scripts/install-deps.sh does it)"
        ))
    };
    let first = |dir: &Path, prefix: &str| -> Option<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .collect();
        v.sort();
        v.pop()
    };
    let root = Path::new(KERNEL_ROOT);
    let vmlinuz = first(&root.join("boot"), "vmlinuz-").ok_or_else(missing)?;
    let modules = first(&root.join("lib/modules"), "").ok_or_else(missing)?;
    Ok((vmlinuz, modules.join("kernel")))
}

/// The initramfs, built once per topology into its state directory.
fn initramfs(state_dir: &Path, modules: &Path) -> Result<PathBuf, DaemonError> {
    let out = state_dir.join("guests").join("initramfs.cpio");
    if out.exists() {
        return Ok(out);
    }
    let tree = state_dir.join("guests").join("initramfs");
    let _ = std::fs::remove_dir_all(&tree);
    for d in ["bin", "lib", "proc", "sys", "dev", "newroot"] {
        std::fs::create_dir_all(tree.join(d)).map_err(io_err("create the initramfs tree"))?;
    }
    // busybox-static: the initramfs has no libraries.
    std::fs::copy("/usr/bin/busybox", tree.join("bin/busybox")).map_err(io_err(
        "copy /usr/bin/busybox (Debian's busybox-static; scripts/install-deps.sh installs it)",
    ))?;
    for applet in [
        "sh",
        "mount",
        "umount",
        "insmod",
        "mkdir",
        "switch_root",
        "poweroff",
    ] {
        std::os::unix::fs::symlink("busybox", tree.join("bin").join(applet))
            .map_err(io_err("link a busybox applet"))?;
    }
    let mut names = Vec::new();
    for m in MODULES {
        let name = m.rsplit('/').next().expect("a module path");
        let plain = modules.join(format!("{m}.ko"));
        let xz = modules.join(format!("{m}.ko.xz"));
        let data = if plain.exists() {
            std::fs::read(&plain).map_err(io_err(format!("read {}", plain.display())))?
        } else {
            let o = Command::new("xz")
                .arg("-dc")
                .arg(&xz)
                .output()
                .map_err(io_err("run xz"))?;
            if !o.status.success() {
                return Err(DaemonError::Other(format!(
                    "the cloud kernel has no module {m} under {}",
                    modules.display()
                )));
            }
            o.stdout
        };
        std::fs::write(tree.join("lib").join(format!("{name}.ko")), data)
            .map_err(io_err("write a module into the initramfs"))?;
        names.push(name);
    }
    let init = tree.join("init");
    std::fs::write(&init, STAGE1.replace("MODULES", &names.join(" ")))
        .map_err(io_err("write the initramfs's init"))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))
        .map_err(io_err("chmod the initramfs's init"))?;
    // There is no cpio binary; busybox packs the newc format the kernel
    // unpacks.
    let tmp = out.with_extension("tmp");
    let packed = Command::new("sh")
        .arg("-c")
        .arg("cd \"$1\" && find . | busybox cpio -o -H newc > \"$2\" 2>/dev/null")
        .args(["sh", &tree.to_string_lossy(), &tmp.to_string_lossy()])
        .status()
        .map_err(io_err("pack the initramfs"))?;
    let _ = std::fs::remove_dir_all(&tree);
    if !packed.success() {
        return Err(DaemonError::Other("packing the initramfs failed".into()));
    }
    std::fs::rename(&tmp, &out).map_err(io_err("place the initramfs"))?;
    Ok(out)
}

/// Starts a virtiofsd serving `source` on `socket` (`read_only`: through
/// a read-only bind mount in a mount namespace of its own), in process
/// group `pgid` (0: a group of its own).
fn virtiofsd(
    source: &Path,
    socket: &Path,
    read_only: bool,
    pgid: u32,
    log: &File,
) -> Result<Child, DaemonError> {
    if !Path::new(VIRTIOFSD).exists() {
        return Err(DaemonError::Other(format!(
            "kind = \"qemu\" needs {VIRTIOFSD} (Debian's qemu-system-common; scripts/install-deps.sh installs it)"
        )));
    }
    let _ = std::fs::remove_file(socket);
    let mut cmd = if read_only {
        let view = socket.with_extension("view");
        std::fs::create_dir_all(&view).map_err(io_err("create the root share's mount point"))?;
        let mut c = Command::new("unshare");
        c.args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(concat!(
                "mount --bind \"$1\" \"$2\" && mount -o remount,bind,ro \"$2\" && ",
                "exec \"$3\" --socket-path=\"$4\" -o source=\"$2\" -o cache=always"
            ))
            .arg("sh")
            .arg(source)
            .arg(&view)
            .arg(VIRTIOFSD)
            .arg(socket);
        c
    } else {
        let mut c = Command::new(VIRTIOFSD);
        c.arg(format!("--socket-path={}", socket.display()))
            .arg("-o")
            .arg(format!("source={}", source.display()))
            .arg("-o")
            .arg("cache=none");
        c
    };
    use std::os::unix::process::CommandExt;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io_err("virtiofsd log"))?)
        .stderr(log.try_clone().map_err(io_err("virtiofsd log"))?)
        .process_group(pgid as i32)
        .spawn()
        .map_err(io_err(format!("start {VIRTIOFSD}")))?;
    Ok(child)
}

/// Waits for the virtiofsd sockets QEMU connects to at start.
fn wait_sockets(sockets: &[&Path], helpers: &mut [Child]) -> Result<(), DaemonError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sockets.iter().all(|s| s.exists()) {
        if helpers
            .iter_mut()
            .any(|h| !matches!(h.try_wait(), Ok(None)))
        {
            return Err(DaemonError::Other(
                "virtiofsd exited at start; see the guest's virtiofsd.log".into(),
            ));
        }
        if Instant::now() > deadline {
            return Err(DaemonError::Other(
                "virtiofsd did not open its socket within 10 s".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// QEMU's command line for VM `vm`.
fn argv(vm: &Vm, state_dir: &Path, vmlinuz: &Path, initrd: &Path, kvm: bool) -> Vec<String> {
    let gdir = guest_dir(state_dir, &vm.name);
    let mem = vm.memory_mib;
    let q = vm.queues;
    let (accel, cpu) = if kvm { ("kvm", "host") } else { ("tcg", "max") };
    // QEMU 7.2 under TCG crashes starting a vhost-user device with MSI-X
    // (REFERENCE.md): legacy interrupts there; under KVM, QEMU's default
    // (a vector per virtqueue and one for the configuration).
    let vectors = if kvm { "" } else { ",vectors=0" };
    let mq = if q > 1 { ",mq=on" } else { "" };
    let s = |p: PathBuf| p.to_string_lossy().into_owned();
    vec![
        "-name".into(),
        format!("{},debug-threads=on", vm.name),
        "-accel".into(),
        accel.into(),
        "-cpu".into(),
        cpu.into(),
        "-smp".into(),
        "1".into(),
        "-m".into(),
        format!("{mem}M"),
        "-display".into(),
        "none".into(),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-serial".into(),
        "stdio".into(),
        "-no-reboot".into(),
        "-kernel".into(),
        vmlinuz.to_string_lossy().into_owned(),
        "-initrd".into(),
        initrd.to_string_lossy().into_owned(),
        "-append".into(),
        "console=ttyS0 quiet panic=-1".into(),
        "-object".into(),
        format!("memory-backend-memfd,id=mem,size={mem}M,share=on"),
        "-numa".into(),
        "node,memdev=mem".into(),
        "-chardev".into(),
        format!("socket,id=root,path={}", s(gdir.join("root.sock"))),
        "-device".into(),
        format!("vhost-user-fs-pci,chardev=root,tag=root{vectors}"),
        "-chardev".into(),
        format!("socket,id=x,path={}", s(gdir.join("x.sock"))),
        "-device".into(),
        format!("vhost-user-fs-pci,chardev=x,tag=x{vectors}"),
        "-chardev".into(),
        // reconnect=1: a switch that restarts (or dies and comes back)
        // finds the guest running and its NIC connecting again each second.
        format!(
            "socket,id=net,path={},reconnect=1",
            s(socket_path(state_dir, &vm.name))
        ),
        "-netdev".into(),
        format!("vhost-user,id=net0,chardev=net,queues={q}"),
        "-device".into(),
        format!(
            "virtio-net-pci,netdev=net0,mac={},romfile={vectors},mrg_rxbuf=on,rx_queue_size={}{mq}{packed}",
            vm.mac,
            vm.settings.ring1,
            packed = if vm.packed { ",packed=on" } else { "" },
        ),
        "-qmp".into(),
        format!("unix:{},server=on,wait=off", s(gdir.join("qmp.sock"))),
    ]
}

/// Starts VM `vm`'s QEMU guest, on KVM if `kvm`, else under TCG.
pub fn start(vm: &Vm, state_dir: &Path, kvm: bool) -> Result<Guest, DaemonError> {
    let (vmlinuz, modules) = kernel()?;
    let initrd = initramfs(state_dir, &modules)?;
    let gdir = guest_dir(state_dir, &vm.name);
    let x = fresh_exchange(state_dir, &vm.name)?;
    write_init(vm, &x.join("init"), PREAMBLE)?;
    let (input, log) = console(state_dir, &vm.name)?;
    let fs_log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(gdir.join("virtiofsd.log"))
        .map_err(io_err("open the virtiofsd log"))?;
    let (root_sock, x_sock) = (gdir.join("root.sock"), gdir.join("x.sock"));
    // The first virtiofsd leads the guest's process group; the second and
    // QEMU join it, so that one kill ends them all.
    let root = virtiofsd(Path::new("/"), &root_sock, true, 0, &fs_log)?;
    let pgid = root.id();
    let mut helpers = vec![root];
    let started = virtiofsd(
        &exchange_dir(state_dir, &vm.name),
        &x_sock,
        false,
        pgid,
        &fs_log,
    )
    .and_then(|h| {
        helpers.push(h);
        wait_sockets(&[&root_sock, &x_sock], &mut helpers)
    });
    let qemu = started.and_then(|()| {
        use std::os::unix::process::CommandExt;
        Command::new("qemu-system-x86_64")
            .args(argv(vm, state_dir, &vmlinuz, &initrd, kvm))
            .stdin(input.try_clone().map_err(io_err("guest console"))?)
            .stdout(log.try_clone().map_err(io_err("guest console log"))?)
            .stderr(log)
            .process_group(pgid as i32)
            .spawn()
            .map_err(io_err(
                "start qemu-system-x86_64 (Debian's qemu-system-x86; scripts/install-deps.sh installs it)",
            ))
    });
    let child = match qemu {
        Ok(c) => c,
        Err(e) => {
            super::kill_group(pgid);
            for h in &mut helpers {
                let _ = h.wait();
            }
            return Err(e);
        }
    };
    tracing::info!(vm = %vm.name, accel = if kvm { "kvm" } else { "tcg" }, pid = child.id(), "QEMU guest started");
    Ok(Guest {
        vm: vm.name.clone(),
        kind: vm.kind,
        child: super::Process::Child(child),
        helpers,
        pgid,
        _console: input,
        fallback: None,
    })
}
