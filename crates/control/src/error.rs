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

/// An error in words with the errors under it (its sources), each after
/// a colon: what a reply or a log line says where a typed error becomes
/// words (its own message names what failed, its sources why). A message
/// that ends with its source's words already (`DaemonError::Io`'s) does
/// not say them twice.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut words = e.to_string();
    let mut under = e.source();
    while let Some(s) = under {
        let said = s.to_string();
        if !words.ends_with(&said) {
            words += ": ";
            words += &said;
        }
        under = s.source();
    }
    words
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_says_each_source_once() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = DaemonError::Io {
            what: "read x".into(),
            source: io(),
        };
        assert_eq!(chain(&e), "read x: entity not found");
        #[derive(Debug, thiserror::Error)]
        #[error("cannot run it")]
        struct Run(#[source] DaemonError);
        let e = Run(DaemonError::Io {
            what: "exec it".into(),
            source: io(),
        });
        assert_eq!(chain(&e), "cannot run it: exec it: entity not found");
    }
}
