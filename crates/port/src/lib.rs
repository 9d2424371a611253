//! Ports: where frames enter and leave the switch, and the packet type that
//! carries them through it.
//!
//! - [`pool`]: buffers in two size classes, per-thread LIFO caches over a
//!   per-port account with a cap (memory stays bounded whatever a guest
//!   sends);
//! - [`packet`]: a buffer and its metadata, parsed once where the frame
//!   enters;
//! - [`vnet`]: the virtio-net header at the port boundary — receive
//!   errors, the header's check against its frame, writing behind one —
//!   for every backend;
//! - [`tap`]: TAP ports (a VM's NIC as a hypervisor's device model holds
//!   it), read and written with virtio-net headers checked at the boundary;
//! - [`uplink`]: uplink ports, AF_PACKET sockets on an existing interface
//!   with the same header, one per receive queue;
//! - [`vhost_user`]: vhost-user ports, a real guest's virtio-net device
//!   served over its shared memory and virtqueues;
//! - [`virtq`]: frames in and out of a guest's virtqueues;
//! - [`ctrlq`]: a guest's control virtqueue (queue pairs, offloads);
//! - [`device`]: the port interface every backend implements — a
//!   device, a receiver and a transmitter per queue — all the datapath
//!   sees of a port;
//! - [`whole_frame`]: whole frames from an uplink socket without a
//!   virtio-net header (a tunnel endpoint's, whose peers send tunnelled
//!   GSO frames);
//! - [`netqueue`]: an uplink's receive filters, as the kernel runs them;
//! - [`rss_fanout`]: RSS (Toeplitz) at an uplink, as the kernel runs it.

#![forbid(unsafe_code)]

pub mod backends;
pub mod device;
mod fd_tx;
pub mod packet;
pub mod pool;
pub mod vnet;

pub use backends::uplink::netqueue;
pub use backends::vhost_user::virtq;
pub use backends::{replay, tap, uplink, vhost_user};

pub use device::{Caps, Device, DeviceStatus, Link, Receiver, SendError, Transmitter, TxOptions};
pub use packet::{Meta, Packet};
pub use pool::{Buf, Home, Pool, PoolCaps, PoolStatus, SizeClass};
pub use pool::{HEADROOM, SMALL_FRAME};
pub use replay::{ReplayError, ReplayPort};
pub use tap::{tap_offload_flags, TapError, TapPort, TapReader};
pub use uplink::socket_batch::{Framing, SocketBatchReader};
pub use uplink::{LinkState, Spread, UplinkPort, UplinkRead};
pub use vhost_user::{GuestOffloads, SocketMode, VhostUserPort, VhostUserStatus, VirtqueueSizes};
pub use virtq::VirtqError;
pub use vnet::{check, send, vnet_bytes, write_frame, RecvError, MAX_GSO_SEGMENTS, VNET_HDR_LEN};
