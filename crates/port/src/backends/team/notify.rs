//! "Notify switches" (vSphere's name for it): when a VM's traffic moves to
//! another member, the physical switches learn its new place from frames
//! the team sends for it there at once, rather than from its next frame —
//! a reverse-ARP announcement as a migrated guest's (QEMU's
//! `announce-self`), a gratuitous ARP for its IPv4 address and an
//! unsolicited neighbour advertisement for its IPv6 address, each in its
//! VLAN.

use super::policy::Placement;
use hvnet_wire::arp::{self, Operation};
use hvnet_wire::{nd, MacAddr};

/// The frames that announce `mac` (as `p` last saw it) on its new member.
pub fn announcements(mac: MacAddr, p: &Placement) -> Vec<Vec<u8>> {
    let mut out = vec![arp::rarp_announcement(mac).to_vec()];
    if let Some(ip) = p.ipv4 {
        let garp = arp::Repr {
            op: Operation::Request,
            sender_mac: mac,
            sender_ip: ip,
            target_mac: MacAddr([0; 6]),
            target_ip: ip,
        };
        out.push(garp.frame().to_vec());
    }
    if let Some(ip) = p.ipv6 {
        out.push(nd::unsolicited_advertisement(mac, ip).to_vec());
    }
    if let Some(vid) = p.tag.filter(|&v| v != 0) {
        for f in &mut out {
            let mut tag = [0x81, 0x00, 0, 0];
            tag[2..].copy_from_slice(&vid.to_be_bytes());
            f.splice(12..12, tag);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_moved_vm_is_announced_by_rarp_garp_and_na_in_its_vlan() {
        let mac = MacAddr([2, 0, 0, 0, 0, 5]);
        let mut p = Placement {
            home: 0,
            now: 1,
            frames: 0,
            bytes: 0,
            bytes_at_look: 0,
            tag: None,
            ipv4: Some([198, 18, 0, 5]),
            ipv6: Some([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5]),
            seen: Instant::now(),
        };
        let f = announcements(mac, &p);
        assert_eq!(f.len(), 3);
        assert_eq!(&f[0][12..14], &[0x80, 0x35]);
        assert_eq!(&f[1][12..14], &[0x08, 0x06]);
        assert_eq!(&f[1][14 + 14..14 + 18], &[198, 18, 0, 5], "sender IP");
        assert_eq!(&f[1][14 + 24..14 + 28], &[198, 18, 0, 5], "target IP");
        assert_eq!(&f[2][12..14], &[0x86, 0xdd]);
        p.tag = Some(10);
        p.ipv6 = None;
        let tagged = announcements(mac, &p);
        assert_eq!(tagged.len(), 2);
        assert!(tagged
            .iter()
            .all(|f| f[12..16] == [0x81, 0, 0, 10] && f[6..12] == mac.0));
    }
}
