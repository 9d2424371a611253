//! Ports: where frames enter and leave the switch, and the packet type that
//! carries them through it.
//!
//! The shared interface sits at the top, all the datapath sees of a port:
//! - [`device`]: the port interface every backend implements — a
//!   device, a receiver and a transmitter per queue, its capabilities,
//!   link, what to wait on and its status for views;
//! - [`packet`]: a buffer and its metadata, parsed once where the frame
//!   enters;
//! - [`pool`]: buffers in two size classes, per-thread LIFO caches over a
//!   per-port account with a cap (memory stays bounded whatever a guest
//!   sends);
//! - [`vnet`]: the virtio-net header at the port boundary — receive
//!   errors, the header's check against its frame, writing behind one —
//!   for every backend;
//! - [`outgoing`]: what a transmitter takes — frames with their metadata
//!   — and their serialisation behind a virtio-net header;
//! - `fd_tx` (private): writing frames to a TAP queue or a packet socket
//!   with the fewest system calls, for the two backends that have one.
//!
//! The [`backends`] implement it, one module each (a new kind of port is
//! written there alone):
//! - [`backends::tap`]: TAP ports (a VM's NIC as a hypervisor's device
//!   model holds it), read and written with virtio-net headers checked at
//!   the boundary;
//! - [`backends::uplink`]: uplink ports, AF_PACKET sockets on an existing
//!   interface with the same header, one per receive queue, and what only
//!   they use: the fanout programs in classic BPF ([`uplink::netqueue`]'s
//!   receive filters, [`uplink::rss_fanout`]'s RSS), reads a batch per
//!   system call ([`uplink::socket_batch`]) and a tunnel endpoint's whole
//!   frames without a header ([`uplink::whole_frame`]);
//! - [`backends::team`]: NIC teams, one uplink port over several
//!   devices, each an uplink of its own, with vSphere's and Open vSwitch's
//!   policies, failover and LACP ([`team::lacp`]);
//! - [`backends::vhost_user`]: vhost-user ports, a real guest's
//!   virtio-net device served over its shared memory and virtqueues, with
//!   its own engine for frames in and out of them ([`vhost_user::virtq`])
//!   and the guest's control virtqueue ([`vhost_user::ctrlq`]);
//! - [`backends::vxlan`]: VXLAN tunnel endpoints, a device over an
//!   uplink's that decapsulates what it reads and encapsulates what it
//!   writes, with the endpoint's tables (remotes, learned and advertised
//!   MACs, its underlay neighbours);
//! - [`backends::replay`]: a port over in-memory queues, what a test or a
//!   capture replays into the switch.
//!
//! The backends' modules are re-exported at the top (`hvnet_port::uplink`,
//! `hvnet_port::virtq`, …), as are the types other crates use.

#![forbid(unsafe_code)]

pub mod backends;
pub mod device;
mod fd_tx;
pub mod filters;
pub mod outgoing;
pub mod packet;
pub mod pool;
pub mod status;
pub mod vnet;

pub use backends::uplink::netqueue;
pub use backends::vhost_user::virtq;
pub use backends::{replay, tap, team, uplink, vhost_user, vxlan};

pub use device::{Caps, Device, Link, Receiver, TraceMark, Transmitter, TxOptions};
pub use outgoing::{BatchOptions, OutFrame, SendError, Written};
pub use packet::{Meta, OuterTag, Packet, TunnelMeta};
pub use pool::{Buf, Home, Pool, PoolCaps, PoolStatus, SizeClass};
pub use pool::{HEADROOM, SMALL_FRAME};
pub use replay::{ReplayError, ReplayPort};
pub use status::{DeviceStatus, GuestOffloads, TeamStatus, VhostUserStatus, VirtqueueSizes};
pub use tap::{tap_offload_flags, TapError, TapPort, TapReader};
pub use team::{TeamConfig, TeamPort};
pub use uplink::socket_batch::{Framing, SocketBatchReader};
pub use uplink::{LinkState, Spread, UplinkPort, UplinkRead};
pub use vhost_user::{SocketMode, VhostUserPort};
pub use virtq::VirtqError;
pub use vnet::{
    check, send, vnet_bytes, write_frame, RecvError, TeamRefusal, MAX_GSO_SEGMENTS, VNET_HDR_LEN,
};
pub use vxlan::VxlanPort;
