//! Trunk and access ports through the stepped switch: which frames reach
//! which port, with which tag, what is dropped and counted, and the
//! offloads on tagged frames.

use crate::counters::DropReason;
use crate::engine::SwitchConfig;
use crate::harness::Harness;
use crate::settings::PortSettings;
use crate::vlan::{VlanMode, VlanSet};
use hvnet_offload::testutil::TcpSpec;
use hvnet_wire::virtio_net::{GsoType, Repr as VirtioNetHdr};
use hvnet_wire::{Layers, MacAddr};

fn mac(i: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, i])
}

const BCAST: [u8; 6] = [0xff; 6];

fn access() -> PortSettings {
    PortSettings {
        lro: false,
        ..PortSettings::default()
    }
}

fn trunk(vlans: &str, native: Option<u16>) -> PortSettings {
    PortSettings {
        vlan_mode: VlanMode::Trunk,
        vlans: VlanSet::parse(vlans).unwrap(),
        native_vlan: native,
        ..access()
    }
}

/// A frame from port `from`'s MAC to `to` (a MAC), tagged with `vlan`,
/// with a zero virtio-net header in front.
fn frame(from: u8, to: [u8; 6], vlan: Option<u16>, seq: u32) -> Vec<u8> {
    let mut v = vec![0u8; 12];
    v.extend(
        TcpSpec {
            src_mac: mac(from).0,
            dst_mac: to,
            vlan,
            seq: 1000 + seq * 100,
            payload: vec![seq as u8; 100],
            ..TcpSpec::default()
        }
        .build(),
    );
    v
}

/// The outer tag's VID of a delivered frame (virtio-net header first).
fn tag_of(delivered: &[u8]) -> Option<u16> {
    Layers::parse(&delivered[12..]).unwrap().outer_vlan()
}

/// Ports: 0 a trunk of every VLAN, 1 a trunk of 10 and 20 with native
/// VLAN 5, 2 access VLAN 10, 3 access VLAN 5, 4 access VLAN 20, 5 the
/// untagged domain (access 0).
fn switch() -> Harness {
    let ports = [
        (mac(1), 1, trunk("", None)),
        (mac(2), 1, trunk("10,20", Some(5))),
        (mac(3), 1, access()),
        (mac(4), 1, access()),
        (mac(5), 1, access()),
        (mac(6), 1, access()),
    ];
    Harness::with_access_vlans(&ports, &[0, 0, 10, 5, 20, 0], SwitchConfig::default())
}

/// What each port got: (port, outer tag) of every delivered frame.
fn run(h: &mut Harness, frames: &[(usize, Vec<u8>)]) -> Vec<(usize, Option<u16>)> {
    for (p, f) in frames {
        assert!(h.send(*p, 0, f));
    }
    let mut out = Vec::new();
    h.settle(100, &mut out);
    h.check_accounting().unwrap();
    let mut got: Vec<_> = out.iter().map(|(p, f)| (*p, tag_of(f))).collect();
    got.sort();
    got
}

#[test]
fn a_broadcast_reaches_the_ports_of_its_vlan_tagged_as_each_carries_it() {
    let mut h = switch();
    // VLAN 10 from the full trunk: the other trunk tagged, access 10
    // untagged, nobody else.
    let got = run(&mut h, &[(0, frame(1, BCAST, Some(10), 0))]);
    assert_eq!(got, [(1, Some(10)), (2, None)]);
    // VLAN 5 from the access port: trunk 0 tagged, trunk 1 untagged (its
    // native VLAN).
    let got = run(&mut h, &[(3, frame(4, BCAST, None, 1))]);
    assert_eq!(got, [(0, Some(5)), (1, None)]);
    // Untagged from trunk 1 is VLAN 5; a priority tag (VID 0) too.
    let got = run(&mut h, &[(1, frame(2, BCAST, None, 2))]);
    assert_eq!(got, [(0, Some(5)), (3, None)]);
    let got = run(&mut h, &[(1, frame(2, BCAST, Some(0), 3))]);
    assert_eq!(got, [(0, Some(5)), (3, None)]);
    // VLAN 5 tagged from trunk 1 (its native VLAN, tagged): the same.
    let got = run(&mut h, &[(1, frame(2, BCAST, Some(5), 4))]);
    assert_eq!(got, [(0, Some(5)), (3, None)]);
    // The untagged domain stays apart from every trunk.
    let got = run(&mut h, &[(5, frame(6, BCAST, None, 5))]);
    assert_eq!(got, []);
    let dropped = |p: usize| h.sw.ports()[p].ingress_stats().dropped[DropReason::NoRoute];
    assert_eq!(dropped(5), 1, "flooded to nobody");
}

#[test]
fn frames_of_vlans_a_port_does_not_carry_are_dropped_and_counted() {
    let mut h = switch();
    let got = run(
        &mut h,
        &[
            // Trunk 1 allows 10 and 20 (and its native 5): not 30.
            (1, frame(2, BCAST, Some(30), 0)),
            // A tagged frame at an access port.
            (2, frame(3, BCAST, Some(10), 1)),
            // Untagged at a trunk without a native VLAN.
            (0, frame(1, BCAST, None, 2)),
        ],
    );
    assert_eq!(got, []);
    for p in [0, 1, 2] {
        let i = h.sw.ports()[p].ingress_stats();
        assert_eq!(i.dropped[DropReason::VlanNotAllowed], 1, "port {p}: {i:?}");
        assert_eq!(i.dropped[DropReason::Policy], 0);
    }
    // VLAN 30 from the full trunk reaches nobody: trunk 1 does not carry it.
    let got = run(&mut h, &[(0, frame(1, BCAST, Some(30), 3))]);
    assert_eq!(got, []);
}

#[test]
fn unicast_is_learned_per_vlan_and_goes_only_where_the_vlan_is() {
    let mut h = switch();
    // Port 2 (access 10) is known by its own address in VLAN 10 once it
    // sent; port 0 reaches it tagged 10, and gets the answer tagged 10.
    let got = run(
        &mut h,
        &[
            (2, frame(3, BCAST, None, 0)),
            (0, frame(1, mac(3).0, Some(10), 1)),
            (2, frame(3, mac(1).0, None, 2)),
        ],
    );
    // The broadcast to both trunks tagged 10; then one frame each way.
    assert_eq!(
        got,
        [(0, Some(10)), (0, Some(10)), (1, Some(10)), (2, None)]
    );
    // The same address in VLAN 20 is another entry: unknown there, so
    // flooded to VLAN 20 (trunk 1 and access 20), never to port 2.
    let got = run(&mut h, &[(0, frame(1, mac(3).0, Some(20), 3))]);
    assert_eq!(got, [(1, Some(20)), (4, None)]);
}

#[test]
fn a_run_time_change_of_vlans_takes_effect_and_flushes_what_was_learned() {
    let mut h = switch();
    // Port 0 learned in VLANs 10 and 20.
    run(
        &mut h,
        &[
            (0, frame(1, BCAST, Some(10), 0)),
            (0, frame(1, BCAST, Some(20), 1)),
        ],
    );
    let learned = |h: &Harness| {
        let mut v: Vec<u16> =
            h.sw.fdb
                .rows(std::time::Instant::now())
                .into_iter()
                .filter(|r| r.port == 0 && r.kind == "learned")
                .map(|r| r.vlan)
                .collect();
        v.sort();
        v
    };
    assert_eq!(learned(&h), [10, 20]);
    h.sw.set_port("p0", trunk("20,100-199", Some(10))).unwrap();
    assert_eq!(learned(&h), [10, 20], "10 is its native VLAN now");
    h.sw.set_port("p0", trunk("100-199", None)).unwrap();
    assert_eq!(learned(&h), Vec::<u16>::new());
    let got = run(&mut h, &[(0, frame(1, BCAST, Some(10), 2))]);
    assert_eq!(got, []);
    let i = h.sw.ports()[0].ingress_stats();
    assert_eq!(i.dropped[DropReason::VlanNotAllowed], 1);
    // Back to access (its VLAN 0): untagged frames go to the untagged
    // domain, tagged ones are dropped.
    h.sw.set_port("p0", access()).unwrap();
    let got = run(
        &mut h,
        &[
            (0, frame(1, BCAST, None, 3)),
            (0, frame(1, BCAST, Some(100), 4)),
        ],
    );
    assert_eq!(got, [(5, None)]);
    let i = h.sw.ports()[0].ingress_stats();
    assert_eq!(i.dropped[DropReason::VlanNotAllowed], 2);
}

#[test]
fn an_access_port_moved_to_another_vlan_at_run_time_switches_there_only() {
    let mut h = switch();
    // Port 5 (the untagged domain) and port 2 (access 10) make
    // themselves known.
    run(
        &mut h,
        &[(5, frame(6, BCAST, None, 0)), (2, frame(3, BCAST, None, 1))],
    );
    let own = |h: &Harness, vlan: u16| h.sw.fdb.pinned_to(vlan, mac(6));
    assert_eq!(own(&h, 0), Some(5));
    assert_eq!(h.sw.set_access_vlan("p5", 10), Ok(0));
    assert_eq!(h.sw.ports()[5].vlan(), 10);
    // Its own address moved with it; nothing of it is left in VLAN 0.
    assert_eq!((own(&h, 0), own(&h, 10)), (None, Some(5)));
    // A broadcast of VLAN 10 now reaches it (untagged), and its frames
    // reach VLAN 10's ports, tagged at the trunks that carry it.
    let got = run(&mut h, &[(2, frame(3, BCAST, None, 2))]);
    assert_eq!(got, [(0, Some(10)), (1, Some(10)), (5, None)]);
    let got = run(&mut h, &[(5, frame(6, mac(3).0, None, 3))]);
    assert_eq!(got, [(2, None)]);
    // An uplink's VLAN and one past 4094 are refused.
    assert!(h.sw.set_access_vlan("p5", 4095).is_err());
    assert_eq!(
        h.sw.ports()[5].vlan(),
        10,
        "a refused change changes nothing"
    );
    assert!(h.sw.set_access_vlan("nobody", 7).is_err());
}
/// A TSO frame of `segments` MSS-sized segments from `from` to `to`,
/// tagged `vlan`, with its virtio-net header (partial checksum).
fn tso(from: u8, to: u8, vlan: Option<u16>, segments: usize) -> Vec<u8> {
    let mss = 1000;
    let f = TcpSpec {
        src_mac: mac(from).0,
        dst_mac: mac(to).0,
        vlan,
        payload: (0..mss * segments).map(|i| i as u8).collect(),
        ..TcpSpec::default()
    }
    .build();
    let l = Layers::parse(&f).unwrap();
    let t = l.transport().unwrap();
    let hdr = VirtioNetHdr {
        flags: hvnet_wire::virtio_net::flags::NEEDS_CSUM,
        gso_type: GsoType::TcpV4,
        gso_ecn: false,
        hdr_len: l.payload_offset() as u16,
        gso_size: mss as u16,
        csum_start: t.offset as u16,
        csum_offset: 16,
        num_buffers: 1,
    };
    let mut v = vec![0u8; 12];
    hdr.emit(&mut v[..], 12);
    v.extend(f);
    v
}

#[test]
fn a_tagged_tso_frame_is_segmented_untagged_for_an_access_port_and_kept_whole_for_a_trunk() {
    // 0: trunk (takes GSO whole, LRO on); 1: access 10 without LRO (gets
    // segments); 2: access 10 with LRO (takes the frame whole, untagged).
    let lro = PortSettings::default();
    let ports = [
        (
            mac(1),
            1,
            PortSettings {
                vlan_mode: VlanMode::Trunk,
                ..lro.clone()
            },
        ),
        (mac(2), 1, access()),
        (mac(3), 1, lro.clone()),
        (mac(4), 1, access()),
    ];
    let mut h = Harness::with_access_vlans(&ports, &[0, 10, 10, 10], SwitchConfig::default());
    // Everyone's address known first.
    run(
        &mut h,
        &[(1, frame(2, BCAST, None, 0)), (2, frame(3, BCAST, None, 1))],
    );
    for (to, want) in [(2u8, 1usize), (3, 2)] {
        assert!(h.send(0, 0, &tso(1, to, Some(10), 4)));
        let mut out = Vec::new();
        h.settle(100, &mut out);
        h.check_accounting().unwrap();
        let mine: Vec<_> = out.iter().filter(|(p, _)| *p == want).collect();
        assert!(!mine.is_empty(), "port {want} got nothing: {out:?}");
        let mut payload = Vec::new();
        for (_, f) in &mine {
            let hdr = VirtioNetHdr::parse(&f[..12], 12).unwrap();
            let frame = &f[12..];
            let l = Layers::parse(frame).unwrap();
            assert_eq!(l.l2().vlans, [None, None], "untagged to an access port");
            assert_eq!(l.l2_len(), 14);
            if hdr.needs_csum() {
                assert_eq!(hdr.csum_start as usize, l.transport().unwrap().offset);
            }
            if hdr.gso_type != GsoType::None {
                assert_eq!(hdr.hdr_len as usize, l.payload_offset());
            }
            payload.extend_from_slice(&frame[l.payload_offset()..l.net().unwrap().end]);
        }
        let want_payload: Vec<u8> = (0..4000).map(|i| i as u8).collect();
        assert_eq!(payload, want_payload);
        if want == 1 {
            assert_eq!(mine.len(), 4, "segmented for a port without LRO");
        } else {
            assert_eq!(mine.len(), 1, "whole for a port with LRO");
        }
    }
    // Untagged segments from access 10 coalesce into one tagged frame for
    // the trunk guest (LRO on): its headers and checksum start moved by
    // the tag.
    let mut segs = Vec::new();
    for i in 0..4u32 {
        let mut v = vec![0u8; 12];
        v.extend(
            TcpSpec {
                src_mac: mac(2).0,
                dst_mac: mac(1).0,
                seq: 5000 + i * 500,
                payload: vec![i as u8; 500],
                ..TcpSpec::default()
            }
            .build(),
        );
        segs.push((1usize, v));
    }
    // The trunk's address in VLAN 10 learned first.
    run(&mut h, &[(0, frame(1, BCAST, Some(10), 9))]);
    for (p, f) in &segs {
        assert!(h.send(*p, 0, f));
    }
    let mut out = Vec::new();
    h.settle(100, &mut out);
    h.check_accounting().unwrap();
    let to_trunk: Vec<_> = out.iter().filter(|(p, _)| *p == 0).collect();
    assert_eq!(to_trunk.len(), 1, "coalesced: {}", to_trunk.len());
    let f = &to_trunk[0].1;
    let hdr = VirtioNetHdr::parse(&f[..12], 12).unwrap();
    let l = Layers::parse(&f[12..]).unwrap();
    assert_eq!(l.outer_vlan(), Some(10));
    assert_eq!(l.l2_len(), 18);
    assert_eq!(hdr.gso_type, GsoType::TcpV4);
    assert_eq!(hdr.hdr_len as usize, l.payload_offset());
    assert_eq!(hdr.csum_start as usize, l.transport().unwrap().offset);
    assert_eq!(l.net().unwrap().end - l.payload_offset(), 2000);
}
