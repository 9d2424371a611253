//! The network configuration on standard input: CNI's own keys, the
//! topology to join, and every other key one of a `[[vm]]` table's, in
//! hvnet's own words (`vlan`, `mtu`, `tx_rate`, guards…). Unknown keys
//! and keys the plugin sets itself are refused with the key's name,
//! before anything is made.

use crate::error::{code, CniError};
use serde_json::{Map, Value};

/// Where a `"kind": "vhost-user"` network's sockets go by default, one
/// directory per network (a pod mounts it to reach its socket).
pub const SOCKET_DIRS: &str = "/run/hvnet-cni";

/// The versions this plugin speaks (0.3.x results are 0.4.0's).
pub const VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The `[[vm]]` keys a configuration may give.
pub const VM_KEYS: [&str; 30] = [
    "vlan",
    "vlan_mode",
    "vlans",
    "native_vlan",
    "mtu",
    "mac",
    "queues",
    "security_groups",
    "tx_rate",
    "tx_burst",
    "rx_rate",
    "rx_burst",
    "source_guard",
    "arp_guard",
    "nd_guard",
    "dhcp_guard",
    "ra_guard",
    "dhcp_snooping",
    "addresses",
    "lro",
    "tso",
    "csum",
    "ring1",
    "ring2",
    "rx_overflow",
    "delivery",
    "cpu_limit",
    "shares",
    "reservation",
    "connected",
];

/// The `[[vm]]` keys the plugin sets from the call (refused in the
/// configuration, with where they come from).
const SET_BY_PLUGIN: [(&str, &str); 9] = [
    (
        "name",
        "the port's name comes from the container ID and interface",
    ),
    ("netns", "CNI_NETNS gives it"),
    ("ifname", "CNI_IFNAME gives it"),
    ("ipv4", "the IPAM plugin gives it (ipam)"),
    ("ipv6", "the IPAM plugin gives it (ipam)"),
    ("routes", "the IPAM plugin gives them (ipam)"),
    ("container", "CNI_CONTAINERID gives it"),
    ("network", "the configuration's name gives it"),
    (
        "pod",
        "CNI_ARGS' K8S_POD_NAMESPACE and K8S_POD_NAME give it",
    ),
];

/// CNI's own keys, and the plugin's (`kind`, `socket_dir`).
const CNI_KEYS: [&str; 11] = [
    "kind",
    "socket_dir",
    "cniVersion",
    "name",
    "type",
    "topology",
    "ipam",
    "dns",
    "runtimeConfig",
    "capabilities",
    "args",
];

/// What `runtimeConfig` brings (the capabilities `mac`, `ips`,
/// `bandwidth`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Runtime {
    /// The container's MAC.
    pub mac: Option<String>,
    /// Addresses asked for (for the IPAM plugin, which reads them).
    pub ips: Vec<String>,
    /// Rates in bit/s and bursts in bits: into the container
    /// (`ingress*`) and out of it (`egress*`).
    pub bandwidth: Option<Bandwidth>,
}

/// The `bandwidth` capability.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bandwidth {
    /// Into the container, bit/s (0: no limit).
    pub ingress_rate: u64,
    /// Its burst, bits.
    pub ingress_burst: u64,
    /// Out of the container, bit/s (0: no limit).
    pub egress_rate: u64,
    /// Its burst, bits.
    pub egress_burst: u64,
}

/// One call's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct NetConf {
    /// `cniVersion`.
    pub version: String,
    /// The network's name.
    pub name: String,
    /// The hvnet topology whose switch the containers join.
    pub topology: String,
    /// The IPAM plugin's type, if addresses are delegated.
    pub ipam: Option<String>,
    /// `dns`, as given (for the result).
    pub dns: Option<Value>,
    /// What the runtime passed at run time.
    pub runtime: Runtime,
    /// The ADD result (DEL, CHECK).
    pub prev_result: Option<Value>,
    /// GC: the attachments still in use, `(container, ifname)`, if the
    /// runtime gave the list.
    pub valid_attachments: Option<Vec<(String, String)>>,
    /// The `[[vm]]` keys given, in order.
    pub vm: Vec<(String, Value)>,
    /// `"kind": "vhost-user"`: the port is a vhost-user socket in this
    /// directory, for a userspace container (DPDK) to open, and no
    /// interface is made in the container's namespace.
    pub socket_dir: Option<std::path::PathBuf>,
}

fn invalid(details: String) -> CniError {
    CniError::new(
        code::INVALID_CONFIG,
        "invalid network configuration",
        details,
    )
}

fn unsupported(details: String) -> CniError {
    CniError::new(code::UNSUPPORTED_FIELD, "unsupported field", details)
}

impl NetConf {
    /// Reads and checks a configuration.
    pub fn parse(bytes: &[u8]) -> Result<NetConf, CniError> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| {
            CniError::new(
                code::DECODING_FAILURE,
                "the configuration is not JSON",
                e.to_string(),
            )
        })?;
        let Value::Object(m) = v else {
            return Err(CniError::new(
                code::DECODING_FAILURE,
                "the configuration is not a JSON object",
                "",
            ));
        };
        let version = match m.get("cniVersion") {
            None => "0.1.0".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(o) => {
                return Err(invalid(format!(
                    "cniVersion {o}: a string such as \"1.0.0\""
                )))
            }
        };
        if !VERSIONS.contains(&version.as_str()) {
            return Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                "incompatible CNI versions",
                format!("config is {version:?}, plugin supports {VERSIONS:?}"),
            ));
        }
        let string = |k: &str| -> Result<Option<String>, CniError> {
            match m.get(k) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(o) => Err(invalid(format!("{k} {o}: a string"))),
            }
        };
        let name = string("name")?
            .filter(|n| !n.is_empty())
            .ok_or_else(|| invalid("name: the network's name is missing".into()))?;
        let topology = string("topology")?.ok_or_else(|| {
            invalid("topology: name the hvnet topology whose switch the containers join (\"topology\": \"NAME\")".into())
        })?;
        hvnet_control::topology::check_topology_name(&topology)
            .map_err(|e| invalid(format!("topology {topology:?}: {e}")))?;
        let ipam = match m.get("ipam") {
            None => None,
            Some(Value::Object(i)) if i.is_empty() => None,
            Some(Value::Object(i)) => match i.get("type") {
                Some(Value::String(t)) if plugin_name(t) => Some(t.clone()),
                Some(t) => {
                    return Err(invalid(format!(
                        "ipam.type {t}: a plugin's file name (host-local, static, dhcp)"
                    )))
                }
                None => {
                    return Err(invalid(
                        "ipam: its type is missing (\"type\": \"host-local\")".into(),
                    ))
                }
            },
            Some(o) => return Err(invalid(format!("ipam {o}: an object with a type"))),
        };
        let socket_dir = match (string("kind")?.as_deref(), string("socket_dir")?) {
            (None | Some("netns"), None) => None,
            (None | Some("netns"), Some(_)) => {
                return Err(invalid(
                    "socket_dir is for \"kind\": \"vhost-user\" (a socket for a userspace container)".into(),
                ))
            }
            (Some("vhost-user"), dir) => {
                let dir = std::path::PathBuf::from(
                    dir.unwrap_or_else(|| format!("{SOCKET_DIRS}/{name}")),
                );
                if !dir.is_absolute() {
                    return Err(invalid(format!(
                        "socket_dir {}: an absolute path",
                        dir.display()
                    )));
                }
                Some(dir)
            }
            (Some(k), _) => {
                return Err(invalid(format!(
                    "kind {k:?}: \"netns\" (an interface in the container, the default) or \"vhost-user\" (a socket)"
                )))
            }
        };
        let mut vm = Vec::new();
        for (k, v) in &m {
            if CNI_KEYS.contains(&k.as_str()) || k.starts_with("cni.dev/") || k == "prevResult" {
                continue;
            }
            if let Some((_, why)) = SET_BY_PLUGIN.iter().find(|(s, _)| s == k) {
                return Err(unsupported(format!(
                    "{k} = {v}: not in the configuration ({why})"
                )));
            }
            if !VM_KEYS.contains(&k.as_str()) {
                return Err(unsupported(format!(
                    "{k} = {v}: not a key hvnet-cni knows; besides CNI's own (cniVersion, name, type, topology, ipam, dns) and the port's kind (kind, socket_dir) the keys are a [[vm]] table's: {}",
                    VM_KEYS.join(", ")
                )));
            }
            vm.push((k.clone(), v.clone()));
        }
        let runtime = match m.get("runtimeConfig") {
            Some(Value::Object(r)) => runtime(r)?,
            Some(Value::Null) | None => Runtime::default(),
            Some(o) => return Err(invalid(format!("runtimeConfig {o}: an object"))),
        };
        let valid_attachments = match m
            .get("cni.dev/valid-attachments")
            .or_else(|| m.get("cni.dev/attachments"))
        {
            None => None,
            Some(Value::Array(a)) => Some(
                a.iter()
                    .map(|x| {
                        let s = |k: &str| x.get(k).and_then(Value::as_str).map(str::to_string);
                        s("containerID").zip(s("ifname")).ok_or_else(|| {
                            invalid(format!(
                                "cni.dev/valid-attachments: {x} has no containerID and ifname"
                            ))
                        })
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Some(o) => return Err(invalid(format!("cni.dev/valid-attachments {o}: a list"))),
        };
        Ok(NetConf {
            version,
            name,
            topology,
            ipam,
            dns: m.get("dns").cloned(),
            runtime,
            prev_result: m.get("prevResult").cloned().filter(|p| !p.is_null()),
            valid_attachments,
            vm,
            socket_dir,
        })
    }

    /// True if the configuration's version has `verb` (CHECK from 0.4.0,
    /// GC and STATUS from 1.1.0).
    pub fn allows(&self, verb: crate::env::Command) -> bool {
        use crate::env::Command;
        let at_least = |v: &str| version_key(&self.version) >= version_key(v);
        match verb {
            Command::Check => at_least("0.4.0"),
            Command::Gc | Command::Status => at_least("1.1.0"),
            _ => true,
        }
    }
}

/// `(major, minor, patch)` of a version string.
fn version_key(v: &str) -> (u32, u32, u32) {
    let mut p = v.split('.').map(|x| x.parse().unwrap_or(0));
    (
        p.next().unwrap_or(0),
        p.next().unwrap_or(0),
        p.next().unwrap_or(0),
    )
}

/// A plugin's file name: no path, nothing a shell or a directory walk
/// could read more into.
fn plugin_name(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 64
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !t.starts_with('.')
}

fn runtime(r: &Map<String, Value>) -> Result<Runtime, CniError> {
    let mac = match r.get("mac") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(o) => return Err(invalid(format!("runtimeConfig.mac {o}: a string"))),
    };
    let ips = match r.get("ips") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| invalid(format!("runtimeConfig.ips: {x} is not a string")))
            })
            .collect::<Result<_, _>>()?,
        Some(o) => {
            return Err(invalid(format!(
                "runtimeConfig.ips {o}: a list of addresses"
            )))
        }
    };
    let bandwidth = match r.get("bandwidth") {
        None | Some(Value::Null) => None,
        Some(Value::Object(b)) => {
            let n = |k: &str| -> Result<u64, CniError> {
                match b.get(k) {
                    None | Some(Value::Null) => Ok(0),
                    Some(v) => v.as_u64().ok_or_else(|| {
                        invalid(format!("runtimeConfig.bandwidth.{k} {v}: a whole number (bit/s for a rate, bits for a burst)"))
                    }),
                }
            };
            Some(Bandwidth {
                ingress_rate: n("ingressRate")?,
                ingress_burst: n("ingressBurst")?,
                egress_rate: n("egressRate")?,
                egress_burst: n("egressBurst")?,
            })
        }
        Some(o) => return Err(invalid(format!("runtimeConfig.bandwidth {o}: an object"))),
    };
    Ok(Runtime {
        mac,
        ips,
        bandwidth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(extra: &str) -> Result<NetConf, CniError> {
        let text = format!(
            r#"{{"cniVersion": "1.0.0", "name": "net", "type": "hvnet-cni", "topology": "t1"{extra}}}"#
        );
        NetConf::parse(text.as_bytes())
    }

    #[test]
    fn a_vhost_user_network_has_a_socket_directory() {
        assert_eq!(conf("").unwrap().socket_dir, None);
        assert_eq!(conf(r#", "kind": "netns""#).unwrap().socket_dir, None);
        let c = conf(r#", "kind": "vhost-user""#).unwrap();
        assert_eq!(
            c.socket_dir.unwrap(),
            std::path::Path::new("/run/hvnet-cni/net")
        );
        let c = conf(r#", "kind": "vhost-user", "socket_dir": "/run/dpdk""#).unwrap();
        assert_eq!(c.socket_dir.unwrap(), std::path::Path::new("/run/dpdk"));
        for (extra, says) in [
            (r#", "kind": "tap""#, "vhost-user"),
            (r#", "socket_dir": "/run/dpdk""#, "socket_dir is for"),
            (r#", "kind": "vhost-user", "socket_dir": "run""#, "absolute"),
        ] {
            let e = conf(extra).unwrap_err();
            assert!(e.code == 7 && e.details.contains(says), "{extra}: {e:?}");
        }
    }

    #[test]
    fn every_other_key_is_a_vm_tables_and_unknown_ones_are_named() {
        let c = conf(
            r#", "vlan": 10, "mtu": 9000, "tx_rate": "1gbit", "ipam": {"type": "host-local"}"#,
        )
        .unwrap();
        assert_eq!(c.vm.len(), 3);
        assert_eq!(c.ipam.as_deref(), Some("host-local"));
        let e = conf(r#", "bridge": "br0""#).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(
            e.details
                .starts_with("bridge = \"br0\": not a key hvnet-cni knows"),
            "{e}"
        );
        let e = conf(r#", "ipv4": "198.18.0.2/24""#).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.details.contains("IPAM"), "{e}");
        // The runtime's own keys pass.
        assert!(conf(
            r#", "cni.dev/valid-attachments": [], "capabilities": {"mac": true}, "args": {}"#
        )
        .is_ok());
    }

    #[test]
    fn versions_and_what_each_allows() {
        let e = NetConf::parse(br#"{"cniVersion": "0.2.0", "name": "n", "topology": "t"}"#)
            .unwrap_err();
        assert_eq!(e.code, 1);
        let old =
            NetConf::parse(br#"{"cniVersion": "0.3.1", "name": "n", "topology": "t"}"#).unwrap();
        assert!(!old.allows(crate::env::Command::Check));
        let v10 = conf("").unwrap();
        assert!(v10.allows(crate::env::Command::Check) && !v10.allows(crate::env::Command::Gc));
        let e = NetConf::parse(b"{").unwrap_err();
        assert_eq!(e.code, 6);
        let e = NetConf::parse(br#"{"cniVersion": "1.0.0", "name": "n"}"#).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.details.starts_with("topology"), "{e}");
    }

    #[test]
    fn capabilities_and_gc_lists_are_read() {
        let c = conf(r#", "runtimeConfig": {"mac": "02:00:00:00:00:01", "ips": ["198.18.0.9/24"], "bandwidth": {"ingressRate": 1000000, "ingressBurst": 800000, "egressRate": 2000000, "egressBurst": 1600000}}, "cni.dev/valid-attachments": [{"containerID": "a", "ifname": "eth0"}]"#).unwrap();
        assert_eq!(c.runtime.mac.as_deref(), Some("02:00:00:00:00:01"));
        assert_eq!(c.runtime.bandwidth.unwrap().egress_rate, 2_000_000);
        assert_eq!(
            c.valid_attachments,
            Some(vec![("a".to_string(), "eth0".to_string())])
        );
        assert_eq!(conf("").unwrap().valid_attachments, None);
        let e = conf(r#", "ipam": {"type": "../../bin/sh"}"#).unwrap_err();
        assert_eq!(e.code, 7);
    }

    proptest::proptest! {
        /// Whatever a runtime sends, parsing answers (a configuration or
        /// an error with a code), never panics.
        #[test]
        fn prop_any_bytes_parse_or_are_refused(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = NetConf::parse(&bytes);
        }
    }
}
