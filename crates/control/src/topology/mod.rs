//! Topology files: which VMs to create and how their vNICs are set.
//!
//! ```toml
//! name = "two-vms"          # names the state under /run/hvnet and the namespaces
//! fdb_aging_secs = 300
//! netns = "host1"           # optional: run the switch inside this network namespace (its uplinks'
//!                           #   devices, EVPN's shadow and FRR are that namespace's: a host of its own)
//!
//! [[vm]]
//! name = "vm1"
//! kind = "netns"            # a namespace behind a TAP; "uml" / "qemu": a real guest hvnet starts
//!                           #   on a vhost-user port; "vhost-user": the socket only
//! memory = 256              # MiB, real guests (64..4096)
//! accel = "auto"            # qemu: "kvm", "tcg", or "auto" (KVM where it runs the guest)
//! ipv4 = "10.10.0.1/24"
//! ipv6 = "fd10::1/64"       # optional
//! mac = "02:00:00:00:00:01" # optional: derived from the VM's index otherwise
//! mtu = 1500                # 68..9000
//! queues = 2                # 1..16 (TAP queues, receive queues, workers);
//!                           # default: the host's cores, at most 4
//! vlan = 0                  # access VLAN, 0 = untagged (the default domain), 1..4094
//! vlan_mode = "access"      # or "trunk": 802.1Q tags (Open vSwitch's trunk / native-untagged);
//!                           #   a tagged frame's VLAN is its tag's, allowed VLANs pass, the rest
//!                           #   are dropped (drop_vlan_not_allowed); frames go out tagged, access
//!                           #   ports get theirs untagged. A trunk takes no `vlan` (see native_vlan)
//! vlans = [10, 20, "100-199"] # a trunk's allowed VLANs, ids and "low-high" ranges in 1..4094;
//!                           #   absent or empty: every VLAN
//! native_vlan = 5           # a trunk's untagged VLAN: untagged frames in and out belong to it
//!                           #   (also taken tagged); without it, untagged frames are dropped
//! lro = true                # software LRO into this VM (and GSO frames taken whole)
//! tso = true                # the VM may send TSO frames
//! csum = true               # checksum offload both ways
//! ring1 = 256               # receive ring sizes per queue, 32..4096 (qemu: its receive
//!                           #   virtqueue, 256, 512 or 1024)
//! ring2 = 256
//! rx_overflow = "backpressure" # or "drop": what a sender does when a ring is full
//! delivery = "auto"         # or "thread": who writes into this VM (see PortSettings)
//! rx_usecs = 0              # wake-up coalescing at its queues, 0..10000 µs (as at an uplink)
//! connected = true          # the vNIC's cable (off: no traffic, addresses withdrawn from EVPN)
//! tx_rate = "1gbit"         # rates (docs/guide/rates.md): a policer on what the VM sends and a
//! rx_rate = "500mbit"       #   shaper on what it receives, as tc writes rates; tx_burst and
//!                           #   rx_burst as tc writes bursts ("256kb")
//! cpu_limit = 0             # the most of one worker's time its queues take, 0..100 % (0: no
//!                           #   limit); over it they wait (docs/guide/rates.md)
//! shares = 50               # its weight in an uplink's capacity, 1..100 (Network I/O Control;
//! reservation = "1gbit"     #   docs/guide/rates.md), and what it gets of it before shares count
//! mode = "server"           # kind = "vhost-user": "server" (hvnet listens) or "client" (hvnet
//!                           #   connects to the hypervisor's socket, again whenever it goes away)
//! socket = "/run/vm1.sock"  # kind = "vhost-user": the socket (client: required; server: default
//!                           #   /run/hvnet/TOPOLOGY/VM.sock)
//! socket_owner = "root"     # server: who owns the socket, and its group and mode (default root's,
//! socket_group = "kvm"      #   0600), so that a hypervisor not run as root (libvirt's QEMU) can
//! socket_mode = "0660"      #   connect
//! packed = true             # real guests: offer packed virtqueues (default: on for kind = "vhost-user",
//!                           #   whose front end chooses; off for "qemu", which then asks for them
//!                           #   with packed=on; "uml" guests take split rings only)
//! security_groups = ["web"] # its port's security groups, their rules in this order (none: no
//!                           #   filtering); [[security_group]] tables: docs/guide/security-groups.md
//! addresses = ["10.10.0.9", "10.10.8.0/24"] # more addresses and prefixes of the VM, beside ipv4
//!                           #   and ipv6, for its guards (docs/guide/guards.md)
//! source_guard = true       # guards, each a named drop (docs/guide/guards.md): sends only from its
//! arp_guard = true          #   addresses; claims in ARP and ND only its own; sends no DHCP server
//! nd_guard = true           #   messages (off for a DHCP server VM) and no router advertisements
//! dhcp_guard = true         #   (off for a router VM)
//! ra_guard = true
//! dhcp_snooping = true      # an address a DHCP server gives the VM is its own while the lease lasts
//! netns = "/run/netns/blue" # a namespace VM's interface in a namespace hvnet did not make (a
//!                           #   container's, docs/guide/containers.md); vm del and down take it out
//! ifname = "eth0"           #   its name there (default eth0)
//! routes = ["default via 10.10.0.1"] # routes through it, as ip route writes them
//! container = "8c1e…"       # the container (and CNI network) it was made for: set by hvnet-cni,
//! network = "web"           #   whose ports hvnet up FILE leaves alone
//! pod = "default/web-1"     #   and the Kubernetes pod it was made for (from the kubelet's CNI_ARGS)
//! domain = "web1"           # the libvirt domain it was made for (set from its XML for libvirt's
//! domain_uuid = "4dea22b3-…" #   guests): its UUID and the interface's alias, shown as the port's
//! alias = "ua-net0"          #   external_ids and in its metrics' labels
//!
//! [[uplink]]                # the physical side: an existing interface
//! name = "up0"              # the port's name (as a VM's)
//! device = "eth1"           # the interface, in the daemon's namespace
//! queues = 2                # receive queues, each an AF_PACKET socket with its own thread
//! lro = "hardware"          # "hardware": the device's GRO coalesces; "software": hvnet's GRO, before
//!                           #   switching; "off"
//! tso = "hardware"          # "hardware": GSO frames go to the device whole; "software": hvnet segments
//! csum = "hardware"         # "hardware": the device checksums (partial checksums to it, its word on
//!                           #   receive taken); "software": hvnet completes them before the wire and
//!                           #   checks every received one (the inner one at a VXLAN endpoint)
//! mtu = 1500                # the wire's MTU (the device's must be at least this)
//! vlan = 0                  # access VLAN, as on a VM's port; or vlan_mode = "trunk" with vlans
//!                           #   and native_vlan, as on a VM's port (frames to the wire tagged)
//! netqueue = false          # true ("static"): each VM's MAC filtered to a queue of its own, the rest
//!                           #   to queue 0; "dynamic": filters packed, spread by load (Dynamic NetQueue)
//! netqueue_threshold = 60   # dynamic: % of a core a queue's thread may use before filters are spread
//! rss = false               # true: queues spread by the Toeplitz hash of each flow (the inner one at a
//!                           #   VXLAN endpoint), as a NIC's RSS; default: the kernel's flow hash
//! batch = 32                # frames read per system call at each queue (1..32; 1 is the
//!                           #   per-packet API)
//! rx_usecs = 0              # wake-up coalescing, 0..10000 µs (ethtool's rx-usecs): a queue's thread
//!                           #   waking again within this long of its last wake-up waits out the rest
//! capacity = "10gbit"       # the rate its VMs' shares divide (Network I/O Control, docs/guide/rates.md);
//!                           #   absent: no shares
//! # devices = ["eth1", "eth2"] instead of device: a NIC team (docs/guide/teams.md), with
//! # teaming = "port-id"      #   "port-id" (default), "source-mac", "ip-hash", "load-based",
//! #                          #   "active-backup" or "lacp"
//! # order = ["eth1", "eth2"] #   switch-independent: the first usable is the active member
//! # failback = true          #   traffic goes back to a member usable again
//! # lacp_rate = "fast"       #   lacp: "fast" (a LACPDU a second asked for) or "slow" (30 s)
//! # lacp_mode = "active"     #   lacp: "active" or "passive"
//!
//! [uplink.vxlan]            # the uplink is a VXLAN tunnel endpoint (docs/guide/uplinks.md)
//! vni = 42
//! local = "198.18.60.1/24"  # the endpoint's own underlay address
//! remotes = []              # static peers (the flood list)
//! evpn = false              # true: peers, remote MACs and IPs from BGP EVPN through FRR as well, the
//!                           #   VMs' MACs and IPs advertised (docs/guide/evpn.md)
//! vlans = { 10 = 5010 }     # more VLANs the tunnel carries, each in a VNI of its own (the uplink's
//!                           #   own vlan, 1..4094, is vni's; the uplink becomes a trunk of them)
//!
//! [frr]                     # optional, with evpn: `hvnet up` starts FRR's zebra and bgpd (stopped by down)
//! asn = 65000
//! router_id = "198.18.60.11" # the host's own underlay address: BGP runs on the host's IP stack
//! neighbors = ["198.18.60.12"]
//! keepalive_secs = 3        # hold time 3x
//!
//! [[host]]                  # an external host on an uplink's wire (tests, demos, the lab)
//! name = "ext"              # its namespace is TOPOLOGY-NAME
//! uplink = "up0"            # joined to that uplink by a fresh veth pair named as its device
//! ipv4 = "198.18.0.100/24"
//! ipv6 = "fd18::100/64"     # optional
//! mac = "02:00:00:00:01:00" # optional
//! tso = false               # false (default): wire-sized frames, as a physical NIC sends
//!
//! [switch]                  # optional: the switch's own settings
//! cpus = "0-1"              # the CPUs its datapath workers run on, one worker each, pinned (as
//!                           #   taskset -c writes them); default: every CPU the daemon may use
//! rebalance = true          # queues moved between workers by their measured load
//! busy_poll_max_us = 50      # longest watch of a queue gone empty under load (0-1000; 0: never)
//! nice = "auto"             # the workers' weight: "auto" (as many threads as they have queues
//!                           #   with traffic) or a fixed nice value, -20 to 19
//!
//! [libvirt]                 # optional: libvirt's guests get ports as they start (docs/guide/libvirt.md)
//! sockets = "/run/hvnet-libvirt/lab" # their vhost-user sockets' directory, under /run/hvnet-libvirt
//!                           #   (default /run/hvnet-libvirt/TOPOLOGY); no [[vm]]'s socket may be in it
//! group = "libvirt-qemu"    # the group that may create sockets there (QEMU's, for hot-plug)
//! uri = "qemu:///system"    # the libvirt connection whose domains are looked up, read-only
//! ```
//!
//! At most [`MAX_VMS`] VMs. A bad file is refused with its path, the line
//! and the reason before anything is created.

pub mod attach;
mod frr;
mod host;
mod ipfix;
mod libvirt;
mod mirror;
mod security_group;
mod team;
mod tenant;
mod uplink;
mod vhost_socket;
mod vm;

pub use frr::Frr;
pub use host::Host;
use hvnet_datapath::vlan::{VlanMode, VlanSet, MAX_VID, MIN_VID};
use hvnet_datapath::{PortSettings, WorkerNice};
use hvnet_wire::MacAddr;
pub use libvirt::{Libvirt, SOCKETS_ROOT};
pub use mirror::MAX_MIRRORS;
pub use security_group::{GroupRule, Remote, SecurityGroup};
use serde::Deserialize;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
pub use team::Team;
use uplink::VXLAN_OVERHEAD;
pub use uplink::{NetQueueMode, Uplink, UplinkLro, Vxlan};
pub use vhost_socket::VhostSocket;
pub use vm::{Accel, Vm, VmKind, VmTableError};

/// The UDP port of the shadow `vxlan` devices: never hvnet's VXLAN port,
/// so the kernel's socket on it sees no traffic (a private port, outside
/// Linux's ephemeral range).
pub const SHADOW_PORT: u16 = 65330;

/// One queue per core, up to 4: several flows from one VM then use every
/// core (measured in `docs/perf/live-switch.md`: 4 streams, 2 cores, +16 %
/// with 2 queues; 1 stream unchanged).
pub fn default_queues() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
}

/// One item of a `vlans` list: a VLAN id or a `"low-high"` range.
#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
pub(super) enum VlanItem {
    Id(i64),
    Range(String),
}

/// The VLAN keys of a VM's or an uplink's table (`vlan`, `vlan_mode`,
/// `vlans`, `native_vlan`), checked: the access VLAN, and default
/// settings with the port's VLAN mode, VLANs and native VLAN in them.
pub(super) fn check_vlans(
    vlan: Option<u16>,
    mode: Option<&str>,
    vlans: Option<&[VlanItem]>,
    native: Option<i64>,
) -> Result<(u16, PortSettings), String> {
    let mode = match mode {
        None | Some("access") => VlanMode::Access,
        Some("trunk") => VlanMode::Trunk,
        Some(o) => return Err(format!("vlan_mode {o:?} is not \"access\" or \"trunk\"")),
    };
    if let Some(v) = vlan.filter(|v| *v > 4094) {
        return Err(format!("vlan {v} is outside 0..4094"));
    }
    match mode {
        VlanMode::Trunk if vlan.is_some() => return Err(
            "vlan is an access port's VLAN; a trunk's untagged frames belong to its native_vlan"
                .into(),
        ),
        VlanMode::Access if vlans.is_some() || native.is_some() => {
            return Err("vlans and native_vlan are a trunk's: set vlan_mode = \"trunk\"".into())
        }
        _ => {}
    }
    let range = |v: i64, what: &str| {
        u16::try_from(v)
            .ok()
            .filter(|v| (MIN_VID..=MAX_VID).contains(v))
            .ok_or_else(|| format!("{what} {v} is outside {MIN_VID}..{MAX_VID}"))
    };
    let items = vlans
        .unwrap_or_default()
        .iter()
        .map(|i| match i {
            VlanItem::Id(v) => range(*v, "vlan").map(|v| v.to_string()),
            VlanItem::Range(r) => Ok(r.clone()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let set = VlanSet::parse_items(items.iter().map(String::as_str))?;
    let native_vlan = native.map(|n| range(n, "native_vlan")).transpose()?;
    Ok((
        vlan.unwrap_or(0),
        PortSettings {
            vlan_mode: mode,
            vlans: set,
            native_vlan,
            ..PortSettings::default()
        },
    ))
}

/// A refused topology.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {}{reason}", in_section(.section))]
pub struct TopologyError {
    /// The file.
    pub path: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// The table the error is in; `None` where it is the file as a whole
    /// (its top-level keys, its TOML syntax, a file that cannot be read).
    pub section: Option<Section>,
    /// What is wrong.
    pub reason: String,
}

/// Refused topology text: the line and the table at fault, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", in_section(.section))]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// The table the error is in; `None` where it is the text as a whole.
    pub section: Option<Section>,
    /// What is wrong.
    pub reason: String,
}

impl ParseError {
    /// An error in table `section`, at `line`.
    fn at(line: usize, section: Section, reason: impl Into<String>) -> ParseError {
        ParseError {
            line,
            section: Some(section),
            reason: reason.into(),
        }
    }

    /// An error of the text as a whole, at `line`.
    fn whole(line: usize, reason: impl Into<String>) -> ParseError {
        ParseError {
            line,
            section: None,
            reason: reason.into(),
        }
    }

    /// The error as the error of file `path`.
    pub fn in_file(self, path: &Path) -> TopologyError {
        TopologyError {
            path: path.into(),
            line: self.line,
            section: self.section,
            reason: self.reason,
        }
    }
}

/// A table of a topology file, as its errors name it (`vm "web1"`,
/// `switch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Section {
    /// A `[[vm]]`, by its name.
    Vm(String),
    /// An `[[uplink]]`, by its name.
    Uplink(String),
    /// An uplink's `[uplink.vxlan]`, by the uplink's name.
    Vxlan(String),
    /// A `[[host]]`, by its name.
    Host(String),
    /// A `[[security_group]]`, by its name.
    SecurityGroup(String),
    /// One rule of a `[[security_group]]`.
    Rule {
        /// The group's name.
        group: String,
        /// The rule's place in the group's list, from 0.
        index: usize,
    },
    /// `[conntrack]`.
    Conntrack,
    /// A `[[mirror]]`, by its name.
    Mirror(String),
    /// `[switch]`.
    Switch,
    /// `[frr]`.
    Frr,
    /// `[ipfix]`.
    Ipfix,
    /// `[libvirt]`.
    Libvirt,
    /// A `[[tenant]]`, by its name.
    Tenant(String),
}

impl std::fmt::Display for Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Section::Vm(n) => write!(f, "vm {n:?}"),
            Section::Uplink(n) => write!(f, "uplink {n:?}"),
            Section::Vxlan(n) => write!(f, "uplink {n:?}: vxlan"),
            Section::Host(n) => write!(f, "host {n:?}"),
            Section::SecurityGroup(n) => write!(f, "security_group {n:?}"),
            Section::Rule { group, index } => write!(f, "security_group {group:?} rule {index}"),
            Section::Conntrack => f.write_str("conntrack"),
            Section::Mirror(n) => write!(f, "mirror {n:?}"),
            Section::Switch => f.write_str("switch"),
            Section::Frr => f.write_str("frr"),
            Section::Ipfix => f.write_str("[ipfix]"),
            Section::Libvirt => f.write_str("libvirt"),
            Section::Tenant(n) => write!(f, "tenant {n:?}"),
        }
    }
}

/// An error's section as its message begins with it (`vm "a": `).
fn in_section(section: &Option<Section>) -> String {
    section
        .as_ref()
        .map(|s| format!("{s}: "))
        .unwrap_or_default()
}

/// The table of `text` that byte `offset` is in: the inline table around
/// it, else the last table header before it (for an error of the TOML
/// reader, which knows the place but not the table). `None` before the
/// first table, in a table without a name, or in text that is not TOML.
fn section_at(text: &str, offset: usize) -> Option<Section> {
    use toml::de::{DeTable, DeValue};
    let doc = DeTable::parse(text).ok()?;
    let name = |t: &DeTable| match t.get("name").map(|v| v.get_ref()) {
        Some(DeValue::String(n)) => Some(n.to_string()),
        _ => None,
    };
    // Each table with its span and section (`None`: it has no name).
    let mut tables: Vec<(std::ops::Range<usize>, Option<Section>)> = Vec::new();
    for (key, value) in doc.get_ref().iter() {
        let one = match key.get_ref().as_ref() {
            "switch" => Some(Section::Switch),
            "frr" => Some(Section::Frr),
            "ipfix" => Some(Section::Ipfix),
            "libvirt" => Some(Section::Libvirt),
            "conntrack" => Some(Section::Conntrack),
            _ => None,
        };
        if let Some(section) = one {
            tables.push((value.span(), Some(section)));
            continue;
        }
        let DeValue::Array(list) = value.get_ref() else {
            continue;
        };
        for item in list.iter() {
            let DeValue::Table(t) = item.get_ref() else {
                continue;
            };
            let n = name(t);
            let section = match key.get_ref().as_ref() {
                "vm" => n.map(Section::Vm),
                "uplink" => {
                    if let (Some(n), Some(v)) = (&n, t.get("vxlan")) {
                        tables.push((v.span(), Some(Section::Vxlan(n.clone()))));
                    }
                    n.map(Section::Uplink)
                }
                "host" => n.map(Section::Host),
                "mirror" => n.map(Section::Mirror),
                "tenant" => n.map(Section::Tenant),
                "security_group" => {
                    for rules in ["rule", "rules"].iter().filter_map(|k| t.get(*k)) {
                        let DeValue::Array(rules) = rules.get_ref() else {
                            continue;
                        };
                        for (index, r) in rules.iter().enumerate() {
                            let group = n.clone();
                            tables.push((
                                r.span(),
                                group.map(|group| Section::Rule { group, index }),
                            ));
                        }
                    }
                    n.map(Section::SecurityGroup)
                }
                _ => continue,
            };
            tables.push((item.span(), section));
        }
    }
    // A header (`[switch]`, `[[vm]]`) opens its table until the next one;
    // an inline table (`{ .. }`) is its braces.
    let header = |at: &std::ops::Range<usize>| text[at.start..].starts_with('[');
    tables
        .into_iter()
        .filter(|(at, _)| at.start <= offset && (header(at) || offset < at.end))
        .max_by_key(|(at, _)| at.start)
        .and_then(|(_, section)| section)
}

/// A topology file as written, each table with its place in the text
/// (for the line an error names).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRepr {
    name: toml::Spanned<String>,
    #[serde(default = "default_aging")]
    fdb_aging_secs: u64,
    #[serde(default)]
    vm: Vec<toml::Spanned<vm::VmRepr>>,
    #[serde(default)]
    uplink: Vec<toml::Spanned<uplink::UplinkRepr>>,
    #[serde(default)]
    host: Vec<toml::Spanned<host::HostRepr>>,
    frr: Option<toml::Spanned<frr::FrrRepr>>,
    netns: Option<toml::Spanned<String>>,
    switch: Option<toml::Spanned<SwitchRepr>>,
    libvirt: Option<toml::Spanned<libvirt::LibvirtRepr>>,
    #[serde(default)]
    security_group: Vec<toml::Spanned<security_group::GroupRepr>>,
    conntrack: Option<toml::Spanned<security_group::ConntrackRepr>>,
    #[serde(default)]
    mirror: Vec<toml::Spanned<mirror::MirrorRepr>>,
    ipfix: Option<toml::Spanned<ipfix::IpfixRepr>>,
    #[serde(default)]
    tenant: Vec<toml::Spanned<tenant::TenantRepr>>,
}

fn default_aging() -> u64 {
    300
}

fn d_mtu() -> u16 {
    1500
}
fn d_true() -> bool {
    true
}
fn d_ring() -> usize {
    256
}

/// A validated topology.
#[derive(Clone, Debug)]
pub struct Topology {
    /// Topology name.
    pub name: String,
    /// The switch's own settings (`[switch]`).
    pub switch: SwitchSettings,
    /// FDB aging.
    pub fdb_aging_secs: u64,
    /// The VMs.
    pub vms: Vec<Vm>,
    /// The uplinks.
    pub uplinks: Vec<Uplink>,
    /// External hosts on the uplinks' wires.
    pub hosts: Vec<Host>,
    /// FRR's daemons, when `hvnet up` starts them for EVPN.
    pub frr: Option<Frr>,
    /// The network namespace the switch runs in (its uplinks' devices,
    /// EVPN's shadow, FRR), where it is not the caller's: a host of its
    /// own on this machine (tests, demos, the lab).
    pub netns: Option<String>,
    /// Where libvirt's guests find the switch (`[libvirt]`).
    pub libvirt: Option<Libvirt>,
    /// Security groups (`[[security_group]]`), by name.
    pub security_groups: Vec<SecurityGroup>,
    /// The connection tables' bounds (`[conntrack]`).
    pub conntrack: hvnet_datapath::acl::Limits,
    /// Port mirrors (`[[mirror]]`).
    pub mirrors: Vec<hvnet_datapath::mirror::MirrorSpec>,
    /// Flow export (`[ipfix]`).
    pub ipfix: Option<hvnet_datapath::ipfix::IpfixConfig>,
    /// Tenants routed at the edge (`[[tenant]]`).
    pub tenants: Vec<hvnet_datapath::route::Tenant>,
}

impl Topology {
    /// The gateway of VM `vm`'s segment, where its VLAN is a tenant's and
    /// its IPv4 address in the gateway's subnet.
    pub fn gateway_of(&self, vm: &Vm) -> Option<std::net::Ipv4Addr> {
        tenant::gateway_of(&self.tenants, vm)
    }
    /// The IPv6 gateway of VM `vm`'s segment, where it has one.
    pub fn gateway6_of(&self, vm: &Vm) -> Option<std::net::Ipv6Addr> {
        tenant::gateway6_of(&self.tenants, vm)
    }
    /// The MAC VM `vm` sends to for `dst`: its gateway's, when `dst` is
    /// off its subnet in a tenant's segment.
    pub fn next_hop_mac(&self, vm: &Vm, dst: std::net::IpAddr) -> Option<hvnet_wire::MacAddr> {
        tenant::next_hop_mac(&self.tenants, vm, dst)
    }
    /// This host's router MAC (symmetric IRB).
    pub fn router_mac(&self) -> hvnet_wire::MacAddr {
        tenant::router_mac(&self.tenants, &self.uplinks)
    }
    /// The tenant routed across hosts through L3 VNI `vni`, if any.
    pub fn tenant_of_l3(&self, vni: u32) -> Option<&hvnet_datapath::route::Tenant> {
        self.tenants
            .iter()
            .find(|t| t.l3.is_some_and(|l| l.vni == vni))
    }
    /// The router's configuration (`None`: no tenants, no routing).
    pub fn router_config(&self) -> Option<hvnet_datapath::route::RouterConfig> {
        tenant::router_config(&self.tenants, &self.vms, &self.uplinks)
    }
    /// Every VM's security groups as the switch installs them.
    pub fn acl_config(&self) -> hvnet_datapath::acl::AclConfig {
        security_group::acl_config(&self.security_groups, self.conntrack, &self.vms)
    }
    /// The network namespace that is VM `vm`.
    pub fn netns(&self, vm: &Vm) -> String {
        self.netns_of(&vm.name)
    }
    /// A namespace VM's namespace and NIC, if a deleted namespace's name
    /// says it has gone: one hvnet made, or one given under the namespace
    /// directory (`/run/netns`, where container runtimes put theirs).
    pub fn watched_netns(&self, vm: &Vm) -> Option<(PathBuf, String)> {
        if vm.kind != VmKind::Netns {
            return None;
        }
        let path = self.netns_path(vm);
        let under = |d: &str| path.parent() == Some(Path::new(d));
        (vm.attach.is_none() || under(hvnet_sys::netns::NETNS_RUN_DIR) || under("/var/run/netns"))
            .then(|| (path, vm.ifname().to_string()))
    }
    /// The handle of a namespace VM's namespace: the one it was given
    /// (`netns = PATH`), else the one hvnet made for it.
    pub fn netns_path(&self, vm: &Vm) -> PathBuf {
        match &vm.attach {
            Some(a) => a.netns.clone(),
            None => hvnet_sys::netns::path(&self.netns(vm)),
        }
    }
    /// The network namespace of a VM or an external host named `name`.
    pub fn netns_of(&self, name: &str) -> String {
        netns_name(&self.name, name)
    }
    /// The uplink external host `h` is on (the topology was checked: it
    /// has one of that name).
    pub fn uplink_of(&self, h: &Host) -> &Uplink {
        self.uplinks
            .iter()
            .find(|u| u.name == h.uplink)
            .expect("a host's uplink is the topology's")
    }
    /// The VMs on uplink `u`'s segment (its VLAN): whose frames it
    /// carries, and whom NetQueue gives filters.
    pub fn vms_on<'a>(&'a self, u: &'a Uplink) -> impl Iterator<Item = &'a Vm> + 'a {
        self.vms.iter().filter(move |v| u.shares_vlan_with(v))
    }
    /// What works but will not do what a user may expect: a tunnel
    /// endpoint whose underlay MTU leaves less than a VM's MTU for the
    /// inner frame (VXLAN adds 50 bytes).
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        // Two VMs given one address in one VLAN: both come up, and each
        // answers ARP for it (in two VLANs, two tenants', it is fine).
        let addrs: Vec<(String, &Vm)> = self
            .vms
            .iter()
            .flat_map(|v| {
                let v4 = v.ipv4.map(|(a, _)| (a.to_string(), v));
                let v6 = v.ipv6.map(|(a, _)| (a.to_string(), v));
                v4.into_iter().chain(v6)
            })
            .collect();
        for (i, (a, first)) in addrs.iter().enumerate() {
            let same = |(b, v): &&(String, &Vm)| b == a && v.vlans().meets(&first.vlans());
            if let Some((_, second)) = addrs[i + 1..].iter().find(same) {
                w.push(format!(
                    "VMs {} and {} have the same address {a}: each answers for it",
                    first.name, second.name
                ));
            }
        }
        for u in self.uplinks.iter().filter(|u| u.vxlan.is_some()) {
            let overhead = u.vxlan.as_ref().map_or(VXLAN_OVERHEAD, |v| v.overhead());
            let room = (u.settings.mtu as usize).saturating_sub(overhead);
            for vm in self.vms_on(u) {
                if vm.settings.mtu as usize > room {
                    w.push(format!(
                        "uplink {}: VXLAN adds {overhead} bytes; its MTU {} leaves {room} for VM {}'s MTU {}: larger frames are dropped (drop_mtu_exceeded). Give the uplink mtu = {} (and its device that MTU), or the VM mtu = {room}",
                        u.name, u.settings.mtu, vm.name, vm.settings.mtu, vm.settings.mtu as usize + overhead
                    ));
                }
            }
        }
        w
    }
    /// Every namespace the topology creates (namespace VMs, then
    /// external hosts).
    pub fn namespaces(&self) -> Vec<String> {
        self.vms
            .iter()
            .filter(|v| v.kind == VmKind::Netns && v.attach.is_none())
            .map(|v| &v.name)
            .chain(self.hosts.iter().map(|h| &h.name))
            .map(|n| self.netns_of(n))
            .collect()
    }
}

/// The 1-based line of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// The network namespace of VM or host `name` of topology `topology`
/// (`TOPOLOGY-NAME`).
pub fn netns_name(topology: &str, name: &str) -> String {
    format!("{topology}-{name}")
}

/// A topology's name: 1-16 characters of a-z, 0-9 and '-', not starting
/// with '-' (it names a directory under /run/hvnet and prefixes
/// namespaces, so no path components).
pub fn valid_topology_name(s: &str) -> bool {
    valid_name(s) && s.len() <= 16
}

/// [`valid_topology_name`], with the reason a name is refused.
pub fn check_topology_name(s: &str) -> Result<(), String> {
    if valid_topology_name(s) {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a topology name (1-16 characters of a-z, 0-9 and '-')"
        ))
    }
}

/// A VM's, an uplink's or a host's name: 1-24 characters of a-z, 0-9
/// and '-', not starting with '-'.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 24
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
}

/// Reads and validates a topology file.
pub fn load(path: &Path) -> Result<Topology, TopologyError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ParseError::whole(0, format!("cannot read: {e}")).in_file(path))?;
    parse(&text).map_err(|e| e.in_file(path))
}

/// Validates topology text; errors carry a 1-based line and the table
/// they are in.
pub fn parse(text: &str) -> Result<Topology, ParseError> {
    let f: FileRepr = toml::from_str(text).map_err(|e| match e.span() {
        Some(at) => ParseError {
            line: line_of(text, at.start),
            section: section_at(text, at.start),
            reason: e.message().to_string(),
        },
        None => ParseError::whole(1, e.message()),
    })?;
    let name_line = line_of(text, f.name.span().start);
    let name = f.name.into_inner();
    if !valid_topology_name(&name) {
        return Err(ParseError::whole(
            name_line,
            format!("topology name {name:?} must be 1-16 characters of a-z, 0-9 and '-'"),
        ));
    }
    let vms = vm::parse_vms(&name, text, &f.vm)?;
    let vm_lines: Vec<usize> = f.vm.iter().map(|v| line_of(text, v.span().start)).collect();
    let (security_groups, conntrack) = security_group::parse_groups(
        text,
        &f.security_group,
        f.conntrack.as_ref(),
        &vms,
        &vm_lines,
    )?;
    let uplinks = uplink::parse_uplinks(text, &f.uplink, &vms)?;
    let hosts = host::parse_hosts(&name, text, &f.host, &vms, &uplinks)?;
    let mirrors = mirror::parse_mirrors(text, &f.mirror, &vms, &uplinks)?;
    let ipfix = ipfix::parse_ipfix(text, f.ipfix.as_ref())?;
    let tenants = tenant::parse_tenants(text, &f.tenant, &uplinks, &vms)?;
    let frr = frr::parse_frr(text, f.frr.as_ref(), &uplinks)?;
    let netns = match f.netns {
        None => None,
        Some(n) => {
            let line = line_of(text, n.span().start);
            let n = n.into_inner();
            if !valid_name(&n) || n.len() > 64 {
                return Err(ParseError::whole(
                    line,
                    format!("netns {n:?} must be a network namespace's name (a-z, 0-9, '-')"),
                ));
            }
            Some(n)
        }
    };
    let switch = parse_switch(text, f.switch.as_ref())?;
    let libvirt = libvirt::parse_libvirt(&name, text, f.libvirt.as_ref())?;
    if let (Some(lv), Some(table)) = (&libvirt, &f.libvirt) {
        // libvirt's guests' sockets: their ports come and go with them.
        if let Some(v) = vms
            .iter()
            .find(|v| v.vhost.path.as_deref().and_then(Path::parent) == Some(lv.sockets.as_path()))
        {
            return Err(ParseError::at(
                line_of(text, table.span().start),
                Section::Libvirt,
                format!(
                    "vm {}: its socket is in [libvirt] sockets ({}), whose sockets are libvirt's guests'; put it elsewhere",
                    v.name,
                    lv.sockets.display()
                ),
            ));
        }
    }
    if vms.is_empty() && libvirt.is_none() {
        // A switch of libvirt's guests alone starts with none.
        return Err(ParseError::whole(
            line_of(text, text.len()),
            "no [[vm]] entries (a switch whose VMs all come from libvirt says [libvirt])",
        ));
    }
    Ok(Topology {
        name,
        switch,
        fdb_aging_secs: f.fdb_aging_secs.max(1),
        vms,
        uplinks,
        hosts,
        frr,
        netns,
        libvirt,
        security_groups,
        conntrack,
        mirrors,
        ipfix,
        tenants,
    })
}

/// VMs a topology may have: as many as a vSphere host's switch has ports.
/// What bounds a switch is the memory its ports take, stated per port in
/// docs/guide/operations.md.
pub const MAX_VMS: usize = 4096;

/// `[switch]` as written.
#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
struct SwitchRepr {
    cpus: Option<String>,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    rebalance: bool,
    busy_poll_max_us: Option<u32>,
    nice: Option<NiceRepr>,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    multicast_snooping: bool,
    #[serde(default, deserialize_with = "hvnet_datapath::on_off")]
    multicast_querier: bool,
    #[serde(default, deserialize_with = "hvnet_datapath::on_off")]
    multicast_flood_unknown: bool,
}

/// `nice` as written: a number, or a word (`"auto"`).
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum NiceRepr {
    Number(i64),
    Word(String),
}

/// The longest a worker watches a queue that went empty under load
/// (`[switch] busy_poll_max_us`), by default, and at most.
pub const BUSY_POLL_MAX_US: (u32, u32) = (50, 1000);

/// The workers' nice value by default (`[switch] nice`): `auto`, the
/// weight of as many threads as a worker has queues with traffic
/// ([`hvnet_datapath::workers::weight`]). A fixed pool of a few workers
/// shares its CPUs with every guest process placed there: at a fixed 0, 64
/// busy namespace VMs leave them a sixty-fourth of their CPUs; at a fixed
/// -20, one VM pair's stream pays, its receiver preempted at every frame
/// (docs/perf/live-switch.md).
pub const DEFAULT_NICE: WorkerNice = WorkerNice::Auto;

/// The switch's own settings (`[switch]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchSettings {
    /// The CPUs the datapath's workers run on, one worker each, pinned
    /// (empty: every CPU the daemon may use).
    pub cpus: Vec<usize>,
    /// Queues moved between workers by their load.
    pub rebalance: bool,
    /// The longest a worker watches a queue that went empty under load
    /// before it asks for notifications and sleeps (0: never watches).
    pub busy_poll_max_us: u32,
    /// The workers' nice value: `auto`, or fixed, -20 to 19 (nice(1)).
    pub nice: WorkerNice,
    /// IGMP/MLD snooping (the Linux bridge's `mcast_snooping`): on.
    pub multicast_snooping: bool,
    /// The switch queries where no querier is heard (`mcast_querier`):
    /// off.
    pub multicast_querier: bool,
    /// Group frames nobody reported are flooded (on) or sent to the
    /// router ports only (off, the Linux bridge's way).
    pub multicast_flood_unknown: bool,
}

impl Default for SwitchSettings {
    fn default() -> Self {
        SwitchSettings {
            cpus: Vec::new(),
            rebalance: true,
            busy_poll_max_us: BUSY_POLL_MAX_US.0,
            nice: DEFAULT_NICE,
            multicast_snooping: true,
            multicast_querier: false,
            multicast_flood_unknown: false,
        }
    }
}

/// `[switch]`, the switch's own settings; errors carry its table's line.
fn parse_switch(
    text: &str,
    repr: Option<&toml::Spanned<SwitchRepr>>,
) -> Result<SwitchSettings, ParseError> {
    Ok(match repr {
        None => SwitchSettings::default(),
        Some(sw) => {
            let line = line_of(text, sw.span().start);
            let bad = |reason: String| ParseError::at(line, Section::Switch, reason);
            let r = sw.get_ref();
            let cpus = match &r.cpus {
                None => Vec::new(),
                Some(list) => {
                    parse_cpu_list(list).map_err(|e| bad(format!("cpus {list:?}: {e}")))?
                }
            };
            let busy_poll_max_us = match r.busy_poll_max_us {
                None => BUSY_POLL_MAX_US.0,
                Some(us) if us <= BUSY_POLL_MAX_US.1 => us,
                Some(us) => {
                    return Err(bad(format!(
                        "busy_poll_max_us {us} out of range: 0 (never watch) to {} microseconds",
                        BUSY_POLL_MAX_US.1
                    )))
                }
            };
            let nice = match &r.nice {
                None => DEFAULT_NICE,
                Some(NiceRepr::Word(w)) if w == "auto" => WorkerNice::Auto,
                Some(NiceRepr::Number(n)) if (-20..=19).contains(n) => WorkerNice::Fixed(*n as i32),
                Some(NiceRepr::Number(n)) => {
                    return Err(bad(format!("nice {n} out of range: \"auto\", or -20 (the highest weight) to 19, as nice(1) takes")))
                }
                Some(NiceRepr::Word(w)) => {
                    return Err(bad(format!("nice {w:?}: \"auto\" (the weight of the queues with traffic) or a number, -20 to 19")))
                }
            };
            SwitchSettings {
                cpus,
                rebalance: r.rebalance,
                busy_poll_max_us,
                nice,
                multicast_snooping: r.multicast_snooping,
                multicast_querier: r.multicast_querier,
                multicast_flood_unknown: r.multicast_flood_unknown,
            }
        }
    })
}

/// A CPU list as `taskset -c` and the kernel's `cpuset` files write it
/// (`0-1`, `0,2-3`), each CPU one the daemon may use.
fn parse_cpu_list(list: &str) -> Result<Vec<usize>, String> {
    let allowed =
        hvnet_sys::allowed_cpus().map_err(|e| format!("cannot read this process's CPUs: {e}"))?;
    let shown = allowed
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim) {
        let num = |x: &str| {
            x.trim().parse::<usize>().map_err(|_| {
                format!("{part:?} is not a CPU number or range (as in \"0-1\" or \"0,2-3\")")
            })
        };
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if a > b {
            return Err(format!("range {part:?} runs backwards"));
        }
        for c in a..=b {
            if !allowed.contains(&c) {
                return Err(format!("CPU {c} is not one this process may use ({shown})"));
            }
            if !cpus.contains(&c) {
                cpus.push(c);
            }
        }
    }
    if cpus.is_empty() {
        return Err("names no CPU".into());
    }
    Ok(cpus)
}

/// A locally administered MAC for the `i`th VM (`kind` 0) or host
/// (`kind` 1) of a topology: unique within it, and different from another
/// topology's, since two hvnet hosts joined by a tunnel have VMs of the
/// same index (from a hash of the topology's name).
fn auto_mac(topology: &str, kind: u8, i: usize) -> MacAddr {
    let h = topology.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    });
    let [_, a, b, c] = h.to_be_bytes();
    // The first 255 as they always were; past them the index's high bits
    // go above `kind`'s.
    let n = i + 1;
    MacAddr([
        0x02,
        a,
        b,
        c,
        kind | ((n >> 8) << 1) as u8,
        (n & 0xff) as u8,
    ])
}

/// [`valid_name`], with the reason a name is refused.
fn check_name(s: &str) -> Result<(), String> {
    if valid_name(s) {
        Ok(())
    } else {
        Err("name must be 1-24 characters of a-z, 0-9 and '-'".into())
    }
}

/// A VM's or a host's IPv4 and IPv6 address, each with its prefix length.
type Addrs = (Option<(Ipv4Addr, u8)>, Option<(Ipv6Addr, u8)>);

/// A VM's or a host's `ipv4` and `ipv6`.
fn parse_addrs(ipv4: Option<&str>, ipv6: Option<&str>) -> Result<Addrs, String> {
    Ok((
        ipv4.map(parse_cidr4).transpose()?,
        ipv6.map(parse_cidr6).transpose()?,
    ))
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
    use hvnet_datapath::PortSettings;

    /// A topology of two VMs, for the sections' tests too.
    pub(super) const GOOD: &str = r#"
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

    /// What [`parse`] says of refused text: the line, and the message (the
    /// section, then the reason).
    pub(super) fn refused(text: &str) -> (usize, String) {
        let e = parse(text).unwrap_err();
        (e.line, e.to_string())
    }

    /// An uplink and a host on its wire, to follow [`GOOD`].
    pub(super) const UPLINK: &str = r#"
[[uplink]]
name = "up0"
device = "hvx0"
queues = 2
lro = "off"
tso = "software"

[[host]]
name = "ext"
uplink = "up0"
ipv4 = "10.1.0.100/24"
"#;

    #[test]
    fn switch_cpus_are_a_cpu_list_of_cpus_the_daemon_may_use() {
        let first = hvnet_sys::allowed_cpus().unwrap()[0];
        let with = |cpus: &str| parse(&format!("{GOOD}\n[switch]\ncpus = \"{cpus}\"\n"));
        let t = with(&format!("{first}-{first},{first}")).unwrap();
        assert_eq!(t.switch.cpus, vec![first]);
        assert!(t.switch.rebalance, "on by default");
        assert_eq!(
            parse(GOOD).unwrap().switch,
            SwitchSettings {
                cpus: Vec::new(),
                rebalance: true,
                busy_poll_max_us: 50,
                nice: WorkerNice::Auto,
                multicast_snooping: true,
                multicast_querier: false,
                multicast_flood_unknown: false,
            }
        );
        let mc = parse(&format!(
            "{GOOD}\n[switch]\nmulticast_snooping = false\nmulticast_querier = true\nmulticast_flood_unknown = \"on\"\n"
        ))
        .unwrap()
        .switch;
        assert!(!mc.multicast_snooping && mc.multicast_querier && mc.multicast_flood_unknown);
        for (bad, why) in [
            ("4095", "CPU 4095 is not one this process may use"),
            ("1-0", "runs backwards"),
            ("x", "is not a CPU number or range"),
        ] {
            let e = with(bad).err().unwrap();
            assert!(e.reason.contains(why), "{bad}: {e}");
            assert_eq!(e.line, 16, "{bad}: the [switch] table's line");
            assert_eq!(e.section, Some(Section::Switch));
            assert!(e.to_string().starts_with("switch: cpus "), "{e}");
        }
        let off = parse(&format!("{GOOD}\n[switch]\nrebalance = \"off\"\n")).unwrap();
        assert!(!off.switch.rebalance);
        let poll = |us: u32| parse(&format!("{GOOD}\n[switch]\nbusy_poll_max_us = {us}\n"));
        assert_eq!(poll(0).unwrap().switch.busy_poll_max_us, 0);
        let e = poll(1001).err().unwrap();
        assert_eq!(e.line, 16);
        assert!(
            e.reason.contains("0 (never watch) to 1000 microseconds"),
            "{e}"
        );
        let nice = |n: &str| parse(&format!("{GOOD}\n[switch]\nnice = {n}\n"));
        assert_eq!(nice("5").unwrap().switch.nice, WorkerNice::Fixed(5));
        assert_eq!(nice("\"auto\"").unwrap().switch.nice, WorkerNice::Auto);
        assert!(nice("-21")
            .err()
            .unwrap()
            .reason
            .contains("-20 (the highest weight) to 19"));
        let e = nice("\"high\"").err().unwrap();
        assert_eq!(e.line, 16);
        assert!(e.reason.contains("\"auto\""), "{e}");
    }

    #[test]
    fn an_error_says_its_file_line_and_table_before_the_reason() {
        let e = parse(&GOOD.replace("mtu = 9000", "mtu = 9001")).unwrap_err();
        assert_eq!(
            (e.line, e.section.clone()),
            (9, Some(Section::Vm("vm2".into())))
        );
        let shown = e.in_file(Path::new("/etc/hvnet/t1.toml")).to_string();
        assert!(
            shown.starts_with("/etc/hvnet/t1.toml:9: vm \"vm2\": mtu 9001"),
            "{shown}"
        );
        // The file as a whole: no table.
        let e = parse("name = \"Bad Name\"\n").unwrap_err();
        assert_eq!(e.section, None);
        let shown = e.in_file(Path::new("t.toml")).to_string();
        assert!(
            shown.starts_with("t.toml:1: topology name \"Bad Name\""),
            "{shown}"
        );
    }

    #[test]
    fn the_toml_readers_errors_name_the_table_they_are_in() {
        let at = |text: &str| {
            let e = parse(text).unwrap_err();
            (e.line, e.section)
        };
        let vm = |n: &str| Some(Section::Vm(n.into()));
        // A key no [[vm]] has, a value of the wrong type: that VM's table.
        assert_eq!(
            at(&GOOD.replace("lro = false", "lro = false\nspeed = 10")),
            (15, vm("vm2"))
        );
        assert_eq!(
            at(&GOOD.replace("mtu = 9000", "mtu = \"big\"")),
            (12, vm("vm2"))
        );
        assert_eq!(
            at(&GOOD.replace("ipv4 = \"10.1.0.1/24\"", "ipv4 = 1")),
            (7, vm("vm1"))
        );
        // Tables of their own, and the tables inside one.
        let up = Some(Section::Uplink("up0".into()));
        assert_eq!(
            at(&format!(
                "{GOOD}{}",
                UPLINK.replace("lro = \"off\"", "lro = 3")
            ))
            .1,
            up
        );
        let vx = Some(Section::Vxlan("up0".into()));
        let tunnel = |vxlan: &str, after: &str| {
            at(&format!(
                "{GOOD}\n[[uplink]]\nname = \"up0\"\ndevice = \"hvx0\"\n{vxlan}\n{after}"
            ))
            .1
        };
        assert_eq!(
            tunnel(
                "[uplink.vxlan]\nvni = 7\nlocal = \"10.9.0.1/24\"\nspeed = 1",
                ""
            ),
            vx
        );
        assert_eq!(
            tunnel(
                "vxlan = { vni = 7, local = \"10.9.0.1/24\", speed = 1 }",
                ""
            ),
            vx
        );
        assert_eq!(
            tunnel("vxlan = { vni = 7, local = \"10.9.0.1/24\" }", "speed = 1"),
            up,
            "after an inline table: its uplink's again"
        );
        assert_eq!(
            at(&format!("{GOOD}\n[switch]\nspeed = 1\n")).1,
            Some(Section::Switch)
        );
        assert_eq!(
            at(&format!("{GOOD}\n[ipfix]\ntargets = 3\n")).1,
            Some(Section::Ipfix)
        );
        // Not in a table: the file's.
        assert_eq!(at(&format!("speed = 1\n{GOOD}")).1, None);
        assert_eq!(
            at(&GOOD.replace("fdb_aging_secs = 5", "fdb_aging_secs = \"x\"")).1,
            None
        );
        // A [[vm]] without a name has no name to be known by.
        assert_eq!(
            at("name = \"t\"\n[[vm]]\nipv4 = \"10.0.0.1/24\"\n"),
            (2, None)
        );
        // Text that is not TOML.
        assert_eq!(at(&format!("{GOOD}\n[[vm]\n")).1, None);
    }

    #[test]
    fn parses_with_defaults() {
        let t = parse(GOOD).unwrap();
        assert_eq!(t.vms.len(), 2);
        // Defaults, and the VM's address its guards' (docs/guide/guards.md).
        let addresses = hvnet_datapath::guard::Addresses::parse("10.1.0.1").unwrap();
        assert_eq!(
            t.vms[0].settings,
            PortSettings {
                addresses,
                ..PortSettings::default()
            }
        );
        assert_eq!(t.vms[1].settings.mtu, 9000);
        assert!(!t.vms[1].settings.lro);
        assert_eq!(t.netns(&t.vms[1]), "t1-vm2");
        assert_ne!(t.vms[0].mac, t.vms[1].mac);
        let other = parse(&GOOD.replace("name = \"t1\"", "name = \"t2\"")).unwrap();
        assert_ne!(
            t.vms[0].mac, other.vms[0].mac,
            "another topology's VMs get other MACs"
        );
    }

    #[test]
    fn the_example_topologies_are_valid() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/topologies");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "toml") {
                load(&path).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 7, "{n} examples in {}", dir.display());
    }
}
