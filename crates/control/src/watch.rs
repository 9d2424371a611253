//! What the daemon logs about its ports that the datapath does not say
//! itself (it logs link changes and thread restarts as they happen), found
//! by watching counters between frames: the first drop under each reason
//! at each port, each switch thread that ended while the switch runs. Said
//! once each, never per frame.

use hvnet_datapath::Switch;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

/// The last state seen.
pub struct Watch {
    /// Per port, the reasons already logged (a bit per
    /// [`DropReason`](hvnet_datapath::DropReason)).
    dropped: HashMap<String, u32>,
    ended: HashSet<String>,
}

impl Watch {
    /// Starts from the switch's current counters (drops so far logged).
    pub fn new(sw: &Switch) -> Watch {
        let mut w = Watch {
            dropped: HashMap::new(),
            ended: HashSet::new(),
        };
        w.check(sw, &[]);
        w
    }

    /// Logs what changed since the last call.
    pub fn check(&mut self, sw: &Switch, threads: &[JoinHandle<()>]) {
        for p in sw.ports().iter() {
            let ways = [
                ("from the port", p.ingress_stats().dropped),
                ("to the port", p.egress_stats().dropped),
            ];
            for (way, dropped) in ways {
                for (reason, _) in dropped.nonzero() {
                    let bit = 1u32 << reason as usize;
                    let seen = match self.dropped.get_mut(&p.name) {
                        Some(seen) => seen,
                        None => self.dropped.entry(p.name.clone()).or_default(),
                    };
                    if *seen & bit == 0 {
                        *seen |= bit;
                        tracing::warn!(port = %p.name, reason = %reason.name(), way, "first drop");
                    }
                }
            }
        }
        if sw.stopping() {
            return;
        }
        for t in threads.iter().filter(|t| t.is_finished()) {
            let name = t.thread().name().unwrap_or("unnamed").to_string();
            if self.ended.insert(name.clone()) {
                tracing::error!(thread = %name, "a switch thread ended while the switch runs");
            }
        }
    }
}

/// Namespace VMs whose namespace may be deleted under the daemon (`ip
/// netns del`, the user's or a test's): the VM is gone, so its NIC must go
/// and its port down. A NIC whose queues were opened inside the namespace
/// (re-attached after a restart) holds the namespace alive, so deleting
/// its name alone would leave the port up: the daemon deletes the NIC
/// itself, through the handle it kept, and the port sees its device gone.
///
/// The names are looked at only after the kernel said a name left the
/// namespace directory (inotify): an idle daemon with a thousand VMs makes
/// no system call for them. Without inotify, every look `stat`s them all.
pub struct NetnsWatch {
    /// VM, namespace name, the handle kept, and the handle's device and
    /// inode (read once: a look is one `stat` of the name).
    vms: Vec<Held>,
    /// Names deleted or moved away in the namespace directory.
    departures: Option<inotify::Inotify>,
}

impl NetnsWatch {
    /// Keeps a handle on each VM's namespace (`(vm, namespace's handle
    /// under the namespace directory, its NIC's name)`).
    pub fn new(vms: impl IntoIterator<Item = (String, PathBuf, String)>) -> NetnsWatch {
        NetnsWatch {
            departures: departures(),
            vms: vms
                .into_iter()
                .filter_map(|(vm, ns, nic)| held(vm, ns, nic))
                .collect(),
        }
    }

    /// Watches one more VM's namespace (a VM added at run time).
    pub fn add(&mut self, vm: &str, ns: PathBuf, nic: &str) {
        // Its namespace directory exists now, if it did not before.
        if self.departures.is_none() {
            self.departures = departures();
        }
        self.vms.extend(held(vm.to_string(), ns, nic.to_string()));
    }

    /// Stops watching VM `vm` (removed: its namespace goes on purpose).
    pub fn remove(&mut self, vm: &str) {
        self.vms.retain(|h| h.vm != vm);
    }

    /// Removes the NIC of each VM whose namespace's name no longer names
    /// the namespace the daemon holds.
    pub fn check(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if self.vms.is_empty() || !self.departed() {
            return;
        }
        let same = |ns: &Path, held: (u64, u64)| {
            let now = std::fs::metadata(ns);
            matches!(now, Ok(a) if (a.dev(), a.ino()) == held)
        };
        self.vms.retain(|h| {
            if same(&h.ns, h.id) {
                return true;
            }
            let removed = hvnet_sys::netns::run_in(&h.handle, || {
                crate::rtnl::Rtnl::new().and_then(|mut r| r.del_link(&h.nic))
            });
            let (vm, ns) = (&h.vm, h.ns.display());
            match removed {
                Ok(Ok(())) => tracing::warn!(vm = %vm, netns = %ns, "the VM's namespace was deleted: its NIC removed, its port goes down"),
                Ok(Err(e)) => tracing::info!(vm = %vm, netns = %ns, error = %e, "the VM's namespace was deleted"),
                Err(e) => tracing::warn!(vm = %vm, netns = %ns, error = %e, "the VM's namespace was deleted; cannot enter it to remove its NIC"),
            }
            false
        });
    }

    /// True if a name may have left the namespace directory since the last
    /// call (always, without inotify).
    fn departed(&mut self) -> bool {
        let Some(ino) = self.departures.as_mut() else {
            return true;
        };
        let mut buf = [0u8; 4096];
        let mut any = false;
        loop {
            match ino.read_events(&mut buf) {
                Ok(events) => {
                    let mut read = false;
                    for e in events {
                        read = true;
                        // The directory itself went: its watch with it.
                        if e.mask.contains(inotify::EventMask::IGNORED) {
                            self.departures = None;
                            return true;
                        }
                    }
                    if !read {
                        return any;
                    }
                    any = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return any,
                // The watch itself failed: look every time from now on.
                Err(_) => {
                    self.departures = None;
                    return true;
                }
            }
        }
    }
}

/// A VM, its namespace's name, the handle kept, and the handle's device
/// and inode (what the name must still lead to).
/// A VM's namespace, held.
struct Held {
    vm: String,
    /// Its handle's path (under the namespace directory).
    ns: PathBuf,
    /// Its NIC there.
    nic: String,
    handle: std::fs::File,
    /// The handle's device and inode.
    id: (u64, u64),
}

/// VM `vm`'s namespace `ns`, held.
fn held(vm: String, ns: PathBuf, nic: String) -> Option<Held> {
    use std::os::unix::fs::MetadataExt;
    let handle = std::fs::File::open(&ns).ok()?;
    let m = handle.metadata().ok()?;
    Some(Held {
        vm,
        ns,
        nic,
        handle,
        id: (m.dev(), m.ino()),
    })
}

/// An inotify watch on the namespace directory for names deleted or moved
/// away (`ip netns del` unmounts and unlinks), or `None` if there is none.
fn departures() -> Option<inotify::Inotify> {
    use inotify::WatchMask;
    let ino = inotify::Inotify::init().ok()?;
    ino.watches()
        .add(
            hvnet_sys::netns::NETNS_RUN_DIR,
            WatchMask::DELETE
                | WatchMask::MOVED_FROM
                | WatchMask::DELETE_SELF
                | WatchMask::MOVE_SELF,
        )
        .ok()?;
    Some(ino)
}
