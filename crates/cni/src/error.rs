//! A CNI error: its code (the spec's well-known ones, and hvnet's own from
//! 100 up), what went wrong, and the details; printed as the spec's error
//! object on standard output, with a non-zero exit.

use serde::Serialize;

/// The spec's codes (SPEC.md, "Error"), and hvnet's.
pub mod code {
    /// The configuration's `cniVersion` is not one this plugin speaks.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// A configuration field this plugin does not support.
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// The container is unknown or gone.
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// An environment variable is missing or invalid.
    pub const INVALID_ENVIRONMENT: u32 = 4;
    /// Reading standard input (or another I/O) failed.
    pub const IO_FAILURE: u32 = 5;
    /// The configuration does not decode.
    pub const DECODING_FAILURE: u32 = 6;
    /// The configuration is invalid.
    pub const INVALID_CONFIG: u32 = 7;
    /// Try again later: the switch is starting, or busy.
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin cannot serve ADD now.
    pub const NOT_AVAILABLE: u32 = 50;
    /// The switch refused the port (a setting, a name or address taken).
    pub const SWITCH_REFUSED: u32 = 100;
    /// The switch failed to make or remove the port.
    pub const SWITCH_FAILED: u32 = 101;
    /// The topology named is not up on this host.
    pub const NO_TOPOLOGY: u32 = 102;
    /// The IPAM plugin failed (its own code is in the details).
    pub const IPAM_FAILED: u32 = 103;
    /// CHECK found the attachment not as ADD made it.
    pub const CHECK_FAILED: u32 = 104;
}

/// An error as the runtime reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{msg}{}", if .details.is_empty() { String::new() } else { format!(": {}", .details) })]
pub struct CniError {
    /// The code.
    pub code: u32,
    /// What went wrong, briefly.
    pub msg: String,
    /// Why, in words a person reading a runtime's log understands.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    /// An error of `code`.
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> CniError {
        CniError {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// The error object the spec prints, in the configuration's version.
    pub fn to_json(&self, version: &str) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("an error serializes");
        v["cniVersion"] = version.into();
        v
    }
}
