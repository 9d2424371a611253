//! The stage tables: ordered, and every port's arc right for every
//! combination of the features it can have.

use super::*;
use crate::arc::Features;

/// Every optional feature, as a setter on [`Features`].
const SWITCHES: [fn(&mut Features); 17] = [
    |f| f.uplink = true,
    |f| f.capture_in = true,
    |f| f.csum_software = true,
    |f| f.lro_software = true,
    |f| f.mirror_output = true,
    |f| f.disconnected = true,
    |f| f.policer = true,
    |f| f.forged_check = true,
    |f| f.guards = true,
    |f| f.lease_snooping = true,
    |f| f.acl = true,
    |f| f.mirror_in = true,
    |f| f.mirror_out = true,
    |f| f.services.insert::<crate::ipfix::Ipfix>(),
    |f| f.suppression = true,
    |f| f.snooping = true,
    |f| f.shares = true,
];

fn features(bits: u32) -> Features {
    let mut f = Features::default();
    for (i, set) in SWITCHES.iter().enumerate() {
        if bits & (1 << i) != 0 {
            set(&mut f);
        }
    }
    f
}

/// True if `names` keeps every constraint of `decls` among the stages it
/// has.
fn keeps_order<R>(decls: &[Decl<R>], names: &[&str]) -> Result<(), String> {
    let at = |n: &str| names.iter().position(|x| *x == n);
    for d in decls {
        let Some(me) = at(d.name) else { continue };
        for a in d.after {
            if at(a).is_some_and(|o| o > me) {
                return Err(format!("{} must run after {a}: {names:?}", d.name));
            }
        }
        for b in d.before {
            if at(b).is_some_and(|o| o < me) {
                return Err(format!("{} must run before {b}: {names:?}", d.name));
            }
        }
    }
    Ok(())
}

#[test]
fn the_tables_order() {
    Order::new(&INGRESS).unwrap();
    Order::new(&EGRESS).unwrap();
}

#[test]
fn every_combination_of_features_gets_its_stages_in_order_and_no_others() {
    for bits in 0..1u32 << SWITCHES.len() {
        let f = features(bits);
        let arc = ingress_arc(&f);
        let names = arc.names();
        keeps_order(&INGRESS, &names).unwrap();
        let wanted: Vec<_> = INGRESS
            .iter()
            .filter(|d| (d.wants)(&f))
            .map(|d| d.name)
            .collect();
        assert_eq!(names.len(), wanted.len(), "{f:?}");
        assert!(wanted.iter().all(|w| arc.has(w)), "{f:?}");
        // The engine's stages are on every arc, in their order.
        let engine: Vec<_> = names
            .iter()
            .filter(|n| ["vlan", "fdb", "forward"].contains(n))
            .collect();
        assert_eq!(engine, [&"vlan", &"fdb", &"forward"]);
        assert_eq!(names.last(), Some(&"forward"));
        let out = egress_arc(&f);
        keeps_order(&EGRESS, &out.names()).unwrap();
        assert_eq!(out.names()[0], "queue");
        assert_eq!(out.names().last(), Some(&"tag"));
    }
}

#[test]
fn a_port_with_every_feature_off_runs_the_engine_alone() {
    let f = Features::default();
    assert_eq!(ingress_arc(&f).names(), ["vlan", "fdb", "forward"]);
    assert_eq!(egress_arc(&f).names(), ["queue", "tag"]);
    let engine = crate::arc::Kind::Engine;
    let on = |k, wants: fn(&Features) -> bool| k != engine || wants(&f);
    assert!(INGRESS.iter().all(|d| on(d.kind, d.wants)));
    assert!(EGRESS.iter().all(|d| on(d.kind, d.wants)));
}

#[test]
fn features_of_one_port_kind_stay_off_another() {
    // Software checksum and LRO are an uplink's; guards and suppression
    // a VM's.
    let mut f = Features {
        csum_software: true,
        lro_software: true,
        guards: true,
        suppression: true,
        ..Features::default()
    };
    let names = ingress_arc(&f).names();
    assert!(!names.contains(&"checksum") && !names.contains(&"lro"));
    assert!(names.contains(&"guard") && names.contains(&"suppress"));
    f.uplink = true;
    let names = ingress_arc(&f).names();
    assert!(names.contains(&"checksum") && names.contains(&"lro"));
    assert!(!names.contains(&"guard") && !names.contains(&"suppress"));
}
