//! hvnet's datapath: a learning L2 switch between VM ports, with per-queue
//! workers, VMXNET3-style guest receive rings, and the offload engines on
//! the path (software LRO into guests, TSO frames passed whole or segmented,
//! checksum completion only where a guest needs it). Every frame is counted.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod counters;
pub mod fdb;
pub mod ring;
pub mod switch;

pub use switch::{Port, PortSettings, PortSpec, Switch, SwitchConfig};
