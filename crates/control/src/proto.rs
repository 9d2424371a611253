//! The control socket protocol: one JSON request per line, one JSON reply
//! per line. The socket is `/run/hvnet/<topology>/ctl.sock`, mode 0600
//! (root only).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A request.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    /// `hvnet ports`
    Ports,
    /// `hvnet stats PATH`
    Stats {
        /// Tree path.
        path: String,
    },
    /// `hvnet port PORT`
    PortShow {
        /// Port name.
        name: String,
    },
    /// `hvnet port PORT set k=v…`
    PortSet {
        /// Port name.
        name: String,
        /// Settings to change (the port's settings as JSON, partial).
        changes: Value,
    },
    /// `hvnet fdb`
    Fdb,
    /// `hvnet top`: every port's counters and ring fill in one snapshot,
    /// with the processes of the real guests hvnet started.
    Counters,
    /// `hvnet down`
    Shutdown,
    /// `hvnet restart VM`: a real guest killed (if it runs) and started
    /// again; it reconnects to its port.
    Restart {
        /// The VM.
        vm: String,
    },
    /// `hvnet kill VM`: a real guest's process ended, as a crash would
    /// end it (its port goes down; the switch goes on).
    Kill {
        /// The VM.
        vm: String,
    },
}

/// A reply.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reply {
    /// Success.
    pub ok: bool,
    /// The data, when ok.
    #[serde(default)]
    pub data: Value,
    /// What went wrong, when not.
    #[serde(default)]
    pub error: String,
}

/// Sends one request and reads the reply.
pub fn call(sock: &Path, req: &Request) -> std::io::Result<Reply> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut line = serde_json::to_string(req).expect("request serializes");
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut out = String::new();
    r.read_line(&mut out)?;
    serde_json::from_str(&out).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}
