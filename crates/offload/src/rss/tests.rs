use super::*;
use crate::testutil::{rss_hash, vxlan_wrap, TcpSpec};

/// Microsoft's "Verifying the RSS Hash Calculation" vectors (also in the
/// Intel 82599 datasheet §7.1.2.8.3 and DPDK `app/test/test_thash.c`):
/// source, destination, source port, destination port, IPv4-only hash,
/// TCP/IPv4 hash.
/// (source, destination, source port, destination port, L3 hash, L3+L4 hash)
type Vector<A> = (A, A, u16, u16, u32, u32);

const V4: [Vector<[u8; 4]>; 5] = [
    (
        [66, 9, 149, 187],
        [161, 142, 100, 80],
        2794,
        1766,
        0x323e8fc2,
        0x51ccc178,
    ),
    (
        [199, 92, 111, 2],
        [65, 69, 140, 83],
        14230,
        4739,
        0xd718262a,
        0xc626b0ea,
    ),
    (
        [24, 19, 198, 95],
        [12, 22, 207, 184],
        12898,
        38024,
        0xd2d0a5de,
        0x5c2b394a,
    ),
    (
        [38, 27, 205, 30],
        [209, 142, 163, 6],
        48228,
        2217,
        0x82989176,
        0xafc7327f,
    ),
    (
        [153, 39, 163, 191],
        [202, 188, 127, 2],
        44251,
        1303,
        0x5d1809c5,
        0x10e828a2,
    ),
];

fn v6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

fn v6_vectors() -> [Vector<[u8; 16]>; 3] {
    [
        (
            v6("3ffe:2501:200:1fff::7"),
            v6("3ffe:2501:200:3::1"),
            2794,
            1766,
            0x2cc18cd5,
            0x40207d3d,
        ),
        (
            v6("3ffe:501:8::260:97ff:fe40:efab"),
            v6("ff02::1"),
            14230,
            4739,
            0x0f0c461c,
            0xdde51bbf,
        ),
        (
            v6("3ffe:1900:4545:3:200:f8ff:fe21:67cf"),
            v6("fe80::200:f8ff:fe21:67cf"),
            44251,
            38024,
            0x4b61e985,
            0x02d1feef,
        ),
    ]
}

#[test]
fn microsoft_ipv4_vectors() {
    let t = Toeplitz::new(&DEFAULT_KEY).unwrap();
    for (s, d, sp, dp, h2, h4) in V4 {
        let mut input = [s, d].concat();
        assert_eq!(toeplitz(&DEFAULT_KEY, &input), h2);
        assert_eq!(t.hash(&input), h2);
        input.extend_from_slice(&sp.to_be_bytes());
        input.extend_from_slice(&dp.to_be_bytes());
        assert_eq!(toeplitz(&DEFAULT_KEY, &input), h4);
        assert_eq!(t.hash(&input), h4);
    }
}

#[test]
fn microsoft_ipv6_vectors() {
    let t = Toeplitz::new(&DEFAULT_KEY).unwrap();
    for (s, d, sp, dp, h2, h4) in v6_vectors() {
        let mut input = [s, d].concat();
        assert_eq!(t.hash(&input), h2);
        input.extend_from_slice(&sp.to_be_bytes());
        input.extend_from_slice(&dp.to_be_bytes());
        assert_eq!(t.hash(&input), h4);
        assert_eq!(toeplitz(&DEFAULT_KEY, &input), h4);
    }
}

#[test]
fn frames_hash_to_the_vectors() {
    let rss = Rss::new(&DEFAULT_KEY, 4).unwrap();
    for (s, d, sp, dp, _, h4) in V4 {
        let mut spec = TcpSpec {
            src_port: sp,
            dst_port: dp,
            ..TcpSpec::default()
        };
        spec.src_ip[12..].copy_from_slice(&s);
        spec.dst_ip[12..].copy_from_slice(&d);
        assert_eq!(rss_hash(&rss, &spec.build()), Some((h4, HashType::TcpIpv4)));
    }
    for (s, d, sp, dp, _, h4) in v6_vectors() {
        let spec = TcpSpec {
            src_port: sp,
            dst_port: dp,
            src_ip: s,
            dst_ip: d,
            ..TcpSpec::v6()
        };
        assert_eq!(rss_hash(&rss, &spec.build()), Some((h4, HashType::TcpIpv6)));
    }
}

#[test]
fn vxlan_hashes_inner_flow() {
    let (s, d, sp, dp, _, h4) = V4[0];
    let mut spec = TcpSpec {
        src_port: sp,
        dst_port: dp,
        ..TcpSpec::default()
    };
    spec.src_ip[12..].copy_from_slice(&s);
    spec.dst_ip[12..].copy_from_slice(&d);
    let outer = vxlan_wrap(&spec.build(), 1, 40000, 0, false);
    let mut rss = Rss::new(&DEFAULT_KEY, 4).unwrap();
    assert_eq!(rss_hash(&rss, &outer), Some((h4, HashType::TcpIpv4)));
    rss.inner = false;
    assert_eq!(rss_hash(&rss, &outer).unwrap().1, HashType::UdpIpv4);
}

#[test]
fn reta_and_key_errors() {
    let r = Reta::spread(3, 128).unwrap();
    assert_eq!(r.queue(0), 0);
    assert_eq!(r.queue(130), 2);
    assert_eq!(r.queue(0x51ccc178), (0x78 % 3) as u16);
    assert_eq!(Reta::spread(0, 128), Err(RssError::BadTable));
    assert_eq!(Reta::spread(2, 100), Err(RssError::BadTable));
    assert_eq!(
        Toeplitz::new(&[0u8; 39]).unwrap_err(),
        RssError::KeyLength(39)
    );
    assert!(Toeplitz::new(&[0u8; 52]).is_ok());
}

proptest::proptest! {
    #[test]
    fn prop_table_matches_bitwise(key in proptest::collection::vec(proptest::num::u8::ANY, 52), input in proptest::collection::vec(proptest::num::u8::ANY, 0..48)) {
        let t = Toeplitz::new(&key).unwrap();
        proptest::prop_assert_eq!(t.hash(&input), toeplitz(&key, &input));
    }
}
