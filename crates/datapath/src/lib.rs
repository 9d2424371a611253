//! hvnet's datapath: a learning L2 switch between VM ports, run by a fixed
//! pool of workers that carry each frame from its receive queue to its
//! destination (run to completion), with the offload engines on the path
//! (software LRO into guests, TSO frames passed whole or segmented,
//! checksum completion only where a guest needs it), and VMXNET3-style
//! guest receive rings with a delivery thread per queue as a lab option.
//! Every frame is counted; memory is bounded per port.
//!
//! Its rooms: [`engine`] (the switch, its ports, the worker pool, a
//! worker's read, forwarding and write, the arc builder), [`tables`] (FDB,
//! MDB, leases), [`stages`] (one folder per feature: its rules, its state
//! and its stage on the path), and the vocabularies every room speaks:
//! [`settings`], [`counters`] and [`trace`]. The stage tables below are
//! the one place a stage is put on the path.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod counters;
pub mod engine;
pub mod settings;
pub mod stages;
pub mod tables;
pub mod trace;

// The paths the control plane and the tests name.
#[cfg(any(test, feature = "test-utils"))]
pub use engine::harness;
pub use engine::{
    arc, deliver, forward, item, pool, port_table, ring, threads, Port, PortArcs, PortSpec,
    PortState, Switch, SwitchConfig, MAX_RESTARTS,
};
pub use stages::rate::Rate;
pub use stages::shares as nioc;
pub use stages::{acl, capture, cpu_limit, guard, ipfix, mirror, rate, route, snoop, vlan};
pub use tables::{fdb, lease, mdb};

pub use counters::{DropReason, Level};
pub use engine::item::{RingItem, BATCH};
pub use engine::pool::weight::WorkerNice;
pub use engine::port_table::{PortTable, TableError};
pub use settings::{
    on_off, setting_range, validate_settings, Delivery, PortSettings, RxOverflow, SettingError,
    BACKPRESSURE_WAIT, MAX_RX_USECS,
};
pub use stages::vlan::{VlanMode, VlanSet};

use arc::{Decl, FeatureArc, Features, Order};
use engine::worker::{self, InRun, OutRun};
use std::sync::OnceLock;

/// Every ingress stage, one line each (a feature is its folder and its
/// line here); the order is what each declares it runs after and before.
/// The engine's own stages are bare; a feature's is marked as one.
static INGRESS: [Decl<InRun>; 18] = [
    feature_in(stages::capture::stage::IN),
    feature_in(stages::csum::DECL),
    feature_in(stages::lro::stage::DECL),
    feature_in(stages::admit::MIRROR_OUTPUT),
    feature_in(stages::admit::DISCONNECTED),
    feature_in(stages::rate::stage::DECL),
    feature_in(stages::admit::FORGED),
    feature_in(stages::guard::stage::GUARDS),
    feature_in(stages::guard::stage::LEASES),
    feature_in(stages::acl::stage::FROM_PORT),
    worker::vlan::CLASSIFY,
    feature_in(stages::mirror::stage::IN),
    worker::learn::DECL,
    feature_in(stages::route::stage::DECL),
    feature_in(stages::ipfix::stage::DECL),
    feature_in(stages::suppress::DECL),
    feature_in(stages::snoop::stage::DECL),
    worker::forward::DECL,
];

/// Every egress stage, one line each (the engine's write follows them).
static EGRESS: [Decl<OutRun>; 5] = [
    worker::egress::QUEUE,
    feature_out(stages::mirror::stage::OUT),
    feature_out(stages::acl::stage::TO_PORT),
    feature_out(stages::shares::stage::DECL),
    worker::vlan::TAG,
];

/// True in a build without the feature stages (`RUSTFLAGS="--cfg
/// hvnet_bare_arcs"`), which the daemon says when it starts.
pub const BARE_ARCS: bool = cfg!(hvnet_bare_arcs);

/// A feature's ingress stage. In a build with bare arcs (the reference a port
/// with every feature off is measured against) it keeps its place in the
/// order, for the others' constraints, but is on no port's arc and its
/// code is not in the binary.
const fn feature_in(d: Decl<InRun>) -> Decl<InRun> {
    if BARE_ARCS {
        Decl {
            wants: arc::never,
            run: |_, _, _| {},
            ..d
        }
    } else {
        d
    }
}

/// A feature's egress stage (as [`feature_in`]).
const fn feature_out(d: Decl<OutRun>) -> Decl<OutRun> {
    if BARE_ARCS {
        Decl {
            wants: arc::never,
            run: |_, _, _| Ok(()),
            ..d
        }
    } else {
        d
    }
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
fn ingress_arc(f: &Features) -> FeatureArc<InRun> {
    orders().0.build(&INGRESS, f)
}

/// A port's egress arc.
fn egress_arc(f: &Features) -> FeatureArc<OutRun> {
    orders().1.build(&EGRESS, f)
}

#[cfg(all(test, not(hvnet_bare_arcs)))]
mod stage_table_tests;
