//! The backends: each kind of port behind the interface of
//! [`crate::device`], in a module of its own.

pub mod replay;
pub mod tap;
pub mod uplink;
pub mod vhost_user;
