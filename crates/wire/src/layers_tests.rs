//! Tests of the one parse: offsets, padding, tags pushed and popped, a
//! VXLAN frame's inner stack, malformed input.
use super::*;
use crate::error::Error;

fn v4_tcp_frame(payload: usize, pad: usize) -> Vec<u8> {
    let mut f = vec![0u8; 14];
    f[12] = 0x08;
    let mut ip = vec![0u8; 20];
    let repr = ipv4::Repr {
        src: [10, 0, 0, 1],
        dst: [10, 0, 0, 2],
        protocol: 6,
        payload_len: 20 + payload,
        ttl: 64,
        tos: 0,
        ident: 1,
        dont_frag: true,
    };
    repr.emit(&mut ipv4::Packet::new_unchecked(&mut ip[..]));
    f.extend_from_slice(&ip);
    let mut t = vec![0u8; 20];
    t[12] = 0x50;
    f.extend_from_slice(&t);
    f.resize(f.len() + payload + pad, 0);
    f
}

#[test]
fn parses_tcp_over_ipv4_with_padding() {
    let f = v4_tcp_frame(6, 4);
    let l = Layers::parse(&f).unwrap();
    let n = l.net().unwrap();
    assert_eq!((n.offset, n.header_len, n.end), (14, 20, 14 + 46));
    let t = l.transport().unwrap();
    assert_eq!((t.offset, t.header_len), (34, 20));
    assert_eq!(l.payload_offset(), 54);
    assert!(l.vxlan_inner_offset(&f).is_none());
}

/// `f` with an 802.1Q tag of `vid` after its addresses.
fn tag(f: &[u8], vid: u16) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    t.extend_from_slice(&[0x81, 0x00]);
    t.extend_from_slice(&vid.to_be_bytes());
    t.extend_from_slice(&f[12..]);
    t
}

#[test]
fn pushing_and_popping_a_tag_keeps_the_stack_true() {
    let f = v4_tcp_frame(100, 0);
    let plain = Layers::parse(&f).unwrap();
    let tagged = Layers::parse(&tag(&f, 10)).unwrap();
    assert_eq!(tagged.l2().header_len, 18);
    let mut l = plain;
    l.push_vlan(10);
    assert_eq!(l, tagged);
    // Pushed in front: the outer tag is the new one.
    let mut twice = tagged;
    twice.push_vlan(20);
    assert_eq!(twice, Layers::parse(&tag(&tag(&f, 10), 20)).unwrap());
    assert_eq!(twice.l2().vlans, [Some(20), Some(10)]);
    let mut back = tagged;
    back.pop_vlan();
    assert_eq!(back, plain);
    let inner = v4_tcp_frame(10, 0);
    let vx = vxlan_frame(&inner, vxlan::PORT);
    let mut l = Layers::parse(&vx).unwrap();
    l.push_vlan(7);
    assert_eq!(l, Layers::parse(&tag(&vx, 7)).unwrap());
}

#[test]
fn truncated_ip_is_an_error() {
    let f = v4_tcp_frame(100, 0);
    assert_eq!(Layers::parse(&f[..100]).unwrap_err(), Error::Truncated);
    assert_eq!(Layers::parse(&f[..30]).err(), Some(Error::Truncated));
    assert_eq!(Layers::parse(&f).err(), None);
}

#[test]
fn unknown_ethertype_ends_the_stack() {
    let mut f = v4_tcp_frame(10, 0);
    f[12] = 0x88;
    f[13] = 0xb5;
    let l = Layers::parse(&f).unwrap();
    assert!(l.net().is_none() && l.transport().is_none());
    assert_eq!(l.payload_offset(), 14);
}

/// `inner` behind outer Ethernet, IPv4, UDP to `port` and VXLAN.
fn vxlan_frame(inner: &[u8], port: u16) -> Vec<u8> {
    let udp_len = udp::HEADER_LEN + vxlan::HEADER_LEN + inner.len();
    let mut f = v4_tcp_frame(0, 0);
    f.truncate(14 + 20);
    let repr = ipv4::Repr {
        src: [198, 18, 0, 1],
        dst: [198, 18, 0, 2],
        protocol: ip_protocol::UDP,
        payload_len: udp_len,
        ttl: 64,
        tos: 0,
        ident: 1,
        dont_frag: true,
    };
    repr.emit(&mut ipv4::Packet::new_unchecked(&mut f[14..]));
    let mut u = [0u8; udp::HEADER_LEN];
    let mut up = udp::Packet::new_unchecked(&mut u[..]);
    up.set_src_port(49152);
    up.set_dst_port(port);
    up.set_len(udp_len as u16);
    f.extend_from_slice(&u);
    let mut v = [0u8; vxlan::HEADER_LEN];
    vxlan::Packet::new_unchecked(&mut v[..]).emit(42);
    f.extend_from_slice(&v);
    f.extend_from_slice(inner);
    f
}

#[test]
fn a_vxlan_frames_inner_stack_is_parsed_with_it() {
    let inner = v4_tcp_frame(100, 0);
    let f = vxlan_frame(&inner, vxlan::PORT);
    let l = Layers::parse(&f).unwrap();
    let (off, il) = l.inner().expect("inner stack");
    assert_eq!(off, 14 + 20 + 8 + 8);
    assert_eq!(il, Layers::parse(&inner).unwrap());
    assert_eq!(l.vxlan_inner_offset(&f), Some(off));
    // On another port it is VXLAN only for a receiver that says so.
    let f = vxlan_frame(&inner, 8472);
    assert!(Layers::parse(&f).unwrap().vxlan.is_none());
    let l = Layers::parse_on(&f, 8472).unwrap();
    assert_eq!(l.inner().map(|(o, _)| o), Some(off));
    assert_eq!(l.vxlan_inner_offset_on(&f, 8472), Some(off));
    assert_eq!(l.vxlan_inner_offset(&f), None);
}

#[test]
fn malformed_inner_headers_leave_the_outer_stack_whole() {
    let inner = v4_tcp_frame(100, 0);
    let f = vxlan_frame(&inner[..30], vxlan::PORT);
    let l = Layers::parse(&f).unwrap();
    let v = l.vxlan.expect("VXLAN all the same");
    assert_eq!(v.inner(), Err(Error::Truncated));
    assert_eq!(l.inner(), None);
    assert!(l.transport().is_some());
}

proptest::proptest! {
    /// The packed inner stack unpacks to what parsing the inner frame
    /// on its own gives, whatever its bytes.
    #[test]
    fn prop_inner_stack_is_the_inner_frames_own(inner in proptest::collection::vec(proptest::num::u8::ANY, 0..200), ethertype in 0usize..3) {
        let mut inner = inner;
        if inner.len() >= 14 {
            let t: [u8; 2] = [[0x08, 0x00], [0x86, 0xdd], [0x81, 0x00]][ethertype];
            inner[12..14].copy_from_slice(&t);
        }
        let f = vxlan_frame(&inner, vxlan::PORT);
        let l = Layers::parse(&f).unwrap();
        let own = Layers::parse(&inner).map(|il| il.without_vxlan());
        proptest::prop_assert_eq!(l.vxlan.map(|v| v.inner()), Some(own));
    }

    #[test]
    fn prop_parse_never_panics_and_offsets_fit(data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        if let Ok(l) = Layers::parse(&data) {
            if let (Some(n), Some(t)) = (l.net(), l.transport()) {
                proptest::prop_assert!(t.offset + t.header_len <= n.end && n.end <= data.len());
            }
            let _ = l.vxlan_inner_offset(&data);
        }
        let _ = crate::pretty::Pretty(&data).to_string();
    }
}
