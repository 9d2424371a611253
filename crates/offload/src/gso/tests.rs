use super::*;
use crate::csum;
use crate::gro::{GroConfig, GroOutput, GroTable};
use crate::testutil::{vxlan_wrap, TcpSpec, ACK};
use hvnet_wire::tcp::flags::*;
use hvnet_wire::virtio_net::{flags as vflags, Repr as Vnet};

fn big(v6: bool, len: usize, flags: u8) -> Vec<u8> {
    let base = if v6 {
        TcpSpec::v6()
    } else {
        TcpSpec::default()
    };
    TcpSpec {
        seq: 1000,
        ident: 500,
        flags,
        payload: (0..len).map(|i| (i * 7) as u8).collect(),
        ..base
    }
    .build()
}

fn collect(frame: &[u8], gso: GsoInfo, mode: CsumMode) -> Vec<(Vec<u8>, OffloadInfo)> {
    let mut v = Vec::new();
    let l = Layers::parse(frame).unwrap();
    segment(frame, &l, gso, mode, &mut |s| v.push((s.to_vec(), s.info))).unwrap();
    v
}

fn tcp_gso(kind: GsoType, size: u16) -> GsoInfo {
    GsoInfo {
        kind,
        size,
        ecn: false,
    }
}

#[test]
fn tcp4_segments_like_tcp_gso_segment() {
    let f = big(false, 65000, ACK | PSH | FIN | CWR);
    let segs = collect(&f, tcp_gso(GsoType::TcpV4, 1448), CsumMode::Full);
    assert_eq!(segs.len(), 65000usize.div_ceil(1448));
    let mut stream = Vec::new();
    for (i, (s, info)) in segs.iter().enumerate() {
        assert_eq!(info.csum, CsumState::Good);
        let (ip, rest) = etherparse::Ipv4Header::from_slice(&s[14..]).unwrap();
        assert_eq!(ip.total_len as usize, s.len() - 14);
        assert_eq!(ip.header_checksum, ip.calc_header_checksum());
        assert_eq!(ip.identification, 500 + i as u16, "ID increments");
        let (th, payload) = etherparse::TcpHeader::from_slice(rest).unwrap();
        assert_eq!(th.checksum, th.calc_checksum_ipv4(&ip, payload).unwrap());
        assert_eq!(th.sequence_number, 1000 + (i * 1448) as u32);
        let last = i + 1 == segs.len();
        assert_eq!(th.fin, last);
        assert_eq!(th.psh, last);
        assert_eq!(th.cwr, i == 0);
        assert!(th.ack);
        stream.extend_from_slice(payload);
    }
    assert_eq!(stream, f[54..]);
}

#[test]
fn tcp6_segments_and_partial_mode() {
    let f = big(true, 10000, ACK);
    let segs = collect(&f, tcp_gso(GsoType::TcpV6, 1428), CsumMode::Partial);
    assert_eq!(segs.len(), 8);
    for (s, info) in &segs {
        let (ip, _) = etherparse::Ipv6Header::from_slice(&s[14..]).unwrap();
        assert_eq!(ip.payload_length as usize, s.len() - 54);
        let CsumState::Partial { start, offset } = info.csum else {
            panic!()
        };
        assert_eq!((start, offset), (54, 16));
        let mut done = s.clone();
        crate::csum::complete_partial(&mut done, start, offset).unwrap();
        let l = hvnet_wire::Layers::parse(&done).unwrap();
        assert_eq!(
            crate::csum::validate_l4(&done, &l).unwrap(),
            CsumState::Good
        );
    }
}

#[test]
fn udp_l4_segments_are_datagrams() {
    // A UDP/IPv4 frame with 3000 bytes of payload.
    let mut f = big(false, 0, ACK);
    f.truncate(34);
    f[23] = 17;
    let payload: Vec<u8> = (0..3000).map(|i| i as u8).collect();
    f.extend_from_slice(&[0x13, 0x88, 0x13, 0x89, 0x0b, 0xc0, 0, 0]);
    f.extend_from_slice(&payload);
    let mut ip = hvnet_wire::Ipv4Packet::new_unchecked(&mut f[14..]);
    ip.set_total_len(20 + 8 + 3000);
    ip.fill_checksum();
    let segs = collect(
        &f,
        GsoInfo {
            kind: GsoType::UdpL4,
            size: 1400,
            ecn: false,
        },
        CsumMode::Full,
    );
    assert_eq!(segs.len(), 3);
    let mut stream = Vec::new();
    for (s, _) in &segs {
        let (ip, rest) = etherparse::Ipv4Header::from_slice(&s[14..]).unwrap();
        let (uh, data) = etherparse::UdpHeader::from_slice(rest).unwrap();
        assert_eq!(uh.length as usize, 8 + data.len());
        assert_eq!(uh.checksum, uh.calc_checksum_ipv4(&ip, data).unwrap());
        stream.extend_from_slice(data);
    }
    assert_eq!(stream, payload);
}

#[test]
fn vxlan_inner_tcp_is_segmented_with_outer_fixed() {
    let inner = big(false, 5000, ACK | PSH);
    let f = vxlan_wrap(&inner, 7, 49152, 100, true);
    let segs = collect(&f, tcp_gso(GsoType::TcpV4, 1400), CsumMode::Full);
    assert_eq!(segs.len(), 4);
    let mut stream = Vec::new();
    for (i, (s, _)) in segs.iter().enumerate() {
        let (oip, orest) = etherparse::Ipv4Header::from_slice(&s[14..]).unwrap();
        assert_eq!(oip.total_len as usize, s.len() - 14);
        assert_eq!(oip.identification, 100 + i as u16);
        assert_eq!(oip.header_checksum, oip.calc_header_checksum());
        let (uh, vx) = etherparse::UdpHeader::from_slice(orest).unwrap();
        assert_eq!(uh.checksum, uh.calc_checksum_ipv4(&oip, vx).unwrap());
        let inner = &vx[8..];
        let (iip, irest) = etherparse::Ipv4Header::from_slice(&inner[14..]).unwrap();
        let (th, payload) = etherparse::TcpHeader::from_slice(irest).unwrap();
        assert_eq!(th.checksum, th.calc_checksum_ipv4(&iip, payload).unwrap());
        assert_eq!(th.psh, i == 3);
        stream.extend_from_slice(payload);
    }
    assert_eq!(stream, inner[54..]);
}

#[test]
fn a_tunnel_endpoint_segments_its_own_vxlan_on_any_port() {
    let inner = big(false, 5000, ACK | PSH);
    let mut f = vxlan_wrap(&inner, 7, 49152, 100, false);
    // Linux's old VXLAN port: not VXLAN to anyone who only knows 4789.
    f[36..38].copy_from_slice(&8472u16.to_be_bytes());
    let l = Layers::parse(&f).unwrap();
    let g = tcp_gso(GsoType::TcpV4, 1400);
    let mut sink = |_: SegmentOut<'_>| {};
    assert_eq!(
        segment(&f, &l, g, CsumMode::Full, &mut sink),
        Err(GsoError::TypeMismatch)
    );
    // Parsed where the endpoint receives, on its own port, it is VXLAN.
    let l = Layers::parse_on(&f, 8472).unwrap();
    let mut segs = Vec::new();
    segment(&f, &l, g, CsumMode::Full, &mut |s| segs.push(s.to_vec())).unwrap();
    assert_eq!(segs.len(), 4);
    let mut stream = Vec::new();
    for s in &segs {
        let (oip, orest) = etherparse::Ipv4Header::from_slice(&s[14..]).unwrap();
        assert_eq!(oip.total_len as usize, s.len() - 14);
        let (uh, vx) = etherparse::UdpHeader::from_slice(orest).unwrap();
        assert_eq!(
            (uh.destination_port, uh.length as usize),
            (8472, vx.len() + 8)
        );
        let (iip, irest) = etherparse::Ipv4Header::from_slice(&vx[8 + 14..]).unwrap();
        let (th, payload) = etherparse::TcpHeader::from_slice(irest).unwrap();
        assert_eq!(th.checksum, th.calc_checksum_ipv4(&iip, payload).unwrap());
        stream.extend_from_slice(payload);
    }
    assert_eq!(stream, inner[54..]);
}

#[test]
fn impossible_headers_are_typed_errors() {
    let f = big(false, 3000, ACK);
    let l = Layers::parse(&f).unwrap();
    let mut sink = |_: SegmentOut<'_>| {};
    assert_eq!(
        segment(
            &f,
            &l,
            tcp_gso(GsoType::TcpV4, 0),
            CsumMode::Full,
            &mut sink
        ),
        Err(GsoError::ZeroGsoSize)
    );
    assert_eq!(
        segment(
            &f,
            &l,
            tcp_gso(GsoType::TcpV6, 1000),
            CsumMode::Full,
            &mut sink
        ),
        Err(GsoError::TypeMismatch)
    );
    assert_eq!(
        segment(
            &f,
            &l,
            GsoInfo {
                kind: GsoType::UdpL4,
                size: 1000,
                ecn: false
            },
            CsumMode::Full,
            &mut sink
        ),
        Err(GsoError::TypeMismatch)
    );
    // A frame whose headers do not parse never gets this far: the parser
    // refuses it where it enters.
    assert!(Layers::parse(&f[..40]).is_err());
    let good = Vnet {
        flags: vflags::NEEDS_CSUM,
        gso_type: GsoType::TcpV4,
        hdr_len: 54,
        gso_size: 1448,
        csum_start: 34,
        csum_offset: 16,
        ..Vnet::default()
    };
    assert!(validate_vnet(&f, &good, &l).is_ok());
    assert_eq!(
        validate_vnet(
            &f,
            &Vnet {
                hdr_len: 4000,
                ..good
            },
            &l
        ),
        Err(GsoError::HdrLenOutOfBounds)
    );
    assert_eq!(
        validate_vnet(
            &f,
            &Vnet {
                csum_start: 3100,
                ..good
            },
            &l
        ),
        Err(GsoError::BadCsumOffsets)
    );
    assert_eq!(
        validate_vnet(
            &f,
            &Vnet {
                csum_offset: 6,
                ..good
            },
            &l
        ),
        Err(GsoError::BadCsumOffsets)
    );
    assert_eq!(
        validate_vnet(
            &f,
            &Vnet {
                gso_size: 0,
                ..good
            },
            &l
        ),
        Err(GsoError::ZeroGsoSize)
    );
    assert_eq!(
        validate_vnet(
            &f,
            &Vnet {
                gso_type: GsoType::TcpV6,
                ..good
            },
            &l
        ),
        Err(GsoError::TypeMismatch)
    );
}

#[test]
fn small_frame_comes_out_whole() {
    let f = big(false, 500, ACK | PSH);
    let segs = collect(&f, tcp_gso(GsoType::TcpV4, 1448), CsumMode::Full);
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].0, f);
}

/// GSO then GRO gives back the original frame, byte for byte.
fn round_trip(f: &[u8], kind: GsoType, mss: u16) -> Vec<u8> {
    let segs = collect(f, tcp_gso(kind, mss), CsumMode::Full);
    let mut t = GroTable::new(GroConfig::default());
    let mut outs = Vec::new();
    t.coalesce_burst(
        segs.into_iter()
            .map(|(s, _)| crate::testutil::parsed(s, OffloadInfo::NONE)),
        0,
        &mut |o| outs.push(o),
    );
    assert_eq!(outs.len(), 1, "one run");
    match outs.pop().unwrap() {
        GroOutput::Coalesced(mut c) => {
            c.fill_checksums();
            c.to_vec()
        }
        GroOutput::Single { frame, .. } => frame,
    }
}

#[test]
fn gso_then_gro_is_identity() {
    for v6 in [false, true] {
        for flags in [ACK, ACK | PSH, ACK | FIN | PSH, ACK | ECE] {
            let f = big(v6, 30000, flags);
            let kind = if v6 { GsoType::TcpV6 } else { GsoType::TcpV4 };
            assert_eq!(round_trip(&f, kind, 1448), f, "v6 {v6} flags {flags:#x}");
        }
    }
}

#[test]
fn cwr_frame_comes_back_as_its_first_segment_and_the_rest() {
    // GSO puts CWR on the first segment only, and Linux 6.18 GRO never
    // holds a CWR segment, so the first segment stays alone.
    let f = big(false, 10 * 1448, ACK | CWR);
    let segs = collect(&f, tcp_gso(GsoType::TcpV4, 1448), CsumMode::Full);
    let mut t = GroTable::new(GroConfig::default());
    let mut outs = Vec::new();
    t.coalesce_burst(
        segs.into_iter()
            .map(|(s, _)| crate::testutil::parsed(s, OffloadInfo::NONE)),
        0,
        &mut |o| outs.push(o),
    );
    let lens: Vec<_> = outs.iter().map(|o| o.len() - 54).collect();
    assert_eq!(lens, vec![1448, 9 * 1448]);
}

#[test]
fn encapsulated_segments_over_ipv6_are_valid_on_the_wire() {
    let inner = big(false, 9000, ACK | PSH);
    let tunnel = crate::vxlan::Tunnel::new(
        42,
        "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap(),
        "2001:db8::2".parse::<std::net::Ipv6Addr>().unwrap(),
    );
    for mode in [CsumMode::Full, CsumMode::Partial] {
        let (whole, segs) =
            encapsulated_both_ways_in(&tunnel, &inner, tcp_gso(GsoType::TcpV4, 1400), mode);
        assert_eq!(whole, segs, "cut apart as put together");
        assert_eq!(segs.len(), 7);
        let mut stream = Vec::new();
        for (s, _) in &segs {
            let (oip, orest) = etherparse::Ipv6Header::from_slice(&s[14..]).unwrap();
            assert_eq!(oip.payload_length as usize, s.len() - 54);
            let (uh, vx) = etherparse::UdpHeader::from_slice(orest).unwrap();
            assert_eq!(uh.length as usize, vx.len() + 8);
            assert_eq!(uh.checksum, uh.calc_checksum_ipv6(&oip, vx).unwrap());
            let (iip, irest) = etherparse::Ipv4Header::from_slice(&vx[8 + 14..]).unwrap();
            let (th, payload) = etherparse::TcpHeader::from_slice(irest).unwrap();
            assert_eq!(th.checksum, th.calc_checksum_ipv4(&iip, payload).unwrap());
            stream.extend_from_slice(payload);
        }
        assert_eq!(stream, inner[54..]);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn prop_gso_then_gro_returns_the_frame(
        v6 in proptest::bool::ANY,
        len in 1usize..20000,
        mss in 1u16..3000,
        fl in proptest::sample::select(vec![ACK, ACK | PSH, ACK | FIN, ACK | ECE, ACK | PSH | ECE]),
        ts in proptest::bool::ANY,
    ) {
        let base = if v6 { TcpSpec::v6() } else { TcpSpec::default() };
        let options = if ts { vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2] } else { vec![] };
        let f = TcpSpec { seq: 7, ident: 9, flags: fl, options, payload: (0..len).map(|i| (i * 13) as u8).collect(), ..base }.build();
        let kind = if v6 { GsoType::TcpV6 } else { GsoType::TcpV4 };
        // Runs of more than 64 KiB of IP packet are split by GRO (Linux
        // does the same), so keep the frame under it.
        proptest::prop_assume!(f.len() - 14 < 65535);
        proptest::prop_assert_eq!(round_trip(&f, kind, mss), f);
    }

    #[test]
    fn prop_segment_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..400), size in 0u16..600, k in 0u8..6) {
        let kind = [GsoType::None, GsoType::TcpV4, GsoType::Udp, GsoType::TcpV6, GsoType::UdpL4, GsoType::TcpV4][k as usize];
        if let Ok(l) = Layers::parse(&data) {
            let _ = segment(&data, &l, GsoInfo { kind, size, ecn: false }, CsumMode::Full, &mut |_| {});
            let _ = segment(&data, &l, GsoInfo { kind, size, ecn: false }, CsumMode::Partial, &mut |_| {});
        }
    }
}

/// Segments as bytes, with their metadata.
type Segments = Vec<(Vec<u8>, OffloadInfo)>;

/// Segments of `inner` behind the outer header `encap_header` makes, both
/// ways: put together first and cut by `segment`, and cut apart
/// by `segment_encapsulated`.
fn encapsulated_both_ways(
    inner: &[u8],
    g: GsoInfo,
    mode: CsumMode,
    udp_csum: bool,
) -> (Segments, Segments) {
    let tunnel = crate::vxlan::Tunnel {
        udp_csum,
        ..crate::vxlan::Tunnel::new(42, [198, 18, 0, 1], [198, 18, 0, 2])
    };
    encapsulated_both_ways_in(&tunnel, inner, g, mode)
}

/// [`encapsulated_both_ways`] through `tunnel`.
fn encapsulated_both_ways_in(
    tunnel: &crate::vxlan::Tunnel,
    inner: &[u8],
    g: GsoInfo,
    mode: CsumMode,
) -> (Segments, Segments) {
    let rss = crate::rss::Rss::new(&crate::rss::DEFAULT_KEY, 1).unwrap();
    let il = Layers::parse(inner).unwrap();
    let info = OffloadInfo {
        gso: Some(g),
        csum: CsumState::Partial {
            start: il.transport().unwrap().offset as u16,
            offset: tcp::CHECKSUM_OFFSET as u16,
        },
    };
    let mut hdr = [0u8; crate::vxlan::MAX_OUTER_LEN];
    let hdr = &mut hdr[..tunnel.outer_len()];
    let hash = rss.hash(inner, &il).map(|(h, _)| h);
    crate::vxlan::encap_header(tunnel, inner, hash, info, hdr).unwrap();
    let whole = [&hdr[..], inner].concat();
    let wl = Layers::parse(&whole).unwrap();
    let mut a = Vec::new();
    segment(&whole, &wl, g, mode, &mut |s| a.push((s.to_vec(), s.info))).unwrap();
    let mut b = Vec::new();
    segment_encapsulated(hdr, inner, &il, g, mode, &mut |s| {
        // The payload is the inner frame's own bytes, not a copy.
        let at = s.payload.as_ptr() as usize - inner.as_ptr() as usize;
        assert!(at + s.payload.len() <= inner.len());
        b.push((s.to_vec(), s.info))
    })
    .unwrap();
    (a, b)
}

#[test]
fn encapsulated_segments_are_valid_on_the_wire() {
    let inner = big(false, 9000, ACK | PSH);
    let (_, segs) =
        encapsulated_both_ways(&inner, tcp_gso(GsoType::TcpV4, 1400), CsumMode::Full, true);
    assert_eq!(segs.len(), 7);
    let mut stream = Vec::new();
    for (s, _) in &segs {
        let (oip, orest) = etherparse::Ipv4Header::from_slice(&s[14..]).unwrap();
        assert_eq!(oip.total_len as usize, s.len() - 14);
        assert_eq!(oip.header_checksum, oip.calc_header_checksum());
        let (uh, vx) = etherparse::UdpHeader::from_slice(orest).unwrap();
        assert_eq!(uh.length as usize, vx.len() + 8);
        assert_eq!(uh.checksum, uh.calc_checksum_ipv4(&oip, vx).unwrap());
        let (iip, irest) = etherparse::Ipv4Header::from_slice(&vx[8 + 14..]).unwrap();
        let (th, payload) = etherparse::TcpHeader::from_slice(irest).unwrap();
        assert_eq!(th.checksum, th.calc_checksum_ipv4(&iip, payload).unwrap());
        stream.extend_from_slice(payload);
    }
    assert_eq!(stream, inner[54..]);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn prop_segmenting_before_encapsulating_equals_after(
        v6 in proptest::bool::ANY,
        len in 1usize..20000,
        mss in 536u16..3000,
        full in proptest::bool::ANY,
        udp_csum in proptest::bool::ANY,
    ) {
        let inner = big(v6, len, ACK | PSH);
        let kind = if v6 { GsoType::TcpV6 } else { GsoType::TcpV4 };
        let mode = if full { CsumMode::Full } else { CsumMode::Partial };
        let (a, b) = encapsulated_both_ways(&inner, tcp_gso(kind, mss), mode, udp_csum);
        proptest::prop_assert_eq!(a, b);
    }
}

// ---- Tagged frames (802.1Q, an 18-byte link header): what a trunk port
// hands the engines.

/// `f` with an 802.1Q tag of `vid` after its addresses.
fn tagged(f: &[u8], vid: u16) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    t.extend_from_slice(&[0x81, 0x00]);
    t.extend_from_slice(&vid.to_be_bytes());
    t.extend_from_slice(&f[12..]);
    t
}

#[test]
fn a_tagged_tso_frame_is_segmented_with_its_tag_on_every_segment() {
    for v6 in [false, true] {
        let plain = big(v6, 20000, ACK | PSH);
        let f = tagged(&plain, 10);
        let kind = if v6 { GsoType::TcpV6 } else { GsoType::TcpV4 };
        let segs = collect(&f, tcp_gso(kind, 1448), CsumMode::Full);
        let want = collect(&plain, tcp_gso(kind, 1448), CsumMode::Full);
        assert_eq!(segs.len(), want.len());
        for ((s, info), (w, winfo)) in segs.iter().zip(&want) {
            // Each segment is the untagged one's, tagged: lengths and
            // checksums (which the tag does not enter) the same.
            assert_eq!(*s, tagged(w, 10), "v6 {v6}");
            assert_eq!(info, winfo);
            let l = Layers::parse(s).unwrap();
            assert_eq!((l.l2_len(), l.outer_vlan()), (18, Some(10)));
            assert_eq!(csum::validate_l4(s, &l), Ok(CsumState::Good));
        }
        // Partial mode: the checksum start counts the tag.
        let partial = collect(&f, tcp_gso(kind, 1448), CsumMode::Partial);
        let l = Layers::parse(&partial[0].0).unwrap();
        assert_eq!(
            partial[0].1.csum,
            CsumState::Partial {
                start: l.transport().unwrap().offset as u16,
                offset: 16
            }
        );
        assert_eq!(round_trip(&f, kind, 1448), f, "GSO then GRO, tagged");
    }
}

#[test]
fn tagged_segments_coalesce_with_their_tag_and_vlans_never_mix() {
    let seg = |vid: u16, seq: u32| {
        tagged(
            &TcpSpec {
                seq: 1000 + seq * 500,
                payload: vec![seq as u8; 500],
                ..TcpSpec::default()
            }
            .build(),
            vid,
        )
    };
    // Interleaved VLANs 10 and 20 of one 5-tuple: two runs, each its own.
    let frames = [seg(10, 0), seg(20, 0), seg(10, 1), seg(20, 1), seg(10, 2)];
    let mut t = GroTable::new(GroConfig::default());
    let mut outs = Vec::new();
    t.coalesce_burst(
        frames
            .iter()
            .map(|f| crate::testutil::parsed(f.clone(), OffloadInfo::NONE)),
        0,
        &mut |o| outs.push(o),
    );
    let mut got: Vec<(u16, usize)> = outs
        .into_iter()
        .map(|o| {
            let f = match o {
                GroOutput::Coalesced(mut c) => {
                    c.fill_checksums();
                    c.to_vec()
                }
                GroOutput::Single { frame, .. } => frame,
            };
            let l = Layers::parse(&f).unwrap();
            assert_eq!(l.l2_len(), 18);
            assert_eq!(csum::validate_l4(&f, &l), Ok(CsumState::Good));
            let ip = l.net().unwrap();
            (l.outer_vlan().unwrap(), ip.end - l.payload_offset())
        })
        .collect();
    got.sort();
    assert_eq!(got, [(10, 1500), (20, 1000)]);
}

#[test]
fn checksums_and_rss_read_past_the_tag() {
    let plain = big(false, 1000, ACK);
    let f = tagged(&plain, 100);
    let (lp, lt) = (Layers::parse(&plain).unwrap(), Layers::parse(&f).unwrap());
    // A partial checksum completed at the tagged offsets is the untagged
    // frame's.
    let mut half = f.clone();
    let t = lt.transport().unwrap();
    let sum = csum::pseudo_header(&half, &lt.net().unwrap(), 6, (half.len() - t.offset) as u32);
    half[t.offset + 16..t.offset + 18].copy_from_slice(&sum.fold().to_be_bytes());
    csum::complete_partial(&mut half, t.offset as u16, 16).unwrap();
    assert_eq!(half, f);
    // RSS hashes the same flow to the same value, tag or not.
    let rss = crate::rss::Rss::new(&crate::rss::DEFAULT_KEY, 4).unwrap();
    assert_eq!(rss.hash(&f, &lt), rss.hash(&plain, &lp));
    assert!(rss.hash(&f, &lt).is_some());
}
