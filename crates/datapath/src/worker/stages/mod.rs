//! The stages of a worker's per-frame path, one module each, and the one
//! table per direction that declares them: a line per stage with its
//! place (what it runs after and before), its kind, and which ports want
//! it. A port's arcs are built from these tables at each refresh
//! ([`crate::arc`]); a stage a port does not want is not on its arc.
//!
//! An ingress stage takes the whole burst ([`Burst`]) and walks its live
//! frames; the last, `forward`, takes each frame on to its destinations,
//! where the destination's egress arc runs frame by frame (a flood's
//! copies each through their own port's), and the engine's write stages
//! the frame for delivery ([`egress`]).

pub(super) mod acl;
pub(super) mod admit;
pub(super) mod capture;
pub(super) mod csum;
pub(super) mod egress;
pub(super) mod forward;
pub(super) mod guard;
pub(super) mod ipfix;
pub(super) mod learn;
pub(super) mod lro;
pub(super) mod mirror;
pub(super) mod police;
pub(super) mod shares;
pub(super) mod snoop;
pub(super) mod suppress;
pub(super) mod vlan;

use super::burst::Burst;
use super::{Ctx, State};
use crate::arc::{Decl, FeatureArc, Features, Order};
use crate::counters::DropReason;
use hvnet_port::Packet;
use std::sync::OnceLock;

/// An ingress stage's entry: the whole burst.
pub(crate) type InRun = fn(&mut State, &Ctx, &mut Burst);

/// An egress stage's entry: one frame to one destination queue; an
/// error drops it, counted there under the reason.
pub(crate) type OutRun = fn(&mut State, &Ctx, &mut Out<'_>) -> Result<(), DropReason>;

/// A frame on its way to one destination.
pub(crate) struct Out<'a> {
    /// The destination port.
    pub(crate) dst: usize,
    /// Its receive queue (the `queue` stage's choice).
    pub(crate) q: usize,
    /// The frame.
    pub(crate) pkt: &'a mut Packet,
}

/// Every ingress stage, one line each; the order is the constraints'.
pub(crate) static INGRESS: [Decl<InRun>; 18] = [
    capture::IN,
    csum::DECL,
    lro::DECL,
    admit::MIRROR_OUTPUT,
    admit::DISCONNECTED,
    police::DECL,
    admit::FORGED,
    guard::GUARDS,
    guard::LEASES,
    acl::FROM_PORT,
    vlan::CLASSIFY,
    mirror::IN,
    learn::LEARN,
    learn::LOOKUP,
    ipfix::DECL,
    suppress::DECL,
    snoop::DECL,
    forward::DECL,
];

/// Every egress stage, one line each (the engine's write follows them).
pub(crate) static EGRESS: [Decl<OutRun>; 5] = [
    egress::QUEUE,
    mirror::OUT,
    acl::TO_PORT,
    shares::DECL,
    vlan::TAG,
];

/// An engine stage: on every port's arc.
pub(crate) fn always(_: &Features) -> bool {
    true
}

/// The tables' orders, sorted once (a table that cannot be ordered is a
/// bug, found by the tests before any switch runs).
fn orders() -> &'static (Order, Order) {
    static ORDERS: OnceLock<(Order, Order)> = OnceLock::new();
    ORDERS.get_or_init(|| {
        (
            Order::new(&INGRESS).expect("the ingress stages' order"),
            Order::new(&EGRESS).expect("the egress stages' order"),
        )
    })
}

/// A port's ingress arc.
pub(crate) fn ingress_arc(f: &Features) -> FeatureArc<InRun> {
    orders().0.build(&INGRESS, f)
}

/// A port's egress arc.
pub(crate) fn egress_arc(f: &Features) -> FeatureArc<OutRun> {
    orders().1.build(&EGRESS, f)
}

#[cfg(test)]
mod tests;
