//! The port interface: what every backend — a VM's TAP device, an uplink's
//! packet sockets, a real guest's virtqueues over vhost-user, a test's
//! in-memory queues — gives the datapath. The datapath holds a port's
//! device as `Arc<dyn Device>` and never asks which kind it is: it opens a
//! [`Receiver`] and a [`Transmitter`] per queue, waits on what the receiver
//! names, and asks the device for its link and what its other side takes.
//! A new backend is written in [`crate::backends`] alone.
//!
//! Frames cross the interface with their metadata, both ways: a receiver
//! hands over [`Packet`]s already checked and parsed
//! ([`crate::vnet::check`]); a transmitter takes [`OutFrame`]s — packets
//! with their metadata, coalesced frames, segments — and writes each as
//! its device needs it (behind a virtio-net header, or inside a tunnel).

use crate::filters::Filters;
use crate::outgoing::{BatchOptions, OutFrame, SendError, Written};
use crate::packet::Packet;
use crate::pool::Pool;
use crate::status::DeviceStatus;
use crate::vnet::RecvError;
use hvnet_wire::MacAddr;
use std::fmt;
use std::os::fd::RawFd;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// A port's device.
pub trait Device: Send + Sync + fmt::Debug {
    /// The port type as `hvnet ports` shows it (`tap+vnet_hdr`, …).
    fn kind(&self) -> &'static str;

    /// The interface's name (the TAP as the host named it; the uplink's
    /// device; a vhost-user port's socket).
    fn name(&self) -> &str;

    /// Number of queues (pairs: each has a receive and a transmit side).
    fn num_queues(&self) -> usize;

    /// Queues frames may be spread over now: all of them, unless the
    /// other side uses fewer (a guest that set fewer queue pairs).
    fn active_queues(&self) -> usize {
        self.num_queues()
    }

    /// The port leaves the switch: what its device runs for it (a
    /// vhost-user socket's thread, its front end's connection) ends now,
    /// not when the last reference to it goes (a worker's table may hold
    /// one a while longer). Nothing by default.
    fn close(&self) {}

    /// A VM that sent through this device left the switch (its port
    /// removed: stopped, or migrated away): whatever the device keeps of
    /// it goes. A team stops taking its address for one of its own VMs
    /// (whose frames from the wire would be reflections), so that the
    /// VM, now behind the wire, is heard again. Nothing by default.
    fn forget_sender(&self, _mac: MacAddr) {}

    /// True for the physical side (an uplink), false for a VM's NIC: the
    /// side whose checksums are verified in software, whose LRO coalesces
    /// before switching, and whose MAC is not learned statically.
    fn faces_wire(&self) -> bool {
        false
    }

    /// What the other side takes now (a guest's driver may have refused
    /// offloads the port's settings allow).
    fn caps(&self) -> Caps {
        Caps::ALL
    }

    /// Applies a run-time change of the offloads the other side may hand
    /// over (`hvnet port VM set tso off`); a device that has no such
    /// switch ignores it.
    fn set_offloads(&self, _csum: bool, _tso: bool) -> Result<(), String> {
        Ok(())
    }

    /// `counter` is bumped whenever [`Device::caps`] or
    /// [`Device::active_queues`] change (so the switch re-reads them).
    fn notify_changes(&self, _counter: Arc<AtomicU64>) {}

    /// The link now.
    fn link(&self) -> Link;

    /// While the link is down: waits up to `timeout` for it to change
    /// (queue `q`'s thread calls this).
    fn wait_link(&self, _q: usize, timeout: Duration) {
        std::thread::sleep(timeout);
    }

    /// False while the other side is away though the port stays up: a
    /// guest migrated to another host leaves its source front end
    /// connected, its rings stopped. The port's own address is then no
    /// longer pinned to it; the switch learns it wherever the guest shows
    /// up next, and pins it again when the guest is back.
    fn guest_present(&self) -> bool {
        true
    }

    /// A receiver for queue `q`: it reads what the other side sends.
    fn receiver(self: Arc<Self>, q: usize) -> Box<dyn Receiver>;

    /// A transmitter for queue `q`: it writes frames to the other side.
    fn transmitter(self: Arc<Self>, q: usize, opts: TxOptions) -> Box<dyn Transmitter>;

    /// What the device says of itself for views (as Open vSwitch's
    /// `netdev_get_status`): the parts its kind has.
    fn status(&self) -> DeviceStatus {
        DeviceStatus::default()
    }

    /// True when the other side sets its own MTU (a real guest's driver):
    /// the switch takes it and cannot change it.
    fn other_side_sets_mtu(&self) -> bool {
        false
    }

    /// The receive filters steering frames to queues (NetQueue), where
    /// the device has them.
    fn filters(&self) -> Option<Filters> {
        None
    }

    /// Installs receive filters; refused by a device without them.
    fn set_filters(&self, _f: Filters) -> Result<(), String> {
        Err(format!("a {} port has no receive filters", self.kind()))
    }

    /// Bytes the device adds to every frame on the wire (a tunnel
    /// endpoint's outer headers): the frames it takes are that much
    /// shorter than its MTU.
    fn overhead(&self) -> usize {
        0
    }

    /// True when its transmitters copy a frame's payload from where it is
    /// still pending (a sending guest's memory: [`crate::pool::Pending`])
    /// themselves: a guest's receive virtqueue, written straight from the
    /// other guest's buffers. Every other device gets whole buffers.
    fn writes_pending(&self) -> bool {
        false
    }
}

/// The other side's offloads, as far as the device knows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Takes frames with partial checksums.
    pub csum: bool,
    /// Takes TCP GSO frames whole.
    pub gso: bool,
}

impl Caps {
    /// Whatever the port's settings say.
    pub const ALL: Caps = Caps {
        csum: true,
        gso: true,
    };
}

/// A device's link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Frames flow.
    Up,
    /// Down for now: an uplink's device set down or without carrier, a
    /// guest's front end disconnected (it may reconnect).
    Down,
    /// Gone for good: the TAP's namespace deleted, the uplink's device
    /// deleted.
    Gone,
}

/// How a transmitter writes batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxOptions {
    /// Submit a batch of writes through io_uring (TAP queues), instead of
    /// one system call per frame.
    pub uring: bool,
}

/// Reads one queue of a device. It owns its spare buffers and whatever
/// per-queue state its kind needs.
pub trait Receiver: Send {
    /// Reads up to `max` frames into `out`, each checked and parsed, or
    /// the reason it was refused (counted by the caller, which goes on).
    /// Returns `Ok(())` when `max` were read, else why reading stopped:
    /// [`RecvError::WouldBlock`] when the queue is empty,
    /// [`RecvError::NoBuffer`] at the port's buffer cap,
    /// [`RecvError::Gone`] or [`RecvError::LinkDown`] for the link.
    fn recv_batch(
        &mut self,
        pool: &mut Pool,
        max: usize,
        out: &mut Vec<Result<Packet, RecvError>>,
    ) -> Result<(), RecvError>;

    /// What the queue's thread polls for readability before it reads.
    fn wait_fd(&self) -> RawFd;

    /// After [`Receiver::wait_fd`] became readable: clears the
    /// notification and, where the other side can be asked to, stops it
    /// notifying while the queue is read anyway.
    fn woken(&mut self) {}

    /// The queue found empty under load: watches it for up to `budget`
    /// where that needs no system call (a guest's virtqueue in shared
    /// memory); true as soon as frames are there. A queue that can only
    /// be watched by a system call says false at once (the default).
    fn poll(&mut self, _budget: Duration) -> bool {
        false
    }

    /// Before the thread sleeps, the queue found empty: asks the other
    /// side to notify again; true if it added frames meanwhile (read on).
    fn rearm(&mut self) -> bool {
        false
    }

    /// After the frames of the last batch were switched and written: gives
    /// back what the batch still held of the other side's (a guest's
    /// transmit chains whose payloads were left in its memory, copied
    /// since straight into their receivers or into buffers).
    fn end_batch(&mut self) {}

    /// Frames the kernel dropped at this queue before they could be read
    /// (an uplink socket's full buffer), since the last call.
    fn kernel_drops(&mut self) -> u64 {
        0
    }

    /// Gives the spare buffers it holds back to `pool`'s cache.
    fn release(&mut self, _pool: &mut Pool) {}

    /// True for a queue with periodic work of its own, which its worker
    /// then looks at every tick even while idle (a tunnel endpoint's first
    /// queue, resolving the endpoint's peers).
    fn ticks(&self) -> bool {
        false
    }

    /// The periodic work [`Receiver::ticks`] asked for.
    fn tick(&mut self, _now: std::time::Instant) {}

    /// The frames of the last batch that the endpoint which sent them
    /// marked for a trace (a tunnel endpoint's receiver; none elsewhere),
    /// added to `out`.
    fn trace_marks(&mut self, _out: &mut Vec<TraceMark>) {}

    /// Sends this host's part of trace `token` (its lines, `payload`) back
    /// to the endpoint that marked the frame.
    fn report_trace(&mut self, _token: u16, _payload: &[u8]) {}
}

/// A frame a far tunnel endpoint marked for a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceMark {
    /// Its place in the batch.
    pub index: usize,
    /// The trace's token, to report back with.
    pub token: u16,
    /// A synthetic frame: its decisions are run, it is delivered nowhere.
    pub synthetic: bool,
}

/// Writes one queue of a device.
pub trait Transmitter: Send {
    /// Writes `frames`, telling `done` each frame's result, in order (a
    /// callback, so that no caller needs a buffer for them). `how` says
    /// whether a full queue on the other side is waited on and whether
    /// partial checksums may leave partial ([`BatchOptions`]): with a
    /// zero hold, the first frame that finds the queue full, and every
    /// frame after it, is reported [`SendError::Full`] untried (a datapath
    /// worker keeps them, in order, to write again, rather than holding
    /// its other queues up).
    fn send_batch(
        &mut self,
        frames: &[OutFrame<'_>],
        how: BatchOptions,
        done: &mut dyn FnMut(Result<Written, SendError>),
    );

    /// Writes one frame (see [`Transmitter::send_batch`]).
    fn send(&mut self, frame: OutFrame<'_>, how: BatchOptions) -> Result<Written, SendError> {
        let mut result = Err(SendError::Failed);
        self.send_batch(&[frame], how, &mut |r| result = r);
        result
    }

    /// After a batch: tells the other side what it received (a guest's
    /// used ring, signalled when its event index asks for it).
    fn flush(&mut self) {}

    /// Where this transmitter would send `pkt`, and why, in words (a
    /// team: the member and its policy's reason), for a trace's line;
    /// `None` where there is nothing to choose.
    fn explain(&self, _pkt: &crate::packet::Packet) -> Option<String> {
        None
    }

    /// Writes a traced frame with its trace's mark, for the far end to
    /// trace it too (a tunnel endpoint): where it went, in words. `None`
    /// where the device carries no marks (everything but a tunnel).
    fn send_traced(
        &mut self,
        _pkt: &crate::packet::Packet,
        _mark: hvnet_offload::vxlan::OuterMark,
    ) -> Option<Result<String, SendError>> {
        None
    }
}
