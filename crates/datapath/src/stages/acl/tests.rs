//! The ACL on frames built byte by byte and parsed as the ports parse
//! them: rules, the connection table's way with replies and ICMP errors,
//! run-time changes, bounds; and properties over arbitrary flows.

use super::flow::{proto, Family, Flow, Tuple, L4};
use super::*;
use hvnet_wire::Layers;
use proptest::prelude::*;

const A: [u8; 4] = [198, 18, 0, 1];
const B: [u8; 4] = [198, 18, 0, 2];
const C: [u8; 4] = [198, 18, 1, 3];

fn v4(a: [u8; 4]) -> u128 {
    u128::from(u32::from_be_bytes(a))
}

/// An Ethernet + IPv4 frame with protocol `p` and transport bytes `l4`.
fn ipv4(src: [u8; 4], dst: [u8; 4], p: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let total = (20 + l4.len()) as u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        1,
        0x40,
        0,
        64,
        p,
        0,
        0,
    ]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(l4);
    f
}

fn tcp_hdr(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut h = vec![0u8; 20];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[12] = 5 << 4;
    h[13] = flags;
    h
}

fn udp_hdr(sport: u16, dport: u16) -> Vec<u8> {
    let mut h = vec![0u8; 8];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[5] = 8;
    h
}

fn tcp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    ipv4(src, dst, proto::TCP, &tcp_hdr(sport, dport, flags))
}

fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    ipv4(src, dst, proto::UDP, &udp_hdr(sport, dport))
}

fn ping(src: [u8; 4], dst: [u8; 4], ty: u8, id: u16) -> Vec<u8> {
    let mut h = vec![ty, 0, 0, 0, (id >> 8) as u8, id as u8, 0, 1];
    h.extend_from_slice(&[0; 8]);
    ipv4(src, dst, proto::ICMP, &h)
}

/// An ICMP error from `src` to `dst` quoting `quoted` (a whole frame).
fn icmp_error(src: [u8; 4], dst: [u8; 4], ty: u8, code: u8, quoted: &[u8]) -> Vec<u8> {
    let mut h = vec![ty, code, 0, 0, 0, 0, 0, 0];
    h.extend_from_slice(&quoted[14..]);
    ipv4(src, dst, proto::ICMP, &h)
}

fn rule(direction: Direction, action: Action) -> Rule {
    Rule::any("g#0", direction, action)
}

fn tcp_in(port: u16) -> Rule {
    Rule {
        protocol: Some(proto::TCP),
        ports: Some((port, port)),
        ..rule(Direction::In, Action::Allow)
    }
}

fn acl(rules: Vec<Rule>) -> (Acl, Arc<PortAcl>) {
    acl_with(rules, Limits::default())
}

/// [`acl`], with the tables' `limits`.
fn acl_with(rules: Vec<Rule>, limits: Limits) -> (Acl, Arc<PortAcl>) {
    let acl = Acl::new();
    let mut cfg = AclConfig {
        limits,
        ..AclConfig::default()
    };
    cfg.ports.insert(
        "vm".into(),
        RuleSet {
            rules,
            groups: vec!["g".into()],
        },
    );
    acl.install(cfg);
    let p = acl.port("vm").unwrap();
    (acl, p)
}

fn check(p: &PortAcl, stage: Direction, frame: &[u8], now: Secs) -> Result<(), Denied> {
    let l = Layers::parse(frame).unwrap();
    let f = Flow::of(frame, &l).unwrap();
    p.check_flow(stage, &f, now)
}

use Direction::{In, Out};

#[test]
fn no_rule_denies_and_an_allowed_connection_s_replies_pass() {
    // vm is B: it serves TCP 22 to anyone, and may not open anything.
    let (_a, p) = acl(vec![tcp_in(22)]);
    assert_eq!(
        check(&p, In, &tcp(A, B, 5000, 80, 0x02), 0),
        Err(Denied::Rule)
    );
    assert_eq!(
        check(&p, Out, &tcp(B, A, 80, 5000, 0x02), 0),
        Err(Denied::Rule)
    );
    assert_eq!(check(&p, In, &tcp(A, B, 5000, 22, 0x02), 0), Ok(()));
    // The SYN-ACK goes out though no out rule allows it: a reply.
    assert_eq!(check(&p, Out, &tcp(B, A, 22, 5000, 0x12), 1), Ok(()));
    assert_eq!(check(&p, In, &tcp(A, B, 5000, 22, 0x10), 1), Ok(()));
    let v = p.view(Instant::now());
    assert_eq!(v.rules[0].hits, 1, "one connection opened");
    assert_eq!(v.connections, 1);
    assert_eq!(v.counters.denied_default, 2);
    let c = &p.connections(p.epoch)[0];
    assert_eq!(
        (c.state, c.src.as_str(), c.dport),
        ("ESTABLISHED", "198.18.0.1", 22)
    );
}

#[test]
fn a_segment_its_state_does_not_take_is_invalid_and_a_reset_closes() {
    let (_a, p) = acl(vec![tcp_in(22)]);
    // A SYN-ACK first cannot open a connection.
    assert_eq!(
        check(&p, In, &tcp(A, B, 5000, 22, 0x12), 0),
        Err(Denied::Invalid)
    );
    check(&p, In, &tcp(A, B, 5000, 22, 0x02), 0).unwrap();
    // The originator's SYN-ACK in SYN_SENT is not the handshake.
    assert_eq!(
        check(&p, In, &tcp(A, B, 5000, 22, 0x12), 0),
        Err(Denied::Invalid)
    );
    check(&p, Out, &tcp(B, A, 22, 5000, 0x14), 0).unwrap();
    assert_eq!(p.connections(p.epoch)[0].state, "CLOSE");
}

#[test]
fn icmp_errors_about_tracked_flows_pass_and_others_do_not() {
    // vm is A: it may send UDP anywhere.
    let out_udp = Rule {
        protocol: Some(proto::UDP),
        ..rule(Out, Action::Allow)
    };
    let (_a, p) = acl(vec![out_udp]);
    let sent = udp(A, B, 4000, 9999);
    check(&p, Out, &sent, 0).unwrap();
    // Port unreachable from B, and time exceeded from a router C.
    assert_eq!(check(&p, In, &icmp_error(B, A, 3, 3, &sent), 0), Ok(()));
    assert_eq!(check(&p, In, &icmp_error(C, A, 11, 0, &sent), 0), Ok(()));
    let other = udp(A, B, 4001, 9999);
    assert_eq!(
        check(&p, In, &icmp_error(B, A, 3, 3, &other), 0),
        Err(Denied::Rule),
        "about no tracked flow"
    );
    assert_eq!(p.view(p.epoch).counters.related, 2);
}

#[test]
fn pings_are_tracked_by_identifier_and_an_answer_opens_nothing() {
    let icmp_out = Rule {
        protocol: Some(proto::ICMP),
        icmp_type: Some(8),
        ..rule(Out, Action::Allow)
    };
    let (_a, p) = acl(vec![icmp_out]);
    check(&p, Out, &ping(A, B, 8, 7), 0).unwrap();
    assert_eq!(check(&p, In, &ping(B, A, 0, 7), 0), Ok(()));
    assert_eq!(check(&p, In, &ping(B, A, 0, 8), 0), Err(Denied::Rule));
    let any_in = Rule {
        protocol: Some(proto::ICMP),
        ..rule(In, Action::Allow)
    };
    let (_b, q) = acl(vec![any_in]);
    assert_eq!(check(&q, In, &ping(B, A, 0, 8), 0), Err(Denied::Invalid));
}

#[test]
fn first_match_wins_stateless_tracks_nothing_and_remotes_match_prefixes() {
    let deny_c = Rule {
        remote: Some(vec![Prefix {
            family: Family::V4,
            addr: v4([198, 18, 1, 0]),
            len: 24,
        }]),
        ..rule(In, Action::Deny)
    };
    let stateless = Rule {
        protocol: Some(proto::UDP),
        stateless: true,
        ..rule(In, Action::Allow)
    };
    let (_a, p) = acl(vec![deny_c, stateless]);
    assert_eq!(check(&p, In, &udp(C, B, 1, 53), 0), Err(Denied::Rule));
    assert_eq!(check(&p, In, &udp(A, B, 1, 53), 0), Ok(()));
    assert_eq!(
        check(&p, Out, &udp(B, A, 53, 1), 0),
        Err(Denied::Rule),
        "not tracked"
    );
    let v = p.view(p.epoch);
    assert_eq!((v.rules[0].hits, v.rules[1].hits, v.connections), (1, 1, 0));
}

#[test]
fn rule_changes_apply_to_new_connections_and_to_established_ones_on_request() {
    let (acl, p) = acl(vec![tcp_in(22), tcp_in(80)]);
    check(&p, In, &tcp(A, B, 5000, 22, 0x02), 0).unwrap();
    check(&p, In, &tcp(A, B, 5001, 80, 0x02), 0).unwrap();
    check(&p, Out, &tcp(B, A, 80, 5001, 0x12), 0).unwrap();
    let mut cfg = AclConfig::default();
    cfg.ports.insert(
        "vm".into(),
        RuleSet {
            rules: vec![tcp_in(22)],
            groups: vec!["g".into()],
        },
    );
    acl.install(cfg);
    assert!(Arc::ptr_eq(&p, &acl.port("vm").unwrap()), "table kept");
    assert_eq!(
        check(&p, In, &tcp(A, B, 5002, 80, 0x02), 0),
        Err(Denied::Rule)
    );
    assert_eq!(
        check(&p, In, &tcp(A, B, 5001, 80, 0x10), 0),
        Ok(()),
        "established"
    );
    assert_eq!(p.reapply(), 1);
    assert_eq!(
        check(&p, In, &tcp(A, B, 5001, 80, 0x18), 0),
        Err(Denied::Rule)
    );
    assert_eq!(check(&p, In, &tcp(A, B, 5000, 22, 0x02), 0), Ok(()), "kept");
    acl.install(AclConfig::default());
    assert!(acl.port("vm").is_none());
    drop(p);
    assert_eq!(acl.total(), 0, "its table went with its last holder");
}

#[test]
fn a_flood_of_half_open_connections_is_bounded_and_others_keep_theirs() {
    let acl = Acl::new();
    let mut cfg = AclConfig {
        limits: Limits {
            max_per_port: 100,
            max: 150,
            tcp_be_liberal: false,
        },
        ..AclConfig::default()
    };
    let all_out = RuleSet {
        rules: vec![rule(Out, Action::Allow), rule(In, Action::Allow)],
        groups: vec![],
    };
    cfg.ports.insert("flood".into(), all_out.clone());
    cfg.ports.insert("other".into(), all_out);
    acl.install(cfg);
    let (f, o) = (acl.port("flood").unwrap(), acl.port("other").unwrap());
    check(&o, Out, &tcp(B, A, 1000, 80, 0x02), 0).unwrap();
    check(&o, In, &tcp(A, B, 80, 1000, 0x12), 0).unwrap();
    for i in 0..10_000u32 {
        let sport = (i % 60_000) as u16 + 1;
        let dst = [198, 18, 2, (i / 60_000) as u8];
        // Each SYN takes an unreplied one's place: never refused.
        check(&f, Out, &tcp(A, dst, sport, 80, 0x02), 0).unwrap();
    }
    assert_eq!(f.view(f.epoch).connections, 100);
    assert!(acl.total() <= 150);
    assert_eq!(check(&o, Out, &tcp(B, A, 1000, 80, 0x10), 0), Ok(()));
    assert_eq!(o.view(o.epoch).connections, 1);
}

#[test]
fn ipv6_flows_and_neighbour_discovery() {
    let frame = |src: u8, dst: u8, p: u8, l4: &[u8]| {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
        f.extend_from_slice(&[0x60, 0, 0, 0, 0, l4.len() as u8, p, 64]);
        f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, src]);
        f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, dst]);
        f.extend_from_slice(l4);
        f
    };
    let v6_in = Rule {
        family: Some(Family::V6),
        protocol: Some(proto::TCP),
        ..rule(In, Action::Allow)
    };
    let (_a, p) = acl(vec![v6_in]);
    assert_eq!(
        check(&p, In, &frame(1, 2, proto::TCP, &tcp_hdr(1, 2, 0x02)), 0),
        Ok(())
    );
    assert_eq!(
        check(&p, Out, &frame(2, 1, proto::TCP, &tcp_hdr(2, 1, 0x12)), 0),
        Ok(())
    );
    assert_eq!(
        check(&p, In, &tcp(A, B, 1, 2, 0x02), 0),
        Err(Denied::Rule),
        "IPv4"
    );
    let ns = [
        135u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    assert_eq!(check(&p, Out, &frame(2, 1, proto::ICMPV6, &ns), 0), Ok(()));
    let connections = p.connections(p.epoch);
    assert_eq!(connections[0].src, "fd00::1");
}

#[test]
fn frames_that_are_not_ip_pass() {
    let (_a, p) = acl(vec![]);
    let arp = [
        vec![0xffu8; 6],
        vec![2, 0, 0, 0, 0, 1, 0x08, 0x06],
        vec![0; 28],
    ]
    .concat();
    let l = Layers::parse(&arp).unwrap();
    assert_eq!(p.check(In, &arp, &l, Instant::now()), Ok(()));
}

fn any_flow() -> impl Strategy<Value = Flow> {
    let family = prop_oneof![Just(Family::V4), Just(Family::V6)];
    let l4 = prop_oneof![
        (
            1u16..6,
            1u16..6,
            any::<u8>(),
            any::<(u32, u32, u16)>(),
            0u32..70_000
        )
            .prop_map(|(sport, dport, flags, (seq, ack, win), len)| L4::Tcp {
                sport,
                dport,
                flags,
                seg: crate::acl::window::Segment {
                    seq,
                    ack,
                    win,
                    len,
                    wscale: None
                },
            }),
        (1u16..6, 1u16..6).prop_map(|(sport, dport)| L4::Udp { sport, dport }),
        (
            prop_oneof![Just(0u8), Just(8), Just(128), Just(129)],
            0u16..3
        )
            .prop_map(|(ty, id)| L4::IcmpQuery { ty, code: 0, id }),
        Just(L4::Other),
    ];
    (family, l4, 0u128..4, 0u128..4).prop_map(|(family, l4, src, dst)| Flow {
        family,
        proto: match l4 {
            L4::Tcp { .. } => proto::TCP,
            L4::Udp { .. } => proto::UDP,
            L4::IcmpQuery { .. } if family == Family::V4 => proto::ICMP,
            L4::IcmpQuery { .. } => proto::ICMPV6,
            _ => 47,
        },
        src,
        dst,
        l4,
    })
}

proptest! {
    /// Whatever frames come, the table holds at most its bound, the
    /// switch-wide count is the tables' sum, and a port that allows
    /// nothing in lets in only replies of what it opened.
    #[test]
    fn the_table_stays_bounded_and_only_replies_get_in(
        frames in proptest::collection::vec((any::<bool>(), any_flow(), 0u32..400), 1..300)
    ) {
        let acl = Acl::new();
        let mut cfg = AclConfig { limits: Limits { max_per_port: 8, max: 12, tcp_be_liberal: false }, ..AclConfig::default() };
        cfg.ports.insert("vm".into(), RuleSet { rules: vec![rule(Out, Action::Allow)], groups: vec![] });
        acl.install(cfg);
        let p = acl.port("vm").unwrap();
        let mut opened: Vec<Tuple> = Vec::new();
        let mut now = 0;
        for (out, f, dt) in frames {
            now += dt;
            let stage = if out { Out } else { In };
            let r = p.check_flow(stage, &f, now);
            if out {
                if r.is_ok() { opened.extend(f.tuple()); }
            } else if r.is_ok() {
                let t = f.tuple().unwrap();
                prop_assert!(opened.contains(&t.reversed()) || opened.contains(&t), "{f:?}");
            }
            let v = p.view(p.epoch);
            prop_assert!(v.connections <= 8);
            prop_assert_eq!(acl.total(), v.connections);
        }
    }
}

/// A TCP segment from `src` to `dst` with its numbers, `len` bytes of
/// payload and, on a SYN, the window scale option `wscale`.
#[allow(clippy::too_many_arguments)]
fn tcp_seg(
    (src, sport): ([u8; 4], u16),
    (dst, dport): ([u8; 4], u16),
    flags: u8,
    seq: u32,
    ack: u32,
    win: u16,
    len: usize,
    wscale: Option<u8>,
) -> Vec<u8> {
    let mut h = tcp_hdr(sport, dport, flags);
    h[4..8].copy_from_slice(&seq.to_be_bytes());
    h[8..12].copy_from_slice(&ack.to_be_bytes());
    h[14..16].copy_from_slice(&win.to_be_bytes());
    if let Some(s) = wscale {
        // NOP, window scale: the header grows to 24 bytes.
        h.extend_from_slice(&[1, 3, 3, s]);
        h[12] = 6 << 4;
    }
    h.resize(h.len() + len, 0xab);
    ipv4(src, dst, proto::TCP, &h)
}

#[test]
fn a_segment_outside_its_connections_windows_is_invalid_unless_liberal() {
    let flow = |tcp_be_liberal: bool| {
        let limits = Limits {
            tcp_be_liberal,
            ..Limits::default()
        };
        let (_acl, p) = acl_with(vec![tcp_in(22)], limits);
        // A (client, ISN 1000, scale 7) opens to B:22 (ISN 9000).
        let (a, b) = ((A, 5000), (B, 22));
        let syn = tcp_seg(a, b, 0x02, 1000, 0, 64240, 0, Some(7));
        let f = Flow::of(&syn, &Layers::parse(&syn).unwrap()).unwrap();
        let L4::Tcp { seg, .. } = f.l4 else {
            panic!("{f:?}")
        };
        assert_eq!(
            (seg.seq, seg.win, seg.len, seg.wscale),
            (1000, 64240, 0, Some(7))
        );
        assert_eq!(check(&p, In, &syn, 0), Ok(()));
        let syn_ack = tcp_seg(b, a, 0x12, 9000, 1001, 65160, 0, Some(7));
        assert_eq!(check(&p, Out, &syn_ack, 0), Ok(()));
        assert_eq!(
            check(&p, In, &tcp_seg(a, b, 0x10, 1001, 9001, 502, 0, None), 0),
            Ok(())
        );
        // Data within the windows, and its acknowledgement.
        let data = tcp_seg(a, b, 0x18, 1001, 9001, 502, 1448, None);
        assert_eq!(check(&p, In, &data, 0), Ok(()));
        assert_eq!(
            check(&p, Out, &tcp_seg(b, a, 0x10, 9001, 2449, 509, 0, None), 0),
            Ok(())
        );
        // A segment far beyond the window (a spoofed one, or a stream
        // from another incarnation of the connection).
        let far = tcp_seg(a, b, 0x18, 1001 + 40_000_000, 9001, 502, 100, None);
        let r = check(&p, In, &far, 0);
        (r, p.view(p.epoch).counters.out_of_window)
    };
    assert_eq!(flow(false), (Err(Denied::Invalid), 1));
    assert_eq!(flow(true), (Ok(()), 0));
}
