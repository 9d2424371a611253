//! What a port is attached to: a VM's TAP device, an uplink's interface,
//! or a real guest's virtqueues over vhost-user. All carry one frame
//! behind a 12-byte virtio-net header per read and per write; TAP and
//! uplink queues are file descriptors read and written alike, a vhost-user
//! port's queues are the guest's virtqueues.

use crate::tap::TapPort;
use crate::uplink::UplinkPort;
use crate::vhost_user::VhostUserPort;
use hvnet_sys::FrameQueue;
use std::os::fd::RawFd;

/// A port's device.
#[derive(Debug)]
pub enum Device {
    /// A VM's NIC: the queues of a TAP device.
    Tap(TapPort),
    /// The physical side: packet sockets on an existing interface.
    Uplink(UplinkPort),
    /// A real guest's virtio-net device, served over vhost-user.
    VhostUser(VhostUserPort),
}

impl Device {
    /// Queue `i` as a file descriptor, for TAP and uplink ports.
    pub fn frames(&self, i: usize) -> Option<&FrameQueue> {
        match self {
            Device::Tap(t) => Some(t.queue(i)),
            Device::Uplink(u) => Some(u.queue(i)),
            Device::VhostUser(_) => None,
        }
    }

    /// What queue `i`'s reader waits on: the queue's descriptor, or the
    /// guest's transmit kicks.
    pub fn wait_fd(&self, i: usize) -> RawFd {
        match self {
            Device::Tap(t) => t.queue(i).raw_fd(),
            Device::Uplink(u) => u.queue(i).raw_fd(),
            Device::VhostUser(v) => v.tx_kick_fd(i),
        }
    }

    /// Number of queues.
    pub fn num_queues(&self) -> usize {
        match self {
            Device::Tap(t) => t.num_queues(),
            Device::Uplink(u) => u.num_queues(),
            Device::VhostUser(v) => v.num_queues(),
        }
    }

    /// Queues frames may be spread over now: all of them, except for a
    /// guest that uses fewer queue pairs than it has.
    pub fn active_queues(&self) -> usize {
        match self {
            Device::VhostUser(v) => v.active_queues(),
            _ => self.num_queues(),
        }
    }

    /// The interface's name (the TAP as the host named it; the uplink's
    /// device; a vhost-user port's socket).
    pub fn name(&self) -> &str {
        match self {
            Device::Tap(t) => t.name(),
            Device::Uplink(u) => u.device(),
            Device::VhostUser(v) => v.socket().to_str().unwrap_or("?"),
        }
    }

    /// The uplink, if this is one.
    pub fn uplink(&self) -> Option<&UplinkPort> {
        match self {
            Device::Uplink(u) => Some(u),
            _ => None,
        }
    }

    /// The vhost-user port, if this is one.
    pub fn vhost_user(&self) -> Option<&VhostUserPort> {
        match self {
            Device::VhostUser(v) => Some(v),
            _ => None,
        }
    }

    /// The port type as `hvnet ports` shows it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Device::Tap(_) => "tap+vnet_hdr",
            Device::Uplink(_) => "uplink+af_packet",
            Device::VhostUser(_) => "vhost-user",
        }
    }
}
