use super::*;

fn g(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn members(m: &Mdb, vlan: u16, group: &str, now: Instant) -> (Lookup, Vec<usize>) {
    let mut v = Vec::new();
    let l = m.lookup(vlan, g(group), now, &mut v);
    v.sort();
    (l, v)
}

/// With the own querier, which has queried VLANs 0, 10 and 20 a
/// response time ago.
fn with_querier() -> Mdb {
    queried(SnoopConfig::default())
}

/// `cfg` with the own querier, as [`with_querier`].
fn queried(cfg: SnoopConfig) -> Mdb {
    let m = Mdb::new(SnoopConfig {
        querier: true,
        ..cfg
    });
    let then = Instant::now() - Duration::from_secs(10);
    m.queries_due([0, 10, 20], then);
    m
}

#[test]
fn the_own_querier_prunes_from_its_first_querys_response_time_on() {
    let m = Mdb::new(SnoopConfig {
        querier: true,
        ..SnoopConfig::default()
    });
    let now = Instant::now();
    m.join(0, g("239.1.1.1"), 3, now);
    assert_eq!(members(&m, 0, "239.1.1.1", now).0, Lookup::Flood);
    assert_eq!(m.queries_due([0], now).len(), 2);
    let soon = now + Duration::from_secs(9);
    assert_eq!(members(&m, 0, "239.1.1.1", soon).0, Lookup::Flood);
    assert!(!m.querier_exists(0, Family::Ipv6, soon));
    let ready = now + Duration::from_secs(10);
    assert_eq!(
        members(&m, 0, "239.1.1.1", ready),
        (Lookup::Members, vec![3])
    );
    assert!(m.querier_exists(0, Family::Ipv6, ready));
    // A VLAN not queried yet is flooded.
    m.join(30, g("239.1.1.1"), 3, now);
    assert_eq!(members(&m, 30, "239.1.1.1", ready).0, Lookup::Flood);
    // Later queries do not move the start.
    m.queries_due([0], now + Duration::from_secs(40));
    assert_eq!(
        m.own_querier(ready),
        [(0, Family::Ipv4, true), (0, Family::Ipv6, true)]
    );
}

#[test]
fn without_a_querier_everything_floods() {
    let m = Mdb::new(SnoopConfig::default());
    let now = Instant::now();
    m.join(0, g("239.1.1.1"), 3, now);
    assert_eq!(members(&m, 0, "239.1.1.1", now).0, Lookup::Flood);
    // A querier heard: after its response time, pruned.
    m.query(0, 7, g("198.18.0.1"), None, Duration::from_secs(10), now);
    assert_eq!(members(&m, 0, "239.1.1.1", now).0, Lookup::Flood);
    let later = now + Duration::from_secs(11);
    assert_eq!(
        members(&m, 0, "239.1.1.1", later),
        (Lookup::Members, vec![3])
    );
    // The IPv6 family has no querier.
    m.join(0, g("ff0e::1"), 3, now);
    assert_eq!(members(&m, 0, "ff0e::1", later).0, Lookup::Flood);
    let mut r = Vec::new();
    m.routers(0, later, &mut r);
    assert_eq!(r, [7]);
    let off = Mdb::new(SnoopConfig {
        enabled: false,
        querier: true,
        ..SnoopConfig::default()
    });
    assert_eq!(members(&off, 0, "239.1.1.1", now).0, Lookup::Flood);
}

#[test]
fn members_per_vlan_expire_and_leave() {
    let m = with_querier();
    let now = Instant::now();
    m.join(10, g("239.1.1.1"), 1, now);
    m.join(10, g("239.1.1.1"), 2, now);
    m.join(20, g("239.1.1.1"), 3, now);
    assert_eq!(
        members(&m, 10, "239.1.1.1", now),
        (Lookup::Members, vec![1, 2])
    );
    assert_eq!(
        members(&m, 20, "239.1.1.1", now),
        (Lookup::Members, vec![3])
    );
    assert_eq!(members(&m, 10, "239.1.1.2", now).0, Lookup::Unknown);
    // A leave keeps the member for the last member time.
    m.leave(10, g("239.1.1.1"), 1, now);
    assert_eq!(members(&m, 10, "239.1.1.1", now).1, vec![1, 2]);
    let t = now + Duration::from_secs(3);
    assert_eq!(members(&m, 10, "239.1.1.1", t).1, vec![2]);
    // A report in time keeps it.
    m.leave(10, g("239.1.1.1"), 2, now);
    m.join(10, g("239.1.1.1"), 2, now + Duration::from_secs(1));
    assert_eq!(members(&m, 10, "239.1.1.1", t).1, vec![2]);
    // The membership interval.
    let late = now + Duration::from_secs(262);
    assert_eq!(members(&m, 10, "239.1.1.1", late).0, Lookup::Unknown);
    m.sweep(late);
    assert!(m.is_empty());
}

#[test]
fn memberships_are_bounded_per_port_and_in_all() {
    let m = Mdb::new(SnoopConfig {
        limits: MdbLimits {
            per_port: 3,
            total: 5,
        },
        ..SnoopConfig::default()
    });
    let now = Instant::now();
    let grp = |i: u8| IpAddr::V4([239, 0, 1, i].into());
    let got: Vec<_> = (0..5).map(|i| m.join(0, grp(i), 1, now)).collect();
    assert_eq!(got.iter().filter(|j| **j == Join::Refused).count(), 2);
    // A refresh is never refused.
    assert_eq!(m.join(0, grp(0), 1, now), Join::Member);
    assert_eq!(m.join(0, grp(0), 2, now), Join::Member);
    assert_eq!(m.join(0, grp(1), 2, now), Join::Member);
    assert_eq!(m.join(0, grp(2), 2, now), Join::Refused);
    assert_eq!(m.len(), 5);
    m.forget_port(1);
    assert_eq!(m.len(), 2);
    assert_eq!(m.join(0, grp(2), 2, now), Join::Member);
}

#[test]
fn a_refused_group_floods_until_its_membership_would_have_lapsed() {
    let m = queried(SnoopConfig {
        limits: MdbLimits {
            per_port: 1,
            total: 8,
        },
        ..SnoopConfig::default()
    });
    let now = Instant::now();
    assert_eq!(m.join(0, g("239.1.1.1"), 1, now), Join::Member);
    assert_eq!(m.join(0, g("239.1.1.2"), 1, now), Join::Refused);
    // Port 2's member of the refused group is in the table; port 1's
    // is not, so the group floods rather than go to port 2 only.
    assert_eq!(m.join(0, g("239.1.1.2"), 2, now), Join::Member);
    assert_eq!(members(&m, 0, "239.1.1.2", now).0, Lookup::Refused);
    assert_eq!(members(&m, 0, "239.1.1.1", now).0, Lookup::Members);
    assert_eq!(members(&m, 0, "239.1.1.3", now).0, Lookup::Unknown);
    assert_eq!(members(&m, 10, "239.1.1.2", now).0, Lookup::Unknown);
    assert_eq!(m.refused_groups(now), 1);
    let late = now + Duration::from_secs(261);
    m.sweep(late);
    assert_eq!(m.refused_groups(late), 0);
}

#[test]
fn past_the_refused_groups_kept_every_unknown_group_floods() {
    let m = queried(SnoopConfig {
        limits: MdbLimits {
            per_port: 0,
            total: 8,
        },
        ..SnoopConfig::default()
    });
    let now = Instant::now();
    for i in 0..=MAX_REFUSED_GROUPS {
        let grp = IpAddr::V4([239, 3, (i >> 8) as u8, i as u8].into());
        assert_eq!(m.join(0, grp, 1, now), Join::Refused);
    }
    assert_eq!(m.refused_groups(now), MAX_REFUSED_GROUPS);
    assert_eq!(members(&m, 0, "239.9.9.9", now).0, Lookup::Refused);
    let late = now + Duration::from_secs(261);
    m.sweep(late);
    assert_eq!(members(&m, 0, "239.9.9.9", late).0, Lookup::Unknown);
}

#[test]
fn a_heard_querier_decides_leaves_and_silences_the_own() {
    let m = Mdb::new(SnoopConfig {
        querier: true,
        ..SnoopConfig::default()
    });
    let now = Instant::now();
    assert_eq!(m.queries_due([0, 10], now).len(), 4);
    assert!(m.queries_due([0, 10], now).is_empty(), "claimed");
    let startup = now + Duration::from_millis(31_250);
    assert_eq!(m.queries_due([0], startup).len(), 2);
    assert!(m
        .queries_due([0], startup + Duration::from_secs(124))
        .is_empty());
    m.join(0, g("239.1.1.1"), 1, now);
    m.query(0, 5, g("198.18.0.254"), None, Duration::from_secs(10), now);
    // A leave waits for the querier's group-specific query.
    m.leave(0, g("239.1.1.1"), 1, now);
    assert_eq!(
        members(&m, 0, "239.1.1.1", now + Duration::from_secs(20)).1,
        vec![1]
    );
    m.query(
        0,
        5,
        g("198.18.0.254"),
        Some(g("239.1.1.1")),
        Duration::from_secs(1),
        now,
    );
    assert_eq!(
        members(&m, 0, "239.1.1.1", now + Duration::from_secs(11)).0,
        Lookup::Unknown
    );
    let t = startup + Duration::from_secs(126);
    assert_eq!(m.queries_due([0], t), vec![(0, Family::Ipv6)]);
    let (_, routers, queriers) = m.rows(now);
    assert_eq!(routers.len(), 1);
    assert_eq!(queriers[0].addr, g("198.18.0.254"));
}
