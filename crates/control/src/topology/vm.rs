//! `[[vm]]`: a VM as a topology file writes it, checked into a [`Vm`];
//! and one more `[[vm]]` table for a topology that runs (`hvnet vm add`).

use super::vhost_socket::{ModeRepr, SocketRepr};
use super::{
    auto_mac, check_name, d_mtu, d_ring, d_true, default_queues, line_of, parse, parse_addrs,
    ParseError, Section, Topology, VhostSocket, MAX_VMS,
};
use hvnet_datapath::guard::{Addresses, Cidr};
use hvnet_datapath::rate::{Burst, Rate};
use hvnet_datapath::settings::validate_settings;
use hvnet_datapath::{Delivery, PortSettings, RxOverflow};
use hvnet_wire::MacAddr;
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, Ipv6Addr};

/// A `[[vm]]` table as written.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct VmRepr {
    name: String,
    #[serde(default)]
    kind: VmKind,
    #[serde(default = "d_memory")]
    memory: u32,
    accel: Option<Accel>,
    ipv4: Option<String>,
    ipv6: Option<String>,
    mac: Option<String>,
    #[serde(default = "d_mtu")]
    mtu: u16,
    queues: Option<usize>,
    vlan: Option<u16>,
    vlan_mode: Option<String>,
    vlans: Option<Vec<super::VlanItem>>,
    native_vlan: Option<i64>,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    lro: bool,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    tso: bool,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    csum: bool,
    #[serde(default = "d_ring")]
    ring1: usize,
    #[serde(default = "d_ring")]
    ring2: usize,
    #[serde(default = "d_overflow")]
    rx_overflow: RxOverflow,
    #[serde(default = "d_delivery")]
    delivery: Delivery,
    #[serde(default)]
    rx_usecs: u32,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    connected: bool,
    mode: Option<ModeRepr>,
    socket: Option<String>,
    socket_owner: Option<String>,
    socket_group: Option<String>,
    socket_mode: Option<String>,
    packed: Option<bool>,
    tx_rate: Option<Rate>,
    tx_burst: Option<Burst>,
    rx_rate: Option<Rate>,
    rx_burst: Option<Burst>,
    #[serde(default)]
    cpu_limit: u8,
    shares: Option<u32>,
    reservation: Option<Rate>,
    #[serde(default)]
    security_groups: Vec<String>,
    addresses: Option<Vec<String>>,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    source_guard: bool,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    arp_guard: bool,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    nd_guard: bool,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    dhcp_guard: bool,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    ra_guard: bool,
    #[serde(default = "d_true", deserialize_with = "hvnet_datapath::on_off")]
    dhcp_snooping: bool,
    netns: Option<String>,
    ifname: Option<String>,
    routes: Option<Vec<String>>,
    container: Option<String>,
    network: Option<String>,
    pod: Option<String>,
    domain: Option<String>,
    domain_uuid: Option<String>,
    alias: Option<String>,
}

fn d_overflow() -> RxOverflow {
    PortSettings::default().rx_overflow
}
fn d_delivery() -> Delivery {
    PortSettings::default().delivery
}

fn d_memory() -> u32 {
    256
}

/// What a VM is.
#[derive(Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VmKind {
    /// A network namespace behind a TAP device (shares the host's kernel).
    #[default]
    Netns,
    /// A User-Mode Linux guest (its own kernel and virtio-net driver)
    /// attached over vhost-user, started by hvnet.
    Uml,
    /// A QEMU guest (Debian's cloud kernel, its virtio-net-pci driver)
    /// attached over vhost-user, started by hvnet.
    Qemu,
    /// A vhost-user socket for a guest started by someone else (QEMU,
    /// cloud-hypervisor, DPDK's virtio_user).
    VhostUser,
}

impl VmKind {
    /// As the topology file spells it.
    pub fn name(self) -> &'static str {
        match self {
            VmKind::Netns => "netns",
            VmKind::Uml => "uml",
            VmKind::Qemu => "qemu",
            VmKind::VhostUser => "vhost-user",
        }
    }
    /// A real guest hvnet starts, stops and restarts (and runs `hvnet
    /// exec` in).
    pub fn started_by_hvnet(self) -> bool {
        matches!(self, VmKind::Uml | VmKind::Qemu)
    }
    /// Attached over vhost-user.
    pub fn is_vhost_user(self) -> bool {
        self != VmKind::Netns
    }
}
/// How a QEMU guest's vCPU runs.
#[derive(Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Accel {
    /// KVM where `/dev/kvm` opens and can run the guest, else TCG (a KVM
    /// guest that fails while booting is started again under TCG).
    #[default]
    Auto,
    /// Hardware virtualization only.
    Kvm,
    /// QEMU's binary translation only (slow, runs anywhere).
    Tcg,
}

impl Accel {
    /// As the topology file spells it.
    pub fn name(self) -> &'static str {
        match self {
            Accel::Auto => "auto",
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

impl Vm {
    /// Who its port is for, as the switch's port carries it
    /// (`PortSpec::external_ids`): its libvirt domain's.
    pub fn external_ids(&self) -> Vec<(String, String)> {
        self.domain
            .as_ref()
            .map(super::attach::GuestDomain::external_ids)
            .unwrap_or_default()
    }

    /// A namespace VM's interface name in its namespace.
    pub fn ifname(&self) -> &str {
        self.attach.as_ref().map_or("eth0", |a| a.ifname.as_str())
    }

    /// The VLANs its port carries.
    pub fn vlans(&self) -> hvnet_datapath::vlan::PortVlans<'_> {
        self.settings.vlans_of(self.vlan)
    }
}

/// A VM of a validated topology.
#[derive(Clone, Debug, PartialEq)]
pub struct Vm {
    /// Its name.
    pub name: String,
    /// What it is.
    pub kind: VmKind,
    /// Guest memory in MiB (real guests).
    pub memory_mib: u32,
    /// How a QEMU guest's vCPU runs.
    pub accel: Accel,
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
    /// A `kind = "vhost-user"` VM's socket: server or client, where, and
    /// who may connect.
    pub vhost: VhostSocket,
    /// A real guest's device offers packed virtqueues (the front end
    /// chooses; a QEMU guest hvnet starts asks for them).
    pub packed: bool,
    /// Its port's security groups (`security_groups = [..]`), in the
    /// order their rules are matched; none: no filtering.
    pub security_groups: Vec<String>,
    /// A namespace VM in a namespace hvnet did not make (a container's):
    /// where, its interface's name there, its routes.
    pub attach: Option<super::attach::Attach>,
    /// The container the port was made for by the CNI plugin (a namespace
    /// VM so attached, or a vhost-user port a userspace container opens).
    pub container: Option<super::attach::Container>,
    /// The libvirt domain (and its interface) the port was made for
    /// (`domain`, `domain_uuid`, `alias`).
    pub domain: Option<super::attach::GuestDomain>,
}

/// The `[[vm]]` tables, each checked (and against the ones before it)
/// into a [`Vm`]; errors carry the line of the VM's table.
pub(super) fn parse_vms(
    topology: &str,
    text: &str,
    reprs: &[toml::Spanned<VmRepr>],
) -> Result<Vec<Vm>, ParseError> {
    if let Some(first) = reprs.get(MAX_VMS) {
        return Err(ParseError::at(
            line_of(text, first.span().start),
            Section::Vm(first.get_ref().name.clone()),
            format!("at most {MAX_VMS} VMs"),
        ));
    }
    let mut vms: Vec<Vm> = Vec::new();
    for (i, sv) in reprs.iter().enumerate() {
        let line = line_of(text, sv.span().start);
        let v = sv.get_ref().clone();
        let bad = |r: String| ParseError::at(line, Section::Vm(v.name.clone()), r);
        check_name(&v.name).map_err(bad)?;
        if vms.iter().any(|o| o.name == v.name) {
            return Err(bad("duplicate VM name".into()));
        }
        let (ipv4, ipv6) = parse_addrs(v.ipv4.as_deref(), v.ipv6.as_deref()).map_err(bad)?;
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
            None => auto_mac(topology, 0, i),
        };
        // A real guest's queue pairs are what its driver is offered (it
        // sets how many it uses); one unless asked.
        let queues = match (v.kind, v.queues) {
            (VmKind::Netns, q) => q.unwrap_or_else(default_queues),
            (_, q) => q.unwrap_or(1),
        };
        if !(1..=16).contains(&queues) {
            return Err(bad(format!("queues {queues} is outside 1..16")));
        }
        if v.kind.is_vhost_user() && !(64..=4096).contains(&v.memory) {
            return Err(bad(format!("memory {} MiB is outside 64..4096", v.memory)));
        }
        if v.accel.is_some() && v.kind != VmKind::Qemu {
            return Err(bad(format!(
                "accel is for kind = \"qemu\" VMs, not {:?}",
                v.kind.name()
            )));
        }
        // A QEMU guest's receive virtqueue is its ring 1: QEMU takes
        // powers of two from 256 to 1024.
        if v.kind == VmKind::Qemu && ![256, 512, 1024].contains(&v.ring1) {
            return Err(bad(format!(
                "ring1 {} for a qemu guest (its receive virtqueue) must be 256, 512 or 1024",
                v.ring1
            )));
        }
        let (vlan, vlans) = super::check_vlans(
            v.vlan,
            v.vlan_mode.as_deref(),
            v.vlans.as_deref(),
            v.native_vlan,
        )
        .map_err(bad)?;
        let vhost = VhostSocket::from_repr(
            v.kind.name(),
            &SocketRepr {
                mode: v.mode,
                socket: v.socket.clone(),
                owner: v.socket_owner.clone(),
                group: v.socket_group.clone(),
                perm: v.socket_mode.clone(),
            },
        )
        .map_err(bad)?;
        let packed = match (v.kind, v.packed) {
            (VmKind::Netns, Some(_)) => {
                return Err(bad("packed is for real guests (kind uml, qemu or vhost-user): a netns VM has no virtqueues".into()))
            }
            (VmKind::Uml, Some(true)) => {
                return Err(bad("packed = true is not for kind = \"uml\": User-Mode Linux starts every ring at base 0, which a packed ring (wrap counter 1 at the start) cannot take".into()))
            }
            // What a front end is offered unless told: a guest someone
            // else starts chooses (QEMU's packed=on, DPDK's packed_vq=1);
            // a QEMU guest hvnet starts asks for split rings, as QEMU does
            // by default.
            (VmKind::VhostUser, p) => p.unwrap_or(true),
            (_, p) => p.unwrap_or(false),
        };
        if let Some(p) = &vhost.path {
            if vms.iter().any(|o| o.vhost.path.as_ref() == Some(p)) {
                return Err(bad(format!("socket {p:?} is used twice")));
            }
        }
        let attach =
            super::attach::parse(v.netns.as_deref(), v.ifname.as_deref(), v.routes.as_deref())
                .map_err(bad)?;
        let container = super::attach::container(
            v.container.as_deref(),
            v.network.as_deref(),
            v.pod.as_deref(),
        )
        .map_err(bad)?;
        let domain = super::attach::guest_domain(
            v.domain.as_deref(),
            v.domain_uuid.as_deref(),
            v.alias.as_deref(),
        )
        .map_err(bad)?;
        if container.is_some() && attach.is_none() && v.kind != VmKind::VhostUser {
            return Err(bad(
                "container is for a container's port: a namespace VM in its namespace (netns = PATH) or a \
                 vhost-user port (kind = \"vhost-user\")"
                    .to_string(),
            ));
        }
        if attach.is_some() && v.kind != VmKind::Netns {
            return Err(bad(format!(
                "netns is for kind = \"netns\" VMs, not {:?}",
                v.kind.name()
            )));
        }
        if let Some(a) = &attach {
            if let Some(o) = vms.iter().find(|o| {
                o.attach
                    .as_ref()
                    .is_some_and(|b| b.netns == a.netns && b.ifname == a.ifname)
            }) {
                return Err(bad(format!(
                    "{} in {} is VM {}'s",
                    a.ifname,
                    a.netns.display(),
                    o.name
                )));
            }
        }
        let addresses = guard_addresses(ipv4, ipv6, v.addresses.as_deref()).map_err(bad)?;
        let settings = PortSettings {
            addresses,
            source_guard: v.source_guard,
            arp_guard: v.arp_guard,
            nd_guard: v.nd_guard,
            dhcp_guard: v.dhcp_guard,
            ra_guard: v.ra_guard,
            dhcp_snooping: v.dhcp_snooping,
            lro: v.lro,
            tso: v.tso,
            csum: v.csum,
            mtu: v.mtu,
            ring1: v.ring1,
            ring2: v.ring2,
            allow_forged_transmits: false,
            rx_overflow: v.rx_overflow,
            delivery: v.delivery,
            rx_usecs: v.rx_usecs,
            connected: v.connected,
            tx_rate: v.tx_rate,
            tx_burst: v.tx_burst,
            rx_rate: v.rx_rate,
            rx_burst: v.rx_burst,
            cpu_limit: v.cpu_limit,
            shares: v.shares.unwrap_or(hvnet_datapath::nioc::SHARES_NORMAL),
            reservation: v.reservation,
            ..vlans
        };
        validate_settings(&settings).map_err(|e| bad(e.to_string()))?;
        // One MAC in two VLANs is two stations (two tenants' cloned
        // guests, each in its segment); in one VLAN, a conflict.
        let here = settings.vlans_of(vlan);
        if let Some(o) = vms.iter().find(|o| o.mac == mac && o.vlans().meets(&here)) {
            return Err(bad(format!(
                "mac {mac} is used twice in one VLAN (VM {:?} has it)",
                o.name
            )));
        }
        vms.push(Vm {
            name: v.name.clone(),
            kind: v.kind,
            memory_mib: v.memory,
            accel: v.accel.unwrap_or_default(),
            ipv4,
            ipv6,
            mac,
            queues,
            vlan,
            settings,
            vhost,
            packed,
            security_groups: v.security_groups.clone(),
            attach,
            container,
            domain,
        });
    }
    Ok(vms)
}

/// A VM's addresses as its port's guards see them: its `ipv4` and
/// `ipv6` (the address, not the subnet), then its `addresses`.
fn guard_addresses(
    ipv4: Option<(Ipv4Addr, u8)>,
    ipv6: Option<(Ipv6Addr, u8)>,
    more: Option<&[String]>,
) -> Result<Addresses, String> {
    let mut all = Vec::new();
    all.extend(ipv4.map(|(a, _)| Cidr::host(a.into())));
    all.extend(ipv6.map(|(a, _)| Cidr::host(a.into())));
    for a in more.unwrap_or_default() {
        let c: Cidr = a.parse().map_err(|e| format!("addresses: {e}"))?;
        if !all.contains(&c) {
            all.push(c);
        }
    }
    Addresses::new(all).map_err(|e| format!("addresses: {e}"))
}

/// Why a `[[vm]]` table for a topology that runs (`hvnet vm add`, a VM
/// added at run time) was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VmTableError {
    /// The table is refused as a file's `[[vm]]` would be; its line
    /// counts from the table's first.
    #[error("line {}: {}", .0.line, .0)]
    Table(ParseError),
    /// The text has no `[[vm]]` table, or more than one.
    #[error("give exactly one [[vm]] table")]
    NotOne,
    /// A VM of its name runs already.
    #[error("vm {0:?}: a VM of that name runs already")]
    NameTaken(String),
    /// Its MAC is another VM's.
    #[error("vm {name:?}: mac {mac} is VM {other}'s")]
    MacTaken {
        /// The VM.
        name: String,
        /// Its MAC.
        mac: MacAddr,
        /// The VM that has it.
        other: String,
    },
    /// Its interface in its namespace is another VM's.
    #[error("vm {name:?}: {ifname} in its namespace is VM {other}'s")]
    InterfaceTaken {
        /// The VM.
        name: String,
        /// The interface.
        ifname: String,
        /// The VM that has it.
        other: String,
    },
    /// The VMs would be more than [`MAX_VMS`].
    #[error("at most {} VMs", MAX_VMS)]
    TooMany,
}

impl Topology {
    /// The topology as it runs after VMs were added and removed at run
    /// time (`hvnet vm add|del`): `added`, each one `[[vm]]` table (with
    /// its MAC written in, so that it never depends on its place), after
    /// the file's VMs; the VMs named in `removed` gone.
    pub fn with_changes(
        mut self,
        added: &[String],
        removed: &[String],
    ) -> Result<Topology, VmTableError> {
        self.vms.retain(|v| !removed.contains(&v.name));
        for table in added {
            let vm = self.parse_vm(table)?;
            if !removed.contains(&vm.name) {
                self.vms.push(vm);
            }
        }
        if self.vms.len() > MAX_VMS {
            return Err(VmTableError::TooMany);
        }
        Ok(self)
    }

    /// The name a `[[vm]]` table gives its VM, if it names one.
    pub fn parse_vm_name(&self, table: &str) -> Option<String> {
        let t: toml::Table = toml::from_str(table).ok()?;
        let vm = t.get("vm")?.as_array()?.first()?;
        Some(vm.get("name")?.as_str()?.to_string())
    }

    /// One `[[vm]]` table (`hvnet vm add`), checked as the file's VMs are
    /// and against them: a name of its own, and a MAC — the one it gives,
    /// else the one its place among every VM ever added gives.
    pub fn parse_vm(&self, table: &str) -> Result<Vm, VmTableError> {
        // The running topology's security groups, by name after the
        // table: its `security_groups` may name them (their rules are
        // the topology's).
        let groups: String = self
            .security_groups
            .iter()
            .map(|g| format!("\n[[security_group]]\nname = {:?}\n", g.name))
            .collect();
        let text = format!("name = {:?}\n{table}{groups}", self.name);
        let mut t = parse(&text).map_err(|e| {
            VmTableError::Table(ParseError {
                line: e.line.saturating_sub(1).max(1),
                ..e
            })
        })?;
        let [mut vm]: [Vm; 1] = t
            .vms
            .drain(..)
            .collect::<Vec<_>>()
            .try_into()
            .map_err(|_| VmTableError::NotOne)?;
        if self.vms.iter().any(|v| v.name == vm.name) {
            return Err(VmTableError::NameTaken(vm.name));
        }
        if !table.lines().any(|l| l.trim_start().starts_with("mac")) {
            let free = (self.vms.len()..)
                .map(|i| auto_mac(&self.name, 0, i))
                .find(|m| self.vms.iter().all(|v| v.mac != *m));
            vm.mac = free.expect("a free MAC");
        }
        if let Some(o) = self
            .vms
            .iter()
            .find(|v| v.mac == vm.mac && v.vlans().meets(&vm.vlans()))
        {
            return Err(VmTableError::MacTaken {
                name: vm.name,
                mac: vm.mac,
                other: o.name.clone(),
            });
        }
        if let Some(a) = &vm.attach {
            let same = |v: &&Vm| {
                v.attach
                    .as_ref()
                    .is_some_and(|b| b.netns == a.netns && b.ifname == a.ifname)
            };
            if let Some(o) = self.vms.iter().find(same) {
                return Err(VmTableError::InterfaceTaken {
                    name: vm.name,
                    ifname: a.ifname.clone(),
                    other: o.name.clone(),
                });
            }
        }
        Ok(vm)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{refused, GOOD};
    use super::*;

    /// `n` VMs with addresses in 198.18.0.0/15.
    fn many(n: usize) -> String {
        let mut t = String::from("name = \"many\"\n");
        for i in 0..n {
            t += &format!(
                "[[vm]]\nname = \"v{i}\"\nipv4 = \"198.18.{}.{}/15\"\n",
                i / 250,
                i % 250 + 1
            );
        }
        t
    }

    #[test]
    fn thousands_of_vms_each_with_a_mac_of_its_own_and_no_more_than_the_limit() {
        let t = parse(&many(MAX_VMS)).unwrap();
        let macs: std::collections::HashSet<_> = t.vms.iter().map(|v| v.mac).collect();
        assert_eq!(macs.len(), MAX_VMS);
        // The first VMs keep the addresses they always had.
        assert_eq!(t.vms[0].mac, auto_mac("many", 0, 0));
        assert_eq!(t.vms[0].mac.0[4..], [0, 1]);
        assert_eq!(t.vms[254].mac.0[4..], [0, 255]);
        let e = parse(&many(MAX_VMS + 1)).unwrap_err();
        assert_eq!(e.reason, format!("at most {MAX_VMS} VMs"));
        assert_eq!(
            (e.line, e.section),
            (2 + 3 * MAX_VMS, Some(Section::Vm(format!("v{MAX_VMS}")))),
            "the line and table of the first VM too many"
        );
    }

    #[test]
    fn a_table_for_a_running_topology_is_checked_against_its_vms() {
        let t = parse(GOOD).unwrap();
        let vm = t.parse_vm("[[vm]]\nname = \"vm3\"\n").unwrap();
        assert!(t.vms.iter().all(|v| v.mac != vm.mac), "a MAC of its own");
        assert_eq!(
            t.parse_vm("[[vm]]\nname = \"vm1\"\n"),
            Err(VmTableError::NameTaken("vm1".into()))
        );
        let mac = t.vms[1].mac;
        assert_eq!(
            t.parse_vm(&format!("[[vm]]\nname = \"vm3\"\nmac = \"{mac}\"\n")),
            Err(VmTableError::MacTaken {
                name: "vm3".into(),
                mac,
                other: "vm2".into()
            })
        );
        // The line is the table's (`hvnet vm add` names the setting on it).
        let e = t
            .parse_vm("[[vm]]\nname = \"vm3\"\nmtu = 99999\n")
            .unwrap_err();
        let VmTableError::Table(p) = &e else {
            panic!("{e:?}")
        };
        assert_eq!((p.line, &p.section), (3, &Some(Section::Vm("vm3".into()))));
        assert!(e.to_string().starts_with("line 3: vm \"vm3\": "), "{e}");
        assert_eq!(
            t.parse_vm("[[vm]]\nname = \"a\"\n[[vm]]\nname = \"b\"\n"),
            Err(VmTableError::NotOne)
        );
    }

    #[test]
    fn errors_name_the_line() {
        let bad_mtu = GOOD.replace("mtu = 9000", "mtu = 9001");
        let (line, reason) = refused(&bad_mtu);
        assert_eq!(line, 9, "{reason}");
        assert!(reason.contains("mtu 9001"), "{reason}");
        let unknown = GOOD.replace("lro = false", "lro = false\nspeed = 10");
        let (line, reason) = refused(&unknown);
        assert_eq!(line, 15, "{reason}");
        assert!(reason.contains("speed"), "{reason}");
        let dup = GOOD.replace("name = \"vm2\"", "name = \"vm1\"");
        assert!(refused(&dup).1.contains("duplicate"));
        let cidr = GOOD.replace("10.1.0.1/24", "10.1.0.1");
        assert_eq!(refused(&cidr).0, 5);
        let ring = GOOD.replace("queues = 4", "queues = 4\nring1 = 8192");
        assert!(refused(&ring).1.contains("ring1 8192 is outside 32..4096"));
        assert!(refused("name = \"x\"").1.contains("no [[vm]]"));
        assert!(parse("name = 3").is_err());
    }

    #[test]
    fn qemu_guests_take_an_accelerator_and_a_virtqueue_size() {
        let q = GOOD.replace(
            "name = \"vm1\"",
            "name = \"vm1\"\nkind = \"qemu\"\naccel = \"tcg\"\nring1 = 1024",
        );
        let t = parse(&q).unwrap();
        assert_eq!((t.vms[0].kind, t.vms[0].accel), (VmKind::Qemu, Accel::Tcg));
        assert!(t.vms[0].kind.started_by_hvnet() && !VmKind::VhostUser.started_by_hvnet());
        assert_eq!(t.vms[1].accel, Accel::Auto);
        let (line, reason) = refused(&q.replace("ring1 = 1024", "ring1 = 4096"));
        assert_eq!(line, 5);
        assert!(reason.contains("must be 256, 512 or 1024"), "{reason}");
        let (_, reason) = refused(&q.replace("kind = \"qemu\"\n", ""));
        assert!(reason.contains("accel is for kind = \"qemu\""), "{reason}");
        let (_, reason) = refused(&q.replace("\"tcg\"", "\"hvf\""));
        assert!(
            reason.contains("auto") && reason.contains("tcg"),
            "{reason}"
        );
    }

    #[test]
    fn packed_virtqueues_are_offered_by_kind_unless_set() {
        let vm = |kind: &str, extra: &str| {
            format!("name = \"t\"\n\n[[vm]]\nname = \"g\"\nkind = \"{kind}\"\n{extra}\n")
        };
        let packed = |kind: &str, extra: &str| parse(&vm(kind, extra)).unwrap().vms[0].packed;
        assert!(packed("vhost-user", ""));
        assert!(!packed("vhost-user", "packed = false"));
        assert!(!packed("qemu", ""));
        assert!(packed("qemu", "packed = true"));
        assert!(!packed("uml", ""));
        let (line, reason) = refused(&vm("uml", "packed = true"));
        assert_eq!(line, 3, "{reason}");
        assert!(reason.contains("base 0"), "{reason}");
        let (_, reason) = refused(&vm("netns", "packed = true"));
        assert!(reason.contains("real guests"), "{reason}");
    }

    #[test]
    fn a_vhost_user_vms_socket_is_checked_with_its_line() {
        let vm = |extra: &str| {
            format!("name = \"t\"\n\n[[vm]]\nname = \"g\"\nkind = \"vhost-user\"\n{extra}\n")
        };
        let t = parse(&vm("mode = \"client\"\nsocket = \"/run/qemu/g.sock\"")).unwrap();
        assert_eq!(t.vms[0].vhost.mode, hvnet_port::SocketMode::Client);
        let (line, reason) = refused(&vm("mode = \"client\""));
        assert_eq!(line, 3, "{reason}");
        assert!(reason.contains("needs socket"), "{reason}");
        let (_, reason) = refused(&vm("mode = \"both\""));
        assert!(
            reason.contains("server") && reason.contains("client"),
            "{reason}"
        );
        let (_, reason) = refused(&vm("socket_mode = \"0999\""));
        assert!(reason.contains("octal"), "{reason}");
        let two = format!(
            "{}[[vm]]\nname = \"h\"\nkind = \"vhost-user\"\nsocket = \"/run/x.sock\"\n",
            vm("socket = \"/run/x.sock\"")
        );
        assert!(refused(&two).1.contains("used twice"));
    }
}

#[cfg(test)]
mod vlan_tests {
    use super::super::tests::{refused, GOOD, UPLINK};
    use super::*;
    use hvnet_datapath::{VlanMode, VlanSet};

    /// GOOD with `keys` in vm1's table (line 5).
    fn vm1(keys: &str) -> String {
        GOOD.replace("name = \"vm1\"\n", &format!("name = \"vm1\"\n{keys}\n"))
    }

    #[test]
    fn one_mac_is_two_stations_in_two_vlans_and_a_conflict_in_one() {
        let clone = |vlan2: &str| {
            GOOD.replace(
                "name = \"vm1\"\n",
                "name = \"vm1\"\nmac = \"02:70:00:00:00:01\"\nvlan = 10\n",
            )
            .replace(
                "name = \"vm2\"\n",
                &format!("name = \"vm2\"\nmac = \"02:70:00:00:00:01\"\n{vlan2}\n"),
            )
        };
        let t = parse(&clone("vlan = 20")).unwrap();
        assert_eq!(t.vms[0].mac, t.vms[1].mac);
        let (line, reason) = refused(&clone("vlan = 10"));
        assert!(
            reason.contains("used twice in one VLAN"),
            "{line}: {reason}"
        );
        // A trunk carrying the other's VLAN shares its domain.
        let (_, reason) = refused(&clone("vlan_mode = \"trunk\"\nvlans = [10]"));
        assert!(reason.contains("\"vm1\" has it"), "{reason}");
    }

    #[test]
    fn a_trunk_takes_vlans_and_ranges_and_a_native_vlan() {
        let t = parse(&vm1(
            "vlan_mode = \"trunk\"\nvlans = [10, 20, \"100-199\"]\nnative_vlan = 5",
        ))
        .unwrap();
        let s = &t.vms[0].settings;
        assert_eq!(s.vlan_mode, VlanMode::Trunk);
        assert_eq!(s.vlans, VlanSet::parse("10,20,100-199").unwrap());
        assert_eq!(s.native_vlan, Some(5));
        assert_eq!(t.vms[0].vlan, 0);
        // No list (or an empty one): every VLAN; no native VLAN.
        for keys in ["vlan_mode = \"trunk\"", "vlan_mode = \"trunk\"\nvlans = []"] {
            let t = parse(&vm1(keys)).unwrap();
            assert!(t.vms[0].settings.vlans.is_all(), "{keys}");
            assert_eq!(t.vms[0].settings.native_vlan, None);
        }
        // Access stays the default, with its vlan.
        let t = parse(&vm1("vlan = 7")).unwrap();
        assert_eq!(
            (t.vms[0].vlan, t.vms[0].settings.vlan_mode),
            (7, VlanMode::Access)
        );
        let t = parse(&vm1("vlan_mode = \"access\"\nvlan = 7")).unwrap();
        assert_eq!(t.vms[0].vlan, 7);
    }

    #[test]
    fn rates_are_read_as_tc_writes_them_and_bad_ones_refused_with_the_line() {
        let t = parse(&vm1(
            "tx_rate = \"1gbit\"\ntx_burst = \"2mb\"\nrx_rate = 500000000",
        ))
        .unwrap();
        let s = &t.vms[0].settings;
        assert_eq!(
            (s.tx_rate.map(|r| r.0), s.tx_burst.map(|b| b.0)),
            (Some(1_000_000_000), Some(2 << 20))
        );
        assert_eq!(
            (s.rx_rate.map(|r| r.0), s.rx_burst),
            (Some(500_000_000), None)
        );
        for (keys, why) in [
            ("tx_rate = \"fast\"", "as tc writes it"),
            ("rx_rate = \"1gbps\"", "bit, kbit, mbit, gbit or tbit"),
            (
                "tx_rate = \"1gbit\"\ntx_burst = \"1kb\"",
                "at least one largest GSO frame",
            ),
            ("rx_burst = \"1mb\"", "rx_burst needs a rx_rate"),
        ] {
            let (line, reason) = refused(&vm1(keys));
            assert!(line >= 3, "{keys}: line {line}: {reason}");
            assert!(reason.contains(why), "{keys}: {reason}");
        }
    }

    #[test]
    fn bad_vlan_keys_are_refused_with_the_line_and_the_reason() {
        for (keys, why) in [
            ("vlan = 5000", "vlan 5000 is outside 0..4094"),
            (
                "vlan_mode = \"trunk\"\nvlans = [10, 5000]",
                "vlan 5000 is outside 1..4094",
            ),
            (
                "vlan_mode = \"trunk\"\nvlans = [0]",
                "vlan 0 is outside 1..4094",
            ),
            (
                "vlan_mode = \"trunk\"\nvlans = [\"100-5000\"]",
                "vlan 5000 is outside 1..4094",
            ),
            (
                "vlan_mode = \"trunk\"\nvlans = [\"200-100\"]",
                "vlans \"200-100\": 200 is above 100",
            ),
            (
                "vlan_mode = \"trunk\"\nvlans = [\"ten\"]",
                "vlans \"ten\" is not a VLAN id or a range low-high",
            ),
            (
                "vlan_mode = \"trunk\"\nnative_vlan = 4095",
                "native_vlan 4095 is outside 1..4094",
            ),
            (
                "vlan_mode = \"trunk\"\nnative_vlan = 0",
                "native_vlan 0 is outside 1..4094",
            ),
            (
                "vlan_mode = \"trunk\"\nvlan = 10",
                "vlan is an access port's VLAN; a trunk's untagged frames belong to its native_vlan",
            ),
            (
                "vlans = [10]",
                "vlans and native_vlan are a trunk's: set vlan_mode = \"trunk\"",
            ),
            ("native_vlan = 3", "vlans and native_vlan are a trunk's"),
            (
                "vlan_mode = \"hybrid\"",
                "vlan_mode \"hybrid\" is not \"access\" or \"trunk\"",
            ),
        ] {
            let (line, reason) = refused(&vm1(keys));
            assert_eq!(line, 5, "{keys}: {reason}");
            assert!(
                reason.starts_with("vm \"vm1\": ") && reason.contains(why),
                "{keys}: {reason}"
            );
        }
    }

    #[test]
    fn an_uplink_may_be_a_trunk_and_is_checked_the_same_way() {
        let up = |keys: &str| {
            format!(
                "{GOOD}{}",
                UPLINK.replace("name = \"up0\"\n", &format!("name = \"up0\"\n{keys}\n"))
            )
        };
        let t = parse(&up("vlan_mode = \"trunk\"\nvlans = [10, 20]")).unwrap();
        let u = &t.uplinks[0];
        assert_eq!(u.settings.vlan_mode, VlanMode::Trunk);
        assert_eq!(u.settings.vlans.to_string(), "10,20");
        // The access VMs of VLAN 0 share no VLAN with it; a trunk VM does.
        assert_eq!(t.vms_on(u).count(), 0);
        let (line, reason) = refused(&up("vlan_mode = \"trunk\"\nvlans = [4095]"));
        assert!(
            reason.contains("uplink \"up0\": vlan 4095 is outside 1..4094"),
            "{reason}"
        );
        assert_eq!(line, GOOD.lines().count() + 2, "{reason}");
    }
}

#[cfg(test)]
mod guard_tests {
    use super::super::tests::{refused, GOOD};
    use super::*;

    fn vm1(keys: &str) -> String {
        GOOD.replace("name = \"vm1\"\n", &format!("name = \"vm1\"\n{keys}\n"))
    }

    #[test]
    fn a_vms_addresses_are_its_ipv4_ipv6_and_addresses_and_its_guards_are_on() {
        let t = parse(&vm1(
            "ipv6 = \"fd10::1/64\"\naddresses = [\"10.1.0.50\", \"10.1.8.0/24\", \"10.1.0.1\"]",
        ))
        .unwrap();
        let s = &t.vms[0].settings;
        let shown: Vec<String> = s
            .addresses
            .entries()
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(shown, ["10.1.0.1", "fd10::1", "10.1.0.50", "10.1.8.0/24"]);
        assert!(s.source_guard && s.arp_guard && s.nd_guard && s.dhcp_guard && s.ra_guard);
        let t = parse(&vm1("dhcp_guard = false\nra_guard = \"off\"")).unwrap();
        let s = &t.vms[0].settings;
        assert!(!s.dhcp_guard && !s.ra_guard && s.source_guard);
    }

    #[test]
    fn addresses_that_cannot_apply_are_refused_with_the_line_and_the_reason() {
        for (keys, why) in [
            ("addresses = [\"10.1.0.7/24\"]", "has host bits set"),
            ("addresses = [\"ten\"]", "is not an IP address or prefix"),
            ("addresses = [\"ff02::1\"]", "is not a unicast address"),
        ] {
            let (line, reason) = refused(&vm1(keys));
            assert_eq!(line, 5, "{keys}: {reason}");
            assert!(reason.contains(why), "{keys}: {reason}");
        }
    }
}
