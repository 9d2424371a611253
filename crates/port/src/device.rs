//! What a port is attached to: a VM's TAP device or an uplink's interface.
//! Both carry one frame behind a 12-byte virtio-net header per read and
//! per write, so the datapath reads and writes them the same way and asks
//! the device only for its queues.

use crate::tap::TapPort;
use crate::uplink::UplinkPort;
use hvnet_sys::FrameQueue;

/// A port's device.
#[derive(Debug)]
pub enum Device {
    /// A VM's NIC: the queues of a TAP device.
    Tap(TapPort),
    /// The physical side: packet sockets on an existing interface.
    Uplink(UplinkPort),
}

impl Device {
    /// Queue `i`.
    pub fn queue(&self, i: usize) -> &FrameQueue {
        match self {
            Device::Tap(t) => t.queue(i),
            Device::Uplink(u) => u.queue(i),
        }
    }

    /// Number of queues.
    pub fn num_queues(&self) -> usize {
        match self {
            Device::Tap(t) => t.num_queues(),
            Device::Uplink(u) => u.num_queues(),
        }
    }

    /// The interface's name (the TAP as the host named it; the uplink's
    /// device).
    pub fn name(&self) -> &str {
        match self {
            Device::Tap(t) => t.name(),
            Device::Uplink(u) => u.device(),
        }
    }

    /// The uplink, if this is one.
    pub fn uplink(&self) -> Option<&UplinkPort> {
        match self {
            Device::Uplink(u) => Some(u),
            Device::Tap(_) => None,
        }
    }

    /// The port type as `hvnet ports` shows it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Device::Tap(_) => "tap+vnet_hdr",
            Device::Uplink(_) => "uplink+af_packet",
        }
    }
}
