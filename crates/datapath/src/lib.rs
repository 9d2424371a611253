//! hvnet's datapath: a learning L2 switch between VM ports, run by a fixed
//! pool of workers that carry each frame from its receive queue to its
//! destination (run to completion), with the offload engines on the path
//! (software LRO into guests, TSO frames passed whole or segmented,
//! checksum completion only where a guest needs it), and VMXNET3-style
//! guest receive rings with a delivery thread per queue as a lab option.
//! Every frame is counted; memory is bounded per port.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod acl;
pub mod arc;
#[cfg(test)]
mod arc_tests;
pub mod capture;
pub mod counters;
pub mod cpu_limit;
mod deliver;
pub mod fdb;
pub mod forward;
pub mod guard;
#[cfg(any(test, feature = "test-utils"))]
pub mod harness;
pub mod ipfix;
pub mod item;
pub mod lease;
pub mod mdb;
pub mod mirror;
pub mod nioc;
pub mod port_table;
pub mod rate;
pub mod ring;
pub mod settings;
pub mod snoop;
#[cfg(test)]
mod snoop_tests;
pub mod switch;
pub mod threads;
pub mod trace;
#[cfg(test)]
mod trunk_tests;
pub mod vlan;

mod worker;
pub mod workers;

pub use counters::{DropReason, Level};
pub use item::{RingItem, BATCH};
pub use port_table::{PortTable, TableError};
pub use settings::{
    on_off, setting_range, validate_settings, Delivery, PortSettings, RxOverflow, SettingError,
    BACKPRESSURE_WAIT, MAX_RX_USECS,
};
pub use switch::{Port, PortArcs, PortSpec, PortState, Switch, SwitchConfig};
pub use threads::MAX_RESTARTS;
pub use vlan::{VlanMode, VlanSet};
pub use workers::weight::WorkerNice;
