//! The device features a vhost-user port offers a guest, and the
//! offloads the guest takes from what it acknowledged.

use crate::status::GuestOffloads;
use vhost::vhost_user::message::VhostUserVirtioFeatures;
use virtio_bindings::virtio_config::{VIRTIO_F_IN_ORDER, VIRTIO_F_RING_PACKED, VIRTIO_F_VERSION_1};
use virtio_bindings::virtio_net::*;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

/// Largest virtqueue a guest may set up (the virtio-net maximum QEMU
/// allows for `rx_queue_size`).
pub const MAX_QUEUE_SIZE: u16 = 4096;

/// The device features offered: what a hypervisor's switch offers a guest
/// (checksum and TSO both ways, ECN with TSO, mergeable receive buffers,
/// MTU, link status, several queue pairs, a control queue for what the
/// guest may change, event index, packed virtqueues unless `packed` is
/// off, in-order use of buffers), and dirty logging for live migration.
///
/// `VIRTIO_F_IN_ORDER` costs the engine nothing: it takes chains in the
/// order they were made available and gives them back used in that order
/// (a frame that found too few receive buffers gives back the ones it
/// took as still available, not used), so a driver that negotiates it
/// (DPDK's `in_order=1`, its default) may free its descriptors in bulk.
pub fn offered_features(packed: bool) -> u64 {
    [
        VIRTIO_NET_F_CSUM,
        VIRTIO_NET_F_GUEST_CSUM,
        VIRTIO_NET_F_MTU,
        VIRTIO_NET_F_MAC,
        VIRTIO_NET_F_GUEST_TSO4,
        VIRTIO_NET_F_GUEST_TSO6,
        VIRTIO_NET_F_GUEST_ECN,
        VIRTIO_NET_F_HOST_TSO4,
        VIRTIO_NET_F_HOST_TSO6,
        VIRTIO_NET_F_HOST_ECN,
        VIRTIO_NET_F_MRG_RXBUF,
        VIRTIO_NET_F_STATUS,
        VIRTIO_NET_F_CTRL_VQ,
        VIRTIO_NET_F_CTRL_RX,
        VIRTIO_NET_F_CTRL_GUEST_OFFLOADS,
        VIRTIO_NET_F_MQ,
        VIRTIO_RING_F_EVENT_IDX,
        VIRTIO_RING_F_INDIRECT_DESC,
        VIRTIO_F_VERSION_1,
        VIRTIO_F_IN_ORDER,
    ]
    .iter()
    .fold(0u64, |f, &b| f | (1u64 << b))
        | if packed {
            1u64 << VIRTIO_F_RING_PACKED
        } else {
            0
        }
        | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
        | VhostUserVirtioFeatures::LOG_ALL.bits()
}

impl GuestOffloads {
    /// From the acknowledged features, and the offloads the guest set
    /// since through its control queue (the same bits).
    pub(super) fn from_features(acked: u64, offloads: u64) -> GuestOffloads {
        let has = |b: u32| offloads & acked & (1u64 << b) != 0;
        GuestOffloads {
            csum: has(VIRTIO_NET_F_GUEST_CSUM),
            tso: has(VIRTIO_NET_F_GUEST_TSO4) && has(VIRTIO_NET_F_GUEST_TSO6),
            mergeable: acked & (1u64 << VIRTIO_NET_F_MRG_RXBUF) != 0,
        }
    }
}
