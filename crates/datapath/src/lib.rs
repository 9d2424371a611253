//! hvnet's datapath: a learning L2 switch between VM ports, with per-queue
//! workers, VMXNET3-style guest receive rings filled through lock-free
//! single-producer/single-consumer lanes, and the offload engines on the
//! path (software LRO into guests, TSO frames passed whole or segmented,
//! checksum completion only where a guest needs it). Every frame is
//! counted; memory is bounded per port.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod counters;
mod deliver;
pub mod fdb;
pub mod forward;
#[cfg(any(test, feature = "test-utils"))]
pub mod harness;
pub mod item;
pub mod ring;
pub mod settings;
pub mod switch;
pub mod threads;
pub mod tunnel;
mod worker;

pub use item::{RingItem, BATCH};
pub use settings::{
    on_off, setting_range, validate_settings, Delivery, PortSettings, RxOverflow, SettingError,
    BACKPRESSURE_WAIT, MAX_RX_USECS,
};
pub use switch::{Port, PortSpec, PortState, Switch, SwitchConfig};
pub use threads::MAX_RESTARTS;
