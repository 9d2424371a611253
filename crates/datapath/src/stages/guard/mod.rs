//! Guards against a VM that lies about who it is (docs/guide/guards.md):
//! IP source guard, ARP and ND inspection, the DHCP server guard and the
//! router-advertisement guard (RFC 6105), each a named drop. A pure
//! function of a frame from a VM's port, its parsed layers, the port's
//! MAC and settings, and which addresses other ports own; the worker
//! counts the answer.
//!
//! A family (IPv4, IPv6) is guarded at a port once the port has an
//! address of it: `ipv4`/`ipv6` in its topology or its `addresses`. A
//! port with none of a family is not held to addresses nobody told the
//! switch, but it still may not claim in ARP or ND an address another
//! port owns. A DHCP lease snooped for the port ([`crate::lease`]) is
//! one of its IPv4 addresses while it lasts.

use crate::counters::DropReason;
pub use crate::settings::values::{Addresses, Cidr, MAX_ADDRESSES};
use crate::settings::PortSettings;
use hvnet_wire::layers::Net;
use hvnet_wire::{arp, ip_protocol, nd, EtherType, Layers, MacAddr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

/// ICMPv6 types the guards read.
mod icmpv6 {
    pub const MLD_QUERY: u8 = 130;
    pub const MLD_REPORT: u8 = 131;
    pub const MLD_DONE: u8 = 132;
    pub const ROUTER_SOLICITATION: u8 = 133;
    pub const ROUTER_ADVERTISEMENT: u8 = 134;
    pub const NEIGHBOR_SOLICITATION: u8 = 135;
    pub const NEIGHBOR_ADVERTISEMENT: u8 = 136;
    pub const REDIRECT: u8 = 137;
    pub const MLD2_REPORT: u8 = 143;
}

/// UDP ports of DHCP servers and relays (what only they send from) and of
/// clients (what only servers and relays send to).
const DHCP4_SERVER: u16 = 67;
const DHCP4_CLIENT: u16 = 68;
const DHCP6_SERVER: u16 = 547;
const DHCP6_CLIENT: u16 = 546;

/// The EUI-64 link-local address Linux (and every guest left with
/// `addr_gen_mode` 0) makes from `mac` (RFC 4291 appendix A): always the
/// port's own where its IPv6 is guarded.
pub fn eui64_link_local(mac: MacAddr) -> Ipv6Addr {
    let m = mac.0;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 2,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}

/// The port a frame came from, as the guards see it.
pub struct PortView<'a, F: Fn(IpAddr) -> bool> {
    /// Its MAC address.
    pub mac: MacAddr,
    /// Its settings (which guards, its addresses).
    pub settings: &'a PortSettings,
    /// True for an address another port owns (its `ipv4`, `ipv6` or a
    /// single address in its `addresses`).
    pub owned_elsewhere: F,
    /// Now, for its DHCP leases (`settings.leases`).
    pub now: Instant,
}

impl<F: Fn(IpAddr) -> bool> PortView<'_, F> {
    /// True if the port may claim `ip` in ARP or ND: its own where its
    /// family is guarded, else anything no other port owns.
    fn may_claim(&self, ip: IpAddr) -> bool {
        if self.guarded(ip) {
            self.own(ip)
        } else {
            !(self.owned_elsewhere)(ip)
        }
    }
    fn guarded(&self, ip: IpAddr) -> bool {
        self.settings.addresses.guards_family_of(ip) || (ip.is_ipv4() && self.settings.leases.any())
    }
    fn own(&self, ip: IpAddr) -> bool {
        self.settings.addresses.contains(ip)
            || match ip {
                IpAddr::V4(v4) => self.settings.leases.holds(v4, self.now),
                IpAddr::V6(v6) => v6 == eui64_link_local(self.mac),
            }
    }
    /// True if any guard is on (a port with none pays one branch).
    pub fn any(&self) -> bool {
        any_on(self.settings)
    }
}

/// True if any of a port's guards is on (the `guard` stage is on its arc).
pub fn any_on(s: &PortSettings) -> bool {
    s.source_guard || s.arp_guard || s.nd_guard || s.dhcp_guard || s.ra_guard
}

/// True if [`inspect`] may read past a frame's headers (its payload must
/// be in place first: ARP, and ICMPv6 which carries ND and RAs).
pub fn reads_payload(layers: &Layers) -> bool {
    match layers.ethertype() {
        EtherType::Arp => true,
        EtherType::Ipv6 => layers.net().is_some_and(|n| n.protocol == nd::ICMPV6),
        _ => false,
    }
}

/// Passes a frame from a VM's port, or names the guard that drops it.
/// The first guard that refuses names the drop, in this order: DHCP
/// server, router advertisement, ARP or ND inspection, source.
pub fn inspect<F: Fn(IpAddr) -> bool>(
    frame: &[u8],
    layers: &Layers,
    port: &PortView<'_, F>,
) -> Result<(), DropReason> {
    match (layers.ethertype(), layers.net()) {
        (EtherType::Arp, _) if port.settings.arp_guard => arp_claim(frame, layers.l2_len(), port),
        (EtherType::Ipv4, Some(n)) => ipv4(frame, layers, n, port),
        (EtherType::Ipv6, Some(n)) => ipv6(frame, layers, n, port),
        _ => Ok(()),
    }
}

/// ARP inspection: the sender's addresses are the frame's own MAC and an
/// address the port may claim (or none: a probe, RFC 5227). Not
/// Ethernet/IPv4 ARP (or cut short): no host takes it, it passes.
fn arp_claim<F: Fn(IpAddr) -> bool>(
    frame: &[u8],
    at: usize,
    port: &PortView<'_, F>,
) -> Result<(), DropReason> {
    let Some(r) = frame
        .get(at..)
        .and_then(|b| arp::Packet::new_checked(b).ok())
        .and_then(|p| arp::Repr::parse(&p).ok())
    else {
        return Ok(());
    };
    let sender = Ipv4Addr::from(r.sender_ip);
    if r.sender_mac.0[..] != frame[6..12]
        || !(sender.is_unspecified() || port.may_claim(IpAddr::V4(sender)))
    {
        return Err(DropReason::ArpGuard);
    }
    Ok(())
}

fn udp_ports(frame: &[u8], layers: &Layers) -> Option<(u16, u16)> {
    let t = layers
        .transport()
        .filter(|t| t.protocol == ip_protocol::UDP)?;
    let h = frame.get(t.offset..t.offset + 4)?;
    Some((
        u16::from_be_bytes([h[0], h[1]]),
        u16::from_be_bytes([h[2], h[3]]),
    ))
}

fn ipv4<F: Fn(IpAddr) -> bool>(
    frame: &[u8],
    layers: &Layers,
    n: Net,
    port: &PortView<'_, F>,
) -> Result<(), DropReason> {
    let s = port.settings;
    let udp = udp_ports(frame, layers);
    if s.dhcp_guard && udp.is_some_and(|(sp, dp)| sp == DHCP4_SERVER || dp == DHCP4_CLIENT) {
        return Err(DropReason::DhcpGuard);
    }
    let Some(src) = frame.get(n.offset + 12..n.offset + 16) else {
        return Ok(());
    };
    let src = IpAddr::V4(Ipv4Addr::new(src[0], src[1], src[2], src[3]));
    if !s.source_guard || !port.guarded(src) || port.own(src) {
        return Ok(());
    }
    // A client without an address yet: DHCP discover and request; IGMP
    // reports a kernel sends before its address is set.
    const IGMP: u8 = 2;
    let unaddressed = udp == Some((DHCP4_CLIENT, DHCP4_SERVER)) || n.protocol == IGMP;
    if src.is_unspecified() && unaddressed {
        return Ok(());
    }
    Err(DropReason::SourceGuard)
}

fn ipv6<F: Fn(IpAddr) -> bool>(
    frame: &[u8],
    layers: &Layers,
    n: Net,
    port: &PortView<'_, F>,
) -> Result<(), DropReason> {
    let s = port.settings;
    let Some(src) = frame.get(n.offset + 8..n.offset + 24) else {
        return Ok(());
    };
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(src).expect("16 bytes"));
    // ICMPv6 read from its first bytes, within the IP packet; a fragment
    // is not looked into (hosts take no ND in fragments, RFC 6980).
    let icmp = (n.protocol == nd::ICMPV6 && !n.fragment)
        .then(|| frame.get(n.offset + n.header_len..n.end.min(frame.len())))
        .flatten()
        .filter(|b| !b.is_empty());
    let kind = icmp.map(|b| b[0]);
    if s.dhcp_guard
        && udp_ports(frame, layers).is_some_and(|(sp, dp)| sp == DHCP6_SERVER || dp == DHCP6_CLIENT)
    {
        return Err(DropReason::DhcpGuard);
    }
    if s.ra_guard && matches!(kind, Some(icmpv6::ROUTER_ADVERTISEMENT | icmpv6::REDIRECT)) {
        return Err(DropReason::RaGuard);
    }
    if let (true, Some(b)) = (s.nd_guard, icmp) {
        nd_claim(frame, b, src, port)?;
    }
    if !s.source_guard || !port.guarded(IpAddr::V6(src)) || port.own(IpAddr::V6(src)) {
        return Ok(());
    }
    // Duplicate address detection, MLD and router solicitation before
    // an address is ready (RFC 4862 §5.4.2, RFC 3810 §5.2.13).
    let before_address = matches!(
        kind,
        Some(
            icmpv6::NEIGHBOR_SOLICITATION
                | icmpv6::ROUTER_SOLICITATION
                | icmpv6::MLD_QUERY
                | icmpv6::MLD_REPORT
                | icmpv6::MLD_DONE
                | icmpv6::MLD2_REPORT
        )
    );
    if src.is_unspecified() && before_address {
        return Ok(());
    }
    Err(DropReason::SourceGuard)
}

/// ND inspection: an advertisement's target, and a solicitation's
/// source, are addresses the port may claim; the link-layer address an
/// option gives is the frame's own. Options malformed: dropped (a host
/// would drop them too, but not every host checks).
fn nd_claim<F: Fn(IpAddr) -> bool>(
    frame: &[u8],
    icmp: &[u8],
    src: Ipv6Addr,
    port: &PortView<'_, F>,
) -> Result<(), DropReason> {
    let claimed = match icmp[0] {
        icmpv6::NEIGHBOR_ADVERTISEMENT => {
            let t: [u8; 16] = icmp
                .get(8..24)
                .ok_or(DropReason::NdGuard)?
                .try_into()
                .expect("16 bytes");
            Some(Ipv6Addr::from(t))
        }
        icmpv6::NEIGHBOR_SOLICITATION if icmp.len() < 24 => return Err(DropReason::NdGuard),
        icmpv6::NEIGHBOR_SOLICITATION => (!src.is_unspecified()).then_some(src),
        _ => return Ok(()),
    };
    if claimed.is_some_and(|ip| !port.may_claim(IpAddr::V6(ip))) {
        return Err(DropReason::NdGuard);
    }
    // Options: type, length in 8-byte units; 1 and 2 carry a link-layer
    // address (source, target).
    let mut opts = &icmp[24..];
    while !opts.is_empty() {
        let len = usize::from(*opts.get(1).ok_or(DropReason::NdGuard)?) * 8;
        if len == 0 || len > opts.len() {
            return Err(DropReason::NdGuard);
        }
        if matches!(opts[0], 1 | 2) && opts[2..8] != frame[6..12] {
            return Err(DropReason::NdGuard);
        }
        opts = &opts[len..];
    }
    Ok(())
}

pub(crate) mod stage;
#[cfg(test)]
mod tests;
