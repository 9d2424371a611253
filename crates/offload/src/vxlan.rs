//! VXLAN encapsulation and decapsulation (RFC 7348) that keep the inner
//! frame's offload metadata.
//!
//! Encapsulation prepends outer Ethernet/IPv4/UDP/VXLAN headers. A partial
//! inner checksum stays partial (its start moves by the outer header
//! length) and a GSO inner frame stays GSO: segmentation, wherever it
//! happens, fixes outer lengths per segment. The outer UDP source port comes
//! from the inner flow's hash scaled into a port range, as Linux
//! `udp_flow_src_port` does, so one overlay tunnel still spreads its flows
//! over RSS queues. The outer UDP checksum is off by default over IPv4 (as in
//! Linux's vxlan driver); when on, and the inner checksum is partial, it is
//! computed without reading the payload (local checksum offload, Linux
//! `lco_csum`).

use crate::meta::{CsumState, OffloadInfo};
use hvnet_wire::checksum::Sum;
use hvnet_wire::checksum::{pseudo_header_v4, pseudo_header_v6};
use hvnet_wire::layers::Layers;
use hvnet_wire::{ipv4, ipv6, udp, vxlan, EtherType, EthernetFrame, EthernetRepr, MacAddr};
use std::net::IpAddr;

/// Outer header length for IPv4 underlay: Ethernet + IPv4 + UDP + VXLAN.
pub const OUTER_LEN: usize = 14 + 20 + 8 + 8;
/// Outer header length for IPv6 underlay: Ethernet + IPv6 + UDP + VXLAN.
pub const OUTER_LEN_V6: usize = 14 + 40 + 8 + 8;
/// The longer of the two: room for either.
pub const MAX_OUTER_LEN: usize = OUTER_LEN_V6;

/// The underlay end of a VXLAN tunnel.
#[derive(Clone, Debug)]
pub struct Tunnel {
    /// VXLAN network identifier (24 bits).
    pub vni: u32,
    /// Local (source) underlay address.
    pub local: IpAddr,
    /// Remote (destination) underlay address, of the same family.
    pub remote: IpAddr,
    /// Outer source MAC.
    pub src_mac: MacAddr,
    /// Outer destination MAC (the next hop).
    pub dst_mac: MacAddr,
    /// Outer UDP destination port.
    pub dst_port: u16,
    /// Outer UDP source ports are drawn from `[min, max)`.
    pub src_port_range: (u16, u16),
    /// Outer TTL (hop limit).
    pub ttl: u8,
    /// Compute the outer UDP checksum over IPv4. Over IPv6 it is always
    /// computed: a zero UDP checksum is refused there unless both ends
    /// agree (RFC 6935), and Linux's `vxlan` refuses it by default
    /// (`udp6zerocsumrx` off).
    pub udp_csum: bool,
    /// A traced frame's mark in its outer headers ([`OuterMark`]), for a
    /// far end that traces it too; none for every other frame.
    pub mark: Option<OuterMark>,
}

/// A mark a tunnel endpoint puts on a traced frame's outer headers where
/// every VXLAN endpoint ignores it (RFC 7348 endpoints drop frames with
/// reserved VXLAN bits set, so those are not used): its UDP source port
/// is one below the Linux range the flow hash picks from, and its token
/// is the outer IPv4 identification (the frames leave with DF set, so it
/// numbers no fragments) or the IPv6 flow label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OuterMark {
    /// What the marked frame is ([`MARK_TRACED`], [`MARK_SYNTHETIC`],
    /// [`MARK_REPORT`]): its UDP source port.
    pub kind: u16,
    /// Which trace (never 0).
    pub token: u16,
}

/// A traced frame, delivered as any other at the far end.
pub const MARK_TRACED: u16 = 32767;
/// A synthetic traced frame: the far end runs its decisions only.
pub const MARK_SYNTHETIC: u16 = 32766;
/// A far end's report of its part of a trace, to the endpoint that sent
/// the traced frame.
pub const MARK_REPORT: u16 = 32765;

impl OuterMark {
    /// The mark of an outer UDP source port and IP identification (or
    /// flow label), if they are one.
    pub fn read(src_port: u16, token: u32) -> Option<OuterMark> {
        let kind = [MARK_TRACED, MARK_SYNTHETIC, MARK_REPORT]
            .into_iter()
            .find(|k| *k == src_port)?;
        let token = u16::try_from(token).ok().filter(|t| *t != 0)?;
        Some(OuterMark { kind, token })
    }
}

impl Tunnel {
    /// A tunnel with Linux's defaults: port 4789, source ports 32768..61000,
    /// TTL 64, no outer UDP checksum over IPv4.
    pub fn new(vni: u32, local: impl Into<IpAddr>, remote: impl Into<IpAddr>) -> Tunnel {
        Tunnel {
            vni,
            local: local.into(),
            remote: remote.into(),
            src_mac: MacAddr([0x02, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([0x02, 0, 0, 0, 0, 2]),
            dst_port: vxlan::PORT,
            src_port_range: (32768, 61000),
            ttl: 64,
            udp_csum: false,
            mark: None,
        }
    }

    /// True over an IPv6 underlay.
    pub fn ipv6(&self) -> bool {
        self.local.is_ipv6()
    }

    /// The outer headers' length: [`OUTER_LEN`] or [`OUTER_LEN_V6`].
    pub fn outer_len(&self) -> usize {
        if self.ipv6() {
            OUTER_LEN_V6
        } else {
            OUTER_LEN
        }
    }

    /// Where the outer UDP header starts.
    pub fn outer_udp(&self) -> usize {
        self.outer_len() - 16
    }

    /// True when the outer UDP checksum is made (always over IPv6).
    pub fn outer_csum(&self) -> bool {
        self.udp_csum || self.ipv6()
    }

    /// The outer UDP pseudo-header sum for a UDP datagram of `udp_len`
    /// bytes.
    pub fn pseudo_header(&self, udp_len: usize) -> Sum {
        match (self.local, self.remote) {
            (IpAddr::V6(l), IpAddr::V6(r)) => {
                pseudo_header_v6(l.octets(), r.octets(), 17, udp_len as u32)
            }
            (IpAddr::V4(l), IpAddr::V4(r)) => {
                pseudo_header_v4(l.octets(), r.octets(), 17, udp_len as u32)
            }
            // Mixed families never make a tunnel (the topology refuses
            // them); an IPv4 sum of the mapped addresses keeps this total.
            (l, r) => pseudo_header_v4(v4_of(l), v4_of(r), 17, udp_len as u32),
        }
    }
}

fn v4_of(a: IpAddr) -> [u8; 4] {
    match a {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or([0; 4], |a| a.octets()),
    }
}

/// Why a frame could not be encapsulated or decapsulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VxlanError {
    /// The inner frame is malformed (its header stack did not parse).
    #[error("inner frame is malformed: {0}")]
    Malformed(hvnet_wire::Error),
    /// The frame is not VXLAN (not UDP to the VXLAN port, or no I flag).
    #[error("not a VXLAN frame")]
    NotVxlan,
    /// The encapsulated frame would exceed 65535 bytes of IP packet.
    #[error("encapsulated frame too large")]
    TooLarge,
    /// The tunnel's two ends are of different address families.
    #[error("the tunnel's local and remote addresses are of different families")]
    MixedFamilies,
    /// An inner frame given in two parts whose first is of odd length or
    /// does not hold the partial checksum's field.
    #[error("the inner frame's first part does not end after its headers at an even length")]
    BadSplit,
}

/// The outer UDP source port for an inner frame: its flow hash (RSS's
/// Toeplitz hash of the inner flow, [`crate::rss::Rss::hash`], or `None`
/// for a frame with no IP header: its Ethernet header is hashed instead)
/// scaled into `[min, max)` (Linux `udp_flow_src_port`).
pub fn source_port(hash: Option<u32>, inner: &[u8], range: (u16, u16)) -> u16 {
    let hash = hash.unwrap_or_else(|| fallback_hash(inner));
    let hash = hash ^ (hash << 16);
    let (min, max) = range;
    let span = max.saturating_sub(min) as u64;
    ((hash as u64 * span) >> 32) as u16 + min
}

fn fallback_hash(inner: &[u8]) -> u32 {
    // No IP header: hash the Ethernet header, as Linux does with `use_eth`.
    let n = inner.len().min(14);
    inner[..n].iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

/// True when an inner frame of `inner_len` bytes fits one outer IP packet
/// (its length field: the outer UDP and VXLAN headers and the inner frame,
/// and over IPv4 the IP header too; no jumbograms).
pub fn fits(ipv6: bool, inner_len: usize) -> bool {
    let udp_len = 8 + vxlan::HEADER_LEN + inner_len;
    udp_len + if ipv6 { 0 } else { 20 } <= 65535
}

/// Builds the outer headers for `inner` into `out` (at least
/// [`Tunnel::outer_len`] bytes: [`OUTER_LEN`] over IPv4, [`OUTER_LEN_V6`]
/// over IPv6) and returns the metadata of the encapsulated frame.
/// The caller sends `out` followed by `inner` (no copy of the inner frame).
/// `hash` is the inner frame's flow hash (Toeplitz, the default key: the
/// one RSS took, or took now from the header stack parsed where the frame
/// entered), for the outer source port: nothing of the inner frame is
/// parsed again.
pub fn encap_header(
    tunnel: &Tunnel,
    inner: &[u8],
    hash: Option<u32>,
    info: OffloadInfo,
    out: &mut [u8],
) -> Result<OffloadInfo, VxlanError> {
    encap_header_split(tunnel, (inner, &[]), hash, info, out)
}

/// [`encap_header`] for an inner frame in two parts, `head` then `rest`
/// (a tagged frame's headers without the tag, and its payload where it
/// lies): nothing of it is put together. `head` is of even length and
/// holds a partial inner checksum's field, if there is one.
pub fn encap_header_split(
    tunnel: &Tunnel,
    (head, rest): (&[u8], &[u8]),
    hash: Option<u32>,
    info: OffloadInfo,
    out: &mut [u8],
) -> Result<OffloadInfo, VxlanError> {
    let inner_len = head.len() + rest.len();
    if !rest.is_empty() && head.len() % 2 == 1 {
        return Err(VxlanError::BadSplit);
    }
    let outer_len = tunnel.outer_len();
    let at_udp = tunnel.outer_udp();
    let udp_len = outer_len - at_udp + inner_len;
    if !fits(tunnel.ipv6(), inner_len) {
        return Err(VxlanError::TooLarge);
    }
    let ethertype = match (tunnel.local, tunnel.remote) {
        (IpAddr::V4(local), IpAddr::V4(remote)) => {
            ipv4::Repr {
                src: local.octets(),
                dst: remote.octets(),
                protocol: 17,
                payload_len: udp_len,
                ttl: tunnel.ttl,
                tos: 0,
                ident: tunnel.mark.map_or(0, |m| m.token),
                dont_frag: true,
            }
            .emit(&mut ipv4::Packet::new_unchecked(&mut out[14..]));
            EtherType::Ipv4
        }
        (IpAddr::V6(local), IpAddr::V6(remote)) => {
            ipv6::Repr {
                src: local.octets(),
                dst: remote.octets(),
                next_header: 17,
                payload_len: udp_len,
                hop_limit: tunnel.ttl,
                traffic_class: 0,
                flow_label: tunnel.mark.map_or(0, |m| u32::from(m.token)),
            }
            .emit(&mut ipv6::Packet::new_unchecked(&mut out[14..]));
            EtherType::Ipv6
        }
        _ => return Err(VxlanError::MixedFamilies),
    };
    EthernetRepr {
        dst: tunnel.dst_mac,
        src: tunnel.src_mac,
        ethertype,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
    let sport = match tunnel.mark {
        Some(m) => m.kind,
        None => source_port(hash, head, tunnel.src_port_range),
    };
    {
        let mut u = udp::Packet::new_unchecked(&mut out[at_udp..]);
        u.set_src_port(sport);
        u.set_dst_port(tunnel.dst_port);
        u.set_len(udp_len as u16);
        u.set_checksum(0);
    }
    vxlan::Packet::new_unchecked(&mut out[at_udp + 8..]).emit(tunnel.vni);
    let csum = match info.csum {
        CsumState::Partial { start, offset } => CsumState::Partial {
            start: start + outer_len as u16,
            offset,
        },
        other => other,
    };
    if tunnel.outer_csum() {
        let ph = tunnel.pseudo_header(udp_len);
        let inner_sum = match info.csum {
            // LCO: once the inner checksum is filled in, the inner packet
            // from csum_start sums to the complement of the pseudo-header
            // value now in the field, so the payload need not be read.
            CsumState::Partial { start, offset } => {
                let (s, o) = (start as usize, offset as usize);
                let Some(f) = head.get(s + o..s + o + 2) else {
                    return Err(VxlanError::BadSplit);
                };
                let field = u16::from_be_bytes([f[0], f[1]]);
                Sum::ZERO.add_bytes(&head[..s]).add_u16(!field)
            }
            _ => Sum::ZERO.add_bytes(head).add_bytes(rest),
        };
        let c = ph
            .add_bytes(&out[at_udp..outer_len])
            .combine(inner_sum)
            .finish();
        udp::Packet::new_unchecked(&mut out[at_udp..]).set_checksum(if c == 0 {
            0xffff
        } else {
            c
        });
    }
    Ok(OffloadInfo {
        gso: info.gso,
        csum,
    })
}

/// [`encap_header`] into a new buffer, the outer headers and the inner
/// frame together (for the pcap tool and tests).
pub fn encap(
    tunnel: &Tunnel,
    inner: &[u8],
    hash: Option<u32>,
    info: OffloadInfo,
) -> Result<(Vec<u8>, OffloadInfo), VxlanError> {
    let mut hdr = [0u8; MAX_OUTER_LEN];
    let info = encap_header(tunnel, inner, hash, info, &mut hdr)?;
    Ok(([&hdr[..tunnel.outer_len()], inner].concat(), info))
}

/// A decapsulated frame: where the inner frame is and its metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decapped {
    /// Offset of the inner Ethernet frame.
    pub inner_offset: usize,
    /// End of the inner frame (the outer IP packet's end).
    pub inner_end: usize,
    /// The VNI.
    pub vni: u32,
    /// The inner frame's offload metadata.
    pub info: OffloadInfo,
    /// The inner frame's header stack (offsets from its Ethernet header,
    /// and VXLAN inside it found), or why it is malformed.
    pub layers: hvnet_wire::Result<Layers>,
}

/// Finds the inner frame of a VXLAN frame on UDP port `port` and carries
/// its metadata over. `l` is the frame's header stack as parsed where it
/// entered, on that port (`Layers::parse`, or `Layers::parse_on` at a
/// tunnel endpoint's own): the inner frame and its stack are the ones
/// parsed with the outer headers; a stack that found no VXLAN on `port`
/// is [`VxlanError::NotVxlan`].
pub fn decap(
    frame: &[u8],
    l: &Layers,
    info: OffloadInfo,
    port: u16,
) -> Result<Decapped, VxlanError> {
    let v = l
        .vxlan()
        .filter(|v| v.port == port)
        .ok_or(VxlanError::NotVxlan)?;
    let inner_offset = v.inner_offset as usize;
    let net = l.net().ok_or(VxlanError::NotVxlan)?;
    let vni = vxlan::Packet::new_unchecked(&frame[inner_offset - vxlan::HEADER_LEN..]).vni();
    let csum = match info.csum {
        CsumState::Partial { start, offset } if start as usize >= inner_offset => {
            CsumState::Partial {
                start: start - inner_offset as u16,
                offset,
            }
        }
        CsumState::Partial { .. } => CsumState::Unknown,
        other => other,
    };
    let inner = &frame[inner_offset..net.end.max(inner_offset)];
    // A VXLAN frame inside has headers not walked yet: the walk goes on
    // into them.
    let layers = v.inner().map(|il| il.with_vxlan(inner, vxlan::PORT));
    Ok(Decapped {
        inner_offset,
        inner_end: net.end,
        vni,
        info: OffloadInfo {
            gso: info.gso,
            csum,
        },
        layers,
    })
}

#[cfg(test)]
#[path = "vxlan_tests.rs"]
mod tests;
