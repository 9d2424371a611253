//! Uplink ports: the switch's way out to the physical side, on an existing
//! Linux interface (a NIC; in tests and the lab, a veth whose other end is
//! an "external host"). Each receive queue is an AF_PACKET socket carrying
//! the same 12-byte virtio-net header as a TAP queue ([`hvnet_sys::packet`]),
//! so frames are read and checked exactly as a guest's are
//! ([`crate::tap::check`]); the sockets form a fanout group, so the kernel
//! spreads flows over the queues by their hash and each queue has its own
//! thread.
//!
//! The link follows the device: it is down while the device is down (the
//! sockets see `ENETDOWN` and then nothing), up again when the device comes
//! back, and gone for good when the device is deleted.

use hvnet_sys::{FrameQueue, PacketError};

/// An uplink: the packet sockets of one interface.
#[derive(Debug)]
pub struct UplinkPort {
    device: String,
    ifindex: u32,
    queues: Vec<FrameQueue>,
}

/// Where an uplink's device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Administratively and operationally up.
    Up,
    /// Present but down (or without carrier).
    Down,
    /// Deleted (or replaced by another device of the same name).
    Gone,
}

impl UplinkPort {
    /// Opens `queues` receive queues on `device`.
    pub fn open(device: &str, queues: usize) -> Result<UplinkPort, PacketError> {
        let queues = hvnet_sys::open_uplink(device, queues)?;
        let ifindex =
            hvnet_sys::packet::ifindex(device).ok_or(PacketError::NoDevice(device.into()))?;
        Ok(UplinkPort {
            device: device.into(),
            ifindex,
            queues,
        })
    }

    /// The interface.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Queue `i`.
    pub fn queue(&self, i: usize) -> &FrameQueue {
        &self.queues[i]
    }

    /// Number of receive queues.
    pub fn num_queues(&self) -> usize {
        self.queues.len()
    }

    /// The device's state now (from sysfs: its index, then `operstate`).
    pub fn link_state(&self) -> LinkState {
        let dir = std::path::Path::new("/sys/class/net").join(&self.device);
        let index = std::fs::read_to_string(dir.join("ifindex"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        if index != Some(self.ifindex) {
            return LinkState::Gone;
        }
        match std::fs::read_to_string(dir.join("operstate")).as_deref() {
            // "unknown": a device that reports no operational state (tun,
            // dummy) is up when its flags say so.
            Ok("up\n") | Ok("unknown\n") => LinkState::Up,
            _ => LinkState::Down,
        }
    }
}
