//! `[[uplink]]`: the physical side, an existing interface, as a topology
//! file writes it (with its VXLAN tunnel endpoint, `[uplink.vxlan]`),
//! checked into an [`Uplink`].

use super::team::{parse_team, Team, TeamRepr};
use super::{
    check_name, d_mtu, d_ring, default_queues, line_of, parse_cidr4, parse_cidr6, ParseError,
    Section, Vm, SHADOW_PORT,
};
use hvnet_datapath::settings::validate_settings;
use hvnet_datapath::PortSettings;
use serde::Deserialize;
use std::net::IpAddr;

/// An `[[uplink]]` table as written.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct UplinkRepr {
    name: String,
    device: Option<toml::Spanned<String>>,
    devices: Option<toml::Spanned<Vec<String>>>,
    teaming: Option<toml::Spanned<String>>,
    order: Option<toml::Spanned<Vec<String>>>,
    failback: Option<toml::Spanned<bool>>,
    lacp_rate: Option<toml::Spanned<String>>,
    lacp_mode: Option<toml::Spanned<String>>,
    #[serde(default = "default_queues")]
    queues: usize,
    #[serde(default = "d_hardware")]
    lro: toml::Spanned<String>,
    #[serde(default = "d_hardware")]
    tso: toml::Spanned<String>,
    #[serde(default = "d_hardware")]
    csum: toml::Spanned<String>,
    #[serde(default = "d_mtu")]
    mtu: u16,
    vlan: Option<u16>,
    vlan_mode: Option<String>,
    vlans: Option<Vec<super::VlanItem>>,
    native_vlan: Option<i64>,
    #[serde(default = "d_ring")]
    ring1: usize,
    #[serde(default = "d_ring")]
    ring2: usize,
    #[serde(default, deserialize_with = "netqueue_mode")]
    netqueue: NetQueueMode,
    #[serde(default = "d_netqueue_threshold")]
    netqueue_threshold: u32,
    #[serde(default, deserialize_with = "hvnet_datapath::on_off")]
    rss: bool,
    #[serde(default = "d_read_batch")]
    batch: usize,
    #[serde(default)]
    rx_usecs: u32,
    capacity: Option<hvnet_datapath::rate::Rate>,
    vxlan: Option<toml::Spanned<VxlanRepr>>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct VxlanRepr {
    vni: u32,
    local: String,
    #[serde(default)]
    remotes: Vec<String>,
    #[serde(default = "d_vxlan_port")]
    port: u16,
    #[serde(default)]
    udp_csum: bool,
    #[serde(default, deserialize_with = "hvnet_datapath::on_off")]
    evpn: bool,
    /// More VLANs the tunnel carries: `{ 10 = 5010, 20 = 5020 }`.
    #[serde(default)]
    vlans: std::collections::BTreeMap<String, u32>,
    /// Who segments the VMs' TSO frames: "kernel" or "software".
    #[serde(default)]
    gso: Option<String>,
}

fn d_vxlan_port() -> u16 {
    hvnet_wire::vxlan::PORT
}

/// A field's default; errors about it point at its table's line.
fn d_hardware() -> toml::Spanned<String> {
    toml::Spanned::new(0..0, "hardware".into())
}

/// How an uplink's NetQueue places VM filters on its queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetQueueMode {
    /// No NetQueue: the queues are spread by hash.
    #[default]
    Off,
    /// Each VM's filter on a queue of its own, for good.
    Static,
    /// Filters packed on few queues and spread as load demands
    /// (the control crate's `balancer`).
    Dynamic,
}

fn d_netqueue_threshold() -> u32 {
    60
}

fn d_read_batch() -> usize {
    hvnet_port::uplink::READ_BATCH
}

/// `netqueue = true | false | "on" | "off" | "static" | "dynamic"`.
fn netqueue_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<NetQueueMode, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Bool(bool),
        Word(String),
    }
    match Repr::deserialize(d) {
        Ok(Repr::Bool(true)) => Ok(NetQueueMode::Static),
        Ok(Repr::Bool(false)) => Ok(NetQueueMode::Off),
        Ok(Repr::Word(w)) => match w.as_str() {
            "on" | "static" => Ok(NetQueueMode::Static),
            "off" => Ok(NetQueueMode::Off),
            "dynamic" => Ok(NetQueueMode::Dynamic),
            _ => Err(serde::de::Error::custom(format!(
                "{w:?} is not one of on, off, \"static\", \"dynamic\""
            ))),
        },
        Err(_) => Err(serde::de::Error::custom(
            "expected on, off, \"static\" or \"dynamic\"",
        )),
    }
}

/// Who coalesces what arrives from the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UplinkLro {
    /// The device's own GRO (a NIC's hardware LRO; on a veth, its GRO):
    /// frames reach the switch coalesced, with their GSO metadata.
    Hardware,
    /// hvnet's GRO at the uplink (a hypervisor's software LRO): the
    /// device's GRO off, what each receive queue reads in a batch
    /// coalesced before it is switched.
    Software,
    /// Nobody at the uplink: frames reach the switch as they crossed the
    /// wire (a VM's own LRO may still coalesce them on delivery).
    Off,
}

/// An uplink of a validated topology.
#[derive(Clone, Debug, PartialEq)]
pub struct Uplink {
    /// The port's name.
    pub name: String,
    /// The interface (a team's: its members joined by `+`, as its port's
    /// device is named).
    pub device: String,
    /// A team of devices (`devices = [..]`) instead of one.
    pub team: Option<Team>,
    /// Receive queues.
    pub queues: usize,
    /// Who coalesces at the uplink.
    pub lro: UplinkLro,
    /// Access VLAN.
    pub vlan: u16,
    /// The port's settings (`tso`: GSO frames go to the device whole).
    pub settings: PortSettings,
    /// When the uplink is a VXLAN tunnel endpoint: its settings.
    pub vxlan: Option<Vxlan>,
    /// Spread received frames by NetQueue's filters (each VM's MAC to a
    /// queue, the rest to queue 0) instead of by flow hash: each VM its
    /// own queue (static), or as a load balancer decides (dynamic).
    pub netqueue: NetQueueMode,
    /// Dynamic NetQueue: the share of a core (percent) a queue's thread
    /// may use before its filters are spread.
    pub netqueue_threshold: u32,
    /// Spread received frames by RSS (the Toeplitz hash of the flow)
    /// instead of by the kernel's flow hash.
    pub rss: bool,
    /// Frames read per system call where the queues are read in batches
    /// (a VXLAN endpoint whose frames fit a small buffer); 1: one frame
    /// per call, the per-packet API (NIC Technology in vSphere, Figure 10).
    pub batch: usize,
}

impl Uplink {
    /// True if VM `vm`'s port and this uplink carry a VLAN in common (the
    /// uplink then carries the VM's frames in it).
    pub fn shares_vlan_with(&self, vm: &Vm) -> bool {
        vm.vlans().meets(&self.settings.vlans_of(self.vlan))
    }

    /// Its devices: the one, or a team's members.
    pub fn devices(&self) -> Vec<&str> {
        match &self.team {
            Some(t) => t.devices.iter().map(String::as_str).collect(),
            None => vec![self.device.as_str()],
        }
    }
}

/// An uplink's VXLAN tunnel endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vxlan {
    /// VNI, 1..16777215.
    pub vni: u32,
    /// The endpoint's underlay address and prefix length: IPv4 or IPv6.
    pub local: (IpAddr, u8),
    /// Static remote endpoints (the flood list), of `local`'s family.
    pub remotes: Vec<IpAddr>,
    /// UDP port.
    pub port: u16,
    /// Outer UDP checksum.
    pub udp_csum: bool,
    /// Remote endpoints and MACs from BGP EVPN too, through FRR (see the
    /// control crate's `evpn`); the VMs' MACs and IPs advertised.
    pub evpn: bool,
    /// More VLANs the tunnel carries, each in a VNI of its own (VLAN,
    /// VNI); `vni` carries the uplink's own VLAN.
    pub vlans: Vec<(u16, u32)>,
    /// The VMs' TSO frames leave as tunnelled GSO frames, segmented by the
    /// kernel or the NIC (`gso = "kernel"`, the default, where the kernel
    /// takes them: Linux 6.17 and later); else the endpoint segments them
    /// (`"software"`).
    pub kernel_gso: bool,
}

/// What VXLAN takes from the underlay's MTU: outer IPv4, UDP and VXLAN
/// headers and the inner Ethernet header.
pub(super) const VXLAN_OVERHEAD: usize = 20 + 8 + 8 + 14;

impl Vxlan {
    /// What the tunnel takes from the underlay's MTU: 50 bytes over IPv4,
    /// 70 over IPv6.
    pub fn overhead(&self) -> usize {
        VXLAN_OVERHEAD + if self.local.0.is_ipv6() { 20 } else { 0 }
    }
}

/// Interface names the kernel takes: 1-15 bytes, no '/', ':' or space.
fn valid_ifname(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// The `[[uplink]]` tables, each checked (and against the VMs and the
/// uplinks before it) into an [`Uplink`]; errors carry the line of the
/// uplink's table, or of the field at fault where it was written.
pub(super) fn parse_uplinks(
    text: &str,
    reprs: &[toml::Spanned<UplinkRepr>],
    vms: &[Vm],
) -> Result<Vec<Uplink>, ParseError> {
    let mut out: Vec<Uplink> = Vec::new();
    for su in reprs {
        let line = line_of(text, su.span().start);
        let u = su.get_ref();
        let section = || Section::Uplink(u.name.clone());
        let bad = |r: String| ParseError::at(line, section(), r);
        // A field's own line where it was written, else the table's.
        let bad_at = |field: &toml::Spanned<String>, r: String| {
            let at = field.span();
            let l = if at.is_empty() {
                line
            } else {
                line_of(text, at.start)
            };
            ParseError::at(l, section(), r)
        };
        check_name(&u.name).map_err(bad)?;
        if vms.iter().any(|v| v.name == u.name) || out.iter().any(|o| o.name == u.name) {
            return Err(bad("a VM or another uplink has this name".into()));
        }
        let team_keys = TeamRepr {
            devices: u.devices.clone(),
            teaming: u.teaming.clone(),
            order: u.order.clone(),
            failback: u.failback.clone(),
            lacp_rate: u.lacp_rate.clone(),
            lacp_mode: u.lacp_mode.clone(),
        };
        let team = parse_team(&team_keys, valid_ifname).map_err(|(w, r)| {
            let l = w.map_or(line, |start| line_of(text, start));
            ParseError::at(l, section(), r)
        })?;
        let device = match (&u.device, &team) {
            (Some(d), None) => {
                if !valid_ifname(d.get_ref()) {
                    return Err(bad_at(d, format!(
                        "device {:?} is not an interface name (1-15 characters of a-z, A-Z, 0-9, '-', '_', '.')",
                        d.get_ref()
                    )));
                }
                d.get_ref().clone()
            }
            (None, Some(t)) => t.devices.join("+"),
            (Some(d), Some(_)) => {
                return Err(bad_at(
                    d,
                    "device and devices both given: a team lists its members in devices only"
                        .into(),
                ))
            }
            (None, None) => {
                return Err(bad(
                    "no device: give device = \"..\" (or devices = [..] for a team)".into(),
                ))
            }
        };
        let mine: Vec<&str> = match &team {
            Some(t) => t.devices.iter().map(String::as_str).collect(),
            None => vec![device.as_str()],
        };
        for d in &mine {
            if let Some(o) = out.iter().find(|o| o.devices().contains(d)) {
                let r = format!("device {d} has another uplink ({})", o.name);
                return Err(match &u.device {
                    Some(at) => bad_at(at, r),
                    None => bad(r),
                });
            }
        }
        let lro = match u.lro.get_ref().as_str() {
            "hardware" => UplinkLro::Hardware,
            "off" => UplinkLro::Off,
            "software" => UplinkLro::Software,
            o => {
                return Err(bad_at(
                    &u.lro,
                    format!("lro {o:?} is not one of \"hardware\", \"software\", \"off\""),
                ))
            }
        };
        // Who does an offload: the device ("hardware": true) or hvnet.
        let by_device = |field: &toml::Spanned<String>, name: &str| match field.get_ref().as_str() {
            "hardware" => Ok(true),
            "software" => Ok(false),
            o => Err(bad_at(
                field,
                format!("{name} {o:?} is not one of \"hardware\", \"software\""),
            )),
        };
        let tso = by_device(&u.tso, "tso")?;
        let csum = by_device(&u.csum, "csum")?;
        if !(1..=16).contains(&u.queues) {
            return Err(bad(format!("queues {} is outside 1..16", u.queues)));
        }
        let (vlan, vlans) = super::check_vlans(
            u.vlan,
            u.vlan_mode.as_deref(),
            u.vlans.as_deref(),
            u.native_vlan,
        )
        .map_err(bad)?;
        let mut settings = PortSettings {
            // At an uplink, `lro` is software LRO at its ingress.
            lro: lro == UplinkLro::Software,
            tso,
            // "software": checksums completed before the wire and checked
            // in hvnet on receive, the device's word not taken.
            csum,
            mtu: u.mtu,
            ring1: u.ring1,
            ring2: u.ring2,
            // The wire carries every host's addresses.
            allow_forged_transmits: true,
            rx_usecs: u.rx_usecs,
            capacity: u.capacity,
            ..vlans
        };
        validate_settings(&settings).map_err(|e| bad(e.to_string()))?;
        let vxlan = match &u.vxlan {
            None => None,
            Some(sv) => {
                let vline = line_of(text, sv.span().start);
                let vbad = |r: String| ParseError::at(vline, Section::Vxlan(u.name.clone()), r);
                let v = sv.get_ref();
                if !(1..(1 << 24)).contains(&v.vni) {
                    return Err(vbad(format!("vni {} is outside 1..16777215", v.vni)));
                }
                if v.port == 0 {
                    return Err(vbad("port 0 is not a UDP port (1..65535)".into()));
                }
                let local: (IpAddr, u8) = if v.local.contains(':') {
                    parse_cidr6(&v.local).map(|(a, l)| (a.into(), l))
                } else {
                    parse_cidr4(&v.local).map(|(a, l)| (a.into(), l))
                }
                .map_err(|e| vbad(format!("local: {e}")))?;
                let family = if local.0.is_ipv6() { "IPv6" } else { "IPv4" };
                let remotes = v
                    .remotes
                    .iter()
                    .map(|r| {
                        r.parse::<IpAddr>()
                            .ok()
                            .filter(|a| a.is_ipv6() == local.0.is_ipv6())
                            .ok_or_else(|| {
                                vbad(format!(
                                    "remote {r:?} is not an {family} address (local is {family})"
                                ))
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if remotes.contains(&local.0) {
                    return Err(vbad("a remote is the local address".into()));
                }
                if v.evpn && v.port == SHADOW_PORT {
                    return Err(vbad(format!(
                        "port {} is the port of the EVPN shadow device; choose another",
                        v.port
                    )));
                }
                if local.0.is_ipv6() {
                    if v.evpn {
                        return Err(vbad("evpn over an IPv6 underlay: not supported yet (FRR 8.4's EVPN advertises IPv4 VTEPs)".into()));
                    }
                    if u.rss || u.netqueue != NetQueueMode::Off {
                        return Err(vbad("rss and netqueue over an IPv6 underlay: not supported yet (their kernel programs read an IPv4 outer header); use queues = 1".into()));
                    }
                }
                let kernel_gso = match v.gso.as_deref() {
                    None | Some("kernel") => true,
                    Some("software") => false,
                    Some(other) => {
                        return Err(vbad(format!(
                            "gso {other:?}: allowed values are \"kernel\" (tunnelled GSO frames to the kernel, the default) and \"software\" (segmented by hvnet)"
                        )))
                    }
                };
                let mut vlans = Vec::new();
                for (key, &vni) in &v.vlans {
                    let id = key
                        .parse::<u16>()
                        .ok()
                        .filter(|id| (1..=4094).contains(id))
                        .ok_or_else(|| vbad(format!("vlans: VLAN {key:?} is outside 1..4094")))?;
                    if !(1..(1 << 24)).contains(&vni) {
                        return Err(vbad(format!(
                            "vlans: VNI {vni} (VLAN {id}) is outside 1..16777215"
                        )));
                    }
                    if vni == v.vni || vlans.iter().any(|&(_, n)| n == vni) {
                        return Err(vbad(format!(
                            "vlans: VNI {vni} carries two VLANs (the uplink's own, vni, is {})",
                            v.vni
                        )));
                    }
                    if id == vlan {
                        return Err(vbad(format!(
                            "vlans: VLAN {id} is the uplink's own (vlan), which vni {} carries",
                            v.vni
                        )));
                    }
                    vlans.push((id, vni));
                }
                if !vlans.is_empty() {
                    if u.vlan_mode.is_some() || u.vlans.is_some() || u.native_vlan.is_some() {
                        return Err(vbad("vlans makes the uplink a trunk of those VLANs (its own, vlan, untagged): give it no vlan_mode, vlans or native_vlan".into()));
                    }
                    if vlan == 0 {
                        return Err(vbad("vlans needs the uplink's own VLAN (vlan, 1..4094): the one vni carries".into()));
                    }
                    // The switch's side of it: a trunk of those VLANs whose
                    // native VLAN is the uplink's own; the endpoint turns
                    // each tag into its VNI and back.
                    let ranges: Vec<(u16, u16)> = vlans.iter().map(|&(id, _)| (id, id)).collect();
                    settings.vlan_mode = hvnet_datapath::VlanMode::Trunk;
                    settings.vlans = hvnet_datapath::VlanSet::from_ranges(&ranges);
                    settings.native_vlan = Some(vlan);
                }
                Some(Vxlan {
                    vni: v.vni,
                    local,
                    remotes,
                    port: v.port,
                    udp_csum: v.udp_csum,
                    evpn: v.evpn,
                    vlans,
                    kernel_gso,
                })
            }
        };
        if u.netqueue != NetQueueMode::Off && u.queues < 2 {
            return Err(bad(
                "netqueue needs queues = 2 or more (queue 0 is the default queue)".into(),
            ));
        }
        if !(1..=100).contains(&u.netqueue_threshold) {
            return Err(bad(format!(
                "netqueue_threshold {} is outside 1..100 (percent of a core)",
                u.netqueue_threshold
            )));
        }
        if u.netqueue != NetQueueMode::Off && u.rss {
            return Err(bad(
                "netqueue and rss both spread the queues; choose one (netqueue = true or rss = true)"
                    .into(),
            ));
        }
        if !(1..=hvnet_port::uplink::READ_BATCH).contains(&u.batch) {
            return Err(bad(format!(
                "batch {} is outside 1..{} (frames per system call)",
                u.batch,
                hvnet_port::uplink::READ_BATCH
            )));
        }
        out.push(Uplink {
            batch: u.batch,
            netqueue: u.netqueue,
            netqueue_threshold: u.netqueue_threshold,
            rss: u.rss,
            vxlan,
            name: u.name.clone(),
            device,
            team,
            queues: u.queues,
            lro,
            vlan,
            settings,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::{refused, GOOD, UPLINK};
    use super::super::Section;
    use super::*;

    #[test]
    fn a_tunnel_of_several_vlans_is_a_trunk_of_them() {
        let vx = |vlan: &str, extra: &str, vlans: &str| {
            parse(&format!(
                "{GOOD}{}{extra}\n[uplink.vxlan]\nvni = 7\nlocal = \"10.9.0.1/24\"\nvlans = {vlans}\n",
                UPLINK.replace("queues = 2", &format!("queues = 2\n{vlan}"))
            ))
        };
        let t = vx("vlan = 5", "", "{ 10 = 5010, 20 = 5020 }").unwrap();
        let u = &t.uplinks[0];
        assert_eq!(
            u.vxlan.as_ref().unwrap().vlans,
            vec![(10, 5010), (20, 5020)]
        );
        assert_eq!(u.settings.vlan_mode, hvnet_datapath::VlanMode::Trunk);
        assert_eq!(u.settings.native_vlan, Some(5));
        assert!(u.settings.vlans.contains(10) && u.settings.vlans.contains(20));
        assert!(!u.settings.vlans.contains(30));
        let bad = |vlan: &str, extra: &str, vlans: &str, why: &str| {
            let e = vx(vlan, extra, vlans).unwrap_err();
            assert_eq!(e.section, Some(Section::Vxlan("up0".into())), "{e}");
            assert!(e.reason.contains(why), "{vlans}: {e}");
            assert!(
                e.to_string().starts_with("uplink \"up0\": vxlan: vlans"),
                "{e}"
            );
        };
        bad(
            "vlan = 5",
            "",
            "{ 5000 = 5010 }",
            "VLAN \"5000\" is outside 1..4094",
        );
        bad("vlan = 5", "", "{ 10 = 16777216 }", "outside 1..16777215");
        bad("vlan = 5", "", "{ 10 = 7 }", "carries two VLANs");
        bad("vlan = 5", "", "{ 10 = 9, 20 = 9 }", "carries two VLANs");
        bad("vlan = 5", "", "{ 5 = 9 }", "is the uplink's own");
        bad("", "", "{ 10 = 9 }", "needs the uplink's own VLAN");
        bad(
            "vlan_mode = \"trunk\"",
            "",
            "{ 10 = 9 }",
            "give it no vlan_mode",
        );
    }

    #[test]
    fn a_tunnel_over_ipv6_and_its_gso() {
        let vx = |body: &str| {
            parse(&format!(
                "{GOOD}{}\n[uplink.vxlan]\nvni = 7\n{body}",
                UPLINK.replace("queues = 2", "queues = 1")
            ))
        };
        let t = vx("local = \"2001:db8::1/64\"\nremotes = [\"2001:db8::2\"]").unwrap();
        let v = t.uplinks[0].vxlan.as_ref().unwrap();
        assert_eq!(v.local, ("2001:db8::1".parse().unwrap(), 64));
        assert_eq!((v.overhead(), v.kernel_gso), (70, true));
        let reason = |body: &str| vx(body).unwrap_err().to_string();
        assert!(
            reason("local = \"2001:db8::1/64\"\nremotes = [\"10.0.0.2\"]")
                .contains("not an IPv6 address (local is IPv6)"),
        );
        assert!(reason("local = \"2001:db8::1/64\"\nevpn = true").contains("IPv6 underlay"));
        assert!(
            reason("local = \"10.9.0.1/24\"\ngso = \"hardware\"").contains(
                "\"kernel\" (tunnelled GSO frames to the kernel, the default) and \"software\""
            )
        );
        let sw = vx("local = \"10.9.0.1/24\"\ngso = \"software\"").unwrap();
        assert!(!sw.uplinks[0].vxlan.as_ref().unwrap().kernel_gso);
    }

    #[test]
    fn uplinks_are_read_and_checked_with_their_line() {
        let t = parse(&format!("{GOOD}{UPLINK}")).unwrap();
        let u = &t.uplinks[0];
        assert_eq!(
            (u.name.as_str(), u.device.as_str(), u.queues),
            ("up0", "hvx0", 2)
        );
        assert_eq!(u.lro, UplinkLro::Off);
        assert!(!u.settings.tso && !u.settings.lro && u.settings.allow_forged_transmits);
        let err = |from: &str, to: &str| refused(&format!("{GOOD}{}", UPLINK.replace(from, to)));
        let (line, reason) = err("lro = \"off\"", "lro = \"maybe\"");
        assert_eq!(line, 20, "the lro line: {reason}");
        assert!(
            reason.contains("\"hardware\", \"software\", \"off\""),
            "{reason}"
        );
        assert!(err("tso = \"software\"", "tso = \"on\"")
            .1
            .contains("\"hardware\", \"software\""));
        let (line, reason) = err(
            "tso = \"software\"",
            "tso = \"software\"\ncsum = \"partial\"",
        );
        assert_eq!(line, 22, "the csum line: {reason}");
        assert!(
            reason.contains("csum \"partial\" is not one of"),
            "{reason}"
        );
        assert!(u.settings.csum, "the device checksums by default");
        let vx = |port: &str| {
            parse(&format!(
                "{GOOD}{UPLINK}\n[uplink.vxlan]\nvni = 7\nlocal = \"10.9.0.1/24\"\n{port}"
            ))
        };
        assert_eq!(
            vx("port = 8472").unwrap().uplinks[0]
                .vxlan
                .as_ref()
                .unwrap()
                .port,
            8472
        );
        assert!(vx("port = 0").unwrap_err().reason.contains("port 0"));
        assert_eq!(
            parse(&format!(
                "{GOOD}{}",
                UPLINK.replace("queues = 2", "queues = 2\nbatch = 4")
            ))
            .unwrap()
            .uplinks[0]
                .batch,
            4
        );
        assert!(err("queues = 2", "queues = 2\nbatch = 0")
            .1
            .contains("batch 0 is outside 1..32"));
        let sw = parse(&format!(
            "{GOOD}{}",
            UPLINK.replace("lro = \"off\"", "lro = \"software\"")
        ))
        .unwrap();
        assert_eq!(sw.uplinks[0].lro, UplinkLro::Software);
        assert!(
            sw.uplinks[0].settings.lro,
            "software LRO at the uplink's ingress"
        );
        assert!(err("device = \"hvx0\"", "device = \"../x\"")
            .1
            .contains("not an interface name"));
        assert!(err("name = \"up0\"", "name = \"vm2\"")
            .1
            .contains("a VM or another uplink"));
    }
}
