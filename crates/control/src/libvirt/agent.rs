//! The daemon's watch on `[libvirt] sockets`: a socket there that no port
//! has is a guest's interface with `mode='server'` (libvirt bound it for a
//! starting or incoming guest, or QEMU for a hot-plug, and QEMU waits for
//! the switch); it is looked up in libvirt and gets its port. A port there
//! whose connection ended is looked up again; when no running domain has
//! its interface any more, the port goes.
//!
//! The directory is looked at ten times a second (a few `getdents` of a
//! directory of tens of sockets): QEMU waits for the switch, so the wait
//! is a guest's start that much longer, never a frame lost.

use super::virsh::Virsh;
use super::{in_directory, remove_left_over, vm_table};
use crate::ctl::Ctl;
use crate::state::{read_state, state_dir, write_state};
use crate::topology::{Libvirt, SOCKETS_ROOT};
use hvnet_port::SocketMode;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the directory is looked at.
const LOOK: Duration = Duration::from_millis(100);
/// The longest wait before a socket without a port, or a port without a
/// connection, is looked up again (the wait doubles from [`LOOK`]).
const LOOK_AGAIN_MAX: Duration = Duration::from_secs(5);
/// How long a socket no running domain has stays before it is removed as
/// left over (a guest killed before libvirt could remove it), when nothing
/// listens on it.
const LEFT_OVER: Duration = Duration::from_secs(10);

/// Creates the socket directory: the switch's, and writable by QEMU's
/// group (QEMU binds a hot-plugged interface's socket itself), sticky (a
/// QEMU removes no socket but its own, nor one the switch serves).
pub fn prepare_directory(lv: &Libvirt) -> std::io::Result<()> {
    let root = Path::new(SOCKETS_ROOT);
    if lv.sockets.starts_with(root) {
        std::fs::create_dir_all(root)?;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755))?;
    }
    std::fs::create_dir_all(&lv.sockets)?;
    std::os::unix::fs::chown(&lv.sockets, Some(0), Some(lv.gid))?;
    std::fs::set_permissions(&lv.sockets, std::fs::Permissions::from_mode(0o1770))
}

/// When a path is looked up next, since when it waits, and how many
/// look-ups in a row found no owner.
struct Wait {
    ino: u64,
    since: Instant,
    next: Instant,
    delay: Duration,
    misses: u32,
}

impl Wait {
    fn new(ino: u64, now: Instant) -> Wait {
        Wait {
            ino,
            since: now,
            next: now,
            delay: LOOK,
            misses: 0,
        }
    }

    fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    fn later(&mut self, now: Instant) {
        self.delay = (self.delay * 2).min(LOOK_AGAIN_MAX);
        self.next = now + self.delay;
    }
}

/// Runs until the switch stops.
pub(crate) fn run(cx: Arc<Ctl>, lv: Libvirt) {
    let virsh = Virsh::new(&lv.uri);
    // Sockets without a port, by path.
    let mut unclaimed: HashMap<PathBuf, Wait> = HashMap::new();
    // Ports without a connection, by socket (ino: the socket's when the
    // port was made).
    let mut lost: HashMap<PathBuf, Wait> = HashMap::new();
    let mut made: HashMap<PathBuf, u64> = HashMap::new();
    // Sockets whose port someone else removed (`hvnet vm del`) while the
    // guest ran on: not given a port again until bound again.
    // (Kept in the state: a restarted daemon does not make them again.)
    let mut dismissed: BTreeMap<PathBuf, u64> = read_state(&state_dir(&cx.topology().name))
        .map(|s| s.dismissed_sockets)
        .unwrap_or_default();
    let mut kept = dismissed.clone();
    while !cx.sw.stopping() {
        std::thread::sleep(LOOK);
        let now = Instant::now();
        let topo = cx.topology();
        let sockets = match list(&lv.sockets) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(dir = %lv.sockets.display(), error = %e, "libvirt: socket directory unreadable");
                continue;
            }
        };
        unclaimed.retain(|p, _| sockets.iter().any(|(s, _)| s == p));
        // Ports gone (a `release`, `hvnet vm del`): what was known of
        // their sockets goes too.
        let has_port = |p: &Path| topo.vms.iter().any(|v| v.vhost.path.as_deref() == Some(p));
        made.retain(|p, ino| {
            if has_port(p) {
                return true;
            }
            if sockets.iter().any(|(s, i)| s == p && i == ino) {
                tracing::info!(socket = %p.display(), "libvirt: port removed by hand; not made again until its socket is bound again");
                dismissed.insert(p.clone(), *ino);
            }
            false
        });
        dismissed.retain(|p, ino| sockets.iter().any(|(s, i)| s == p && i == ino));
        if dismissed != kept {
            remember_dismissed(&cx, &dismissed);
            kept = dismissed.clone();
        }
        lost.retain(|p, _| has_port(p));
        for (path, ino) in &sockets {
            let vm = topo
                .vms
                .iter()
                .find(|v| v.vhost.path.as_deref() == Some(path));
            if let Some(vm) = vm {
                // A socket bound again under a port: a new QEMU (the
                // domain started again, or another guest on the path).
                // Its port goes; the socket is looked up afresh.
                let was = made.entry(path.clone()).or_insert(*ino);
                if vm.vhost.mode == SocketMode::Client && *was != *ino {
                    tracing::info!(vm = %vm.name, "libvirt: socket bound again: port made afresh");
                    remove(&cx, &vm.name);
                    made.remove(path);
                    lost.remove(path);
                }
                continue;
            }
            if dismissed.contains_key(path) {
                continue;
            }
            let w = unclaimed
                .entry(path.clone())
                .or_insert_with(|| Wait::new(*ino, now));
            if w.ino != *ino {
                *w = Wait::new(*ino, now);
            }
            if !w.due(now) {
                continue;
            }
            match virsh.owner(path) {
                Ok(Some((dom, nic))) if nic.qemu_listens => {
                    let table = vm_table(&lv, &dom, &nic);
                    match crate::reconcile::add_vm(&cx, &table) {
                        Ok(_) => {
                            tracing::info!(domain = %dom.name, port = %super::port_name(&nic), socket = %path.display(), "libvirt: guest's port added");
                            unclaimed.remove(path);
                            made.insert(path.clone(), *ino);
                        }
                        Err(e) => {
                            tracing::error!(domain = %dom.name, socket = %path.display(), error = %e, "libvirt: guest's port refused");
                            w.delay = LOOK_AGAIN_MAX;
                            w.later(now);
                        }
                    }
                }
                Ok(found) => {
                    // No running domain has it (yet, or any more), or one
                    // whose QEMU connects: not a socket to connect to.
                    if found.is_none() && now - w.since > LEFT_OVER && remove_left_over(path) {
                        tracing::info!(socket = %path.display(), "libvirt: socket left over by a guest that has gone: removed");
                    }
                    w.later(now);
                }
                Err(e) => {
                    if w.delay == LOOK {
                        let error = crate::error::chain(&e);
                        tracing::warn!(socket = %path.display(), %error, "libvirt: cannot look the socket's domain up; trying again");
                    }
                    w.later(now);
                }
            }
        }
        // The ports of this directory whose guest may have gone.
        for vm in topo.vms.iter().filter(|v| v.kind.is_vhost_user()) {
            let Some(path) = vm.vhost.path.as_deref().filter(|p| in_directory(&lv, p)) else {
                continue;
            };
            let qemu_listens = vm.vhost.mode == SocketMode::Client;
            if qemu_listens && !sockets.iter().any(|(s, _)| s == path) {
                tracing::info!(vm = %vm.name, "libvirt: the guest's socket is gone: port removed");
                remove(&cx, &vm.name);
                lost.remove(path);
                made.remove(path);
                continue;
            }
            let Some(status) = cx.sw.port(&vm.name).and_then(|p| p.dev.status().vhost_user) else {
                continue;
            };
            if status.connected {
                lost.remove(path);
                continue;
            }
            let w = lost
                .entry(path.to_path_buf())
                .or_insert_with(|| Wait::new(0, now));
            // Not yet connected to: its guest is starting (the `release`
            // hook ends a start that fails); looked up only after a while.
            if (status.connections == 0 && now - w.since < LEFT_OVER) || !w.due(now) {
                continue;
            }
            match virsh.owner(path) {
                // Twice in a row, a second or more apart: a guest that has
                // gone, not a look-up that raced its start.
                Ok(None) if w.misses >= 1 => {
                    tracing::info!(vm = %vm.name, "libvirt: no running domain has the interface any more: port removed");
                    remove_if(&cx, &vm.name, path, vm.mac);
                    lost.remove(path);
                    made.remove(path);
                    if qemu_listens {
                        remove_left_over(path);
                    }
                }
                Ok(None) => {
                    w.misses += 1;
                    w.next = now + Duration::from_secs(1);
                }
                Ok(Some(_)) | Err(_) => {
                    w.misses = 0;
                    w.later(now);
                }
            }
        }
    }
}

/// Port `name` removed if it is still the one on `socket` with `mac` (a
/// look-up takes a while; a guest started again meanwhile may have a port
/// of that name already).
/// Writes the dismissed sockets into the topology's state.
fn remember_dismissed(cx: &Ctl, dismissed: &BTreeMap<PathBuf, u64>) {
    let _one = cx.changes.lock().expect("changes lock");
    let dir = state_dir(&cx.topology().name);
    let Some(mut state) = read_state(&dir) else {
        return;
    };
    state.dismissed_sockets = dismissed.clone();
    if let Err(e) = write_state(&dir, &state) {
        tracing::warn!(error = %e, "libvirt: the dismissed sockets not kept in the state");
    }
}

fn remove_if(cx: &Ctl, name: &str, socket: &Path, mac: hvnet_wire::MacAddr) {
    let same = cx
        .topology()
        .vms
        .iter()
        .any(|v| v.name == name && v.vhost.path.as_deref() == Some(socket) && v.mac == mac);
    if same {
        remove(cx, name);
    }
}

/// A port removed, as `hvnet vm del` removes it.
fn remove(cx: &Ctl, name: &str) {
    if let Err(e) = crate::reconcile::del_vm(cx, name) {
        tracing::warn!(vm = %name, error = %e, "libvirt: port not removed");
    }
}

/// The directory's sockets and their inodes.
fn list(dir: &Path) -> std::io::Result<Vec<(PathBuf, u64)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if let Ok(m) = e.metadata() {
            if m.file_type().is_socket() {
                out.push((e.path(), m.ino()));
            }
        }
    }
    Ok(out)
}
