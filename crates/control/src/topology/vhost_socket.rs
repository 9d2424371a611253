//! A `kind = "vhost-user"` VM's socket as its topology sets it: which side
//! hvnet is (`mode`), where the socket is, and who may connect to it —
//! what a hypervisor that does not run as root needs (libvirt runs QEMU as
//! `libvirt-qemu`), checked when the topology is read, before anything is
//! created.

use hvnet_port::SocketMode;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// `mode` as a topology spells it.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(super) enum ModeRepr {
    Server,
    Client,
}

/// The socket settings of a `[[vm]]`, as written.
#[derive(Clone, Debug, Default)]
pub(super) struct SocketRepr {
    pub mode: Option<ModeRepr>,
    pub socket: Option<String>,
    pub owner: Option<String>,
    pub group: Option<String>,
    pub perm: Option<String>,
}

/// A vhost-user VM's socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VhostSocket {
    /// Which side of it hvnet is.
    pub mode: SocketMode,
    /// Its path; `None`: in the topology's state directory
    /// (`/run/hvnet/TOPOLOGY/VM.sock`).
    pub path: Option<PathBuf>,
    /// Owner of a listening socket (root's unless set).
    pub owner: Option<u32>,
    /// Group of a listening socket.
    pub group: Option<u32>,
    /// Permission bits of a listening socket.
    pub perm: u32,
}

impl Default for VhostSocket {
    fn default() -> Self {
        VhostSocket {
            mode: SocketMode::Server,
            path: None,
            owner: None,
            group: None,
            // Whoever connects shares memory with the switch.
            perm: 0o600,
        }
    }
}

impl VhostSocket {
    /// Checks what a `[[vm]]` of kind `kind` says of its socket.
    pub(super) fn from_repr(kind: &str, r: &SocketRepr) -> Result<VhostSocket, String> {
        let set: Vec<&str> = [
            ("mode", r.mode.is_some()),
            ("socket", r.socket.is_some()),
            ("socket_owner", r.owner.is_some()),
            ("socket_group", r.group.is_some()),
            ("socket_mode", r.perm.is_some()),
        ]
        .iter()
        .filter(|(_, on)| *on)
        .map(|(k, _)| *k)
        .collect();
        if kind != "vhost-user" {
            return match set.first() {
                Some(k) => Err(format!(
                    "{k} is for kind = \"vhost-user\" VMs, not {kind:?} (hvnet starts those on a socket of its own)"
                )),
                None => Ok(VhostSocket::default()),
            };
        }
        let mode = match r.mode {
            Some(ModeRepr::Client) => SocketMode::Client,
            Some(ModeRepr::Server) | None => SocketMode::Server,
        };
        let path = r.socket.as_deref().map(PathBuf::from);
        if let Some(p) = &path {
            if !p.is_absolute() || p.file_name().is_none() {
                return Err(format!(
                    "socket {p:?} must be an absolute path to a socket file"
                ));
            }
        }
        if mode == SocketMode::Client {
            if path.is_none() {
                return Err("mode = \"client\" needs socket = \"PATH\": the socket the hypervisor listens on".into());
            }
            if let Some(k) = set.iter().find(|k| k.starts_with("socket_")) {
                return Err(format!(
                    "{k} is for mode = \"server\" (a client connects to the hypervisor's socket)"
                ));
            }
        }
        let owner = id_named("/etc/passwd", "socket_owner", "user", r.owner.as_deref())?;
        let group = id_named("/etc/group", "socket_group", "group", r.group.as_deref())?;
        let perm = match r.perm.as_deref() {
            Some(m) => parse_perm(m)?,
            None => VhostSocket::default().perm,
        };
        Ok(VhostSocket {
            mode,
            path,
            owner,
            group,
            perm,
        })
    }
}

/// Permission bits written as `chmod` takes them: octal, `0660` or `660`.
fn parse_perm(m: &str) -> Result<u32, String> {
    let bad =
        || format!("socket_mode {m:?} must be octal permission bits, 0000..0777 (e.g. \"0660\")");
    let digits = m.strip_prefix("0o").unwrap_or(m);
    if digits.is_empty() || digits.len() > 4 {
        return Err(bad());
    }
    let v = u32::from_str_radix(digits, 8).map_err(|_| bad())?;
    if v > 0o777 {
        return Err(bad());
    }
    Ok(v)
}

/// Setting `key`'s user or group id (`what`), if set: looked up in `file`.
fn id_named(file: &str, key: &str, what: &str, name: Option<&str>) -> Result<Option<u32>, String> {
    name.map(|n| {
        id_of(Path::new(file), n).ok_or(format!("{key} {n:?} is not a {what} on this host"))
    })
    .transpose()
}

/// A user's or group's id: a number as it is, else the name looked up in
/// `file` (`/etc/passwd` or `/etc/group`: name, password, id, ...).
pub(super) fn id_of(file: &Path, name: &str) -> Option<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Some(n);
    }
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr(mode: Option<ModeRepr>, socket: Option<&str>) -> SocketRepr {
        SocketRepr {
            mode,
            socket: socket.map(String::from),
            ..SocketRepr::default()
        }
    }

    #[test]
    fn a_client_names_the_hypervisors_socket_and_nothing_else() {
        let c = VhostSocket::from_repr(
            "vhost-user",
            &repr(Some(ModeRepr::Client), Some("/run/vm.sock")),
        )
        .unwrap();
        assert_eq!(
            (c.mode, c.path.as_deref()),
            (SocketMode::Client, Some(Path::new("/run/vm.sock")))
        );
        let e =
            VhostSocket::from_repr("vhost-user", &repr(Some(ModeRepr::Client), None)).unwrap_err();
        assert!(e.contains("needs socket"), "{e}");
        let r = SocketRepr {
            perm: Some("0660".into()),
            ..repr(Some(ModeRepr::Client), Some("/run/vm.sock"))
        };
        let e = VhostSocket::from_repr("vhost-user", &r).unwrap_err();
        assert!(e.starts_with("socket_mode is for mode = \"server\""), "{e}");
        let e = VhostSocket::from_repr("vhost-user", &repr(None, Some("vm.sock"))).unwrap_err();
        assert!(e.contains("absolute path"), "{e}");
    }

    #[test]
    fn a_servers_access_is_checked_and_resolved() {
        let d = VhostSocket::from_repr("vhost-user", &SocketRepr::default()).unwrap();
        assert_eq!(d, VhostSocket::default());
        let r = SocketRepr {
            owner: Some("root".into()),
            group: Some("0".into()),
            perm: Some("0660".into()),
            ..SocketRepr::default()
        };
        let s = VhostSocket::from_repr("vhost-user", &r).unwrap();
        assert_eq!((s.owner, s.group, s.perm), (Some(0), Some(0), 0o660));
        for (m, ok) in [
            ("660", true),
            ("0o640", true),
            ("0777", true),
            ("1777", false),
            ("rw", false),
            ("", false),
        ] {
            assert_eq!(parse_perm(m).is_ok(), ok, "{m}");
        }
        let r = SocketRepr {
            group: Some("no-such-group-here".into()),
            ..SocketRepr::default()
        };
        let e = VhostSocket::from_repr("vhost-user", &r).unwrap_err();
        assert!(e.contains("not a group on this host"), "{e}");
    }

    #[test]
    fn guests_hvnet_starts_keep_their_own_socket() {
        let e = VhostSocket::from_repr("qemu", &repr(Some(ModeRepr::Client), Some("/x.sock")))
            .unwrap_err();
        assert!(
            e.starts_with("mode is for kind = \"vhost-user\" VMs, not \"qemu\""),
            "{e}"
        );
        assert_eq!(
            VhostSocket::from_repr("uml", &SocketRepr::default()).unwrap(),
            VhostSocket::default()
        );
    }
}
