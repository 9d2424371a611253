//! The receive half of each GRO layer: read one header, decide whether the
//! packet can take part in GRO at all, and record what the flow-matching
//! and merge steps need (Linux's `napi_gro_cb`).
//!
//! Layers are dispatched by EtherType and IP protocol with a `match`: the
//! set is closed (Ethernet, IPv4, IPv6, TCP, UDP→VXLAN), so static dispatch
//! keeps the per-packet path free of indirect calls, while each layer keeps
//! its own function, as `dev_add_offload`/`inet_add_offload` do in Linux.

use super::flow::{Cb, NetCb, OuterCb};
use super::PassReason;
use crate::meta::{CsumState, OffloadInfo};
use hvnet_wire::checksum;
use hvnet_wire::layers::{ip_protocol, Layers, NetKind};
use hvnet_wire::{ipv4, ipv6, tcp, udp, vxlan};

/// Most encapsulation levels followed (Linux caps recursion at 15 callbacks;
/// we follow one VXLAN level, which is all the switch produces).
pub const MAX_ENCAP_DEPTH: usize = 1;

/// False for a frame no table ever holds: not IP, or IP carrying neither
/// TCP nor UDP (which may hold a tunnel's TCP). [`GroTable::receive`]
/// passes such a frame on at once, its bytes and place unchanged and held
/// flows untouched, so a caller may pass it on itself, and keep no table
/// for a receiver that gets only such frames (a broadcast's copies).
/// (The table would mark a bad IPv4 header checksum `Bad` rather than
/// `Unknown`: the same, all-zero, virtio-net header on the way out.)
///
/// [`GroTable::receive`]: super::GroTable::receive
#[inline]
pub fn may_coalesce(layers: &Layers) -> bool {
    matches!(
        layers.ip_protocol(),
        Some(ip_protocol::TCP | ip_protocol::UDP)
    )
}

/// Runs the receive callbacks from the network layer down to TCP. `Err`
/// means the packet is passed up unchanged and held flows are not touched
/// (Linux's `goto out` paths with no `pp`).
///
/// Fills the GRO scratch state of a frame from its parsed header stack
/// (`layers`, from the one parser in `hvnet_wire`), adding only the checks
/// GRO makes beyond parsing (IPv4 options and header checksum, length
/// fields that disagree with the frame, the transport checksum).
pub fn parse(
    frame: &[u8],
    info: &OffloadInfo,
    layers: &Layers,
    max_header: usize,
) -> Result<Cb, PassReason> {
    let mut cb = Cb::empty();
    net_receive(frame, 0, layers, info, 0, &mut cb)?;
    if cb.payload_offset > max_header {
        return Err(PassReason::HeaderTooLong);
    }
    if info.gso.is_some() {
        // Only frames we coalesced ourselves are GSO; a guest's TSO frame is
        // untrusted (Linux marks it DODGY) and never merged.
        cb.flush = true;
    }
    Ok(cb)
}

/// The network layer of the stack `l`, whose offsets count from `base`
/// in `frame` (0, or the inner Ethernet header of a VXLAN packet).
fn net_receive(
    frame: &[u8],
    base: usize,
    l: &Layers,
    info: &OffloadInfo,
    depth: usize,
    cb: &mut Cb,
) -> Result<(), PassReason> {
    let Some(n) = l.net() else {
        return Err(PassReason::NotIp);
    };
    let net = NetCb {
        kind: n.kind,
        offset: base + n.offset,
        header_len: n.header_len,
    };
    let b = &frame[net.offset..];
    let flush = match n.kind {
        NetKind::Ipv4 => {
            let p = ipv4::Packet::new_unchecked(b);
            // inet_gro_receive: options, fragments and bad header checksums
            // never take part.
            if b[0] != 0x45 {
                return Err(PassReason::IpOptions);
            }
            if n.fragment {
                return Err(PassReason::Fragment);
            }
            if !ipv4_header_ok(b) {
                return Err(PassReason::BadChecksum);
            }
            // Total length must equal what is there (padding flushes), and
            // no flag but DF may be set.
            p.total_len() as usize != b.len() || p.flags_frag() & !ipv4::DF != 0
        }
        NetKind::Ipv6 => {
            // ipv6_gso_pull_exthdrs: extension headers were stepped over by
            // the parser (and must match byte for byte within a flow); a
            // fragment header stops GRO.
            if n.fragment {
                return Err(PassReason::Fragment);
            }
            let p = ipv6::Packet::new_unchecked(b);
            p.payload_len() as usize != b.len() - ipv6::HEADER_LEN
        }
    };
    // The innermost Ethernet header is the one recorded; an outer one is
    // found again from `OuterCb::net.offset`.
    cb.l2_len = l.l2_len();
    // A VXLAN frame's inner stack was parsed with the outer one.
    let known = l
        .vxlan()
        .map(|v| (base + v.inner_offset as usize, v.inner()));
    l4_receive(frame, net, n.protocol, flush, info, depth, known, cb)
}

/// The checksum of an option-less IPv4 header, as five 32-bit words
/// (`ip_fast_csum(iph, 5)`).
#[inline]
fn ipv4_header_ok(b: &[u8]) -> bool {
    let mut s: u64 = 0;
    for w in b[..20].chunks_exact(4) {
        s += u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    let s = (s >> 32) + (s & 0xffff_ffff);
    let s = (s >> 16) + (s & 0xffff);
    let s = (s >> 16) + (s & 0xffff);
    let s = (s >> 16) + (s & 0xffff);
    s == 0xffff
}

/// A VXLAN frame's inner Ethernet offset in the frame and its parsed
/// stack, as the outer stack carries them.
type KnownInner = Option<(usize, hvnet_wire::Result<Layers>)>;

#[allow(clippy::too_many_arguments)]
fn l4_receive(
    frame: &[u8],
    net: NetCb,
    proto: u8,
    flush: bool,
    info: &OffloadInfo,
    depth: usize,
    known: KnownInner,
    cb: &mut Cb,
) -> Result<(), PassReason> {
    match proto {
        ip_protocol::TCP => tcp_receive(frame, net, flush, info, cb),
        ip_protocol::UDP if depth < MAX_ENCAP_DEPTH => {
            udp_receive(frame, net, flush, info, depth, known, cb)
        }
        _ => Err(PassReason::NotTcp),
    }
}

fn tcp_receive(
    frame: &[u8],
    net: NetCb,
    flush: bool,
    info: &OffloadInfo,
    cb: &mut Cb,
) -> Result<(), PassReason> {
    let off = net.offset + net.header_len;
    let seg = &frame[off..];
    // tcp4_gro_receive: skip validation when the packet is flushed anyway.
    let csum = match info.csum {
        CsumState::Unknown if !flush => {
            if !checksum::verifies(
                net.pseudo_header(frame, ip_protocol::TCP, seg.len())
                    .add_bytes(seg),
            ) {
                return Err(PassReason::BadChecksum);
            }
            CsumState::Good
        }
        CsumState::Bad => return Err(PassReason::BadChecksum),
        other => other,
    };
    // tcp_gro_pull_header
    if seg.len() < tcp::HEADER_LEN {
        return Err(PassReason::Malformed);
    }
    let t = tcp::Packet::new_unchecked(seg);
    let thlen = t.header_len();
    if thlen < tcp::HEADER_LEN || thlen > seg.len() {
        return Err(PassReason::Malformed);
    }
    cb.net = net;
    cb.tcp_offset = off;
    cb.tcp_header_len = thlen;
    cb.payload_offset = off + thlen;
    cb.payload_len = seg.len() - thlen;
    cb.seq = t.seq();
    cb.flags = t.flags();
    cb.flush = flush;
    cb.csum = csum;
    Ok(())
}

fn udp_receive(
    frame: &[u8],
    net: NetCb,
    flush: bool,
    info: &OffloadInfo,
    depth: usize,
    known: KnownInner,
    cb: &mut Cb,
) -> Result<(), PassReason> {
    let off = net.offset + net.header_len;
    let seg = &frame[off..];
    if seg.len() < udp::HEADER_LEN + vxlan::HEADER_LEN {
        return Err(PassReason::NotTcp);
    }
    let u = udp::Packet::new_unchecked(seg);
    if u.dst_port() != vxlan::PORT {
        return Err(PassReason::NotTcp);
    }
    let udp_csum = u.checksum() != 0;
    if udp_csum && info.csum == CsumState::Unknown && !flush {
        let ok = checksum::verifies(
            net.pseudo_header(frame, ip_protocol::UDP, seg.len())
                .add_bytes(seg),
        );
        if !ok {
            return Err(PassReason::BadChecksum);
        }
    }
    if u.len() as usize != seg.len() {
        return Err(PassReason::Malformed);
    }
    if vxlan::Packet::new_checked(&seg[udp::HEADER_LEN..]).is_err() {
        return Err(PassReason::Malformed);
    }
    let inner_l2 = off + udp::HEADER_LEN + vxlan::HEADER_LEN;
    // The inner checksum is validated on its own: the outer one covers it
    // only when present.
    let inner_info = OffloadInfo {
        gso: None,
        csum: info.csum,
    };
    // The inner stack was parsed with the outer one, where the frame
    // entered. A stack parsed for VXLAN on another port (a tunnel
    // endpoint's own) has none for this frame: to it, this is plain UDP.
    let inner = match known {
        Some((at, inner)) if at == inner_l2 => inner.map_err(|_| PassReason::Malformed)?,
        _ => return Err(PassReason::NotTcp),
    };
    net_receive(frame, inner_l2, &inner, &inner_info, depth + 1, cb)?;
    cb.outer = Some(OuterCb {
        net,
        udp_offset: off,
        udp_csum,
        inner_l2,
    });
    cb.flush |= flush;
    Ok(())
}
