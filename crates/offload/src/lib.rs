//! Software NIC offloads, as pure functions and tables over byte buffers:
//! receive coalescing (GRO/LRO), segmentation (TSO/GSO/USO), checksum
//! offload, RSS flow hashing and VXLAN encapsulation.
//!
//! Nothing here does I/O, starts a thread or reads a clock: time is passed
//! in. The live switch and the offline `hvnet pcap` tool run exactly this
//! code.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod csum;
pub mod gro;
pub mod gso;
pub mod meta;
pub mod rss;
pub mod vxlan;

#[cfg(any(test, feature = "test-utils"))]
pub mod testutil;

pub use meta::{CsumState, GsoInfo, OffloadInfo};
