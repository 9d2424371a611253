//! The forwarding decision, as a pure function of a packet's metadata,
//! the port it came from and what the FDB knows. No I/O, no counters: the
//! worker acts on the answer and counts it. (Whether a port may send from
//! another address than its own is the `forged` stage's.)

use crate::vlan::PortVlans;
use hvnet_port::Packet;

/// What to do with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// To one port.
    Unicast(usize),
    /// To every other port of the VLAN (broadcast, multicast, unknown
    /// unicast, or a known destination whose port is down).
    Flood,
    /// Nowhere: the destination lives on the port it came from.
    NoRoute,
}

/// The VLAN a frame from a port of VLANs `vlans` belongs to (its outer
/// 802.1Q tag's as parsed at the port, a trunk's native VLAN, an access
/// port's own), or `None` when the port does not take it: dropped as
/// `vlan_not_allowed`.
#[inline]
pub fn ingress_vlan(vlans: &PortVlans<'_>, pkt: &Packet) -> Option<u16> {
    vlans.ingress(pkt.outer_tag())
}

/// The tag a frame wears out of a port of VLANs `vlans` (which carries
/// its VLAN): `None` untagged.
#[inline]
pub fn egress_tag(vlans: &PortVlans<'_>, pkt: &Packet) -> Option<u16> {
    vlans.egress_tag(pkt.meta.vlan)
}

/// Where a frame from port `from` goes, given where its destination was
/// learned (`None` for group addresses and unknown ones) and whether that
/// port is up.
pub fn route(from: usize, learned: Option<usize>, up: impl Fn(usize) -> bool) -> Action {
    match learned {
        Some(p) if p == from => Action::NoRoute,
        Some(p) if up(p) => Action::Unicast(p),
        _ => Action::Flood,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route(1, Some(1), |_| true), Action::NoRoute);
        assert_eq!(route(1, Some(2), |_| true), Action::Unicast(2));
        assert_eq!(route(1, Some(2), |_| false), Action::Flood);
        assert_eq!(route(1, None, |_| true), Action::Flood);
    }
}
