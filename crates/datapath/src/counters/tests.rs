use super::*;
use hvnet_port::virtq::DescriptorFault;
use hvnet_port::{RecvError, SendError};

#[test]
fn every_reason_has_its_own_slot_and_name() {
    let mut names = std::collections::HashSet::new();
    for (i, r) in DropReason::ALL.into_iter().enumerate() {
        assert_eq!(r as usize, i, "{r:?} out of order");
        assert!(names.insert(r.name()), "{r:?} named twice");
        assert_eq!(r.key(), format!("drop_{}", r.name()));
    }
}

#[test]
fn a_snapshot_serializes_its_way_s_drops_by_key() {
    let c = EgressCounters::default();
    add(&c.offered, 3);
    c.count_drop(DropReason::Ring1Full, 2);
    c.count_drop(DropReason::PortDown, 1);
    let s = c.snapshot();
    assert_eq!((s.drops(), s.in_flight()), (3, 0));
    let v = serde_json::to_value(s).unwrap();
    assert_eq!(v["drop_ring1_full"], 2);
    assert_eq!(v["drop_port_down"], 1);
    assert_eq!(v["drop_virtqueue_full"], 0);
    assert!(v.get("drop_bad_frame").is_none(), "an ingress reason: {v}");
    let nonzero: Vec<_> = s.dropped.nonzero().collect();
    assert_eq!(
        nonzero,
        [(DropReason::Ring1Full, 2), (DropReason::PortDown, 1)]
    );
}

#[test]
fn each_descriptor_fault_has_a_reason_of_its_way() {
    for way in [Way::FromPort, Way::ToPort] {
        let mut seen = std::collections::HashSet::new();
        for f in DescriptorFault::ALL {
            let r = DropReason::of_fault(f, way);
            assert_eq!(r.way(), way, "{f:?}");
            seen.insert(r);
        }
        // Every fault but the one the side cannot have is told apart.
        assert_eq!(seen.len(), DescriptorFault::ALL.len() - 1, "{way:?}");
    }
    assert_eq!(
        DropReason::of_refused(&RecvError::BadDescriptor(DescriptorFault::Loop)),
        Some(DropReason::TxDescLoop)
    );
    assert_eq!(
        DropReason::from(SendError::BadDescriptor(DescriptorFault::Short)),
        DropReason::RxDescShort
    );
}

#[test]
fn a_level_serializes_as_its_value() {
    assert_eq!(serde_json::to_value(Level(5u64)).unwrap(), 5);
    assert_eq!(serde_json::to_value(Level(-2i64)).unwrap(), -2);
    assert_eq!(serde_json::to_value(Level(true)).unwrap(), true);
}

#[test]
fn refused_frames_convert_and_queue_errors_do_not() {
    assert_eq!(
        DropReason::of_refused(&RecvError::TooManySegments),
        Some(DropReason::GsoSegments)
    );
    assert_eq!(DropReason::of_refused(&RecvError::WouldBlock), None);
    assert_eq!(DropReason::from(SendError::Full), DropReason::VirtqueueFull);
    for r in DropReason::ALL {
        let way = r.way();
        assert!(DropReason::of_way(way).any(|x| x == r));
    }
}
