//! What a device says of itself for views ([`crate::Device::status`], as
//! Open vSwitch's `netdev_get_status`): plain typed data, each part filled
//! by the kinds that have it, so that views never reach a backend's type.

use serde::Serialize;
use std::path::PathBuf;

/// What a device says of itself, each part typed ([`Device::status`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeviceStatus {
    /// A real guest's connection: what its driver accepted, its memory,
    /// its virtqueues.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vhost_user: Option<VhostUserStatus>,
    /// How a queue is read: frames per system call, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames_per_read: Option<usize>,
    /// How frames are spread over receive queues (`netqueue`, `rss`,
    /// `flow hash`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<&'static str>,
}

impl DeviceStatus {
    /// The sizes of queue `q`'s virtqueues (receive, transmit), for a
    /// real guest's port.
    pub fn virtqueue_sizes(&self, q: usize) -> Option<(u16, u16)> {
        let vq = self.vhost_user.as_ref()?.virtqueues.get(q)?;
        Some((vq.rx, vq.tx))
    }
}

/// A real guest's connection as views show it ([`crate::Device::status`]).
#[derive(Clone, Debug, Serialize)]
pub struct VhostUserStatus {
    /// The socket's path.
    pub socket: PathBuf,
    /// Who listens (`server`: hvnet; `client`: the guest's VMM).
    pub mode: &'static str,
    /// A front end is connected now.
    pub connected: bool,
    /// Connections so far (a reconnecting guest adds one each time).
    pub connections: u64,
    /// Memory tables set so far.
    pub memory_tables: u64,
    /// Regions of the current memory table.
    pub memory_regions: usize,
    /// Guest memory the current table maps.
    pub memory_bytes: u64,
    /// The virtio features the driver acknowledged, in hex.
    pub acked_features: String,
    /// The virtqueue layout negotiated: `split` or `packed`.
    pub ring_layout: &'static str,
    /// The offloads the driver takes now.
    pub guest_offloads: GuestOffloads,
    /// The guest is here (not migrated away with its rings stopped).
    pub guest_present: bool,
    /// The front end logs dirty pages (live migration under way).
    pub dirty_logging: bool,
    /// RARP announcements sent for the guest after a migration.
    pub announcements: u64,
    /// Each queue pair's virtqueue sizes.
    pub virtqueues: Vec<VirtqueueSizes>,
}

/// One queue pair's virtqueue sizes (0 until the driver set them).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct VirtqueueSizes {
    /// The guest's receive virtqueue.
    pub rx: u16,
    /// The guest's transmit virtqueue.
    pub tx: u16,
}

/// What the guest's driver accepted, as the switch needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GuestOffloads {
    /// Takes frames with partial checksums (`GUEST_CSUM`).
    pub csum: bool,
    /// Takes TCP GSO frames whole (`GUEST_TSO4` and `GUEST_TSO6`).
    pub tso: bool,
    /// Its receive buffers may be chained into one frame (`MRG_RXBUF`).
    pub mergeable: bool,
}
