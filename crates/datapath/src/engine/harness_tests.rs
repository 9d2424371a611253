use super::*;
use crate::counters::DropReason;
use hvnet_offload::testutil::TcpSpec;

fn mac(i: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, i])
}

/// Data segment `seq` of a flow from port 1's MAC to port 2's, 100
/// bytes of `seq` each.
fn segment_1_to_2(seq: u32) -> Vec<u8> {
    TcpSpec {
        src_mac: mac(1).0,
        dst_mac: mac(2).0,
        seq: 1000 + seq * 100,
        payload: vec![seq as u8; 100],
        ..TcpSpec::default()
    }
    .build()
}

fn with_hdr(frame: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; 12];
    v.extend_from_slice(frame);
    v
}

#[test]
fn ports_come_and_go_while_a_flow_between_two_others_runs() {
    let s = PortSettings {
        lro: false,
        ..PortSettings::default()
    };
    let mut h = Harness::new(
        &[(mac(1), 1, s.clone()), (mac(2), 1, s.clone())],
        SwitchConfig::default(),
    );
    let mut out = Vec::new();
    let mut seq = 0u32;
    for round in 0..12u8 {
        let new = MacAddr([2, 0, 0, 0, 1, round]);
        let id = h.add_port(
            &format!("n{round}"),
            new,
            1 + usize::from(round % 2),
            s.clone(),
        );
        let id = id.unwrap();
        assert_eq!(id, 2, "the removed port's index is taken again");
        for _ in 0..10 {
            assert!(h.send(0, 0, &with_hdr(&segment_1_to_2(seq))));
            seq += 1;
        }
        // A frame to the new port, one from it, and the queues moved.
        let to_new = TcpSpec {
            src_mac: mac(1).0,
            dst_mac: new.0,
            ..TcpSpec::default()
        };
        assert!(h.send(0, 0, &with_hdr(&to_new.build())));
        h.step();
        h.rebalance(usize::from(round));
        h.settle(20, &mut out);
        assert!(out.iter().any(|(p, f)| *p == id && f[12..18] == new.0));
        out.retain(|(p, _)| *p == 1);
        h.check_accounting().unwrap();
        h.remove_port(&format!("n{round}")).unwrap();
    }
    h.settle(100, &mut out);
    h.check_accounting().unwrap();
    let got: Vec<u8> = out
        .iter()
        .filter(|(p, _)| *p == 1)
        .map(|(_, f)| f[f.len() - 1])
        .collect();
    let want: Vec<u8> = (0..seq).map(|s| s as u8).collect();
    assert_eq!(
        got, want,
        "the flow between the two others lost or reordered nothing"
    );
    assert_eq!(h.sw.ports().count(), 2);
}

#[test]
fn frames_cross_and_everything_is_accounted() {
    let s = PortSettings::default();
    let mut h = Harness::new(
        &[
            (mac(1), 1, s.clone()),
            (mac(2), 2, s.clone()),
            (mac(3), 1, s),
        ],
        SwitchConfig::default(),
    );
    // Unknown destination first (flooded to both), then learned.
    for seq in 0..20u32 {
        assert!(h.send(0, 0, &with_hdr(&segment_1_to_2(seq))));
    }
    let mut out = Vec::new();
    h.settle(100, &mut out);
    h.check_accounting().unwrap();
    let to_b: usize = out.iter().filter(|(p, _)| *p == 1).count();
    assert!(to_b >= 1, "b got its frames (coalesced: fewer than 20)");
    let i = h.sw.ports()[0].ingress_stats();
    assert_eq!(i.frames, 20);
    let e = h.sw.ports()[1].egress_stats();
    assert_eq!(e.delivered_source_frames, 20, "{e:?}");
}

fn tcp(from: u8, to: u8, seq: u32) -> Vec<u8> {
    with_hdr(
        &TcpSpec {
            src_mac: mac(from).0,
            dst_mac: mac(to).0,
            seq: 1000 + seq * 100,
            payload: vec![seq as u8; 100],
            ..TcpSpec::default()
        }
        .build(),
    )
}

fn drop_settings() -> PortSettings {
    PortSettings {
        rx_overflow: crate::RxOverflow::Drop,
        lro: false,
        ..PortSettings::default()
    }
}

#[test]
fn every_backend_carries_frames_through_the_port_interface_and_accounts_them() {
    let s = drop_settings();
    let ports = [
        (mac(1), 1, s.clone()),
        (mac(2), 2, s.clone()),
        (mac(3), 1, s),
    ];
    let backends = [Backend::Replay, Backend::Tap, Backend::Replay];
    let mut h = Harness::with_backends(&ports, &backends, SwitchConfig::default());
    // Replay to TAP, TAP to replay, and a bad virtio-net header (a
    // GSO type on a frame too short for it) from a replay port.
    for seq in 0..10 {
        assert!(h.send(0, 0, &tcp(1, 2, seq)));
        assert!(h.send(1, seq as usize, &tcp(2, 3, seq)));
    }
    let mut bad = tcp(1, 2, 99);
    bad[0] = 1; // NEEDS_CSUM, with csum_start past the frame
    bad[6..8].copy_from_slice(&60_000u16.to_le_bytes());
    assert!(h.send(0, 0, &bad));
    let mut out = Vec::new();
    h.settle(100, &mut out);
    h.check_accounting().unwrap();
    assert_eq!(out.iter().filter(|(p, _)| *p == 1).count(), 10);
    assert_eq!(out.iter().filter(|(p, _)| *p == 2).count(), 10);
    let i = h.sw.ports()[0].ingress_stats();
    assert_eq!(
        (i.frames, i.dropped[DropReason::BadVnetHeader]),
        (11, 1),
        "{i:?}"
    );
    assert_eq!(h.sw.ports()[0].dev.kind(), "replay");
}

/// Under backpressure a full receiver is not waited on by the worker:
/// what it did not take is kept, in order, the sender's queue is not
/// read meanwhile, and it is written once there is room; a receiver
/// full for longer than the backpressure wait loses it, counted.
#[test]
fn a_full_receiver_under_backpressure_gets_what_was_kept_in_order() {
    let s = PortSettings {
        lro: false,
        ..PortSettings::default()
    };
    let ports = [(mac(1), 1, s.clone()), (mac(2), 1, s)];
    let backends = [Backend::Tap, Backend::Replay];
    let mut h = Harness::with_backends(&ports, &backends, SwitchConfig::default());
    let Guest::Replay(b) = &h.guests[1] else {
        panic!("a replay port");
    };
    let b = Arc::clone(b);
    let mut out = Vec::new();
    h.send(1, 0, &tcp(2, 1, 0));
    h.settle(10, &mut out);
    b.take_sent();
    b.set_room(0, Some(2));
    for seq in 1..=6 {
        h.send(0, 0, &tcp(1, 2, seq));
    }
    for _ in 0..5 {
        h.step();
    }
    let seqs = |sent: Vec<(usize, Vec<u8>)>| -> Vec<u32> {
        sent.iter()
            .map(|(_, f)| u32::from_be_bytes(f[12 + 38..12 + 42].try_into().unwrap()))
            .collect()
    };
    assert_eq!(seqs(b.take_sent()), vec![1000 + 100, 1000 + 200]);
    let e = h.sw.ports()[1].egress_stats();
    assert_eq!(
        e.dropped[DropReason::VirtqueueFull],
        0,
        "kept, not dropped: {e:?}"
    );
    b.set_room(0, None);
    out.clear();
    h.settle(10, &mut out);
    assert_eq!(
        seqs(out.drain(..).filter(|(p, _)| *p == 1).collect()),
        (3..=6).map(|s| 1000 + s * 100).collect::<Vec<_>>(),
        "the rest, in order"
    );
    // Full for good: after the wait, dropped and counted.
    b.set_room(0, Some(0));
    h.send(0, 0, &tcp(1, 2, 7));
    h.step();
    std::thread::sleep(crate::BACKPRESSURE_WAIT + std::time::Duration::from_millis(20));
    h.settle(10, &mut out);
    let e = h.sw.ports()[1].egress_stats();
    assert_eq!(
        (
            e.delivered_source_frames,
            e.dropped[DropReason::VirtqueueFull]
        ),
        (6, 1),
        "{e:?}"
    );
    h.check_accounting().unwrap();
}

#[test]
fn a_full_or_departed_far_side_is_a_named_drop_and_the_others_go_on() {
    let s = drop_settings();
    let ports = [
        (mac(1), 1, s.clone()),
        (mac(2), 1, s.clone()),
        (mac(3), 1, s),
    ];
    let backends = [Backend::Tap, Backend::Replay, Backend::Replay];
    let mut h = Harness::with_backends(&ports, &backends, SwitchConfig::default());
    let (Guest::Replay(b), Guest::Replay(c)) = (&h.guests[1], &h.guests[2]) else {
        panic!("replay ports");
    };
    let (b, c) = (Arc::clone(b), Arc::clone(c));
    // Learn where everyone is, then b's far side takes 3 more frames.
    let mut out = Vec::new();
    h.send(1, 0, &tcp(2, 1, 0));
    h.send(2, 0, &tcp(3, 1, 0));
    h.settle(10, &mut out);
    b.set_room(0, Some(3));
    for seq in 1..=8 {
        h.send(0, 0, &tcp(1, 2, seq));
        h.send(0, 0, &tcp(1, 3, seq));
    }
    h.settle(100, &mut out);
    h.check_accounting().unwrap();
    let e = h.sw.ports()[1].egress_stats();
    assert_eq!(
        (
            e.delivered_source_frames,
            e.dropped[DropReason::VirtqueueFull]
        ),
        (3, 5),
        "{e:?}"
    );
    assert_eq!(h.sw.ports()[2].egress_stats().delivered_source_frames, 8);
    // c's far side goes away: what is sent to it is dropped and
    // counted, b (room again) still gets its frames.
    c.set_link(hvnet_port::Link::Gone);
    b.set_room(0, None);
    for seq in 9..=12 {
        h.send(0, 0, &tcp(1, 2, seq));
        h.send(0, 0, &tcp(1, 3, seq));
    }
    h.send(2, 0, &tcp(3, 1, 9));
    h.settle(100, &mut out);
    h.check_accounting().unwrap();
    assert_eq!(h.sw.ports()[1].egress_stats().delivered_source_frames, 7);
    let e = h.sw.ports()[2].egress_stats();
    assert_eq!(e.delivered_source_frames, 8, "{e:?}");
    assert_eq!(e.drops(), 4, "{e:?}");
    assert!(!h.sw.ports()[2].is_up(), "its receiver found the link gone");
}

/// The VXLAN endpoint is a port like any other: ARP from the remote
/// for its address is answered by the endpoint itself (through its
/// underlay) and counted, not forwarded; what a VM floods leaves the
/// underlay encapsulated to the remote; VXLAN from the remote reaches
/// the VM decapsulated, counted as it arrived (outer headers on).
#[test]
fn a_tunnel_endpoint_is_a_device_that_encapsulates_and_decapsulates() {
    use hvnet_offload::vxlan::{encap_header, Tunnel, OUTER_LEN};
    use hvnet_wire::arp;
    use std::net::Ipv4Addr;
    let s = drop_settings();
    // An uplink forwards whatever its side sends, as provisioning sets it.
    let wire = PortSettings {
        allow_forged_transmits: true,
        ..s.clone()
    };
    let ports = [(mac(1), 1, s), (MacAddr([0; 6]), 1, wire)];
    let (local, remote) = (Ipv4Addr::new(198, 18, 60, 1), Ipv4Addr::new(198, 18, 60, 9));
    let vtep = VtepConfig {
        vni: 42,
        local: local.into(),
        prefix: 24,
        mac: mac(9),
        remotes: vec![remote.into()],
        port: 4789,
        udp_csum: false,
        vlans: Vec::new(),
    };
    let backends = [Backend::Tap, Backend::Replay];
    let mut h = Harness::with_tunnel(&ports, &backends, Some((1, vtep)), SwitchConfig::default());
    let remote_mac = MacAddr([2, 0xee, 0, 0, 0, 9]);
    let request = arp::Repr {
        op: arp::Operation::Request,
        sender_mac: remote_mac,
        sender_ip: remote.octets(),
        target_mac: MacAddr([0; 6]),
        target_ip: local.octets(),
    }
    .frame();
    h.send(1, 0, &with_hdr(&request));
    let mut out = Vec::new();
    h.settle(20, &mut out);
    assert_eq!(out.len(), 1, "answered on the underlay only: {out:?}");
    let reply = &out[0].1[12..];
    assert_eq!((out[0].0, &reply[0..6]), (1, &remote_mac.0[..]));
    let r = arp::Repr::parse(&arp::Packet::new_checked(&reply[14..]).unwrap()).unwrap();
    assert_eq!((r.op, r.sender_mac), (arp::Operation::Reply, mac(9)));

    // Unknown unicast from the VM: to the flood list, encapsulated.
    let inner = &tcp(1, 0x42, 0)[12..];
    h.send(0, 0, &with_hdr(inner));
    out.clear();
    h.settle(20, &mut out);
    let sent: Vec<&Vec<u8>> = out
        .iter()
        .filter(|(p, _)| *p == 1)
        .map(|(_, f)| f)
        .collect();
    assert_eq!(sent.len(), 1, "{out:?}");
    let f = &sent[0][12..];
    assert_eq!(&f[0..6], &remote_mac.0, "to the remote's resolved MAC");
    assert_eq!(&f[30..34], &remote.octets());
    assert_eq!(u16::from_be_bytes([f[36], f[37]]), 4789);
    assert_eq!(&f[OUTER_LEN..], inner, "the inner frame intact");

    // VXLAN from the remote: the VM gets its inner frame.
    let back = &tcp(0x42, 1, 1)[12..];
    let tunnel = Tunnel {
        src_mac: remote_mac,
        dst_mac: mac(9),
        ..Tunnel::new(42, remote.octets(), local.octets())
    };
    let mut outer = [0u8; OUTER_LEN];
    encap_header(&tunnel, back, None, Default::default(), &mut outer).unwrap();
    h.send(1, 0, &with_hdr(&[&outer[..], back].concat()));
    out.clear();
    h.settle(20, &mut out);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].0, &out[0].1[12..]), (0, back));
    let i = h.sw.ports()[1].ingress_stats();
    assert_eq!((i.frames, i.tunnel_control, i.decapsulated), (2, 1, 1));
    assert_eq!(i.bytes, (OUTER_LEN + back.len()) as u64);
    let e = h.sw.endpoint(1).unwrap().view(std::time::Instant::now());
    assert_eq!(e.arp_replies_sent, 1);
    assert_eq!(e.remotes[0].mac, Some(remote_mac.to_string()));
}

/// An ARP request from a VM for an IP the fabric advertised is
/// answered to that VM, not forwarded, and counted; one for another IP
/// is flooded. A disconnected port's frames are dropped and counted,
/// and nothing is flooded to it.
#[test]
fn arp_for_an_advertised_ip_is_answered_here_and_a_disconnected_port_is_cut_off() {
    use hvnet_wire::arp;
    use std::net::{IpAddr, Ipv4Addr};
    let s = drop_settings();
    let ports = [
        (mac(1), 1, s.clone()),
        (mac(2), 1, s.clone()),
        (mac(3), 1, s),
    ];
    let vtep = VtepConfig {
        vni: 42,
        local: Ipv4Addr::new(198, 18, 60, 1).into(),
        prefix: 24,
        mac: mac(9),
        remotes: vec![],
        port: 4789,
        udp_csum: false,
        vlans: Vec::new(),
    };
    let backends = [Backend::Tap, Backend::Replay, Backend::Replay];
    let mut h = Harness::with_tunnel(&ports, &backends, Some((1, vtep)), SwitchConfig::default());
    let remote = MacAddr([2, 0xdd, 0, 0, 0, 7]);
    let sw = Arc::clone(&h.sw);
    let t = sw.endpoint(1).unwrap();
    t.evpn_neighbour(
        t.cfg.vni,
        IpAddr::V4(Ipv4Addr::new(198, 19, 60, 2)),
        Some(remote),
    )
    .unwrap();
    let request = |target: [u8; 4]| {
        let mut f = vec![0u8; 42];
        f[0..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&mac(1).0);
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        arp::Repr {
            op: arp::Operation::Request,
            sender_mac: mac(1),
            sender_ip: [198, 19, 60, 1],
            target_mac: MacAddr([0; 6]),
            target_ip: target,
        }
        .emit(&mut arp::Packet::new_unchecked(&mut f[14..]));
        with_hdr(&f)
    };
    h.send(0, 0, &request([198, 19, 60, 2]));
    let mut out = Vec::new();
    h.settle(20, &mut out);
    assert_eq!(out.len(), 1, "answered, not flooded: {out:?}");
    let (port, reply) = &out[0];
    assert_eq!(*port, 0);
    let frame = &reply[12..];
    assert_eq!(&frame[0..6], &mac(1).0);
    let r = arp::Repr::parse(&arp::Packet::new_checked(&frame[14..]).unwrap()).unwrap();
    assert_eq!(
        (r.op, r.sender_mac, r.sender_ip),
        (arp::Operation::Reply, remote, [198, 19, 60, 2])
    );
    assert_eq!(h.sw.ports()[0].ingress_stats().arp_suppressed, 1);
    assert_eq!(t.evpn_counters().arp_suppressed, 1);
    // Another address is not known: flooded as ever.
    out.clear();
    h.send(0, 0, &request([198, 19, 60, 3]));
    h.settle(20, &mut out);
    assert_eq!(out.iter().filter(|(p, _)| *p == 2).count(), 1, "{out:?}");
    h.check_accounting().unwrap();
    // Port 2 disconnected: what it sends is dropped, nothing reaches it.
    let mut off = h.sw.ports()[2].settings();
    off.connected = false;
    h.sw.set_port("p2", off).unwrap();
    out.clear();
    h.send(2, 0, &tcp(3, 1, 1));
    h.send(0, 0, &request([198, 19, 60, 3]));
    h.settle(20, &mut out);
    assert!(out.iter().all(|(p, _)| *p != 2), "{out:?}");
    assert!(
        out.iter().all(|(_, f)| f[12 + 6..][..6] != mac(3).0),
        "{out:?}"
    );
    assert_eq!(
        h.sw.ports()[2].ingress_stats().dropped[DropReason::Disconnected],
        1
    );
    h.check_accounting().unwrap();
    // A frame to its own address is dropped there, counted, not flooded
    // to the others.
    out.clear();
    h.send(0, 0, &tcp(1, 3, 2));
    h.settle(20, &mut out);
    assert!(out.is_empty(), "{out:?}");
    let e = h.sw.ports()[2].egress_stats();
    assert_eq!(e.dropped[DropReason::PortDown], 1, "{e:?}");
    h.check_accounting().unwrap();
}

/// The FDB is the switch's, the port table a worker's own copy: a port
/// added after the worker read its table may be learned (by another
/// worker) before this one reads the table again. A frame to it must not
/// be taken for a frame to a known port of the worker's table (it was:
/// an index past the worker's settings, and the queue's turn panicked).
#[test]
fn a_destination_learned_on_a_port_newer_than_the_workers_table_is_flooded() {
    let s = PortSettings {
        lro: false,
        ..PortSettings::default()
    };
    let mut h = Harness::new(
        &[(mac(1), 1, s.clone()), (mac(2), 1, s)],
        SwitchConfig::default(),
    );
    let mut out = Vec::new();
    assert!(h.send(0, 0, &tcp(1, 2, 0)));
    h.settle(20, &mut out);
    // As another worker would learn the newest port: an index the
    // stepped workers' tables do not have.
    h.sw.fdb.learn(0, mac(9), 7, std::time::Instant::now());
    out.clear();
    assert!(h.send(0, 0, &tcp(1, 9, 1)));
    h.settle(20, &mut out);
    assert!(
        out.iter().any(|(p, _)| *p == 1),
        "flooded to the ports the worker knows: {out:?}"
    );
    h.check_accounting().unwrap();
}

/// Broadcasts (ICMP, no table would hold them) between the segments of a
/// flow, to receivers with LRO on: each copy arrives unchanged, once at
/// every other port, and the flow's bytes arrive whole and in order.
#[test]
fn broadcasts_pass_lro_receivers_unchanged_beside_a_coalesced_flow() {
    let s = PortSettings::default();
    assert!(s.lro);
    let mut h = Harness::new(
        &[
            (mac(1), 1, s.clone()),
            (mac(2), 1, s.clone()),
            (mac(3), 1, s),
        ],
        SwitchConfig::default(),
    );
    let mut broadcast = TcpSpec {
        src_mac: mac(1).0,
        dst_mac: [0xff; 6],
        payload: vec![0x5a; 56],
        ..TcpSpec::default()
    }
    .build();
    // IP protocol ICMP, header checksum made again.
    broadcast[23] = 1;
    broadcast[24..26].fill(0);
    let c = hvnet_wire::checksum::checksum(&broadcast[14..34]);
    broadcast[24..26].copy_from_slice(&c.to_be_bytes());
    let mut out = Vec::new();
    for seq in 0..30u32 {
        assert!(h.send(0, 0, &tcp(1, 2, seq)));
        if seq % 3 == 0 {
            assert!(h.send(0, 0, &with_hdr(&broadcast)));
        }
        if seq % 7 == 0 {
            h.settle(5, &mut out);
        }
    }
    h.settle(100, &mut out);
    h.check_accounting().unwrap();
    for p in [1, 2] {
        let copies = out
            .iter()
            .filter(|(q, f)| *q == p && f[12..] == broadcast[..])
            .count();
        assert_eq!(copies, 10, "port {p}'s copies of the broadcast");
    }
    let payload: Vec<u8> = out
        .iter()
        .filter(|(q, f)| *q == 1 && f[12..] != broadcast[..])
        .flat_map(|(_, f)| f[12 + 54..].to_vec())
        .collect();
    let want: Vec<u8> = (0..30u32).flat_map(|s| vec![s as u8; 100]).collect();
    assert_eq!(payload, want, "the flow's bytes, whole and in order");
}
