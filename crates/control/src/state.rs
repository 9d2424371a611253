//! A topology's state on the host: `/run/hvnet/<topology>/state.json` (what
//! it created, written before each thing is created), the lock that
//! serializes `up` and `down` of one topology, and the ownership markers
//! checked before anything is deleted or re-attached to.

use crate::error::{io_err, DaemonError};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Where topologies keep their state.
pub const RUN_DIR: &str = "/run/hvnet";

/// The directory, in a topology's state directory, of the removals the CNI
/// plugin asked for while the daemon did not answer (one empty file per
/// VM): the daemon does them when it starts.
pub const PENDING_DEL: &str = "cni-deleted";

/// An interface hvnet put in a namespace it did not make.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachedIf {
    /// The namespace's handle.
    pub netns: PathBuf,
    /// The interface's name there.
    pub ifname: String,
}

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
    /// Interfaces put in namespaces hvnet did not make (containers'), for
    /// `down` to take out again.
    #[serde(default)]
    pub attached: Vec<AttachedIf>,
    /// Process groups of the real guests started (each guest leads its
    /// own), for a `down` after the daemon died.
    #[serde(default)]
    pub guests: Vec<u32>,
    /// The real guests that outlive their daemon (QEMU's, which reconnect
    /// to their port): a daemon that starts again takes them over instead
    /// of booting them.
    #[serde(default)]
    pub kept_guests: Vec<KeptGuest>,
    /// Set once traffic can flow; cleared when the daemon stops.
    pub ready: bool,
    /// This bring-up's identity, in the ownership marker of everything it
    /// creates (kept across daemon restarts).
    #[serde(default)]
    pub instance: String,
    /// The topology text that was brought up: a restarted daemon
    /// re-attaches only to the same topology.
    #[serde(default)]
    pub topology_text: String,
    /// How many times a daemon re-attached to this topology (its counters
    /// start from zero each time).
    #[serde(default)]
    pub restarts: u32,
    /// VMs added at run time (`hvnet vm add`), each its `[[vm]]` table
    /// with its MAC written in: a restarted daemon re-attaches to them too.
    #[serde(default)]
    pub added_vms: Vec<String>,
    /// VMs of the file removed at run time (`hvnet vm del`), by name.
    #[serde(default)]
    pub removed_vms: Vec<String>,
    /// Run-time changes of ports' settings (`hvnet port P set`), by port:
    /// a restarted daemon makes them again; `hvnet up FILE` drops those of
    /// the ports the file owns (`reconcile::port_set`).
    #[serde(default)]
    pub port_changes: PortChanges,
    /// libvirt's guests' sockets whose port was removed by hand (`hvnet
    /// vm del`) while the guest ran on, with the socket's inode then: not
    /// given a port again, by this daemon or the next, until bound again.
    #[serde(default)]
    pub dismissed_sockets: std::collections::BTreeMap<PathBuf, u64>,
}

/// Run-time changes by port: each setting changed, with its value as
/// `hvnet port P --json` shows it (and `vlan`, a VM's access VLAN).
pub type PortChanges =
    std::collections::BTreeMap<String, serde_json::Map<String, serde_json::Value>>;

/// Why the topology as it runs could not be made again from the state.
#[derive(Debug, thiserror::Error)]
pub enum RunningTopologyError {
    /// The text brought up (or last applied) is refused.
    #[error("line {}: {}", .0.line, .0)]
    Text(crate::topology::ParseError),
    /// A VM added at run time is refused.
    #[error(transparent)]
    Added(#[from] crate::topology::VmTableError),
    /// A run-time change no longer fits its port's settings.
    #[error("{0}")]
    Changed(String),
}

impl State {
    /// The topology as it runs: the text brought up (or last applied),
    /// with the VMs added and removed at run time since, and the run-time
    /// changes of its ports' settings.
    pub fn running_topology(&self) -> Result<crate::topology::Topology, RunningTopologyError> {
        let mut t = self.declared_topology()?;
        overlay(&mut t, &self.port_changes).map_err(RunningTopologyError::Changed)?;
        Ok(t)
    }

    /// The topology as declared: [`State::running_topology`] without the
    /// ports' run-time changes.
    pub fn declared_topology(&self) -> Result<crate::topology::Topology, RunningTopologyError> {
        let t = crate::topology::parse(&self.topology_text).map_err(RunningTopologyError::Text)?;
        Ok(t.with_changes(&self.added_vms, &self.removed_vms)?)
    }
}

/// `topo` with the run-time changes of `changes` made to its ports (a
/// restarted daemon's topology); a port no longer there is skipped.
pub fn overlay(topo: &mut crate::topology::Topology, changes: &PortChanges) -> Result<(), String> {
    use crate::reconcile::merge::VLAN;
    use hvnet_datapath::PortSettings;
    for (name, c) in changes {
        let merged = |s: &PortSettings| -> Result<PortSettings, String> {
            let mut v = serde_json::json!(s);
            for (k, x) in c.iter().filter(|(k, _)| *k != VLAN) {
                v[k] = x.clone();
            }
            serde_json::from_value(v).map_err(|e| format!("port {name}: a run-time change: {e}"))
        };
        if let Some(vm) = topo.vms.iter_mut().find(|v| v.name == *name) {
            vm.settings = merged(&vm.settings)?;
            if let Some(n) = c.get(VLAN).and_then(serde_json::Value::as_u64) {
                vm.vlan = u16::try_from(n).map_err(|e| format!("port {name}: vlan: {e}"))?;
            }
        } else if let Some(u) = topo.uplinks.iter_mut().find(|u| u.name == *name) {
            u.settings = merged(&u.settings)?;
        }
    }
    Ok(())
}

/// A guest left running by a daemon that stopped or died.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptGuest {
    /// The VM.
    pub vm: String,
    /// Its hypervisor's process (QEMU).
    pub pid: u32,
    /// Its process group (QEMU and its helpers).
    pub pgid: u32,
}

impl State {
    /// The ownership marker: the alias given to each namespace's loopback
    /// and each device this topology creates.
    pub fn marker(&self) -> String {
        format!("hvnet topology={} instance={}", self.name, self.instance)
    }
}

/// A fresh instance identity: time and PID, unique on the host.
pub fn new_instance() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{:x}-{:x}", t.as_nanos(), std::process::id())
}

/// The state directory of a topology.
pub fn state_dir(name: &str) -> PathBuf {
    Path::new(RUN_DIR).join(name)
}

/// Reads a topology's state file.
pub fn read_state(dir: &Path) -> Option<State> {
    serde_json::from_slice(&std::fs::read(dir.join("state.json")).ok()?).ok()
}

pub(crate) fn write_state(dir: &Path, s: &State) -> Result<(), DaemonError> {
    let tmp = dir.join("state.json.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(s).expect("state serializes"),
    )
    .map_err(io_err("write state"))?;
    std::fs::rename(&tmp, dir.join("state.json")).map_err(io_err("write state"))
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

/// Creates a topology's state directory, readable by root only from the
/// start (it holds the control socket).
pub(crate) fn create_state_dir(dir: &Path) -> Result<(), DaemonError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(format!("create {}", dir.display())))
}

/// Held while a topology is being brought up or down: a second `up` or
/// `down` of the same topology is refused instead of racing the first.
/// Released when dropped (an `flock`, so also when the process dies).
pub struct TopologyLock {
    file: File,
    path: PathBuf,
}

impl TopologyLock {
    /// Removes the lock file (a `down` that removed the topology), while
    /// still holding it: whoever opened it before sees, once it has the
    /// lock, that its file is no longer the one at the path and tries again
    /// on a fresh one. So no lock file outlives its topology.
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
        drop(self.file);
    }
}

/// Takes the lock of topology `name`, or says who is holding it.
pub fn lock_topology(name: &str) -> Result<TopologyLock, DaemonError> {
    use std::os::unix::fs::MetadataExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(RUN_DIR)
        .map_err(io_err(format!("create {RUN_DIR}")))?;
    let path = Path::new(RUN_DIR).join(format!(".{name}.lock"));
    loop {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err(format!("open {}", path.display())))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(DaemonError::Other(format!(
                    "topology {name} is being brought up or down by another hvnet command; wait for it to finish"
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(io_err(format!("lock {}", path.display()))(e))
            }
        }
        // Locked; but a `down` may have removed this file meanwhile.
        let held = file.metadata().map(|m| (m.dev(), m.ino()));
        let now = std::fs::metadata(&path).map(|m| (m.dev(), m.ino()));
        if let (Ok(a), Ok(b)) = (held, now) {
            if a == b {
                return Ok(TopologyLock { file, path });
            }
        }
    }
}

/// The ownership marker on namespace `ns` (its loopback's alias), if it
/// exists and carries one.
pub fn netns_marker(ns: &str) -> Option<String> {
    crate::rtnl::Rtnl::in_netns(ns).ok()?.alias("lo").ok()?
}

/// The ownership marker on device `dev` in this namespace (its alias).
pub fn device_marker(dev: &str) -> Option<String> {
    Some(
        crate::rtnl::Rtnl::new()
            .ok()?
            .alias(dev)
            .ok()?
            .unwrap_or_default(),
    )
}

/// Refuses a namespace that is not this topology's (absent, or someone
/// else's of the same name).
pub(crate) fn check_owned_netns(ns: &str, marker: &str) -> Result<(), DaemonError> {
    check_owned("network namespace", ns, netns_marker(ns), marker)
}

/// Refuses a device that is not this topology's.
pub(crate) fn check_owned_device(dev: &str, marker: &str) -> Result<(), DaemonError> {
    check_owned("device", dev, device_marker(dev), marker)
}

fn check_owned(
    what: &str,
    name: &str,
    found: Option<String>,
    marker: &str,
) -> Result<(), DaemonError> {
    match found {
        Some(m) if m == marker => Ok(()),
        Some(m) => Err(DaemonError::Other(format!(
            "{what} {name} is not this topology's (its marker is {m:?}, expected {marker:?})"
        ))),
        None => Err(DaemonError::Other(format!(
            "{what} {name} is gone; `hvnet down` and `hvnet up` the topology again"
        ))),
    }
}
