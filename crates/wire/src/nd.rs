//! IPv6 Neighbor Discovery (RFC 4861), as far as a switch answering for
//! remote addresses needs it: the target of a VM's neighbor solicitation,
//! and the solicited advertisement the owner of that address would send.

use crate::checksum::{pseudo_header_v6, verifies};
use crate::MacAddr;

/// ICMPv6's next-header value.
pub const ICMPV6: u8 = 58;
/// ICMPv6 type of a neighbor solicitation.
pub const SOLICITATION: u8 = 135;
/// ICMPv6 type of a neighbor advertisement.
pub const ADVERTISEMENT: u8 = 136;
/// Length of the advertisement frame [`advertisement`] builds: Ethernet,
/// IPv6, the advertisement and one target link-layer address option.
pub const ADVERTISEMENT_FRAME: usize = 14 + 40 + 24 + 8;

/// Length of the solicitation frame [`solicitation`] builds: Ethernet,
/// IPv6, the solicitation and one source link-layer address option.
pub const SOLICITATION_FRAME: usize = 14 + 40 + 24 + 8;

/// A neighbor solicitation from `src_mac`/`src_ip` for `target`, to its
/// solicited-node multicast group (how a tunnel endpoint resolves an IPv6
/// remote, as Linux's neighbour code does).
pub fn solicitation(
    src_mac: MacAddr,
    src_ip: [u8; 16],
    target: [u8; 16],
) -> [u8; SOLICITATION_FRAME] {
    let mut group = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
    group[13..].copy_from_slice(&target[13..]);
    let dst_mac = MacAddr([0x33, 0x33, group[12], group[13], group[14], group[15]]);
    // Flags clear; the source link-layer address option (type 1).
    message(
        SOLICITATION,
        0,
        (src_mac, src_ip),
        (dst_mac, group),
        target,
        1,
    )
}

/// One ND message of one 8-byte link-layer address option (`option`: 1
/// source, 2 target) carrying the sender's MAC, in its frame: hop limit
/// 255, the ICMPv6 checksum made.
fn message(
    kind: u8,
    flags: u8,
    (src_mac, src_ip): (MacAddr, [u8; 16]),
    (dst_mac, dst_ip): (MacAddr, [u8; 16]),
    target: [u8; 16],
    option: u8,
) -> [u8; ADVERTISEMENT_FRAME] {
    let mut f = [0u8; ADVERTISEMENT_FRAME];
    f[0..6].copy_from_slice(&dst_mac.0);
    f[6..12].copy_from_slice(&src_mac.0);
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    let ip = &mut f[14..];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&32u16.to_be_bytes());
    ip[6] = ICMPV6;
    ip[7] = 255;
    ip[8..24].copy_from_slice(&src_ip);
    ip[24..40].copy_from_slice(&dst_ip);
    let icmp = &mut ip[40..];
    icmp[0] = kind;
    icmp[4] = flags;
    icmp[8..24].copy_from_slice(&target);
    icmp[24] = option;
    icmp[25] = 1; // 8 bytes
    icmp[26..32].copy_from_slice(&src_mac.0);
    let sum = pseudo_header_v6(src_ip, dst_ip, ICMPV6, 32)
        .add_bytes(icmp)
        .finish();
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    f
}

/// The target of a well-formed neighbor advertisement `ip` (header
/// first: hop limit 255, code 0, checksum right, no extension headers) and
/// the link-layer address its option gives, if any.
pub fn advertised(ip: &[u8]) -> Option<([u8; 16], Option<MacAddr>)> {
    if ip.len() < 40 + 24 || ip[0] >> 4 != 6 || ip[6] != ICMPV6 || ip[7] != 255 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let icmp = ip.get(40..40 + len)?;
    if len < 24 || icmp[0] != ADVERTISEMENT || icmp[1] != 0 {
        return None;
    }
    let (src, dst): ([u8; 16], [u8; 16]) =
        (ip[8..24].try_into().ok()?, ip[24..40].try_into().ok()?);
    if !verifies(pseudo_header_v6(src, dst, ICMPV6, len as u32).add_bytes(icmp)) {
        return None;
    }
    let target: [u8; 16] = icmp[8..24].try_into().ok()?;
    // Options: type, length in units of 8 bytes; the target link-layer
    // address is type 2.
    let mut opts = &icmp[24..];
    while opts.len() >= 8 && opts[1] != 0 {
        let n = usize::from(opts[1]) * 8;
        if n > opts.len() {
            break;
        }
        if opts[0] == 2 {
            return Some((target, Some(MacAddr(opts[2..8].try_into().ok()?))));
        }
        opts = &opts[n..];
    }
    Some((target, None))
}

/// The address an IPv6 packet `ip` (header first) solicits, if it is a
/// well-formed neighbor solicitation (hop limit 255, code 0, checksum
/// right, no extension headers) from an address: a duplicate address
/// probe (from `::`) is not answered for the VM.
pub fn solicited_target(ip: &[u8]) -> Option<[u8; 16]> {
    if ip.len() < 40 + 24 || ip[0] >> 4 != 6 || ip[6] != ICMPV6 || ip[7] != 255 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let icmp = ip.get(40..40 + len)?;
    if len < 24 || icmp[0] != SOLICITATION || icmp[1] != 0 || ip[8..24] == [0; 16] {
        return None;
    }
    let (src, dst): ([u8; 16], [u8; 16]) =
        (ip[8..24].try_into().ok()?, ip[24..40].try_into().ok()?);
    if !verifies(pseudo_header_v6(src, dst, ICMPV6, len as u32).add_bytes(icmp)) {
        return None;
    }
    icmp[8..24].try_into().ok()
}

/// The solicited advertisement `mac` (owner of `target`) sends to the
/// soliciting VM (`dst_mac`, `dst_ip`): router flag clear, solicited and
/// override set, its link-layer address as the target option.
pub fn advertisement(
    mac: MacAddr,
    target: [u8; 16],
    dst_mac: MacAddr,
    dst_ip: [u8; 16],
) -> [u8; ADVERTISEMENT_FRAME] {
    // Solicited and override.
    solicited(0x60, mac, target, (dst_mac, dst_ip))
}

/// A solicited advertisement with `flags`: the target link-layer address
/// option.
fn solicited(
    flags: u8,
    mac: MacAddr,
    target: [u8; 16],
    (dst_mac, dst_ip): (MacAddr, [u8; 16]),
) -> [u8; ADVERTISEMENT_FRAME] {
    message(
        ADVERTISEMENT,
        flags,
        (mac, target),
        (dst_mac, dst_ip),
        target,
        2,
    )
}

/// The solicited advertisement a router (a gateway) sends for its own
/// `target`: as [`advertisement`], with the router flag set (RFC 4861
/// §4.4), so that hosts keep it as a router.
pub fn router_advertisement_reply(
    mac: MacAddr,
    target: [u8; 16],
    dst_mac: MacAddr,
    dst_ip: [u8; 16],
) -> [u8; ADVERTISEMENT_FRAME] {
    // Router, solicited and override.
    solicited(0xe0, mac, target, (dst_mac, dst_ip))
}

const _: () = assert!(SOLICITATION_FRAME == ADVERTISEMENT_FRAME);

/// The unsolicited advertisement `mac` sends for its own `target` to every
/// node (RFC 4861 §7.2.6: after its link changed, so that neighbours and
/// switches learn where it is now): to `ff02::1`, override set, solicited
/// and router flags clear, its link-layer address as the target option.
pub fn unsolicited_advertisement(mac: MacAddr, target: [u8; 16]) -> [u8; ADVERTISEMENT_FRAME] {
    const ALL_NODES: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let all_nodes = MacAddr([0x33, 0x33, 0, 0, 0, 1]);
    // Override only.
    message(
        ADVERTISEMENT,
        0x20,
        (mac, target),
        (all_nodes, ALL_NODES),
        target,
        2,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::Sum;

    fn solicitation(src: [u8; 16], target: [u8; 16]) -> Vec<u8> {
        let mut dst = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
        dst[13..].copy_from_slice(&target[13..]);
        let mut ip = vec![0u8; 40 + 32];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&32u16.to_be_bytes());
        ip[6] = ICMPV6;
        ip[7] = 255;
        ip[8..24].copy_from_slice(&src);
        ip[24..40].copy_from_slice(&dst);
        ip[40] = SOLICITATION;
        ip[48..64].copy_from_slice(&target);
        ip[64] = 1; // source link-layer address
        ip[65] = 1;
        let sum = pseudo_header_v6(src, dst, ICMPV6, 32)
            .add_bytes(&ip[40..])
            .finish();
        ip[42..44].copy_from_slice(&sum.to_be_bytes());
        ip
    }

    const VM: [u8; 16] = [0xfd, 0x60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const REMOTE: [u8; 16] = [0xfd, 0x60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    #[test]
    fn a_solicitation_built_here_is_read_and_answered() {
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        let f = super::solicitation(mac, VM, REMOTE);
        assert_eq!(&f[0..6], &[0x33, 0x33, 0xff, 0, 0, 2]);
        assert_eq!(solicited_target(&f[14..]), Some(REMOTE));
        let peer = MacAddr([2, 0, 0, 0, 0, 2]);
        let na = advertisement(peer, REMOTE, mac, VM);
        assert_eq!(advertised(&na[14..]), Some((REMOTE, Some(peer))));
        let mut bad = na;
        bad[14 + 40 + 10] ^= 1;
        assert_eq!(advertised(&bad[14..]), None, "checksum");
        assert_eq!(advertised(&f[14..]), None, "a solicitation");
    }

    #[test]
    fn a_solicitation_is_read_and_a_probe_or_a_lie_is_not() {
        assert_eq!(solicited_target(&solicitation(VM, REMOTE)), Some(REMOTE));
        assert_eq!(
            solicited_target(&solicitation([0; 16], REMOTE)),
            None,
            "duplicate address probe"
        );
        let mut bad = solicitation(VM, REMOTE);
        bad[50] ^= 1;
        assert_eq!(solicited_target(&bad), None, "checksum");
        let mut hop = solicitation(VM, REMOTE);
        hop[7] = 64;
        assert_eq!(solicited_target(&hop), None, "hop limit not 255");
        let mut long = solicitation(VM, REMOTE);
        long[4..6].copy_from_slice(&9000u16.to_be_bytes());
        assert_eq!(
            solicited_target(&long),
            None,
            "payload length past the packet"
        );
        for n in 0..long.len() {
            let _ = solicited_target(&solicitation(VM, REMOTE)[..n]);
        }
    }

    #[test]
    fn the_advertisement_checksums_and_says_who_owns_the_target() {
        let mac = MacAddr([2, 0xdd, 0, 0, 0, 2]);
        let f = advertisement(mac, REMOTE, MacAddr([2, 0, 0, 0, 0, 1]), VM);
        let ip = &f[14..];
        let sum = pseudo_header_v6(REMOTE, VM, ICMPV6, 32).add_bytes(&ip[40..]);
        assert!(verifies(sum), "{:04x}", Sum::fold(sum));
        assert_eq!(
            (ip[40], ip[44], &ip[48..64], &ip[66..72]),
            (ADVERTISEMENT, 0x60, &REMOTE[..], &mac.0[..])
        );
    }

    #[test]
    fn an_unsolicited_advertisement_goes_to_all_nodes_and_checksums() {
        let mac = MacAddr([2, 0xdd, 0, 0, 0, 2]);
        let f = unsolicited_advertisement(mac, VM);
        assert_eq!(&f[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
        let ip = &f[14..];
        let all = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!((&ip[8..24], &ip[24..40]), (&VM[..], &all[..]));
        let sum = pseudo_header_v6(VM, all, ICMPV6, 32).add_bytes(&ip[40..]);
        assert!(verifies(sum), "{:04x}", Sum::fold(sum));
        assert_eq!(
            (ip[40], ip[44]),
            (ADVERTISEMENT, 0x20),
            "override, not solicited"
        );
    }
}
