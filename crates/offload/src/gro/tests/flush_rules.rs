//! One test per flush rule beyond the selftest, the table's bookkeeping,
//! and properties.

use super::*;
// ---- One test per flush rule beyond the selftest.

#[test]
fn cwr_segment_ends_the_run_and_goes_up_alone() {
    let c = TcpSpec {
        flags: ACK | CWR,
        ..seg(1, P)
    }
    .build();
    assert_eq!(
        run(&[seg(0, P).build(), c.clone(), seg(2, P).build()]),
        vec![100, 100, 100]
    );
    let first = TcpSpec {
        flags: ACK | CWR,
        ..seg(0, P)
    }
    .build();
    assert_eq!(
        run(&[first, seg(1, P).build(), seg(2, P).build()]),
        vec![100, 200]
    );
}

#[test]
fn ece_difference_flushes() {
    let e = TcpSpec {
        flags: ACK | ECE,
        ..seg(1, P)
    }
    .build();
    assert_eq!(run(&[seg(0, P).build(), e]), vec![100, 100]);
}

#[test]
fn fin_is_merged_then_flushes() {
    let f = TcpSpec {
        flags: ACK | FIN,
        ..seg(1, P)
    }
    .build();
    let out = run_out(&[seg(0, P).build(), f]);
    assert_eq!(out.len(), 1);
    let v = out[0].to_vec();
    let l = hvnet_wire::Layers::parse(&v).unwrap();
    assert_eq!(v[l.transport().unwrap().offset + 13] & FIN, FIN);
}

#[test]
fn ack_number_difference_flushes() {
    let a = TcpSpec {
        ack: 5000,
        ..seg(1, P)
    }
    .build();
    assert_eq!(run(&[seg(0, P).build(), a]), vec![100, 100]);
}

#[test]
fn different_flows_never_merge() {
    let other = TcpSpec {
        src_port: 1501,
        seq: 200,
        ..seg(0, P)
    }
    .build();
    let out = run(&[seg(0, P).build(), other, seg(1, P).build()]);
    assert_eq!(out, vec![200, 100]);
}

#[test]
fn ipv6_flow_label_makes_a_different_flow() {
    let other = TcpSpec {
        flow_label: 7,
        ..seg6(1, P)
    }
    .build();
    assert_eq!(run(&[seg6(0, P).build(), other]), vec![100, 100]);
}

#[test]
fn hop_limit_difference_flushes_ipv6() {
    let other = TcpSpec {
        ttl: 9,
        ..seg6(1, P)
    }
    .build();
    assert_eq!(run(&[seg6(0, P).build(), other]), vec![100, 100]);
}

#[test]
fn padded_frame_flushes_its_flow_and_passes() {
    // A 4-byte payload frame padded to the Ethernet minimum.
    let mut small = seg(1, 4).build();
    small.resize(60, 0);
    let out = run(&[seg(0, P).build(), small]);
    assert_eq!(out, vec![100, 4]);
}

#[test]
fn vlan_tag_is_part_of_the_flow() {
    let a = TcpSpec {
        vlan: Some(100),
        ..seg(0, P)
    }
    .build();
    let b = TcpSpec {
        vlan: Some(100),
        ..seg(1, P)
    }
    .build();
    let c = TcpSpec {
        vlan: Some(200),
        ..seg(2, P)
    }
    .build();
    assert_eq!(run(&[a, b, c]), vec![200, 100]);
}

#[test]
fn eviction_of_oldest_when_bucket_full() {
    let mut t = GroTable::new(GroConfig {
        buckets: 1,
        flows_per_bucket: 2,
        ..GroConfig::default()
    });
    let mut outs = Vec::new();
    for port in 0..3u16 {
        let f = TcpSpec {
            src_port: 1000 + port,
            ..seg(0, P)
        }
        .build();
        let l = hvnet_wire::Layers::parse(&f).unwrap();
        t.receive(f, OffloadInfo::NONE, &l, 0, &mut |o| outs.push(o));
    }
    assert_eq!(outs.len(), 1);
    assert_eq!(t.stats().flushed(FlushReason::Evicted), 1);
    let first = outs[0].to_vec();
    assert_eq!(
        hvnet_wire::TcpPacket::new_unchecked(&first[34..]).src_port(),
        1000
    );
}

#[test]
fn timeout_flush_uses_passed_in_time() {
    let mut t = GroTable::new(GroConfig {
        flush_timeout: 50,
        ..GroConfig::default()
    });
    let mut n = 0;
    let f = seg(0, P).build();
    let l = hvnet_wire::Layers::parse(&f).unwrap();
    t.receive(f, OffloadInfo::NONE, &l, 10, &mut |_| n += 1);
    t.flush_expired(59, &mut |_| n += 1);
    assert_eq!((n, t.held()), (0, 1));
    t.flush_expired(60, &mut |_| n += 1);
    assert_eq!((n, t.held()), (1, 0));
    assert_eq!(t.stats().flushed(FlushReason::Aged), 1);
}

#[test]
fn coalesced_frame_has_kernel_style_metadata_and_valid_checksums() {
    let frames: Vec<_> = (0..4)
        .map(|i| {
            TcpSpec {
                ident: 8 + i as u16,
                ..seg(i, P)
            }
            .build()
        })
        .collect();
    let mut out = run_out(&frames);
    assert_eq!(out.len(), 1);
    let GroOutput::Coalesced(c) = &mut out[0] else {
        panic!("not coalesced")
    };
    assert_eq!(c.count, 4);
    assert_eq!(
        c.info.gso,
        Some(GsoInfo {
            kind: GsoType::TcpV4,
            size: 100,
            ecn: false
        })
    );
    assert_eq!(
        c.info.csum,
        CsumState::Partial {
            start: 34,
            offset: 16
        }
    );
    assert_eq!(c.info.to_vnet(c.header().len() as u16).hdr_len, 54);
    c.fill_checksums();
    let v = c.to_vec();
    let (ip, rest) = etherparse::Ipv4Header::from_slice(&v[14..]).unwrap();
    assert_eq!(ip.total_len as usize, v.len() - 14);
    assert_eq!(ip.header_checksum, ip.calc_header_checksum());
    let (th, payload) = etherparse::TcpHeader::from_slice(rest).unwrap();
    assert_eq!(th.checksum, th.calc_checksum_ipv4(&ip, payload).unwrap());
    assert_eq!(payload.len(), 400);
}

#[test]
fn vxlan_inner_tcp_coalesces_and_outer_is_rewritten() {
    let mk = |i: u32, outer_id: u16| {
        let inner = TcpSpec {
            ident: i as u16,
            ..seg(i, P)
        }
        .build();
        vxlan_wrap(&inner, 42, 50000, outer_id, true)
    };
    let frames = vec![mk(0, 1), mk(1, 2), mk(2, 3)];
    let mut out = run_out(&frames);
    assert_eq!(out.len(), 1);
    let GroOutput::Coalesced(c) = &mut out[0] else {
        panic!("not coalesced")
    };
    assert_eq!(c.count, 3);
    c.fill_checksums();
    let v = c.to_vec();
    let outer = etherparse::SlicedPacket::from_ethernet(&v).unwrap();
    let Some(etherparse::NetSlice::Ipv4(ip)) = outer.net else {
        panic!()
    };
    assert_eq!(ip.header().total_len() as usize, v.len() - 14);
    let Some(etherparse::TransportSlice::Udp(u)) = outer.transport else {
        panic!()
    };
    assert_eq!(u.length() as usize, v.len() - 34);
    let ph = hvnet_wire::Ipv4Packet::new_unchecked(&v[14..]).pseudo_header(u.length() as u32);
    assert!(hvnet_wire::checksum::verifies(ph.add_bytes(&v[34..])));
    // A different VNI is a different flow.
    let other = vxlan_wrap(&seg(1, P).build(), 43, 50000, 2, true);
    assert_eq!(run_out(&[mk(0, 1), other]).len(), 2);
}

#[test]
fn vxlan_is_vxlan_to_gro_as_its_parse_found_it() {
    // A stack parsed for a tunnel endpoint on another port has no VXLAN
    // for a frame on IANA's: GRO takes it as the parse does, plain UDP.
    let f = vxlan_wrap(&seg(0, P).build(), 42, 50000, 1, true);
    let mut t = GroTable::new(GroConfig::default());
    let l = hvnet_wire::Layers::parse_on(&f, 8472).unwrap();
    assert!(l.vxlan().is_none());
    let mut n = 0;
    let r = t.receive(f.clone(), OffloadInfo::NONE, &l, 0, &mut |_| n += 1);
    assert_eq!((r, n), (GroResult::Normal, 1));
    assert_eq!(t.stats().passed(PassReason::NotTcp), 1);
    // Parsed on IANA's port, its inner TCP is held.
    let l = hvnet_wire::Layers::parse(&f).unwrap();
    let r = t.receive(f, OffloadInfo::NONE, &l, 0, &mut |_| n += 1);
    assert_eq!((r, n, t.held()), (GroResult::Held, 1, 1));
}

#[test]
fn gso_input_is_never_merged_and_flushes_its_flow() {
    let mut t = GroTable::new(GroConfig::default());
    let mut outs = Vec::new();
    let (f0, f1) = (seg(0, P).build(), seg(1, P).build());
    let (l0, l1) = (
        hvnet_wire::Layers::parse(&f0).unwrap(),
        hvnet_wire::Layers::parse(&f1).unwrap(),
    );
    t.receive(f0, OffloadInfo::NONE, &l0, 0, &mut |o| outs.push(o));
    let gso = OffloadInfo {
        gso: Some(GsoInfo {
            kind: GsoType::TcpV4,
            size: 50,
            ecn: false,
        }),
        csum: CsumState::Good,
    };
    assert_eq!(
        t.receive(f1, gso, &l1, 0, &mut |o| outs.push(o)),
        GroResult::Normal
    );
    assert_eq!(outs.len(), 2);
}

#[test]
fn counters_account_for_every_frame() {
    let frames = vec![seg(0, P).build(), seg(1, P).build(), fin(), vec![0u8; 10]];
    let mut t = GroTable::new(GroConfig::default());
    let mut n = 0;
    t.coalesce_burst(
        frames.into_iter().map(|f| parsed(f, OffloadInfo::NONE)),
        0,
        &mut |_| n += 1,
    );
    let s = t.stats();
    assert_eq!(s.frames_in, 4);
    assert_eq!(s.frames_out, n);
    assert_eq!(s.passed(PassReason::Malformed), 1);
    assert_eq!(
        s.merged + s.held + s.normal + s.passed.iter().sum::<u64>(),
        s.frames_in
    );
    assert_eq!(s.frames_in, s.frames_out + s.merged);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// Segments of up to four flows, interleaved at random, with random
    /// sizes, flags and gaps: a coalesced frame only ever holds segments of
    /// one flow, in sequence, and every frame is accounted for.
    #[test]
    fn prop_gro_never_merges_across_flows(
        steps in proptest::collection::vec((0u16..4, 1usize..300, 0u8..10, 0u8..20), 1..80),
    ) {
        let mut next_seq = [1000u32; 4];
        let mut frames = Vec::new();
        for (flow, len, flagpick, gap) in steps {
            let flags = match flagpick { 0 => ACK | PSH, 1 => ACK | FIN, _ => ACK };
            let seq = next_seq[flow as usize] + if gap == 0 { 1 } else { 0 };
            let spec = TcpSpec {
                src_port: 5000 + flow,
                seq,
                flags,
                ident: seq as u16,
                payload: vec![flow as u8 + 1; len],
                ..TcpSpec::default()
            };
            next_seq[flow as usize] = seq + len as u32;
            frames.push(spec.build());
        }
        let n_in = frames.len();
        let mut t = GroTable::new(GroConfig { buckets: 2, flows_per_bucket: 2, ..GroConfig::default() });
        let mut outs = Vec::new();
        t.coalesce_burst(frames.into_iter().map(|f| parsed(f, OffloadInfo::NONE)), 0, &mut |o| outs.push(o));
        let mut segments = 0;
        for o in &outs {
            let v = o.to_vec();
            let port = u16::from_be_bytes([v[34], v[35]]);
            let marker = (port - 5000) as u8 + 1;
            proptest::prop_assert!(v[54..].iter().all(|&b| b == marker), "payload of another flow inside a run");
            segments += match o { GroOutput::Coalesced(c) => c.count as usize, _ => 1 };
        }
        proptest::prop_assert_eq!(segments, n_in);
        proptest::prop_assert_eq!(t.stats().frames_in, t.stats().frames_out + t.stats().merged);
    }

    /// Arbitrary bytes, with or without a claimed-good checksum: no panic,
    /// and the counters add up.
    #[test]
    fn prop_gro_never_panics(frames in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..200), 0..20), good in proptest::bool::ANY) {
        let mut t = GroTable::new(GroConfig { buckets: 1, flows_per_bucket: 2, ..GroConfig::default() });
        let csum = if good { CsumState::Good } else { CsumState::Unknown };
        let mut n = 0u64;
        t.coalesce_burst(frames.into_iter().map(|f| parsed(f, OffloadInfo { gso: None, csum })), 0, &mut |_| n += 1);
        proptest::prop_assert_eq!(t.stats().frames_out, n);
        proptest::prop_assert_eq!(t.stats().frames_in, n + t.stats().merged);
    }

    /// A frame `may_coalesce` turns away (a TCP segment's IP protocol or
    /// EtherType rewritten at random) is what the table passes on at
    /// once: one output, the same bytes, the run it holds untouched — so
    /// the switch may pass it on without a table.
    #[test]
    fn prop_frames_turned_away_pass_the_table_unchanged(
        proto in proptest::num::u8::ANY,
        ethertype in proptest::option::of(proptest::num::u16::ANY),
        good in proptest::bool::ANY,
    ) {
        let mut f = TcpSpec { payload: vec![7; 40], ..TcpSpec::default() }.build();
        f[23] = proto;
        if let Some(e) = ethertype {
            f[12..14].copy_from_slice(&e.to_be_bytes());
        }
        let Ok(l) = hvnet_wire::Layers::parse(&f) else { return Ok(()) };
        let away = !may_coalesce(&l);
        let is_ip = l.net().is_some();
        proptest::prop_assert_eq!(away, !is_ip || !matches!(proto, 6 | 17));
        if !away {
            return Ok(());
        }
        let mut t = GroTable::new(GroConfig::default());
        let held = seg(0, P).build();
        let hl = hvnet_wire::Layers::parse(&held).unwrap();
        t.receive(held, OffloadInfo::NONE, &hl, 0, &mut |_| {});
        proptest::prop_assert_eq!(t.held(), 1);
        let csum = if good { CsumState::Good } else { CsumState::Unknown };
        let mut outs = Vec::new();
        t.receive(f.clone(), OffloadInfo { gso: None, csum }, &l, 0, &mut |o| outs.push(o));
        proptest::prop_assert_eq!(t.held(), 1);
        proptest::prop_assert_eq!(outs.len(), 1);
        match &outs[0] {
            GroOutput::Single { frame, info } => {
                proptest::prop_assert_eq!(frame, &f);
                let same = info.csum == csum || (csum == CsumState::Unknown && info.csum == CsumState::Bad);
                proptest::prop_assert!(same, "checksum state {:?} from {:?}", info.csum, csum);
            }
            GroOutput::Coalesced(_) => proptest::prop_assert!(false, "coalesced"),
        }
    }
}
