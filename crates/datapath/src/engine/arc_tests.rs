//! Feature arcs through the stepped switch: a port's arcs hold the
//! stages of what is on at it and nothing else, a traced frame gets a
//! line from every stage it passes (and an untraced one none), and arcs
//! rebuilt at run time, under traffic, lose no frame.

use crate::acl::{AclConfig, Action, Direction, Rule, RuleSet};
use crate::capture::{Point, Session};
use crate::engine::SwitchConfig;
use crate::harness::Harness;
use crate::ipfix::IpfixConfig;
use crate::mirror::{MirrorSpec, Output};
use crate::rate::Rate;
use crate::settings::PortSettings;
use hvnet_offload::testutil::TcpSpec;
use hvnet_wire::MacAddr;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

fn mac(i: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, i])
}

/// Every feature of the port off (a VM's guards, DHCP snooping and the
/// forged-source check are on by default).
fn plain() -> PortSettings {
    PortSettings {
        lro: false,
        allow_forged_transmits: true,
        source_guard: false,
        arp_guard: false,
        nd_guard: false,
        dhcp_guard: false,
        ra_guard: false,
        dhcp_snooping: false,
        ..PortSettings::default()
    }
}

/// Ports p0 and p1 (VMs) and p2 (to be a mirror's output).
fn switch() -> Harness {
    let ports = [
        (mac(1), 1, plain()),
        (mac(2), 1, plain()),
        (mac(3), 1, plain()),
    ];
    Harness::new(&ports, SwitchConfig::default())
}

/// A TCP frame p0 to p1, with a zero virtio-net header in front.
fn frame(seq: u32) -> Vec<u8> {
    let mut v = vec![0u8; 12];
    v.extend(
        TcpSpec {
            src_mac: mac(1).0,
            dst_mac: mac(2).0,
            seq: 1000 + seq * 100,
            ..TcpSpec::default()
        }
        .build(),
    );
    v
}

fn allow_all(ports: &[&str]) -> AclConfig {
    let rule = |direction| Rule {
        stateless: true,
        ..Rule::any("open#0", direction, Action::Allow)
    };
    let set = RuleSet {
        rules: vec![rule(Direction::Out), rule(Direction::In)],
        groups: vec!["open".into()],
    };
    AclConfig {
        ports: ports.iter().map(|p| (p.to_string(), set.clone())).collect(),
        ..AclConfig::default()
    }
}

fn mirror() -> MirrorSpec {
    MirrorSpec {
        name: "m".into(),
        select_all: false,
        select_src_port: vec!["p0".into()],
        select_dst_port: vec!["p1".into()],
        select_vlan: Vec::new(),
        output: Output::Port("p2".into()),
    }
}

/// Sends `n` frames p0 to p1 and returns how many p1 got.
fn send_and_count(h: &mut Harness, n: u32) -> usize {
    for i in 0..n {
        assert!(h.send(0, 0, &frame(i)));
    }
    let mut out = Vec::new();
    h.settle(100, &mut out);
    out.iter().filter(|(p, _)| *p == 1).count()
}

#[test]
fn a_port_with_every_feature_off_runs_the_engine_alone() {
    let mut h = switch();
    assert_eq!(send_and_count(&mut h, 1), 1);
    let a = h.sw.ports()[0].arcs();
    // Snooping is on by default, as the Linux bridge's.
    assert_eq!(a.ingress, ["vlan", "fdb", "snoop", "forward"]);
    assert_eq!(a.egress, ["queue", "tag"]);
}

#[test]
fn a_traced_frame_gets_a_line_from_every_stage_it_passes_and_others_none() {
    let mut h = switch();
    let collector = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let sw = Arc::clone(&h.sw);
    let mut s0 = plain();
    s0.tx_rate = Some(Rate(10_000_000_000));
    s0.arp_guard = true;
    s0.allow_forged_transmits = false;
    sw.set_port("p0", s0).unwrap();
    let mut s1 = plain();
    s1.dhcp_snooping = true;
    sw.set_port("p1", s1).unwrap();
    sw.set_acl(allow_all(&["p0", "p1"]));
    sw.set_mirrors(vec![mirror()]).unwrap();
    crate::ipfix::set(
        &sw,
        Some(IpfixConfig {
            targets: vec![collector.local_addr().unwrap()],
            sampling: 1,
            obs_domain_id: 1,
            cache_active_timeout: Duration::from_secs(60),
            cache_idle_timeout: Duration::from_secs(15),
            cache_max_flows: 64,
        }),
    )
    .unwrap();
    let capture = Arc::new(Session::new(&[Point::In], None, 256));
    sw.ports()[0].taps.attach(Arc::clone(&capture));

    // Untraced first: no line.
    assert_eq!(send_and_count(&mut h, 3), 3);
    let p0 = Arc::clone(&sw.ports()[0]);
    assert!(p0.tracer.take().is_empty());
    let arcs = p0.arcs();
    assert_eq!(
        arcs.ingress,
        [
            "capture-in",
            "police",
            "forged",
            "guard",
            "leases",
            "acl",
            "vlan",
            "mirror",
            "fdb",
            "ipfix",
            "snoop",
            "forward"
        ]
    );
    let p1_egress = sw.ports()[1].arcs().egress;
    assert_eq!(p1_egress, ["queue", "mirror", "acl", "tag"]);

    // One traced among untraced ones: its lines alone, from every stage.
    p0.tracer.arm(1);
    assert_eq!(send_and_count(&mut h, 3), 3);
    let lines = p0.tracer.take();
    assert!(lines.iter().all(|l| l.frame == 1), "{lines:#?}");
    let stages: BTreeSet<&str> = lines.iter().map(|l| l.stage).collect();
    let passed: BTreeSet<&str> = arcs
        .ingress
        .iter()
        .chain(&p1_egress)
        .copied()
        .chain(["write"])
        .collect();
    assert_eq!(stages, passed, "{lines:#?}");
    let said = |stage: &str| {
        lines
            .iter()
            .filter(|l| l.stage == stage)
            .map(|l| l.text.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(said("forward"), ["to p1"]);
    assert!(
        said("acl")
            .iter()
            .all(|t| t.contains(": allowed, ") || t.starts_with("sent: allowed, ")),
        "{:?}",
        said("acl")
    );
    assert!(said("mirror").iter().any(|t| t.starts_with("copied")));
    sw.ports()[0].taps.detach(&capture);
    sw.stop();
}

#[test]
fn a_drop_is_traced_with_its_reason_and_the_frame_goes_no_further() {
    let mut h = switch();
    let sw = Arc::clone(&h.sw);
    let mut s0 = plain();
    s0.connected = false;
    sw.set_port("p0", s0).unwrap();
    sw.ports()[0].tracer.arm(1);
    assert_eq!(send_and_count(&mut h, 1), 0);
    let lines = sw.ports()[0].tracer.take();
    let stages: Vec<&str> = lines.iter().map(|l| l.stage).collect();
    assert_eq!(stages, ["drop"], "{lines:#?}");
    assert_eq!(lines[0].text, "disconnected");
    assert_eq!(
        sw.ports()[0].arcs().ingress[0],
        "disconnected",
        "a disconnected port's frames go no further than its first stage"
    );
}

#[test]
fn arcs_rebuilt_at_run_time_under_traffic_lose_no_frame() {
    let mut h = switch();
    let sw = Arc::clone(&h.sw);
    let capture = Arc::new(Session::new(&[Point::In], None, 64));
    let mut seen = BTreeSet::new();
    for round in 0u32..32 {
        let on = |bit: u32| round & (1 << bit) != 0;
        let mut s0 = plain();
        s0.tx_rate = on(0).then_some(Rate(10_000_000_000));
        s0.arp_guard = on(1);
        s0.allow_forged_transmits = on(2);
        sw.set_port("p0", s0).unwrap();
        sw.set_acl(if on(3) {
            allow_all(&["p0", "p1"])
        } else {
            AclConfig::default()
        });
        sw.set_mirrors(if on(4) { vec![mirror()] } else { Vec::new() })
            .unwrap();
        if round % 3 == 0 {
            sw.ports()[0].taps.attach(Arc::clone(&capture));
        }
        // Frames sent before the change is seen, and after.
        assert_eq!(send_and_count(&mut h, 5), 5, "round {round}");
        if round % 3 == 0 {
            sw.ports()[0].taps.detach(&capture);
        }
        seen.insert(sw.ports()[0].arcs().ingress.len());
    }
    // The arcs did change among the rounds.
    assert!(seen.len() >= 4, "{seen:?}");
    h.check_accounting().unwrap();
}
