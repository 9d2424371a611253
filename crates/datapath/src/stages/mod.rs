//! The features on a frame's path, one folder each (one file where it is
//! small): its rules, its per-worker state, its counters and drop
//! reasons, and its stage — the entry the worker runs over a burst (or,
//! on the way to a port, per frame), declared with its place on the path
//! (what it runs after and before), its kind and which ports want it. The
//! crate root's tables list every stage once; a port's arcs are built
//! from them ([`crate::arc`]), so a feature off at a port is not on its
//! path.

pub mod acl;
pub(crate) mod admit;
pub mod capture;
pub mod cpu_limit;
pub(crate) mod csum;
pub mod guard;
pub mod ipfix;
pub(crate) mod lro;
pub mod mirror;
pub mod rate;
pub mod route;
pub mod shares;
pub mod snoop;
pub(crate) mod suppress;
pub mod vlan;
