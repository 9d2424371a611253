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
    let mut f = [0u8; ADVERTISEMENT_FRAME];
    f[0..6].copy_from_slice(&dst_mac.0);
    f[6..12].copy_from_slice(&mac.0);
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    let ip = &mut f[14..];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&32u16.to_be_bytes());
    ip[6] = ICMPV6;
    ip[7] = 255;
    ip[8..24].copy_from_slice(&target);
    ip[24..40].copy_from_slice(&dst_ip);
    let icmp = &mut ip[40..];
    icmp[0] = ADVERTISEMENT;
    icmp[4] = 0x60; // solicited, override
    icmp[8..24].copy_from_slice(&target);
    icmp[24] = 2; // target link-layer address
    icmp[25] = 1; // 8 bytes
    icmp[26..32].copy_from_slice(&mac.0);
    let sum = pseudo_header_v6(target, dst_ip, ICMPV6, 32)
        .add_bytes(icmp)
        .finish();
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    f
}

/// The unsolicited advertisement `mac` sends for its own `target` to every
/// node (RFC 4861 §7.2.6: after its link changed, so that neighbours and
/// switches learn where it is now): to `ff02::1`, override set, solicited
/// and router flags clear, its link-layer address as the target option.
pub fn unsolicited_advertisement(mac: MacAddr, target: [u8; 16]) -> [u8; ADVERTISEMENT_FRAME] {
    const ALL_NODES: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let all_nodes_mac = MacAddr([0x33, 0x33, 0, 0, 0, 1]);
    let mut f = advertisement(mac, target, all_nodes_mac, ALL_NODES);
    let icmp = &mut f[14 + 40..];
    icmp[4] = 0x20; // override only
    icmp[2..4].fill(0);
    let sum = pseudo_header_v6(target, ALL_NODES, ICMPV6, 32)
        .add_bytes(icmp)
        .finish();
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    f
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
