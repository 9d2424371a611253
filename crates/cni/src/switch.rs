//! The running switch, asked over its control socket (the plugin never
//! starts one): a port made, removed, shown or listed.

use hvnet_control::proto::{self, CtlError, Request};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// Why the switch did not answer as asked.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    /// No topology of that name is up on this host (nothing under
    /// `/run/hvnet/NAME`).
    #[error("topology {0} is not up on this host (`hvnet up FILE` starts it)")]
    NotUp(String),
    /// The topology is up but its daemon does not answer (stopped, or
    /// restarting).
    #[error("topology {0}'s switch does not answer on {1}: {2}")]
    NoAnswer(String, String, std::io::Error),
    /// The switch answered with an error.
    #[error("{0}")]
    Said(String, Option<CtlError>),
}

impl SwitchError {
    /// The switch said it has no such VM or port.
    pub fn not_found(&self) -> bool {
        matches!(self, SwitchError::Said(_, Some(CtlError::NotFound { .. })))
    }
}

/// The topology's state directory.
pub fn dir(topology: &str) -> PathBuf {
    hvnet_control::state::state_dir(topology)
}

/// Sends `req` to `topology`'s switch, waiting up to `wait`.
pub fn call(topology: &str, req: &Request, wait: Duration) -> Result<Value, SwitchError> {
    let d = dir(topology);
    if !d.join("state.json").exists() {
        return Err(SwitchError::NotUp(topology.into()));
    }
    let sock = d.join("ctl.sock");
    let reply = proto::call_waiting(&sock, req, wait)
        .map_err(|e| SwitchError::NoAnswer(topology.into(), sock.display().to_string(), e))?;
    if reply.ok {
        Ok(reply.data)
    } else {
        Err(SwitchError::Said(reply.error, reply.detail))
    }
}
