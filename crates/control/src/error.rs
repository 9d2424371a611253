//! The control plane's error type, and the helpers every part of it
//! (provisioning, guests, state) uses to make one: kept apart from the
//! daemon so that what the daemon orchestrates does not import it.

use crate::topology;
use std::process::Command;

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
    /// A netlink request (links, addresses) failed.
    #[error(transparent)]
    Netlink(#[from] crate::rtnl::NetlinkError),
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

/// Turns an I/O error into one that says what was being done.
pub fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let what = what.into();
    move |source| DaemonError::Io { what, source }
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
