use super::*;

fn src(i: u8) -> Source {
    Source {
        mac: MacAddr([2, 0, 0, 0, 0, i]),
        tag: None,
        ipv4: Some([198, 18, 0, i]),
        ipv6: None,
    }
}

#[test]
fn igmp_and_mld_reports_are_membership_messages_and_nothing_else_is() {
    use crate::packet::Packet;
    use crate::pool::{Home, Pool, PoolCaps, SizeClass};
    use hvnet_offload::OffloadInfo;
    use hvnet_wire::{igmp, mld};
    let mut pool = Pool::new(Home::new(PoolCaps::DEFAULT));
    let mut is = |frame: &[u8]| {
        let mut b = pool.take(SizeClass::Small).expect("a buffer");
        b.fill(frame);
        let p = Packet::parse(b, OffloadInfo::default()).expect("parses");
        is_membership(&OutFrame::Packet(&p))
    };
    let mac = [2, 0, 0, 0, 0, 1];
    let group = [239, 1, 1, 1];
    let report = igmp::message(0x16, 0, group);
    assert!(is(&igmp::frame(mac, [198, 18, 0, 1], group, &report)));
    let (src, dst) = (
        [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x16],
    );
    let report = mld::message(131, 0, dst, src, dst);
    assert!(is(&mld::frame(mac, src, dst, &report)));
    // A query is the querier's; a group's data is no message.
    let query = mld::message(130, 0, [0; 16], src, dst);
    assert!(!is(&mld::frame(mac, src, dst, &query)));
    let query = igmp::message(0x11, 10, [0; 4]);
    assert!(!is(&igmp::frame(
        mac,
        [198, 18, 0, 1],
        [224, 0, 0, 1],
        &query
    )));
    let mut data = igmp::frame(mac, [198, 18, 0, 1], group, &report);
    data[23] = 99;
    assert!(!is(&data));
}

#[test]
fn port_id_spreads_ports_evenly_and_they_come_back_on_failback() {
    let now = Instant::now();
    let mut p = Placements::default();
    let members: Vec<usize> = (0..4)
        .map(|i| {
            p.member_of(Teaming::PortId, &src(i), 60, &[0, 1], 2, now)
                .member
        })
        .collect();
    assert_eq!(members, vec![0, 1, 0, 1]);
    let moved = p.replace(&[0], true);
    assert_eq!(moved.len(), 2, "member 1's two ports fail over");
    assert!(moved.iter().all(|&(_, m)| m == 0));
    let back = p.replace(&[0, 1], true);
    assert_eq!(back.len(), 2, "and fail back");
    p.replace(&[0], true);
    assert!(
        p.replace(&[0, 1], false).is_empty(),
        "no failback: they stay"
    );
}

#[test]
fn a_flood_of_new_addresses_stays_bounded_and_is_counted() {
    let now = Instant::now();
    let mut p = Placements::default();
    let mut placed = 0;
    for i in 0..(MAX_PLACEMENTS as u32 + 1000) {
        let b = i.to_be_bytes();
        let s = Source {
            mac: MacAddr([2, 0xee, b[0], b[1], b[2], b[3]]),
            tag: None,
            ipv4: None,
            ipv6: None,
        };
        let pick = p.member_of(Teaming::PortId, &s, 60, &[0, 1], 2, now);
        assert!(pick.member < 2);
        placed += usize::from(pick.new);
    }
    assert_eq!(p.len(), MAX_PLACEMENTS);
    assert_eq!(placed, MAX_PLACEMENTS, "only what is remembered is new");
    assert_eq!(p.refused, 1000);
    assert_eq!(p.homes, vec![MAX_PLACEMENTS / 2; 2], "spread evenly");
    // A placed address still has its member; age-out makes room again.
    let first = MacAddr([2, 0xee, 0, 0, 0, 0]);
    assert!(p.get(&first).is_some());
    let gone = p.age_out(now + std::time::Duration::from_secs(1));
    assert_eq!(gone.len(), MAX_PLACEMENTS);
    assert_eq!(p.homes, vec![0, 0]);
    assert!(
        p.member_of(Teaming::PortId, &src(1), 60, &[0, 1], 2, now)
            .new
    );
}

#[test]
fn homes_follow_forgets_and_moves() {
    let now = Instant::now();
    let mut p = Placements::default();
    for i in 0..4 {
        p.member_of(Teaming::PortId, &src(i), 60, &[0, 1], 2, now);
    }
    assert!(p.forget(&src(0).mac));
    assert!(p.rehome(&src(1).mac, 0));
    assert_eq!(p.homes, vec![2, 1]);
    let next = p.member_of(Teaming::PortId, &src(9), 60, &[0, 1], 2, now);
    assert_eq!(next.member, 1, "the member with the fewest");
}

#[test]
fn words_name_each_policy_once() {
    for w in [
        "port-id",
        "source-mac",
        "ip-hash",
        "load-based",
        "active-backup",
        "lacp",
    ] {
        assert_eq!(Teaming::from_word(w).unwrap().word(), w);
    }
    assert!(Teaming::from_word("round-robin").is_none());
    assert!(!Teaming::Lacp.switch_independent());
    assert!(Teaming::ActiveBackup.switch_independent());
}

/// An IPv4 TCP frame's headers (behind a VLAN tag if `tag`).
fn tcp_head(sport: u16, tag: bool) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    if tag {
        f.extend([0x81, 0x00, 0x00, 0x0a]);
    }
    f.extend([0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0]);
    f.extend([198, 18, 0, 1, 198, 18, 0, 100]);
    f.extend(sport.to_be_bytes());
    f.extend(5201u16.to_be_bytes());
    f.extend([0; 16]);
    f
}

#[test]
fn segments_hash_by_their_flow_not_their_addresses() {
    // What a TSO frame segmented on the way out is: its headers, then
    // its payload.
    let hash = |head: &[u8], ports| {
        let pieces = [
            std::io::IoSlice::new(head),
            std::io::IoSlice::new(&[0; 100]),
        ];
        flow_hash(
            &OutFrame::Pieces {
                pieces: &pieces,
                offload: Default::default(),
            },
            ports,
        )
    };
    let flows: Vec<u32> = (40000..40016)
        .map(|p| hash(&tcp_head(p, false), true))
        .collect();
    let on_one = flows.iter().filter(|&&h| h % 2 == 0).count();
    assert!(
        on_one > 0 && on_one < 16,
        "16 flows over two members: {flows:?}"
    );
    // ip-hash leaves the ports out; a tag is skipped.
    assert_eq!(
        hash(&tcp_head(40000, false), false),
        hash(&tcp_head(40001, false), false)
    );
    assert_eq!(
        hash(&tcp_head(40000, true), true),
        hash(&tcp_head(40000, false), true)
    );
    // Not IP: by the MAC addresses.
    let mut arp = tcp_head(1, false);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let mut arp2 = arp.clone();
    arp2[20] = 9;
    assert_eq!(hash(&arp, true), hash(&arp2, true));
}

#[test]
fn source_mac_keeps_an_address_on_its_hash() {
    let now = Instant::now();
    let mut p = Placements::default();
    let a = p
        .member_of(Teaming::SourceMac, &src(7), 60, &[0, 1], 2, now)
        .member;
    assert_eq!(a, mac_hash(src(7).mac) as usize % 2);
    let again = p.member_of(Teaming::SourceMac, &src(7), 60, &[0, 1], 2, now);
    assert_eq!(
        again,
        Pick {
            member: a,
            new: false
        }
    );
}
