//! What a port is attached to: a VM's TAP device, an uplink's interface,
//! or a real guest's virtqueues over vhost-user. All carry one frame
//! behind a 12-byte virtio-net header per read and per write; TAP and
//! uplink queues are file descriptors read and written alike, a vhost-user
//! port's queues are the guest's virtqueues.

use crate::packet::Packet;
use crate::pool::Pool;
use crate::tap::{TapPort, TapReader};
use crate::uplink::{UplinkPort, UplinkRead};
use crate::vhost_user::VhostUserPort;
use crate::vnet::RecvError;
use crate::whole_frame::WholeFrameReader;
use hvnet_sys::FrameQueue;
use std::os::fd::RawFd;

/// A queue reader's state (its spare buffers), of the kind its port reads.
pub enum QueueReader {
    /// One frame per read (TAP queues, uplinks that may get GSO frames).
    Single(TapReader),
    /// Whole frames without a header (tunnel endpoints).
    Whole(Box<WholeFrameReader>),
    /// A guest's transmit virtqueue (its buffers are the guest's).
    Virtq,
}

impl QueueReader {
    /// Gives the buffers it holds back to `pool`'s cache.
    pub fn release(&mut self, pool: &mut Pool) {
        match self {
            QueueReader::Single(r) => r.release(pool),
            QueueReader::Whole(r) => r.release(pool),
            QueueReader::Virtq => {}
        }
    }
}

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

    /// A reader for one of this device's queues.
    pub fn reader(&self) -> QueueReader {
        match self {
            Device::Tap(_) => QueueReader::Single(TapReader::new()),
            Device::Uplink(u) => match u.read_mode() {
                UplinkRead::Single => QueueReader::Single(TapReader::new()),
                UplinkRead::Whole { tunnel, batch } => {
                    QueueReader::Whole(Box::new(WholeFrameReader::new(tunnel, batch)))
                }
            },
            Device::VhostUser(_) => QueueReader::Virtq,
        }
    }

    /// The next frame of queue `q`, read with `r` (made by
    /// [`Device::reader`]) into buffers from `pool`, checked and parsed.
    pub fn read(
        &self,
        q: usize,
        r: &mut QueueReader,
        pool: &mut Pool,
    ) -> Result<Packet, RecvError> {
        match (self, r) {
            (Device::VhostUser(v), _) => v.read(q, pool),
            (Device::Uplink(u), QueueReader::Whole(r)) => r.read(u.queue(q), pool, u.mtu()),
            (Device::Uplink(u), QueueReader::Single(r)) => r.read(u.queue(q), pool),
            (Device::Tap(t), QueueReader::Single(r)) => r.read(t.queue(q), pool),
            _ => Err(RecvError::WouldBlock),
        }
    }

    /// Where frames for queue `q` are written, for TAP and uplink ports.
    pub fn sender(&self, q: usize) -> Option<&FrameQueue> {
        match self {
            Device::Tap(t) => Some(t.queue(q)),
            Device::Uplink(u) => Some(u.sender(q)),
            Device::VhostUser(_) => None,
        }
    }

    /// Frames the kernel dropped before queue `q` could read them, since
    /// the last call (an uplink's socket; 0 for the others, whose kernel
    /// side drops nothing the port sees).
    pub fn kernel_drops(&self, q: usize) -> u64 {
        match self {
            Device::Uplink(u) => u.kernel_drops(q),
            _ => 0,
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
