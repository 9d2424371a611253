//! A port's settings — what `hvnet port PORT set` and topology files
//! change — and how they are checked.

use crate::lease::Leases;
pub mod values;

use crate::ring;
use crate::vlan::{PortVlans, VlanMode, VlanSet, MAX_VID, MIN_VID};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use values::{Addresses, Burst, Rate};

/// What a sender does when a destination's receive ring is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RxOverflow {
    /// Drop the frame and count it (`ring 1 full` / `ring 2 full`), as
    /// VMXNET3 does: what CPU Scheduling and VMXNET3 Ring Exhaustion
    /// measures.
    Drop,
    /// Stop reading the sender's queue until the ring has room (up to
    /// [`BACKPRESSURE_WAIT`], then drop), so the sender's own queue fills
    /// and its TCP slows down. A slow receiver then holds up the sender's
    /// traffic to everyone else too.
    Backpressure,
}

/// Longest a sender waits for ring space under `rx_overflow =
/// "backpressure"` before it drops after all (a receiver that stopped
/// altogether must not stop its senders for good).
pub const BACKPRESSURE_WAIT: Duration = Duration::from_millis(100);

/// Who writes frames into a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// The sender's worker delivers a batch itself when the queue is idle
    /// (run to completion: no hand-off, no wake-up); otherwise the queue's
    /// delivery thread does.
    Auto,
    /// Always the queue's delivery thread, the VM's "vCPU" (what the lab
    /// holds to a CPU share).
    Thread,
}

/// A switch, on or off: `true`/`false`, or the words the CLI takes,
/// `"on"`/`"off"` — one vocabulary in topology files and `port set`.
pub fn on_off<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OnOff {
        Bool(bool),
        Word(String),
    }
    match OnOff::deserialize(d) {
        Ok(OnOff::Bool(b)) => Ok(b),
        Ok(OnOff::Word(w)) if w == "on" => Ok(true),
        Ok(OnOff::Word(w)) if w == "off" => Ok(false),
        Ok(OnOff::Word(w)) => Err(serde::de::Error::custom(format!("{w:?} is not on or off"))),
        Err(_) => Err(serde::de::Error::custom("expected on or off")),
    }
}

/// A port's settings, changeable at run time (`hvnet port PORT set …`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSettings {
    /// Software LRO for frames to this guest; also whether it takes GSO
    /// frames whole. Default on, as in vSphere. At an uplink: software LRO
    /// of what arrives from the wire, before switching (`lro =
    /// "software"`).
    #[serde(deserialize_with = "on_off")]
    pub lro: bool,
    /// The guest may hand us TSO frames (its `ethtool -k` shows TSO on).
    #[serde(deserialize_with = "on_off")]
    pub tso: bool,
    /// Checksum offload both ways: the guest may send partial checksums and
    /// takes frames with partial checksums.
    #[serde(deserialize_with = "on_off")]
    pub csum: bool,
    /// MTU, 68..=9000.
    pub mtu: u16,
    /// Ring 1 size per receive queue (buffers).
    pub ring1: usize,
    /// Ring 2 size per receive queue (buffers).
    pub ring2: usize,
    /// Accept frames whose source MAC is not the port's (forged transmits).
    #[serde(deserialize_with = "on_off")]
    pub allow_forged_transmits: bool,
    /// What a sender does when this port's ring is full.
    pub rx_overflow: RxOverflow,
    /// Who writes frames into this guest.
    pub delivery: Delivery,
    /// Wake-up coalescing at this port's receive queues, in microseconds
    /// (ethtool's `rx-usecs`): a queue's thread that wakes again within
    /// this long of its last wake-up waits out the rest first, so what
    /// arrives meanwhile is read in the same batch — fewer wake-ups per
    /// frame under load for at most this much added latency. 0 (the
    /// default): read as soon as anything arrives.
    #[serde(default)]
    pub rx_usecs: u32,
    /// The vNIC's cable: off, nothing goes to or comes from the port and
    /// its guest's addresses are withdrawn from the fabric (vSphere's
    /// "Connected", QEMU's `set_link`). Default on.
    #[serde(default = "connected", deserialize_with = "on_off")]
    pub connected: bool,
    /// How the port carries VLANs: `access` (its `vlan`, untagged; the
    /// default) or `trunk` (802.1Q tags).
    #[serde(default)]
    pub vlan_mode: VlanMode,
    /// A trunk's allowed VLANs (default: every one, 1..4094).
    #[serde(default)]
    pub vlans: VlanSet,
    /// A trunk's native VLAN: untagged frames in and out belong to it
    /// (without one, untagged frames from the port are dropped).
    #[serde(default)]
    pub native_vlan: Option<u16>,
    /// Policer on what the VM sends: a frame over the rate is dropped
    /// (`policed`), as Open vSwitch's `ingress_policing_rate` and
    /// libvirt's `<outbound>`. None: no limit.
    #[serde(default)]
    pub tx_rate: Option<Rate>,
    /// The policer's burst (default: 10 ms of the rate, at least 1,000,000 bytes).
    #[serde(default)]
    pub tx_burst: Option<Burst>,
    /// Shaper on what the VM receives: frames over the rate wait in its
    /// receive ring and leave at the rate (the port's delivery thread
    /// writes them; a full ring drops), as libvirt's `<inbound>`.
    #[serde(default)]
    pub rx_rate: Option<Rate>,
    /// The shaper's burst (default: 10 ms of the rate, at least 1,000,000 bytes).
    #[serde(default)]
    pub rx_burst: Option<Burst>,
    /// The most of one worker's time the port's queues take together, in
    /// percent (0, the default: no limit; [`crate::cpu_limit`]). Over it,
    /// the port is not read until its share has caught up.
    #[serde(default)]
    pub cpu_limit: u8,
    /// Its weight in the uplinks it sends through, 1..=100 (vSphere's
    /// Network I/O Control: low 25, normal 50, the default, high 100;
    /// [`crate::nioc`]).
    #[serde(default = "shares_normal")]
    pub shares: u32,
    /// What it gets of an uplink's capacity before shares count (none:
    /// nothing reserved).
    #[serde(default)]
    pub reservation: Option<Rate>,
    /// At an uplink: the capacity its shares divide among the VMs
    /// sending through it (its link speed, or what its provider sells);
    /// none, the default: no shares.
    #[serde(default)]
    pub capacity: Option<Rate>,
    /// The port's addresses as the guards see them (docs/guide/guards.md):
    /// its topology `ipv4` and `ipv6`, then its `addresses`. A family with
    /// none here is not source-guarded.
    #[serde(default)]
    pub addresses: Addresses,
    /// IP source guard: the port sends only from its addresses (where
    /// it has some of that family). Default on.
    #[serde(default = "guard_on", deserialize_with = "on_off")]
    pub source_guard: bool,
    /// ARP inspection: the port claims only its own addresses (another
    /// port's never). Default on.
    #[serde(default = "guard_on", deserialize_with = "on_off")]
    pub arp_guard: bool,
    /// ND inspection, ARP inspection's IPv6 twin. Default on.
    #[serde(default = "guard_on", deserialize_with = "on_off")]
    pub nd_guard: bool,
    /// DHCP server guard: the port sends no DHCP or DHCPv6 server (or
    /// relay) messages. Default on: off for a VM that serves DHCP.
    #[serde(default = "guard_on", deserialize_with = "on_off")]
    pub dhcp_guard: bool,
    /// Router-advertisement guard (RFC 6105): the port sends no router
    /// advertisement or redirect. Default on: off for a router VM.
    #[serde(default = "guard_on", deserialize_with = "on_off")]
    pub ra_guard: bool,
    /// DHCP snooping: an address a DHCP server gives the port (its ACK
    /// from an uplink, or from a VM whose `dhcp_guard` is off) is one of
    /// its addresses while the lease lasts. Default on.
    #[serde(default = "guard_on", deserialize_with = "on_off")]
    pub dhcp_snooping: bool,
    /// The leases snooped for the port, as the datapath applies them
    /// ([`crate::Port::effective_settings`]; not a setting of its own).
    #[serde(skip)]
    pub leases: Leases,
}

fn connected() -> bool {
    true
}

fn guard_on() -> bool {
    true
}

fn shares_normal() -> u32 {
    values::SHARES_NORMAL
}

impl Default for PortSettings {
    fn default() -> Self {
        PortSettings {
            lro: true,
            tso: true,
            csum: true,
            mtu: 1500,
            ring1: 256,
            ring2: 256,
            allow_forged_transmits: false,
            rx_overflow: RxOverflow::Backpressure,
            delivery: Delivery::Auto,
            rx_usecs: 0,
            connected: true,
            vlan_mode: VlanMode::Access,
            vlans: VlanSet::ALL,
            native_vlan: None,
            tx_rate: None,
            tx_burst: None,
            rx_rate: None,
            rx_burst: None,
            cpu_limit: 0,
            shares: values::SHARES_NORMAL,
            reservation: None,
            capacity: None,
            addresses: Addresses::default(),
            source_guard: true,
            arp_guard: true,
            nd_guard: true,
            dhcp_guard: true,
            ra_guard: true,
            dhcp_snooping: true,
            leases: Leases::default(),
        }
    }
}

impl PortSettings {
    /// The settings the datapath goes by: a shaped port's frames are
    /// written by its delivery thread, which waits out the rate, and a
    /// sender finding its ring full drops rather than wait (a worker
    /// waiting on a shaped port would hold every other port it serves).
    pub fn shaped(mut self) -> PortSettings {
        if self.rx_rate.is_some() {
            self.delivery = Delivery::Thread;
            self.rx_overflow = RxOverflow::Drop;
        }
        self
    }

    /// The port's VLANs as the datapath applies them, `access` its
    /// access VLAN (the port's `vlan`).
    #[inline]
    pub fn vlans_of(&self, access: u16) -> PortVlans<'_> {
        PortVlans {
            mode: self.vlan_mode,
            access,
            vlans: &self.vlans,
            native: self.native_vlan,
        }
    }
}

/// Longest wake-up coalescing a port takes (10 ms: beyond it a queue's
/// socket or ring fills before it is read).
pub const MAX_RX_USECS: u32 = 10_000;

/// Why a setting change was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingError {
    /// No such port.
    #[error("no port named {0}")]
    NoPort(String),
    /// A value outside what the setting takes.
    #[error("{setting} {value} is outside {min}..{max}")]
    Range {
        /// The setting.
        setting: &'static str,
        /// The value refused.
        value: u64,
        /// Its smallest value.
        min: u64,
        /// Its largest value.
        max: u64,
    },
    /// A setting this port does not let change.
    #[error("{0}")]
    Fixed(String),
    /// The device refused the change.
    #[error("{0}")]
    Device(String),
    /// Settings that do not go together.
    #[error("{0}")]
    Conflict(String),
}

/// The values a numeric setting takes, `(min, max)`; `None` for a setting
/// that is not a number.
pub fn setting_range(setting: &str) -> Option<(u64, u64)> {
    match setting {
        "mtu" => Some((68, 9000)),
        "ring1" | "ring2" => Some((32, ring::MAX_RING as u64)),
        "rx_usecs" => Some((0, u64::from(MAX_RX_USECS))),
        "cpu_limit" => Some((0, 100)),
        "shares" => Some((1, 100)),
        "native_vlan" => Some((u64::from(MIN_VID), u64::from(MAX_VID))),
        _ => None,
    }
}

/// Checks settings ranges (also used for topology files).
pub fn validate_settings(s: &PortSettings) -> Result<(), SettingError> {
    for (setting, value) in [
        ("mtu", u64::from(s.mtu)),
        ("ring1", s.ring1 as u64),
        ("ring2", s.ring2 as u64),
        ("rx_usecs", u64::from(s.rx_usecs)),
        ("cpu_limit", u64::from(s.cpu_limit)),
        ("shares", u64::from(s.shares)),
        ("native_vlan", u64::from(s.native_vlan.unwrap_or(MIN_VID))),
    ] {
        let (min, max) = setting_range(setting).expect("a numeric setting");
        if !(min..=max).contains(&value) {
            return Err(SettingError::Range {
                setting,
                value,
                min,
                max,
            });
        }
    }
    for (burst, rate, b, r) in [
        ("tx_burst", "tx_rate", s.tx_burst, s.tx_rate),
        ("rx_burst", "rx_rate", s.rx_burst, s.rx_rate),
    ] {
        if b.is_some() && r.is_none() {
            return Err(SettingError::Conflict(format!(
                "{burst} needs a {rate} (a burst is of a rate)"
            )));
        }
    }
    Ok(())
}
