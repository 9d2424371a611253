use super::*;

fn router() -> Router {
    let gw = |vlan, a: [u8; 4]| Gateway {
        vlan,
        ipv4: (Ipv4Addr::from(a), 24),
        ipv6: Some((Ipv6Addr::new(0xfd80, 0, 0, vlan, 0, 0, 0, 1), 64)),
    };
    Router::new(RouterConfig {
        tenants: vec![
            Tenant {
                name: "blue".into(),
                mac: DEFAULT_GATEWAY_MAC,
                gateways: vec![gw(10, [198, 19, 80, 254]), gw(20, [198, 19, 81, 254])],
                routes: vec![StaticRoute {
                    to: (Ipv4Addr::UNSPECIFIED, 0),
                    via: Ipv4Addr::new(198, 19, 80, 1),
                }],
                l3: Some(L3Vni {
                    vni: 5999,
                    vlan: 999,
                }),
            },
            // The same subnets in another tenant.
            Tenant {
                name: "red".into(),
                mac: DEFAULT_GATEWAY_MAC,
                gateways: vec![gw(30, [198, 19, 80, 254]), gw(40, [198, 19, 81, 254])],
                routes: vec![],
                l3: None,
            },
        ],
        neighbours: vec![],
        router_mac: MacAddr([2, 0x72, 198, 18, 60, 1]),
    })
}

#[test]
fn a_tenant_routes_to_its_own_segments_only() {
    let r = router();
    let (blue, red) = (r.segment(10).unwrap(), r.segment(30).unwrap());
    let b = Ipv4Addr::new(198, 19, 81, 7);
    assert_eq!(r.hop(blue, b), Hop::Via { vlan: 20, ip: b });
    assert_eq!(r.hop(red, b), Hop::Via { vlan: 40, ip: b });
    assert_eq!(r.hop(blue, Ipv4Addr::new(198, 19, 81, 254)), Hop::Gateway);
    // Off-subnet: blue's default route, red has none.
    let far = Ipv4Addr::new(198, 18, 9, 9);
    assert_eq!(
        r.hop(blue, far),
        Hop::Via {
            vlan: 10,
            ip: Ipv4Addr::new(198, 19, 80, 1)
        }
    );
    assert_eq!(r.hop(red, far), Hop::None);
    assert!(r.segment(50).is_none());
}

#[test]
fn neighbours_are_learned_per_segment_bounded_and_static_ones_kept() {
    let mut cfg = router().config;
    let ip = IpAddr::V4(Ipv4Addr::new(198, 19, 80, 1));
    let m = |i: u8| MacAddr([2, 0, 0, 0, 0, i]);
    cfg.neighbours = vec![(10, ip, m(1))];
    let r = Router::new(cfg);
    r.learn(10, ip, m(2));
    r.learn(30, ip, m(3));
    assert_eq!(
        (r.neighbour(10, ip), r.neighbour(30, ip)),
        (Some(m(1)), Some(m(3)))
    );
    for i in 0..MAX_NEIGHBOURS as u32 + 5 {
        r.learn(30, IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), m(4));
    }
    assert_eq!(r.neighbours.read().unwrap().len(), MAX_NEIGHBOURS);
    assert!(r.counters.neighbours_refused.load(Relaxed) > 0);
}

#[test]
fn an_unresolved_hop_is_asked_for_at_most_every_half_second() {
    let r = router();
    let (t, ip) = (Instant::now(), IpAddr::V4(Ipv4Addr::new(198, 19, 81, 9)));
    assert!(r.should_ask(20, ip, t));
    assert!(!r.should_ask(20, ip, t + Duration::from_millis(100)));
    assert!(r.should_ask(40, ip, t), "another segment's");
    assert!(r.should_ask(20, ip, t + ASK_EVERY));
}

#[test]
fn a_routed_header_has_its_ttl_decremented_and_its_checksum_still_right() {
    use hvnet_wire::checksum::checksum;
    let mut f = vec![0u8; 14 + 20];
    let ip = 14;
    f[ip] = 0x45;
    f[ip + 2..ip + 4].copy_from_slice(&20u16.to_be_bytes());
    f[ip + 8] = 64;
    f[ip + 9] = 6;
    f[ip + 12..ip + 16].copy_from_slice(&[198, 19, 80, 1]);
    f[ip + 16..ip + 20].copy_from_slice(&[198, 19, 81, 1]);
    let c = checksum(&f[ip..ip + 20]);
    f[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    let (src, dst) = (DEFAULT_GATEWAY_MAC, MacAddr([2, 0, 0, 0, 0, 9]));
    frames::route_ipv4(&mut f, ip, src, dst);
    assert_eq!(f[ip + 8], 63);
    assert_eq!(checksum(&f[ip..ip + 20]), 0, "the header sums to zero");
    assert_eq!((&f[0..6], &f[6..12]), (&dst.0[..], &src.0[..]));
    // Time exceeded quotes the header and says where from.
    let te = frames::time_exceeded(&f, ip, 20, Ipv4Addr::new(198, 19, 80, 254), src);
    assert_eq!((te[34], te[35]), (11, 0));
    assert_eq!(checksum(&te[14..34]), 0);
    assert_eq!(checksum(&te[34..]), 0);
    assert_eq!(&te[30..34], &[198, 19, 80, 1], "back to the sender");
}

#[test]
fn an_advertised_host_route_wins_over_its_subnet_and_a_subnet_over_a_prefix() {
    let r = router();
    let blue = r.segment(10).unwrap();
    let vtep: IpAddr = Ipv4Addr::new(198, 18, 60, 2).into();
    let b = Ipv4Addr::new(198, 19, 81, 7);
    let route = |to: [u8; 4], n| RemoteRoute {
        to: (Ipv4Addr::from(to), n),
        vtep,
    };
    assert!(r.set_remote(5999, route([198, 19, 81, 7], 32), true));
    assert!(r.set_remote(5999, route([198, 19, 81, 0], 24), true));
    assert!(r.set_remote(5999, route([198, 19, 90, 0], 24), true));
    assert!(
        !r.set_remote(4242, route([10, 0, 0, 0], 8), true),
        "no tenant's L3 VNI"
    );
    let remote = Hop::Remote {
        vni: 5999,
        vlan: 999,
        vtep,
    };
    assert_eq!(r.hop(blue, b), remote, "the host route");
    let other = Ipv4Addr::new(198, 19, 81, 8);
    assert_eq!(
        r.hop(blue, other),
        Hop::Via {
            vlan: 20,
            ip: other
        },
        "the connected subnet"
    );
    assert_eq!(
        r.hop(blue, Ipv4Addr::new(198, 19, 90, 3)),
        remote,
        "a prefix only the fabric has"
    );
    // From the L3 VNI, to a local VM.
    let l3 = r.segment(999).unwrap();
    assert_eq!(
        r.hop(l3, other),
        Hop::Via {
            vlan: 20,
            ip: other
        }
    );
    // Withdrawn; and kept across a new configuration.
    assert!(r.set_remote(5999, route([198, 19, 81, 7], 32), false));
    assert_eq!(r.hop(blue, b), Hop::Via { vlan: 20, ip: b });
    let mut cfg = r.config.clone();
    cfg.neighbours
        .push((10, IpAddr::V4(b), MacAddr([2, 0, 0, 0, 0, 1])));
    let learned = IpAddr::V4(Ipv4Addr::new(198, 19, 81, 9));
    r.learn(20, learned, MacAddr([2, 0, 0, 0, 0, 9]));
    r.learn(50, learned, MacAddr([2, 0, 0, 0, 0, 9]));
    let again = Router::new(cfg);
    again.take_over(&r);
    assert_eq!(again.hop(blue, Ipv4Addr::new(198, 19, 90, 3)), remote);
    assert_eq!(
        again.neighbour(20, learned),
        Some(MacAddr([2, 0, 0, 0, 0, 9]))
    );
    assert_eq!(again.neighbour(50, learned), None, "VLAN 50 is no segment");
}

#[test]
fn ipv6_is_routed_between_a_tenants_dual_stack_segments() {
    let r = router();
    let blue = r.segment(10).unwrap();
    let b = Ipv6Addr::new(0xfd80, 0, 0, 20, 0, 0, 0, 7);
    assert_eq!(r.hop6(blue, b), Hop6::Via { vlan: 20, ip: b });
    assert_eq!(
        r.hop6(blue, Ipv6Addr::new(0xfd80, 0, 0, 20, 0, 0, 0, 1)),
        Hop6::Gateway
    );
    // Red's subnets are its own (fd80:0:0:30::/64, ...): not blue's.
    assert_eq!(
        r.hop6(blue, Ipv6Addr::new(0xfd80, 0, 0, 40, 0, 0, 0, 7)),
        Hop6::None
    );
}

/// Through the switch: ports 0 and 1 in VLANs 10 and 20, a tenant's
/// gateway on each. Port 0's TCP frame to the gateway MAC for an address
/// in VLAN 20 whose MAC is not known is dropped and the gateway's ARP
/// request goes to port 1; port 1's reply to the gateway teaches it; the
/// next frame reaches port 1 routed (its MACs rewritten, TTL one less, the
/// IPv4 header's checksum still right); TTL 1 is answered with time
/// exceeded to port 0; every frame accounted for.
#[test]
fn a_frame_is_routed_between_two_vlans_through_the_switch() {
    use crate::harness::{Backend, Harness};
    use crate::{PortSettings, SwitchConfig};
    use hvnet_offload::testutil::TcpSpec;
    use hvnet_wire::arp;
    let mac = |i: u8| MacAddr([2, 0, 0, 0, 0, i]);
    let s = PortSettings {
        rx_overflow: crate::RxOverflow::Drop,
        lro: false,
        ..PortSettings::default()
    };
    let ports = [(mac(1), 1, s.clone()), (mac(2), 1, s)];
    let replay = [Backend::Replay, Backend::Replay];
    let mut h =
        Harness::with_backends_on_vlans(&ports, &replay, &[10, 20], SwitchConfig::default());
    let mut cfg = router().config;
    cfg.tenants[0].gateways[0].vlan = 10;
    cfg.tenants[0].gateways[1].vlan = 20;
    set(&h.sw, Some(cfg));
    let v4 = |a: [u8; 4]| {
        let mut ip = [0u8; 16];
        ip[10..12].copy_from_slice(&[0xff, 0xff]);
        ip[12..].copy_from_slice(&a);
        ip
    };
    let hdr = |f: &[u8]| [&[0u8; 12][..], f].concat();
    let tcp = |ttl| {
        hdr(&TcpSpec {
            src_mac: mac(1).0,
            dst_mac: DEFAULT_GATEWAY_MAC.0,
            src_ip: v4([198, 19, 80, 1]),
            dst_ip: v4([198, 19, 81, 7]),
            ttl,
            payload: vec![7; 100],
            ..TcpSpec::default()
        }
        .build())
    };
    let mut out = Vec::new();
    h.send(0, 0, &tcp(64));
    h.settle(20, &mut out);
    assert_eq!(out.len(), 1, "only the gateway's ARP request: {out:?}");
    let (port, req) = &out[0];
    let req = arp::Repr::parse(&arp::Packet::new_checked(&req[12 + 14..]).unwrap()).unwrap();
    assert_eq!(
        (*port, req.target_ip, req.sender_ip),
        (1, [198, 19, 81, 7], [198, 19, 81, 254])
    );
    // The neighbour answers the gateway.
    let reply = arp::Repr {
        op: arp::Operation::Reply,
        sender_mac: mac(2),
        sender_ip: [198, 19, 81, 7],
        target_mac: DEFAULT_GATEWAY_MAC,
        target_ip: [198, 19, 81, 254],
    };
    let mut f = reply.frame().to_vec();
    f[0..6].copy_from_slice(&DEFAULT_GATEWAY_MAC.0);
    h.send(1, 0, &hdr(&f));
    h.settle(20, &mut out);
    out.clear();
    h.send(0, 0, &tcp(64));
    h.settle(20, &mut out);
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, routed) = &out[0];
    let f = &routed[12..];
    assert_eq!(*port, 1);
    assert_eq!(
        (&f[0..6], &f[6..12]),
        (&mac(2).0[..], &DEFAULT_GATEWAY_MAC.0[..])
    );
    assert_eq!(f[14 + 8], 63, "TTL one less");
    assert_eq!(hvnet_wire::checksum::checksum(&f[14..34]), 0);
    // TTL 1: time exceeded, back to port 0.
    out.clear();
    h.send(0, 0, &tcp(1));
    h.settle(20, &mut out);
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, te) = &out[0];
    assert_eq!((*port, te[12 + 34]), (0, 11));
    let p0 = h.sw.ports()[0].ingress_stats();
    assert_eq!(
        (
            p0.routed,
            p0.dropped[crate::counters::DropReason::TtlExceeded]
        ),
        (1, 1)
    );
    assert_eq!(
        p0.dropped[crate::counters::DropReason::NeighbourUnresolved],
        1
    );
    assert_eq!(h.sw.ports()[1].ingress_stats().gateway_answered, 1);
    h.check_accounting().unwrap();
}
