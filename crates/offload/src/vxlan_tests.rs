use super::*;
use crate::rss::{Rss, DEFAULT_KEY};
use crate::testutil::TcpSpec;

/// The inner frame's flow hash, from its stack parsed here (as where
/// it enters the switch).
fn hash(inner: &[u8]) -> Option<u32> {
    let rss = Rss::new(&DEFAULT_KEY, 1).unwrap();
    crate::testutil::rss_hash(&rss, inner).map(|(h, _)| h)
}

/// Decapsulation of a frame parsed here, on IANA's port.
fn decap_bytes(f: &[u8], info: OffloadInfo) -> Result<Decapped, VxlanError> {
    decap(f, &Layers::parse(f).unwrap(), info, vxlan::PORT)
}

#[test]
fn encap_then_decap_round_trips() {
    let inner = TcpSpec::default().build();
    let t = Tunnel {
        udp_csum: true,
        ..Tunnel::new(0xabcdef, [10, 0, 0, 1], [10, 0, 0, 2])
    };
    let (f, info) = encap(&t, &inner, hash(&inner), OffloadInfo::NONE).unwrap();
    let d = decap_bytes(&f, info).unwrap();
    assert_eq!(d.vni, 0xabcdef);
    assert_eq!(&f[d.inner_offset..d.inner_end], &inner[..]);
    // etherparse agrees on the outer headers and the UDP checksum.
    let (ip, rest) = etherparse::Ipv4Header::from_slice(&f[14..]).unwrap();
    let (uh, data) = etherparse::UdpHeader::from_slice(rest).unwrap();
    assert_eq!(uh.destination_port, 4789);
    assert_eq!(uh.checksum, uh.calc_checksum_ipv4(&ip, data).unwrap());
    assert!((32768..61000).contains(&uh.source_port));
}

/// An inner frame given as its headers and its payload apart makes the
/// outer headers it makes whole, checksums included (full and
/// partial inner checksums, over IPv4 with an outer checksum and over
/// IPv6); a split that is odd or leaves the partial checksum's field
/// behind is refused.
#[test]
fn a_split_inner_frame_makes_the_same_outer_headers() {
    let inner = TcpSpec::default().build();
    let at = Layers::parse(&inner).unwrap().payload_offset();
    let partial = OffloadInfo {
        gso: None,
        csum: CsumState::Partial {
            start: 34,
            offset: 16,
        },
    };
    let v4 = Tunnel {
        udp_csum: true,
        ..Tunnel::new(7, [10, 0, 0, 1], [10, 0, 0, 2])
    };
    let v6 = Tunnel::new(
        7,
        std::net::Ipv6Addr::LOCALHOST,
        std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
    );
    for (t, info) in [
        (&v4, OffloadInfo::NONE),
        (&v4, partial),
        (&v6, OffloadInfo::NONE),
        (&v6, partial),
    ] {
        let mut whole = [0u8; MAX_OUTER_LEN];
        let mut split = [0u8; MAX_OUTER_LEN];
        let a = encap_header(t, &inner, None, info, &mut whole).unwrap();
        let b =
            encap_header_split(t, (&inner[..at], &inner[at..]), None, info, &mut split).unwrap();
        assert_eq!(
            (a, &whole[..]),
            (b, &split[..]),
            "{info:?} over {}",
            t.remote
        );
    }
    let mut out = [0u8; MAX_OUTER_LEN];
    assert_eq!(
        encap_header_split(
            &v4,
            (&inner[..15], &inner[15..]),
            None,
            OffloadInfo::NONE,
            &mut out
        ),
        Err(VxlanError::BadSplit)
    );
    assert_eq!(
        encap_header_split(&v4, (&inner[..34], &inner[34..]), None, partial, &mut out),
        Err(VxlanError::BadSplit)
    );
}

#[test]
fn a_traced_frames_mark_is_in_headers_every_endpoint_takes() {
    let inner = TcpSpec::default().build();
    let mark = OuterMark {
        kind: MARK_SYNTHETIC,
        token: 0x1234,
    };
    let t = Tunnel {
        udp_csum: true,
        mark: Some(mark),
        ..Tunnel::new(42, [10, 0, 0, 1], [10, 0, 0, 2])
    };
    let (f, info) = encap(&t, &inner, hash(&inner), OffloadInfo::NONE).unwrap();
    // etherparse: the IP header's checksum and the UDP checksum hold
    // with the mark in; the VXLAN header is as any other's.
    let (ip, rest) = etherparse::Ipv4Header::from_slice(&f[14..]).unwrap();
    assert_eq!(ip.header_checksum, ip.calc_header_checksum());
    assert!(ip.dont_fragment && ip.identification == 0x1234);
    let (uh, data) = etherparse::UdpHeader::from_slice(rest).unwrap();
    assert_eq!(uh.checksum, uh.calc_checksum_ipv4(&ip, data).unwrap());
    assert_eq!(&data[..8], &[0x08, 0, 0, 0, 0, 0, 42, 0]);
    assert_eq!(
        OuterMark::read(uh.source_port, u32::from(ip.identification)),
        Some(mark)
    );
    assert_eq!(decap_bytes(&f, info).unwrap().vni, 42);
    // Unmarked frames never read as marked: their ports are Linux's range.
    assert_eq!(OuterMark::read(40000, 7), None);
    assert_eq!(OuterMark::read(MARK_TRACED, 0), None);
}

#[test]
fn over_ipv6_the_outer_checksum_is_always_made() {
    let inner = TcpSpec::default().build();
    let (l, r): (std::net::Ipv6Addr, std::net::Ipv6Addr) = (
        "2001:db8::1".parse().unwrap(),
        "2001:db8::2".parse().unwrap(),
    );
    // udp_csum off, as Linux's IPv4 default: over IPv6 it is made anyway.
    let t = Tunnel::new(0x1234, l, r);
    let (f, info) = encap(&t, &inner, hash(&inner), OffloadInfo::NONE).unwrap();
    assert_eq!(f.len(), OUTER_LEN_V6 + inner.len());
    let d = decap_bytes(&f, info).unwrap();
    assert_eq!(
        (d.vni, &f[d.inner_offset..d.inner_end]),
        (0x1234, &inner[..])
    );
    let (ip, rest) = etherparse::Ipv6Header::from_slice(&f[14..]).unwrap();
    let (uh, data) = etherparse::UdpHeader::from_slice(rest).unwrap();
    assert_eq!((ip.source, ip.destination), (l.octets(), r.octets()));
    assert_eq!(uh.destination_port, 4789);
    assert_ne!(uh.checksum, 0);
    assert_eq!(uh.checksum, uh.calc_checksum_ipv6(&ip, data).unwrap());
    // Mixed families make no tunnel.
    let mixed = Tunnel::new(1, l, [10, 0, 0, 2]);
    assert_eq!(
        encap(&mixed, &inner, None, OffloadInfo::NONE).unwrap_err(),
        VxlanError::MixedFamilies
    );
}

#[test]
fn partial_inner_checksum_is_kept_and_lco_is_right() {
    let inner = TcpSpec {
        payload: vec![7u8; 3000],
        ..TcpSpec::default()
    }
    .build();
    let l = Layers::parse(&inner).unwrap();
    let (net, tp) = (l.net().unwrap(), l.transport().unwrap());
    // Turn the inner frame into what a guest with checksum offload sends.
    let mut partial = inner.clone();
    let ph = crate::csum::pseudo_header(&partial, &net, 6, (net.end - tp.offset) as u32).fold();
    partial[tp.offset + 16..tp.offset + 18].copy_from_slice(&ph.to_be_bytes());
    let info = OffloadInfo {
        gso: None,
        csum: CsumState::Partial {
            start: tp.offset as u16,
            offset: 16,
        },
    };
    let t = Tunnel {
        udp_csum: true,
        ..Tunnel::new(5, [10, 0, 0, 1], [10, 0, 0, 2])
    };
    let (mut f, out_info) = encap(&t, &partial, hash(&partial), info).unwrap();
    assert_eq!(
        out_info.csum,
        CsumState::Partial {
            start: (tp.offset + OUTER_LEN) as u16,
            offset: 16
        }
    );
    // Completing the inner checksum must make the outer one (computed
    // before, by LCO) verify.
    crate::csum::complete_partial(&mut f, (tp.offset + OUTER_LEN) as u16, 16).unwrap();
    assert_eq!(&f[OUTER_LEN..], &inner[..]);
    let ol = Layers::parse(&f).unwrap();
    assert_eq!(crate::csum::validate_l4(&f, &ol).unwrap(), CsumState::Good);
    let d = decap_bytes(&f, out_info).unwrap();
    assert_eq!(d.info.csum, info.csum);
}

#[test]
fn source_port_follows_inner_flow() {
    let t = Tunnel::new(5, [10, 0, 0, 1], [10, 0, 0, 2]);
    let a = TcpSpec::default().build();
    let b = TcpSpec {
        src_port: 1501,
        ..TcpSpec::default()
    }
    .build();
    let pa = source_port(hash(&a), &a, t.src_port_range);
    assert_eq!(pa, source_port(hash(&a), &a, t.src_port_range));
    assert_ne!(pa, source_port(hash(&b), &b, t.src_port_range));
}

#[test]
fn not_vxlan_is_refused() {
    let f = TcpSpec::default().build();
    assert_eq!(
        decap_bytes(&f, OffloadInfo::NONE),
        Err(VxlanError::NotVxlan)
    );
    // A malformed inner frame is refused by its parse, before anything
    // is encapsulated.
    assert!(Layers::parse(&f[..20]).is_err());
    // On another port than the one its stack was parsed for, VXLAN is
    // not VXLAN.
    let inner = TcpSpec::default().build();
    let (v, _) = encap(
        &Tunnel::new(1, [0; 4], [0; 4]),
        &inner,
        None,
        OffloadInfo::NONE,
    )
    .unwrap();
    let l = Layers::parse(&v).unwrap();
    assert_eq!(
        decap(&v, &l, OffloadInfo::NONE, 8472),
        Err(VxlanError::NotVxlan)
    );
    // Too large to encapsulate.
    let big = vec![0u8; 65535 - OUTER_LEN + 15];
    assert_eq!(
        encap(
            &Tunnel::new(1, [0; 4], [0; 4]),
            &big,
            None,
            OffloadInfo::NONE
        ),
        Err(VxlanError::TooLarge)
    );
}
