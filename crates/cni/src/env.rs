//! What the runtime says in the environment (`CNI_COMMAND`,
//! `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`, `CNI_ARGS`, `CNI_PATH`),
//! checked for the verb: a missing or malformed one is error 4, naming it.

use crate::error::{code, CniError};
use std::path::PathBuf;

/// The verbs of the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Attach a container.
    Add,
    /// Detach it (idempotent).
    Del,
    /// Check an attachment is as ADD made it.
    Check,
    /// Remove what no listed attachment owns.
    Gc,
    /// Whether ADD can be served now.
    Status,
    /// Which versions the plugin speaks.
    Version,
}

impl Command {
    /// As the runtime writes it.
    pub fn name(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }
}

/// The environment of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Env {
    /// The verb.
    pub command: Command,
    /// The container (ADD, DEL, CHECK).
    pub container: String,
    /// Its network namespace's handle (ADD, CHECK; DEL when there is one).
    pub netns: Option<PathBuf>,
    /// The interface's name in it (ADD, DEL, CHECK).
    pub ifname: String,
    /// `CNI_ARGS`, as `KEY=VALUE` pairs.
    pub args: Vec<(String, String)>,
    /// Where plugins (an IPAM's) are looked for.
    pub path: Vec<PathBuf>,
}

impl Env {
    /// Reads the environment through `var` (empty counts as unset, as
    /// runtimes set the attachment's variables empty for GC and STATUS).
    pub fn read(var: impl Fn(&str) -> Option<String>) -> Result<Env, CniError> {
        let get = |k: &str| var(k).filter(|v| !v.is_empty());
        let bad =
            |what: String| CniError::new(code::INVALID_ENVIRONMENT, "invalid environment", what);
        let command = match get("CNI_COMMAND").as_deref() {
            Some("ADD") => Command::Add,
            Some("DEL") => Command::Del,
            Some("CHECK") => Command::Check,
            Some("GC") => Command::Gc,
            Some("STATUS") => Command::Status,
            Some("VERSION") => Command::Version,
            Some(other) => {
                return Err(bad(format!(
                    "CNI_COMMAND={other:?}: it is one of ADD, DEL, CHECK, GC, STATUS, VERSION"
                )))
            }
            None => return Err(bad("CNI_COMMAND is not set".into())),
        };
        let attachment = matches!(command, Command::Add | Command::Del | Command::Check);
        let container = get("CNI_CONTAINERID").unwrap_or_default();
        let ifname = get("CNI_IFNAME").unwrap_or_default();
        let netns = get("CNI_NETNS").map(PathBuf::from);
        if attachment {
            if container.is_empty() {
                return Err(bad(format!(
                    "CNI_CONTAINERID is not set ({} needs it)",
                    command.name()
                )));
            }
            if !valid_container_id(&container) {
                return Err(bad(format!(
                    "CNI_CONTAINERID={container:?}: letters, digits, '_', '.' and '-', starting with a letter or digit"
                )));
            }
            if ifname.is_empty() {
                return Err(bad(format!(
                    "CNI_IFNAME is not set ({} needs it)",
                    command.name()
                )));
            }
            hvnet_control::topology::attach::check_ifname(&ifname)
                .map_err(|e| bad(format!("CNI_IFNAME: {e}")))?;
        }
        if matches!(command, Command::Add | Command::Check) && netns.is_none() {
            return Err(bad(format!(
                "CNI_NETNS is not set ({} needs it)",
                command.name()
            )));
        }
        let args = match get("CNI_ARGS") {
            Some(a) => parse_args(&a).map_err(bad)?,
            None => Vec::new(),
        };
        let path = get("CNI_PATH")
            .map(|p| {
                p.split(':')
                    .filter(|d| !d.is_empty())
                    .map(PathBuf::from)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Env {
            command,
            container,
            netns,
            ifname,
            args,
            path,
        })
    }
}

impl Env {
    /// The Kubernetes pod the runtime asks for, `NAMESPACE/NAME`, from
    /// `K8S_POD_NAMESPACE` and `K8S_POD_NAME` in `CNI_ARGS` (a kubelet's,
    /// or a CRI runtime's, as containerd sets them).
    pub fn pod(&self) -> Option<String> {
        let arg = |k: &str| {
            self.args
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
                .filter(|v| !v.is_empty())
        };
        Some(format!(
            "{}/{}",
            arg("K8S_POD_NAMESPACE")?,
            arg("K8S_POD_NAME")?
        ))
    }
}

/// A CNI container ID: `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`.
pub fn valid_container_id(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphanumeric())
        && c.all(|x| x.is_ascii_alphanumeric() || matches!(x, '_' | '.' | '-'))
}

/// `CNI_ARGS`: `KEY=VALUE` pairs separated by `;`.
fn parse_args(s: &str) -> Result<Vec<(String, String)>, String> {
    s.split(';')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.is_empty() && !v.contains('=') => Ok((k.into(), v.into())),
            _ => Err(format!("CNI_ARGS: {p:?} is not KEY=VALUE")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<Env, CniError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Env::read(|k| m.get(k).cloned())
    }

    #[test]
    fn each_verb_asks_for_what_it_needs_and_names_what_is_missing() {
        let e = env(&[]).unwrap_err();
        assert_eq!((e.code, e.details.as_str()), (4, "CNI_COMMAND is not set"));
        let e = env(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", "/x"),
        ])
        .unwrap_err();
        assert!(e.details.starts_with("CNI_CONTAINERID is not set"), "{e}");
        let e = env(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
        ])
        .unwrap_err();
        assert!(e.details.starts_with("CNI_NETNS"), "{e}");
        // DEL without a namespace (it has gone): fine.
        let d = env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
        ])
        .unwrap();
        assert_eq!((d.command, d.netns), (Command::Del, None));
        // GC and STATUS: the attachment's variables empty, as runtimes set them.
        let g = env(&[
            ("CNI_COMMAND", "GC"),
            ("CNI_CONTAINERID", ""),
            ("CNI_PATH", "/a:/b"),
        ])
        .unwrap();
        assert_eq!(g.path, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        let e = env(&[("CNI_COMMAND", "PUT")]).unwrap_err();
        assert!(e.details.contains("one of ADD, DEL"), "{e}");
        let e = env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "-x"),
            ("CNI_IFNAME", "eth0"),
        ])
        .unwrap_err();
        assert!(e.details.starts_with("CNI_CONTAINERID="), "{e}");
        let e = env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c"),
            ("CNI_IFNAME", "a/b"),
        ])
        .unwrap_err();
        assert!(e.details.starts_with("CNI_IFNAME"), "{e}");
    }

    #[test]
    fn cni_args_are_key_value_pairs() {
        let a = parse_args("IgnoreUnknown=1;K8S_POD_NAME=web;").unwrap();
        assert_eq!(a[1], ("K8S_POD_NAME".into(), "web".into()));
        assert!(parse_args("nokey").is_err());
        assert!(parse_args("a=b=c").is_err());
    }

    #[test]
    fn a_kubelets_pod_comes_from_its_cni_args() {
        let with = |args: &str| {
            env(&[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "c1"),
                ("CNI_IFNAME", "eth0"),
                ("CNI_NETNS", "/x"),
                ("CNI_ARGS", args),
            ])
            .unwrap()
            .pod()
        };
        let k8s = "IgnoreUnknown=1;K8S_POD_NAMESPACE=web;K8S_POD_NAME=front-1;K8S_POD_UID=u";
        assert_eq!(with(k8s).as_deref(), Some("web/front-1"));
        assert_eq!(with("K8S_POD_NAME=front-1"), None);
        assert_eq!(with("IgnoreUnknown=1"), None);
    }
}
