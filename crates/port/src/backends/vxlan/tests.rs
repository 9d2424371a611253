use super::*;
use crate::pool::{Home, Pool, PoolCaps, SizeClass};
use hvnet_offload::testutil::{vxlan_wrap, TcpSpec};
use hvnet_offload::OffloadInfo;

/// VXLAN in `vni` from 10.99.0.1 to the endpoint at 10.99.0.2, around
/// a TCP frame from `src`.
fn from_remote(pool: &mut Pool, vni: u32, src: MacAddr) -> Packet {
    let mut inner = TcpSpec::default().build();
    inner[6..12].copy_from_slice(&src.0);
    let mut b = pool.take(SizeClass::Small).expect("a buffer");
    b.fill(&vxlan_wrap(&inner, vni, 49_999, 1, true));
    Packet::parse(b, OffloadInfo::NONE).expect("parses")
}

/// Segments come and go while frames cross: a VNI the endpoint does
/// not carry is dropped as such, carried once added (tagged with its
/// VLAN, its MACs learned, its flood list the static remotes), and
/// gone again with what it learned once removed; the others keep
/// theirs.
#[test]
fn segments_are_added_and_removed_at_run_time() {
    let mut pool = Pool::new(Home::new(PoolCaps::DEFAULT));
    let remote: IpAddr = [10, 99, 0, 1].into();
    let v = Vtep::for_test([10, 99, 0, 2].into(), 24, remote);
    let (a, b) = (MacAddr([2, 0, 0, 0, 0, 0xa]), MacAddr([2, 0, 0, 0, 0, 0xb]));
    let now = Instant::now();
    let vlan_of = |r: Received| match r {
        Received::Inner(p) => Ok(p.meta.layers.outer_vlan().map(|t| t & 0x0fff)),
        Received::Drop(d) => Err(d),
        _ => panic!("neither a frame nor a drop"),
    };
    assert_eq!(
        vlan_of(v.receive(from_remote(&mut pool, 5020, a), now)),
        Err(TunnelDrop::Vni)
    );
    assert!(!v.carries(5020));

    assert_eq!(
        v.set_vlans(&[(20, 5020)]),
        SegmentChange {
            added: vec![(20, 5020)],
            removed: Vec::new()
        }
    );
    assert_eq!(v.segments(), [(None, 42), (Some(20), 5020)]);
    assert_eq!(v.flood_list(5020), [remote]);
    assert_eq!(
        vlan_of(v.receive(from_remote(&mut pool, 5020, a), now)),
        Ok(Some(20))
    );
    assert_eq!(
        vlan_of(v.receive(from_remote(&mut pool, 42, b), now)),
        Ok(None)
    );
    assert_eq!(
        (v.remote_of(5020, &a), v.remote_of(42, &b)),
        (Some(remote), Some(remote))
    );

    assert_eq!(v.set_vlans(&[]).removed, [(20, 5020)]);
    assert_eq!(
        vlan_of(v.receive(from_remote(&mut pool, 5020, a), now)),
        Err(TunnelDrop::Vni)
    );
    assert_eq!(
        (v.remote_of(5020, &a), v.flood_list(5020)),
        (None, Vec::new())
    );
    assert_eq!(
        v.remote_of(42, &b),
        Some(remote),
        "the uplink's own segment kept"
    );
    // A VLAN moved to another VNI: one segment removed, one added.
    v.set_vlans(&[(20, 5020)]);
    assert_eq!(
        v.set_vlans(&[(20, 5021)]),
        SegmentChange {
            added: vec![(20, 5021)],
            removed: vec![(20, 5020)]
        }
    );
    assert_eq!(
        vlan_of(v.receive(from_remote(&mut pool, 5021, a), now)),
        Ok(Some(20))
    );
}
