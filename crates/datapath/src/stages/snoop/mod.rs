//! What a group frame is to snooping, as a pure function of the packet
//! and the headers found when it was parsed: a membership message (IGMP,
//! MLD) to read, a malformed one to drop, a frame to an IP group to
//! deliver by the multicast database ([`crate::mdb`]), or something that
//! is flooded as ever (not IP, broadcast, a link-local group).

#[cfg(test)]
mod snoop_tests;

pub(crate) mod stage;

use crate::counters::DropReason;
use hvnet_port::Packet;
use hvnet_wire::membership::{is_link_local, Message};
use hvnet_wire::{igmp, mld, nd::ICMPV6, EtherType};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The ports a frame goes to.
pub type Targets = smallvec::SmallVec<[usize; 16]>;

/// Where snooping sends a group frame.
#[derive(Debug)]
pub enum Snooped {
    /// To every port of its VLAN, as without snooping.
    Flood,
    /// To these ports (members, router ports) only; `report` for a
    /// membership message, which no port may need.
    To {
        /// The ports.
        ports: Targets,
        /// It is a membership report.
        report: bool,
    },
    /// Nowhere: dropped and counted.
    Dropped,
}

/// A group frame, as snooping sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupFrame<'a> {
    /// Flooded: not an IP group frame, or one to a link-local group.
    Flood,
    /// An IGMP or MLD message from IP address `src`.
    Membership {
        /// The message.
        msg: Message<'a>,
        /// Its sender's address.
        src: IpAddr,
    },
    /// A malformed IGMP or MLD message: dropped, as the Linux bridge
    /// drops them.
    Bad(DropReason),
    /// A frame to group `group` (not link-local).
    Data(IpAddr),
}

/// What `pkt` (to a group MAC address) is to snooping.
pub fn classify(pkt: &Packet) -> GroupFrame<'_> {
    let l = &pkt.meta.layers;
    let Some(n) = l.net() else {
        return GroupFrame::Flood;
    };
    let f = pkt.frame();
    let ip = &f[n.offset..n.end.min(f.len())];
    let body = f.get(n.offset + n.header_len..n.end).unwrap_or(&[]);
    let (src, dst) = match l.ethertype() {
        EtherType::Ipv4 if ip.len() >= 20 => {
            let a = |at: usize| Ipv4Addr::new(ip[at], ip[at + 1], ip[at + 2], ip[at + 3]);
            (IpAddr::V4(a(12)), IpAddr::V4(a(16)))
        }
        EtherType::Ipv6 if ip.len() >= 40 => {
            let a = |at: usize| {
                let b: [u8; 16] = ip[at..at + 16].try_into().expect("16 bytes");
                b
            };
            let (s, d) = (a(8), a(24));
            if !n.fragment && n.protocol == ICMPV6 {
                match mld::parse(body, s, d) {
                    Ok(Some(msg)) => {
                        return GroupFrame::Membership {
                            msg,
                            src: IpAddr::V6(Ipv6Addr::from(s)),
                        }
                    }
                    Err(_) => return GroupFrame::Bad(DropReason::BadMld),
                    Ok(None) => {}
                }
            }
            (IpAddr::V6(s.into()), IpAddr::V6(d.into()))
        }
        _ => return GroupFrame::Flood,
    };
    if let (IpAddr::V4(_), false, igmp::PROTOCOL) = (src, n.fragment, n.protocol) {
        match igmp::parse(body) {
            Ok(Message::Other) => {}
            Ok(msg) => return GroupFrame::Membership { msg, src },
            Err(_) => return GroupFrame::Bad(DropReason::BadIgmp),
        }
    }
    if !dst.is_multicast() || is_link_local(dst) {
        return GroupFrame::Flood;
    }
    GroupFrame::Data(dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvnet_offload::OffloadInfo;
    use hvnet_port::{Home, Pool, PoolCaps, SizeClass};

    fn pkt(frame: &[u8]) -> Packet {
        let mut b = Pool::new(Home::new(PoolCaps::DEFAULT))
            .take(SizeClass::Small)
            .unwrap();
        b.fill(frame);
        Packet::parse(b, OffloadInfo::default()).unwrap()
    }

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];

    #[test]
    fn membership_messages_data_and_the_rest() {
        let q = igmp::general_query(MAC, 100);
        assert!(matches!(
            classify(&pkt(&q)),
            GroupFrame::Membership {
                msg: Message::Query { group: None, .. },
                ..
            }
        ));
        let q = mld::general_query(MAC, 1000);
        assert!(matches!(
            classify(&pkt(&q)),
            GroupFrame::Membership {
                msg: Message::Query { .. },
                ..
            }
        ));
        let m = igmp::message(igmp::kind::V2_REPORT, 0, [239, 1, 2, 3]);
        let f = igmp::frame(MAC, [198, 18, 0, 1], [239, 1, 2, 3], &m);
        let want = GroupFrame::Membership {
            msg: Message::Join("239.1.2.3".parse().unwrap()),
            src: "198.18.0.1".parse().unwrap(),
        };
        assert_eq!(classify(&pkt(&f)), want);
        let mut bad = m;
        bad[7] = 4;
        let f = igmp::frame(MAC, [198, 18, 0, 1], [239, 1, 2, 3], &bad);
        assert_eq!(classify(&pkt(&f)), GroupFrame::Bad(DropReason::BadIgmp));
        // A UDP datagram to a group, and to a link-local one.
        let udp = |dst: [u8; 4]| {
            let mut f = igmp::frame(MAC, [198, 18, 0, 1], dst, &[0, 9, 0, 9, 0, 8, 0, 0]);
            f[14 + 9] = 17;
            f[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
            let sum = hvnet_wire::checksum::checksum(&f[14..38]);
            f[14 + 10..14 + 12].copy_from_slice(&sum.to_be_bytes());
            f
        };
        assert_eq!(
            classify(&pkt(&udp([239, 1, 2, 3]))),
            GroupFrame::Data("239.1.2.3".parse().unwrap())
        );
        assert_eq!(classify(&pkt(&udp([224, 0, 0, 251]))), GroupFrame::Flood);
    }
}
