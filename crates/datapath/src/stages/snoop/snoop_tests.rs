//! IGMP/MLD snooping through the stepped switch: group frames to their
//! members and the router ports only, reports to the routers, link-local
//! groups flooded, malformed messages dropped and counted, the table's
//! bounds, a removed port's memberships, and the own querier.

use crate::counters::DropReason;
use crate::engine::SwitchConfig;
use crate::harness::Harness;
use crate::mdb::{MdbLimits, SnoopConfig};
use crate::settings::PortSettings;
use hvnet_wire::membership::group_mac;
use hvnet_wire::{igmp, mld, Ipv4Packet, Ipv4Repr, MacAddr};
use std::net::IpAddr;

fn mac(i: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, i])
}

fn ip(i: u8) -> [u8; 4] {
    [198, 18, 0, i]
}

fn ports(n: u8) -> Vec<(MacAddr, usize, PortSettings)> {
    (1..=n)
        .map(|i| {
            (
                mac(i),
                1,
                PortSettings {
                    lro: false,
                    ..PortSettings::default()
                },
            )
        })
        .collect()
}

fn switch(n: u8, snoop: SnoopConfig) -> Harness {
    let mut h = Harness::new(
        &ports(n),
        SwitchConfig {
            multicast: snoop,
            ..SwitchConfig::default()
        },
    );
    querier_ready(&mut h);
    h
}

/// The own querier on, its queries answered at once: it prunes from its
/// first query on ([`querier_ready`]).
fn querier() -> SnoopConfig {
    SnoopConfig {
        querier: true,
        query_response: std::time::Duration::ZERO,
        ..SnoopConfig::default()
    }
}

/// The own querier's first queries sent (and dropped here), so that it
/// prunes from now on.
fn querier_ready(h: &mut Harness) {
    h.look();
    h.settle(100, &mut Vec::new());
}

/// With a zero virtio-net header in front.
fn hdr(f: Vec<u8>) -> Vec<u8> {
    let mut v = vec![0u8; 12];
    v.extend(f);
    v
}

/// An IGMPv2 message of `kind` about `group` from port `from` (index).
fn igmp2(from: usize, kind: u8, group: [u8; 4]) -> Vec<u8> {
    let m = igmp::message(kind, 0, group);
    let dst = if kind == igmp::kind::LEAVE {
        [224, 0, 0, 2]
    } else {
        group
    };
    hdr(igmp::frame(
        mac(from as u8 + 1).0,
        ip(from as u8 + 1),
        dst,
        &m,
    ))
}

/// A UDP datagram from port `from` to IPv4 group `group`.
fn udp_to(from: usize, group: [u8; 4]) -> Vec<u8> {
    let mut f = group_mac(IpAddr::V4(group.into())).to_vec();
    f.extend_from_slice(&mac(from as u8 + 1).0);
    f.extend_from_slice(&[0x08, 0]);
    let mut ip_hdr = [0u8; 20];
    Ipv4Repr {
        src: ip(from as u8 + 1),
        dst: group,
        protocol: 17,
        payload_len: 8 + 32,
        ttl: 1,
        tos: 0,
        ident: 1,
        dont_frag: true,
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut ip_hdr[..]));
    f.extend_from_slice(&ip_hdr);
    f.extend_from_slice(&[0x13, 0x88, 0x13, 0x88, 0, 40, 0, 0]);
    f.extend_from_slice(&[7u8; 32]);
    hdr(f)
}

/// The ports that got something, sorted.
fn run(h: &mut Harness, from: usize, frame: &[u8]) -> Vec<usize> {
    assert!(h.send(from, 0, frame));
    let mut out = Vec::new();
    h.settle(100, &mut out);
    h.check_accounting().unwrap();
    let mut got: Vec<usize> = out.into_iter().map(|(p, _)| p).collect();
    got.sort();
    got
}

const G1: [u8; 4] = [239, 1, 1, 1];

#[test]
fn group_frames_go_to_members_and_router_ports_only() {
    let mut h = switch(5, querier());
    // Ports 1 and 2 join; the reports go nowhere (no router port yet).
    assert_eq!(
        run(&mut h, 1, &igmp2(1, igmp::kind::V2_REPORT, G1)),
        [0usize; 0]
    );
    let v3 = igmp::v3_report(&[(4, G1, 0), (4, [239, 1, 1, 2], 0)]);
    let f = hdr(igmp::frame(mac(3).0, ip(3), [224, 0, 0, 22], &v3));
    // IGMPv3 reports go to the link-local 224.0.0.22, read all the same.
    assert_eq!(run(&mut h, 2, &f), [0usize; 0]);
    assert_eq!(h.sw.mdb.len(), 3);
    let i = h.sw.ports()[1].ingress_stats();
    assert_eq!((i.mcast_reports, i.mcast_consumed), (1, 1));
    assert_eq!(run(&mut h, 0, &udp_to(0, G1)), [1, 2]);
    assert_eq!(h.sw.ports()[0].ingress_stats().mcast_to_members, 1);
    // A group nobody joined goes to the router ports: none.
    assert_eq!(run(&mut h, 0, &udp_to(0, [239, 9, 9, 9])), [0usize; 0]);
    assert_eq!(
        h.sw.ports()[0].ingress_stats().dropped[DropReason::NoRoute],
        1
    );
    // Link-local groups are flooded.
    assert_eq!(run(&mut h, 0, &udp_to(0, [224, 0, 0, 251])), [1, 2, 3, 4]);
    // A query makes port 4 a router port: it gets every group frame and
    // the reports.
    let q = igmp::message(igmp::kind::QUERY, 100, [0; 4]);
    let q = hdr(igmp::frame(mac(5).0, ip(254), [224, 0, 0, 1], &q));
    assert_eq!(run(&mut h, 4, &q), [0, 1, 2, 3]);
    assert_eq!(run(&mut h, 0, &udp_to(0, G1)), [1, 2, 4]);
    assert_eq!(run(&mut h, 0, &udp_to(0, [239, 9, 9, 9])), [4]);
    assert_eq!(run(&mut h, 3, &igmp2(3, igmp::kind::V2_REPORT, G1)), [4]);
    assert_eq!(run(&mut h, 0, &udp_to(0, G1)), [1, 2, 3, 4]);
    // From a member: to the other members and the router.
    assert_eq!(run(&mut h, 1, &udp_to(1, G1)), [2, 3, 4]);
}

#[test]
fn mld_listeners_get_their_groups_and_neighbour_discovery_floods() {
    let mut h = switch(3, querier());
    let src = mld::link_local(mac(2).0);
    let grp: [u8; 16] = "ff0e::1:2".parse::<std::net::Ipv6Addr>().unwrap().octets();
    let m = mld::message(mld::kind::V1_REPORT, 0, grp, src, grp);
    assert_eq!(
        run(&mut h, 1, &hdr(mld::frame(mac(2).0, src, grp, &m))),
        [0usize; 0]
    );
    // A datagram to the group (an MLD-shaped frame of another ICMPv6 type:
    // an echo request to the group).
    let mut echo = mld::message(128, 0, [0; 16], mld::link_local(mac(1).0), grp);
    mld::fill_checksum(&mut echo, mld::link_local(mac(1).0), grp);
    let f = hdr(mld::frame(mac(1).0, mld::link_local(mac(1).0), grp, &echo));
    assert_eq!(run(&mut h, 0, &f), [1]);
    // To a solicited-node group: flooded.
    let sn: [u8; 16] = "ff02::1:ff00:7"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let mut echo = mld::message(128, 0, [0; 16], mld::link_local(mac(1).0), sn);
    mld::fill_checksum(&mut echo, mld::link_local(mac(1).0), sn);
    let f = hdr(mld::frame(mac(1).0, mld::link_local(mac(1).0), sn, &echo));
    assert_eq!(run(&mut h, 0, &f), [1, 2]);
}

#[test]
fn without_a_querier_or_snooping_group_frames_flood() {
    for cfg in [
        SnoopConfig::default(),
        SnoopConfig {
            enabled: false,
            ..querier()
        },
    ] {
        let mut h = switch(3, cfg);
        run(&mut h, 1, &igmp2(1, igmp::kind::V2_REPORT, G1));
        assert_eq!(run(&mut h, 0, &udp_to(0, G1)), [1, 2]);
    }
    // With flood_unknown, a group nobody joined floods.
    let mut h = switch(
        3,
        SnoopConfig {
            flood_unknown: true,
            ..querier()
        },
    );
    assert_eq!(run(&mut h, 0, &udp_to(0, G1)), [1, 2]);
    run(&mut h, 1, &igmp2(1, igmp::kind::V2_REPORT, G1));
    assert_eq!(run(&mut h, 0, &udp_to(0, G1)), [1]);
}

#[test]
fn malformed_reports_and_floods_of_groups_are_counted_and_bounded() {
    let mut h = switch(
        3,
        SnoopConfig {
            limits: MdbLimits {
                per_port: 100,
                total: 150,
            },
            ..querier()
        },
    );
    let mut bad = igmp2(1, igmp::kind::V2_REPORT, G1);
    let n = bad.len();
    bad[n - 1] ^= 0x55;
    assert_eq!(run(&mut h, 1, &bad), [0usize; 0]);
    assert_eq!(
        h.sw.ports()[1].ingress_stats().dropped[DropReason::BadIgmp],
        1
    );
    // Truncated records.
    let mut v3 = igmp::v3_report(&[(4, G1, 2)]);
    v3[7] = 9;
    let f = hdr(igmp::frame(mac(2).0, ip(2), [224, 0, 0, 22], &v3));
    run(&mut h, 1, &f);
    assert_eq!(
        h.sw.ports()[1].ingress_stats().dropped[DropReason::BadIgmp],
        2
    );
    assert!(h.sw.mdb.is_empty());
    // 400 groups from one port: 100 kept, the rest refused and counted.
    for chunk in 0..4u8 {
        let recs: Vec<_> = (0..100u8).map(|i| (4, [239, 2, chunk, i], 0)).collect();
        let f = hdr(igmp::frame(
            mac(2).0,
            ip(2),
            [224, 0, 0, 22],
            &igmp::v3_report(&recs),
        ));
        run(&mut h, 1, &f);
    }
    assert_eq!(h.sw.mdb.len(), 100);
    assert_eq!(h.sw.ports()[1].ingress_stats().mdb_refused, 300);
    // Another port still joins; the switch still forwards.
    run(&mut h, 2, &igmp2(2, igmp::kind::V2_REPORT, G1));
    assert_eq!(run(&mut h, 0, &udp_to(0, G1)), [2]);
    // A removed port's memberships go with it.
    h.remove_port("p1").unwrap();
    assert_eq!(h.sw.mdb.len(), 1);
}

/// A full table refuses a join: the group is flooded (counted), not sent
/// to the router ports and the members it knows only.
#[test]
fn a_group_refused_for_a_full_table_is_flooded() {
    let mut h = switch(
        4,
        SnoopConfig {
            limits: MdbLimits {
                per_port: 1,
                total: 8,
            },
            ..querier()
        },
    );
    const G2: [u8; 4] = [239, 1, 1, 2];
    run(&mut h, 1, &igmp2(1, igmp::kind::V2_REPORT, G1));
    run(&mut h, 1, &igmp2(1, igmp::kind::V2_REPORT, G2));
    run(&mut h, 2, &igmp2(2, igmp::kind::V2_REPORT, G2));
    assert_eq!(h.sw.ports()[1].ingress_stats().mdb_refused, 1);
    assert_eq!(run(&mut h, 0, &udp_to(0, G2)), [1, 2, 3]);
    assert_eq!(h.sw.ports()[0].ingress_stats().mcast_refused_flooded, 1);
    // The group that was not refused is still pruned.
    assert_eq!(run(&mut h, 0, &udp_to(0, G1)), [1]);
    assert_eq!(run(&mut h, 0, &udp_to(0, [239, 9, 9, 9])), [0usize; 0]);
}

#[test]
fn the_own_querier_queries_every_port_once_per_interval() {
    let mut h = Harness::new(
        &ports(3),
        SwitchConfig {
            multicast: SnoopConfig {
                querier: true,
                ..SnoopConfig::default()
            },
            ..SwitchConfig::default()
        },
    );
    // Before its first query, and its response time after, it does not
    // prune: the hosts have not been asked to report. Reports still go
    // to the router ports only (none here): port 2, a member too, must
    // not hear port 1's and keep its own report quiet (IGMPv2).
    assert_eq!(
        run(&mut h, 1, &igmp2(1, igmp::kind::V2_REPORT, G1)),
        [0usize; 0]
    );
    assert_eq!(run(&mut h, 0, &udp_to(0, G1)), [1, 2]);
    h.look();
    let mut out = Vec::new();
    h.settle(100, &mut out);
    // An IGMP and an MLD general query to each port.
    let mut got: Vec<(usize, u8)> = out
        .iter()
        .map(|(p, f)| {
            (
                *p,
                hvnet_wire::Layers::parse(&f[12..])
                    .unwrap()
                    .net()
                    .unwrap()
                    .protocol,
            )
        })
        .collect();
    got.sort();
    assert_eq!(got, [(0, 2), (0, 58), (1, 2), (1, 58), (2, 2), (2, 58)]);
    h.look();
    out.clear();
    h.settle(100, &mut out);
    assert!(out.is_empty(), "not due again");
    assert_eq!(run(&mut h, 0, &udp_to(0, G1)), [1, 2]);
    assert!(!h
        .sw
        .mdb
        .querier_exists(0, crate::mdb::Family::Ipv4, std::time::Instant::now()));
}

/// A switch with a VM (port 0) and a tunnel endpoint (port 1, VNI 42 for
/// the untagged frames, and `vlans` more) with two remotes, each of which
/// has announced itself (its inner MAC 02:ee::i is known).
fn tunnel_switch(snoop: SnoopConfig, vlans: Vec<(u16, u32)>) -> (Harness, [std::net::Ipv4Addr; 2]) {
    use crate::harness::Backend;
    use hvnet_port::vxlan::VtepConfig;
    use hvnet_wire::arp;
    use std::net::Ipv4Addr;
    let s = PortSettings {
        lro: false,
        ..PortSettings::default()
    };
    let wire = PortSettings {
        allow_forged_transmits: true,
        ..s.clone()
    };
    let local = Ipv4Addr::new(198, 18, 60, 1);
    let remotes = [Ipv4Addr::new(198, 18, 60, 8), Ipv4Addr::new(198, 18, 60, 9)];
    let vtep = VtepConfig {
        vni: 42,
        local: local.into(),
        prefix: 24,
        mac: mac(9),
        remotes: remotes.iter().map(|r| (*r).into()).collect(),
        port: 4789,
        udp_csum: false,
        vlans,
    };
    let mut h = Harness::with_tunnel(
        &[(mac(1), 1, s), (MacAddr([0; 6]), 1, wire)],
        &[Backend::Tap, Backend::Replay],
        Some((1, vtep)),
        SwitchConfig {
            multicast: snoop,
            ..SwitchConfig::default()
        },
    );
    let mut out = Vec::new();
    for (i, r) in remotes.iter().enumerate() {
        let request = arp::Repr {
            op: arp::Operation::Request,
            sender_mac: MacAddr([2, 0xee, 0, 0, 0, i as u8]),
            sender_ip: r.octets(),
            target_mac: MacAddr([0; 6]),
            target_ip: local.octets(),
        }
        .frame();
        h.send(1, 0, &hdr(request.to_vec()));
    }
    h.settle(20, &mut out);
    querier_ready(&mut h);
    (h, remotes)
}

/// An IGMPv2 message of `kind` about `group` from host `host` behind
/// remote `remote` of [`tunnel_switch`], in VNI 42, through the tunnel.
fn from_remote(h: &mut Harness, remote: std::net::Ipv4Addr, host: u8, kind: u8, group: [u8; 4]) {
    use hvnet_offload::vxlan::{encap_header, Tunnel, OUTER_LEN};
    let dst = if kind == igmp::kind::LEAVE {
        [224, 0, 0, 2]
    } else {
        group
    };
    let msg = igmp::frame(
        [2, 0x77, 0, 0, 0, host],
        [198, 18, 61, host],
        dst,
        &igmp::message(kind, 0, group),
    );
    let tunnel = Tunnel {
        src_mac: MacAddr([2, 0xee, 0, 0, 0, remote.octets()[3] - 8]),
        dst_mac: mac(9),
        ..Tunnel::new(42, remote.octets(), [198, 18, 60, 1])
    };
    let mut outer = [0u8; OUTER_LEN];
    encap_header(&tunnel, &msg, None, Default::default(), &mut outer).unwrap();
    h.send(1, 0, &hdr([&outer[..], &msg].concat()));
    let mut out = Vec::new();
    h.settle(20, &mut out);
}

/// The remotes a frame from port 0 to `group` crossed the tunnel to.
fn crossed(h: &mut Harness, group: [u8; 4]) -> Vec<[u8; 4]> {
    let mut out = Vec::new();
    h.send(0, 0, &udp_to(0, group));
    h.settle(20, &mut out);
    let mut to: Vec<[u8; 4]> = out
        .iter()
        .filter(|(p, _)| *p == 1)
        .map(|(_, f)| f[12 + 30..12 + 34].try_into().unwrap())
        .collect();
    to.sort();
    to
}

/// Head-end replication pruned: a group's frames cross the tunnel only to
/// the remote endpoint a member's report came from; a group nobody behind
/// the tunnel reported goes to the whole flood list.
#[test]
fn group_frames_cross_the_tunnel_only_to_remotes_with_members() {
    let (mut h, remotes) = tunnel_switch(querier(), Vec::new());
    // A host behind the second remote joins G1.
    from_remote(&mut h, remotes[1], 1, igmp::kind::V2_REPORT, G1);
    h.sw.tunnel_group_pruning(std::time::Instant::now());
    assert_eq!(crossed(&mut h, G1), [remotes[1].octets()]);
    assert_eq!(
        crossed(&mut h, [239, 9, 9, 9]),
        [remotes[0].octets(), remotes[1].octets()]
    );
    let (groups, refused) =
        h.sw.endpoint(1)
            .unwrap()
            .group_remotes(std::time::Instant::now());
    assert_eq!((groups.len(), refused), (1, 0));
}

/// One host's leave behind a remote endpoint (nobody asks the others
/// again: the switch's querier sends no group-specific query) keeps the
/// remote in the group, and the uplink's membership as it was.
#[test]
fn a_leave_from_behind_the_tunnel_keeps_the_remote_in_the_group() {
    use std::time::{Duration, Instant};
    let (mut h, remotes) = tunnel_switch(querier(), Vec::new());
    from_remote(&mut h, remotes[1], 1, igmp::kind::V2_REPORT, G1);
    from_remote(&mut h, remotes[1], 2, igmp::kind::V2_REPORT, G1);
    from_remote(&mut h, remotes[1], 1, igmp::kind::LEAVE, G1);
    let later = Instant::now() + Duration::from_secs(5);
    let (groups, _) = h.sw.endpoint(1).unwrap().group_remotes(later);
    assert_eq!(
        groups,
        [(42, IpAddr::from(G1), vec![IpAddr::from(remotes[1])])]
    );
    let (rows, _, _) = h.sw.mdb.rows(later);
    assert_eq!(rows.len(), 1, "the uplink's membership is kept");
    h.sw.tunnel_group_pruning(Instant::now());
    assert_eq!(crossed(&mut h, G1), [remotes[1].octets()]);
}

/// A tunnel carrying several VNIs prunes each by its own VLAN's querier:
/// one heard in the uplink's VLAN (VNI 42) says nothing of VLAN 10's (VNI
/// 43).
#[test]
fn tunnel_pruning_is_decided_per_vni_by_its_vlans_querier() {
    use hvnet_wire::NetKind;
    use std::time::{Duration, Instant};
    let (mut h, _) = tunnel_switch(SnoopConfig::default(), vec![(10, 43)]);
    let q = igmp::message(igmp::kind::QUERY, 10, [0; 4]);
    let q = hdr(igmp::frame(mac(1).0, ip(254), [224, 0, 0, 1], &q));
    run(&mut h, 0, &q);
    let after = Instant::now() + Duration::from_secs(2);
    h.sw.tunnel_group_pruning(after);
    let vtep = h.sw.endpoint(1).unwrap();
    assert!(vtep.group_pruning(42, NetKind::Ipv4));
    assert!(!vtep.group_pruning(42, NetKind::Ipv6));
    assert!(!vtep.group_pruning(43, NetKind::Ipv4));
    // A query heard in VLAN 10 too: VNI 43 is pruned.
    h.sw.mdb
        .query(10, 0, ip(254).into(), None, Duration::ZERO, Instant::now());
    h.sw.tunnel_group_pruning(after);
    assert!(vtep.group_pruning(43, NetKind::Ipv4));
}
