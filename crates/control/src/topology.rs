//! Topology files: which VMs to create and how their vNICs are set.
//!
//! ```toml
//! name = "two-vms"          # names the state under /run/hvnet and the namespaces
//! fdb_aging_secs = 300
//!
//! [[vm]]
//! name = "vm1"
//! ipv4 = "10.10.0.1/24"
//! ipv6 = "fd10::1/64"       # optional
//! mac = "02:00:00:00:00:01" # optional: derived from the VM's index otherwise
//! mtu = 1500                # 68..9000
//! queues = 2                # 1..16 (TAP queues, receive queues, workers);
//!                           # default: the host's cores, at most 4
//! vlan = 0                  # access VLAN, 0 = untagged
//! lro = true                # software LRO into this VM (and GSO frames taken whole)
//! tso = true                # the VM may send TSO frames
//! csum = true               # checksum offload both ways
//! ring1 = 256               # receive ring sizes per queue, 32..4096
//! ring2 = 256
//! rx_overflow = "backpressure" # or "drop": what a sender does when a ring is full
//! delivery = "auto"         # or "thread": who writes into this VM (see PortSettings)
//! ```
//!
//! A bad file is refused with its path, the line and the reason before
//! anything is created.

use hvnet_datapath::switch::validate_settings;
use hvnet_datapath::{Delivery, PortSettings, RxOverflow};
use hvnet_wire::MacAddr;
use serde::Deserialize;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// A refused topology.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {reason}")]
pub struct TopologyError {
    /// The file.
    pub path: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRepr {
    name: toml::Spanned<String>,
    #[serde(default = "default_aging")]
    fdb_aging_secs: u64,
    #[serde(default)]
    vm: Vec<toml::Spanned<VmRepr>>,
}

fn default_aging() -> u64 {
    300
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct VmRepr {
    name: String,
    ipv4: Option<String>,
    ipv6: Option<String>,
    mac: Option<String>,
    #[serde(default = "d_mtu")]
    mtu: u16,
    #[serde(default = "default_queues")]
    queues: usize,
    #[serde(default)]
    vlan: u16,
    #[serde(default = "d_true")]
    lro: bool,
    #[serde(default = "d_true")]
    tso: bool,
    #[serde(default = "d_true")]
    csum: bool,
    #[serde(default = "d_ring")]
    ring1: usize,
    #[serde(default = "d_ring")]
    ring2: usize,
    #[serde(default = "d_overflow")]
    rx_overflow: RxOverflow,
    #[serde(default = "d_delivery")]
    delivery: Delivery,
}

fn d_overflow() -> RxOverflow {
    PortSettings::default().rx_overflow
}
fn d_delivery() -> Delivery {
    PortSettings::default().delivery
}

fn d_mtu() -> u16 {
    1500
}
/// One queue per core, up to 4: several flows from one VM then use every
/// core (measured in `docs/perf/live-switch.md`: 4 streams, 2 cores, +16 %
/// with 2 queues; 1 stream unchanged).
pub fn default_queues() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
}
fn d_true() -> bool {
    true
}
fn d_ring() -> usize {
    256
}

/// A VM of a validated topology.
#[derive(Clone, Debug)]
pub struct Vm {
    /// Its name.
    pub name: String,
    /// IPv4 address and prefix length.
    pub ipv4: Option<(Ipv4Addr, u8)>,
    /// IPv6 address and prefix length.
    pub ipv6: Option<(Ipv6Addr, u8)>,
    /// MAC address.
    pub mac: MacAddr,
    /// TAP queues.
    pub queues: usize,
    /// Access VLAN.
    pub vlan: u16,
    /// vNIC settings.
    pub settings: PortSettings,
}

/// A validated topology.
#[derive(Clone, Debug)]
pub struct Topology {
    /// Topology name.
    pub name: String,
    /// FDB aging.
    pub fdb_aging_secs: u64,
    /// The VMs.
    pub vms: Vec<Vm>,
}

impl Topology {
    /// The network namespace that is VM `vm`.
    pub fn netns(&self, vm: &Vm) -> String {
        format!("{}-{}", self.name, vm.name)
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 24
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
}

/// Reads and validates a topology file.
pub fn load(path: &Path) -> Result<Topology, TopologyError> {
    let err = |line: usize, reason: String| TopologyError {
        path: path.into(),
        line,
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(0, format!("cannot read: {e}")))?;
    parse(&text).map_err(|(line, reason)| err(line, reason))
}

/// Validates topology text; errors carry a 1-based line.
pub fn parse(text: &str) -> Result<Topology, (usize, String)> {
    let f: FileRepr = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        (line, e.message().to_string())
    })?;
    let name_line = line_of(text, f.name.span().start);
    let name = f.name.into_inner();
    if !valid_name(&name) || name.len() > 16 {
        return Err((
            name_line,
            format!("topology name {name:?} must be 1-16 characters of a-z, 0-9 and '-'"),
        ));
    }
    if f.vm.is_empty() {
        return Err((line_of(text, text.len()), "no [[vm]] entries".into()));
    }
    if f.vm.len() > 64 {
        return Err((1, "at most 64 VMs".into()));
    }
    let mut vms: Vec<Vm> = Vec::new();
    for (i, sv) in f.vm.iter().enumerate() {
        let line = line_of(text, sv.span().start);
        let v = sv.get_ref().clone();
        let bad = |r: String| (line, format!("vm {:?}: {r}", v.name));
        if !valid_name(&v.name) {
            return Err(bad(
                "name must be 1-24 characters of a-z, 0-9 and '-'".into()
            ));
        }
        if vms.iter().any(|o| o.name == v.name) {
            return Err(bad("duplicate VM name".into()));
        }
        let ipv4 = v
            .ipv4
            .as_deref()
            .map(parse_cidr4)
            .transpose()
            .map_err(bad)?;
        let ipv6 = v
            .ipv6
            .as_deref()
            .map(parse_cidr6)
            .transpose()
            .map_err(bad)?;
        let mac = match v.mac.as_deref() {
            Some(m) => {
                let mac: MacAddr = m
                    .parse()
                    .map_err(|_| bad(format!("mac {m:?} is not a MAC address")))?;
                if mac.is_multicast() {
                    return Err(bad(format!("mac {m} is a group address")));
                }
                mac
            }
            None => MacAddr([0x02, 0x68, 0x76, 0, (i >> 8) as u8, (i & 0xff) as u8 + 1]),
        };
        if vms.iter().any(|o| o.mac == mac) {
            return Err(bad(format!("mac {mac} is used twice")));
        }
        if !(1..=16).contains(&v.queues) {
            return Err(bad(format!("queues {} is outside 1..16", v.queues)));
        }
        if v.vlan > 4094 {
            return Err(bad(format!("vlan {} is outside 0..4094", v.vlan)));
        }
        let settings = PortSettings {
            lro: v.lro,
            tso: v.tso,
            csum: v.csum,
            mtu: v.mtu,
            ring1: v.ring1,
            ring2: v.ring2,
            allow_forged_transmits: false,
            rx_overflow: v.rx_overflow,
            delivery: v.delivery,
        };
        validate_settings(&settings).map_err(|e| bad(e.to_string()))?;
        vms.push(Vm {
            name: v.name.clone(),
            ipv4,
            ipv6,
            mac,
            queues: v.queues,
            vlan: v.vlan,
            settings,
        });
    }
    Ok(Topology {
        name,
        fdb_aging_secs: f.fdb_aging_secs.max(1),
        vms,
    })
}

fn parse_cidr4(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| format!("ipv4 {s:?} needs a prefix length, as in 10.0.0.1/24"))?;
    let addr: Ipv4Addr = a
        .parse()
        .map_err(|_| format!("ipv4 {s:?} is not an IPv4 address"))?;
    let len: u8 = p
        .parse()
        .ok()
        .filter(|&l| l <= 32)
        .ok_or_else(|| format!("ipv4 {s:?} has a bad prefix length"))?;
    Ok((addr, len))
}

fn parse_cidr6(s: &str) -> Result<(Ipv6Addr, u8), String> {
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| format!("ipv6 {s:?} needs a prefix length, as in fd00::1/64"))?;
    let addr: Ipv6Addr = a
        .parse()
        .map_err(|_| format!("ipv6 {s:?} is not an IPv6 address"))?;
    let len: u8 = p
        .parse()
        .ok()
        .filter(|&l| l <= 128)
        .ok_or_else(|| format!("ipv6 {s:?} has a bad prefix length"))?;
    Ok((addr, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "t1"
fdb_aging_secs = 5

[[vm]]
name = "vm1"
ipv4 = "10.1.0.1/24"

[[vm]]
name = "vm2"
ipv4 = "10.1.0.2/24"
mtu = 9000
queues = 4
lro = false
"#;

    #[test]
    fn parses_with_defaults() {
        let t = parse(GOOD).unwrap();
        assert_eq!(t.vms.len(), 2);
        assert_eq!(t.vms[0].settings, PortSettings::default());
        assert_eq!(t.vms[1].settings.mtu, 9000);
        assert!(!t.vms[1].settings.lro);
        assert_eq!(t.netns(&t.vms[1]), "t1-vm2");
        assert_ne!(t.vms[0].mac, t.vms[1].mac);
    }

    #[test]
    fn errors_name_the_line() {
        let bad_mtu = GOOD.replace("mtu = 9000", "mtu = 9001");
        let (line, reason) = parse(&bad_mtu).unwrap_err();
        assert_eq!(line, 9, "{reason}");
        assert!(reason.contains("mtu 9001"), "{reason}");
        let unknown = GOOD.replace("lro = false", "lro = false\nspeed = 10");
        let (line, reason) = parse(&unknown).unwrap_err();
        assert_eq!(line, 15, "{reason}");
        assert!(reason.contains("speed"), "{reason}");
        let dup = GOOD.replace("name = \"vm2\"", "name = \"vm1\"");
        assert!(parse(&dup).unwrap_err().1.contains("duplicate"));
        let cidr = GOOD.replace("10.1.0.1/24", "10.1.0.1");
        assert_eq!(parse(&cidr).unwrap_err().0, 5);
        let ring = GOOD.replace("queues = 4", "queues = 4\nring1 = 8192");
        assert!(parse(&ring).unwrap_err().1.contains("ring1 size 8192"));
        assert!(parse("name = \"x\"").unwrap_err().1.contains("no [[vm]]"));
        assert!(parse("name = 3").is_err());
    }
}
