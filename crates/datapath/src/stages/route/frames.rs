//! The frames the gateway reads and writes: a routed frame's headers
//! rewritten in place, and what the gateway sends itself (ARP replies and
//! requests, echo replies, ICMP time exceeded — RFC 792, RFC 1812 §4.3).

use hvnet_wire::checksum::{checksum, pseudo_header_v6, update_u16};
use hvnet_wire::{arp, nd, MacAddr};
use std::net::{Ipv4Addr, Ipv6Addr};

/// ICMP's protocol number.
pub(crate) const ICMP: u8 = 1;
/// The TTL of what the gateway sends.
const TTL: u8 = 64;

/// Rewrites a routed IPv4 frame's head in place: its MACs to `src` and
/// `dst`, its TTL one less and its header checksum updated to match
/// (RFC 1624), whatever the rest of the frame (a TSO frame's segments are
/// cut from this header later). `ip` is the IPv4 header's offset; the
/// caller checked the TTL is above 1.
pub(crate) fn route_ipv4(head: &mut [u8], ip: usize, src: MacAddr, dst: MacAddr) {
    head[0..6].copy_from_slice(&dst.0);
    head[6..12].copy_from_slice(&src.0);
    let old = u16::from_be_bytes([head[ip + 8], head[ip + 9]]);
    head[ip + 8] -= 1;
    let new = u16::from_be_bytes([head[ip + 8], head[ip + 9]]);
    let check = u16::from_be_bytes([head[ip + 10], head[ip + 11]]);
    head[ip + 10..ip + 12].copy_from_slice(&update_u16(check, old, new).to_be_bytes());
}

/// An IPv4 frame from `src` to `dst` (MACs and addresses) carrying ICMP
/// message `icmp` (its checksum filled in here).
fn icmp_frame(
    (src_mac, dst_mac): (MacAddr, MacAddr),
    (src, dst): (Ipv4Addr, Ipv4Addr),
    mut icmp: Vec<u8>,
) -> Vec<u8> {
    icmp[2..4].fill(0);
    let c = checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = Vec::with_capacity(34 + icmp.len());
    f.extend_from_slice(&dst_mac.0);
    f.extend_from_slice(&src_mac.0);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (20 + icmp.len()) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40; // Don't Fragment
    ip[8] = TTL;
    ip[9] = ICMP;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&icmp);
    f
}

/// ICMP time exceeded (type 11, code 0) from gateway `gw` (its MAC
/// `gw_mac`) for the IPv4 frame `frame` whose header is at `ip` (header
/// length `hlen`): back to its sender, quoting its header and 8 bytes.
pub(crate) fn time_exceeded(
    frame: &[u8],
    ip: usize,
    hlen: usize,
    gw: Ipv4Addr,
    gw_mac: MacAddr,
) -> Vec<u8> {
    let sender = MacAddr(frame[6..12].try_into().expect("6 bytes"));
    let src = Ipv4Addr::from(<[u8; 4]>::try_from(&frame[ip + 12..ip + 16]).expect("4 bytes"));
    let quoted = &frame[ip..frame.len().min(ip + hlen + 8)];
    let mut icmp = vec![11, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(quoted);
    icmp_frame((gw_mac, sender), (gw, src), icmp)
}

/// The echo reply to the echo request `frame` (IPv4 header at `ip`,
/// length `hlen`, ICMP to the packet's end `end`) sent to gateway `gw`;
/// `None` if it is no echo request.
pub(crate) fn echo_reply(
    frame: &[u8],
    ip: usize,
    hlen: usize,
    end: usize,
    gw_mac: MacAddr,
) -> Option<Vec<u8>> {
    let icmp = frame.get(ip + hlen..end)?;
    if icmp.len() < 8 || icmp[0] != 8 || icmp[1] != 0 {
        return None;
    }
    let sender = MacAddr(frame[6..12].try_into().ok()?);
    let src = Ipv4Addr::from(<[u8; 4]>::try_from(&frame[ip + 12..ip + 16]).ok()?);
    let dst = Ipv4Addr::from(<[u8; 4]>::try_from(&frame[ip + 16..ip + 20]).ok()?);
    let mut reply = icmp.to_vec();
    reply[0] = 0;
    Some(icmp_frame((gw_mac, sender), (dst, src), reply))
}

/// The gateway's ARP request for `target` in a segment where it is `gw`.
pub(crate) fn arp_request(gw: Ipv4Addr, gw_mac: MacAddr, target: Ipv4Addr) -> [u8; 14 + arp::LEN] {
    arp::Repr {
        op: arp::Operation::Request,
        sender_mac: gw_mac,
        sender_ip: gw.octets(),
        target_mac: MacAddr([0; 6]),
        target_ip: target.octets(),
    }
    .frame()
}

/// The gateway's reply to ARP request `req` for its address.
pub(crate) fn arp_reply(req: &arp::Repr, gw_mac: MacAddr) -> [u8; 14 + arp::LEN] {
    arp::Repr {
        op: arp::Operation::Reply,
        sender_mac: gw_mac,
        sender_ip: req.target_ip,
        target_mac: req.sender_mac,
        target_ip: req.sender_ip,
    }
    .frame()
}

/// Rewrites a routed IPv6 frame's head in place: its MACs, its hop limit
/// one less (IPv6 has no header checksum). The caller checked the hop
/// limit is above 1.
pub(crate) fn route_ipv6(head: &mut [u8], ip: usize, src: MacAddr, dst: MacAddr) {
    head[0..6].copy_from_slice(&dst.0);
    head[6..12].copy_from_slice(&src.0);
    head[ip + 7] -= 1;
}

/// Most of an offending packet an ICMPv6 error quotes (RFC 4443 §2.4: as
/// much as fits in the minimum MTU).
const QUOTE6: usize = 1280 - 40 - 8;

/// An IPv6 frame from `src` to `dst` carrying ICMPv6 message `icmp` (its
/// checksum filled in here).
fn icmp6_frame(
    (src_mac, dst_mac): (MacAddr, MacAddr),
    (src, dst): (Ipv6Addr, Ipv6Addr),
    mut icmp: Vec<u8>,
) -> Vec<u8> {
    icmp[2..4].fill(0);
    let sum = pseudo_header_v6(src.octets(), dst.octets(), nd::ICMPV6, icmp.len() as u32)
        .add_bytes(&icmp)
        .finish();
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut f = Vec::with_capacity(54 + icmp.len());
    f.extend_from_slice(&dst_mac.0);
    f.extend_from_slice(&src_mac.0);
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    let mut ip = [0u8; 40];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&(icmp.len() as u16).to_be_bytes());
    ip[6] = nd::ICMPV6;
    ip[7] = TTL;
    ip[8..24].copy_from_slice(&src.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&icmp);
    f
}

fn v6_at(frame: &[u8], at: usize) -> Option<Ipv6Addr> {
    Some(Ipv6Addr::from(
        <[u8; 16]>::try_from(frame.get(at..at + 16)?).ok()?,
    ))
}

/// ICMPv6 time exceeded (type 3, code 0) from gateway `gw` for the IPv6
/// frame `frame` (header at `ip`), back to its sender.
pub(crate) fn time_exceeded6(
    frame: &[u8],
    ip: usize,
    gw: Ipv6Addr,
    gw_mac: MacAddr,
) -> Option<Vec<u8>> {
    let sender = MacAddr(frame.get(6..12)?.try_into().ok()?);
    let src = v6_at(frame, ip + 8)?;
    let quoted = &frame[ip..frame.len().min(ip + QUOTE6)];
    let mut icmp = vec![3, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(quoted);
    Some(icmp6_frame((gw_mac, sender), (gw, src), icmp))
}

/// The echo reply to ICMPv6 echo request `frame` (IPv6 header at `ip`, a
/// bare header: ICMPv6 right after it, to `end`); `None` if it is none.
pub(crate) fn echo_reply6(frame: &[u8], ip: usize, end: usize, gw_mac: MacAddr) -> Option<Vec<u8>> {
    if frame.get(ip + 6) != Some(&nd::ICMPV6) {
        return None;
    }
    let icmp = frame.get(ip + 40..end)?;
    if icmp.len() < 8 || icmp[0] != 128 || icmp[1] != 0 {
        return None;
    }
    let sender = MacAddr(frame.get(6..12)?.try_into().ok()?);
    let (src, dst) = (v6_at(frame, ip + 8)?, v6_at(frame, ip + 24)?);
    let mut reply = icmp.to_vec();
    reply[0] = 129;
    Some(icmp6_frame((gw_mac, sender), (dst, src), reply))
}

/// The gateway's neighbour solicitation for `target` in a segment where
/// it is `gw`.
pub(crate) fn solicitation(gw: Ipv6Addr, gw_mac: MacAddr, target: Ipv6Addr) -> Vec<u8> {
    nd::solicitation(gw_mac, gw.octets(), target.octets()).to_vec()
}
