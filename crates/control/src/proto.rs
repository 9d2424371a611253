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
    /// `hvnet mdb`: multicast snooping's groups, router ports and
    /// queriers.
    Mdb,
    /// `hvnet ipfix`: flow export's settings, its cache and counters.
    Ipfix,
    /// `hvnet route [TENANT]`: each tenant's gateways, routes and
    /// neighbours.
    Route {
        /// One tenant only.
        tenant: Option<String>,
    },
    /// `hvnet mirror`: the port mirrors, what each selects, where its
    /// copies go, and its counters.
    Mirror,
    /// `hvnet team`: each team uplink's members, their state, its LACP
    /// partner, the ports each member carries, its failovers and drops.
    Team,
    /// `hvnet workers`: the datapath's workers, their queues and loads.
    Workers,
    /// `hvnet vm add`: a VM created and its port added while the switch
    /// runs.
    VmAdd {
        /// One `[[vm]]` table, as in a topology file.
        table: String,
    },
    /// `hvnet up FILE` on a running topology: what runs made what the
    /// file says.
    Apply {
        /// The topology file's text.
        text: String,
    },
    /// `hvnet vm del`: a VM's port removed and the VM deleted.
    VmDel {
        /// The VM.
        name: String,
    },
    /// `hvnet evpn`
    Evpn,
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
    /// libvirt's `qemu` hook, for a domain (`packaging/libvirt/hvnet-hook`):
    /// at `prepare` its interfaces on this switch are checked and the
    /// ones the switch serves get their ports; at `release` they go.
    LibvirtHook {
        /// The hook's operation (`prepare`, `release`, ...).
        op: String,
        /// The domain's XML, as libvirt gives it to the hook.
        xml: String,
    },
    /// `hvnet kill VM`: a real guest's process ended, as a crash would
    /// end it (its port goes down; the switch goes on).
    Kill {
        /// The VM.
        vm: String,
    },
    /// `hvnet acl [PORT] [--conntrack]`: security groups' rules with hit
    /// counts, and the tracked connections.
    Acl {
        /// Only this port.
        #[serde(default)]
        port: Option<String>,
        /// The connection tables too.
        #[serde(default)]
        conntrack: bool,
    },
    /// `hvnet acl reapply [PORT] [--flush]`: tracked connections checked
    /// against the rules now (or all removed).
    AclReapply {
        /// Only this port.
        #[serde(default)]
        port: Option<String>,
        /// Remove every tracked connection.
        #[serde(default)]
        flush: bool,
    },
    /// `hvnet trace PORT --live FILTER`: the next frames from the port
    /// that the filter keeps, each stage's line on their path.
    Trace {
        /// The port (a VM's, an uplink's or a tunnel endpoint's).
        port: String,
        /// A tcpdump filter expression (empty: any frame).
        #[serde(default)]
        filter: String,
        /// Frames to trace (1 to 64).
        count: u32,
        /// How long to wait for them, in milliseconds.
        timeout_ms: u64,
    },
    /// `hvnet trace PORT FLOW`: a frame described in words, switched from
    /// the port with every stage's line and delivered nowhere (unless
    /// `inject`).
    TraceFlow {
        /// The port it is sent from.
        port: String,
        /// Its words (`dst=web1 proto=tcp dport=443`).
        flow: String,
        /// Delivered as the port's guest's own frame.
        #[serde(default)]
        inject: bool,
    },
    /// `hvnet diagnose VM`: what its counters, guest CPU and frames show
    /// over a window, as findings.
    Diagnose {
        /// The VM.
        vm: String,
        /// The window, in milliseconds.
        window_ms: u64,
    },
    /// `hvnet capture PORT`: copies of the port's frames at the points
    /// asked for; after the reply line, the connection carries pcapng
    /// until the client closes it or `count` frames were sent.
    Capture {
        /// The port (a VM's, an uplink's or a tunnel endpoint's).
        port: String,
        /// `in`, `offload`, `out`, `drop` (none: `in` and `out`).
        #[serde(default)]
        points: Vec<String>,
        /// A tcpdump filter expression (empty: every frame).
        #[serde(default)]
        filter: String,
        /// Bytes kept of each frame (0: all).
        #[serde(default)]
        snaplen: u32,
        /// Frames to send before the capture ends (0: no end).
        #[serde(default)]
        count: u64,
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
    /// What went wrong, when not, in words.
    #[serde(default)]
    pub error: String,
    /// What went wrong, typed: for scripts, which act on its `kind` and
    /// the values it names rather than on the words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<CtlError>,
}

impl Reply {
    /// The answer to a request: its data, or why it was refused.
    pub fn new(result: Result<Value, CtlError>) -> Reply {
        match result {
            Ok(data) => Reply {
                ok: true,
                data,
                error: String::new(),
                detail: None,
            },
            Err(e) => Reply {
                ok: false,
                data: Value::Null,
                error: e.to_string(),
                detail: Some(e),
            },
        }
    }
}

/// Why the daemon refused a request. Serialized with a `kind` tag
/// (`{"kind": "bad_value", "setting": "mtu", "value": "99999", "allowed":
/// "a number (68..9000)"}`); displayed as the CLI says it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CtlError {
    /// The request is not one the daemon knows, or not JSON.
    #[error("bad request: {reason}")]
    BadRequest {
        /// What the parser said.
        reason: String,
    },
    /// The request line is longer than the daemon reads.
    #[error("request larger than {limit} bytes: refused")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// No port, uplink, VM, queue or stats node of that name.
    #[error("no {what} named {name:?}{}", choices_text(.choices))]
    NotFound {
        /// `port`, `uplink`, `vm`, `queue` or `stats node`.
        what: String,
        /// The name asked for.
        name: String,
        /// The names there are (empty where they are too many to list).
        choices: Vec<String>,
    },
    /// A setting `port set` does not know.
    #[error("unknown setting {setting:?}; settings are {}", .allowed.join(", "))]
    UnknownSetting {
        /// The key given.
        setting: String,
        /// The settings there are.
        allowed: Vec<String>,
    },
    /// A value the setting does not take.
    #[error("{setting}={value}: {setting} takes {allowed}")]
    BadValue {
        /// The setting.
        setting: String,
        /// The value given, in the CLI's words.
        value: String,
        /// What it takes: `on or off`, `a number (68..9000)`, `a word
        /// (auto or thread)`.
        allowed: String,
    },
    /// A valid request this port, guest or daemon does not allow.
    #[error("{reason}")]
    Refused {
        /// Why.
        reason: String,
    },
    /// The request was allowed but the system failed to carry it out.
    #[error("{reason}")]
    Failed {
        /// What failed.
        reason: String,
    },
}

fn choices_text(choices: &[String]) -> String {
    if choices.is_empty() {
        String::new()
    } else {
        format!(" (there are: {})", choices.join(", "))
    }
}

impl CtlError {
    /// A refusal, in words.
    pub fn refused(reason: impl Into<String>) -> CtlError {
        CtlError::Refused {
            reason: reason.into(),
        }
    }

    /// A failure of the system, in words.
    pub fn failed(reason: impl ToString) -> CtlError {
        CtlError::Failed {
            reason: reason.to_string(),
        }
    }

    /// Nothing called `name` among `choices`.
    pub fn not_found(what: &str, name: &str, choices: Vec<String>) -> CtlError {
        CtlError::NotFound {
            what: what.into(),
            name: name.into(),
            choices,
        }
    }
}

/// Sends one request and reads the reply.
pub fn call(sock: &Path, req: &Request) -> std::io::Result<Reply> {
    call_waiting(sock, req, Duration::from_secs(10))
}

/// [`call`], waiting up to `wait` for the reply (a request that creates
/// VMs takes as long as they do).
pub fn call_waiting(sock: &Path, req: &Request, wait: Duration) -> std::io::Result<Reply> {
    open(sock, req, wait).map(|(reply, _)| reply)
}

/// Sends one request and reads the reply, waiting up to `wait`, and
/// hands back the connection too, for a request whose answer goes on
/// after the reply line (`hvnet capture`'s stream).
pub fn open(
    sock: &Path,
    req: &Request,
    wait: Duration,
) -> std::io::Result<(Reply, BufReader<UnixStream>)> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(wait))?;
    let mut line = serde_json::to_string(req).expect("request serializes");
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut out = String::new();
    r.read_line(&mut out)?;
    let reply = serde_json::from_str(&out)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok((reply, r))
}
