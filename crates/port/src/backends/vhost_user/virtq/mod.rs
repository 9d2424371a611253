//! Frames in and out of a guest's virtqueues: a transmit chain copied
//! into a pool buffer and checked, a frame written into the receive
//! buffers the guest posted (several chains with mergeable buffers).
//! Pure over a `Queue` and guest memory, so the protocol's threads, the
//! tests and the fuzzer (with `virtio-queue`'s mock queues as the
//! independent driver) run the same code.
//!
//! The rings are hvnet's own ([`split`]) rather than `virtio-queue`'s:
//! that crate reads the available index, translates a guest address and
//! writes a used element one access at a time, each through
//! `vm-memory`'s region search, and has no packed rings; a burst here
//! loads the index once, reads the heads in one copy, translates through
//! a view of the regions made once per burst ([`memory`]) and publishes
//! the used ring with one store. The protocol (`vhost-user-backend`)
//! still owns the queue's set-up and position. Every access stays inside
//! the guest's regions; a chain's length is bounded by its table (loops
//! refused) and by the largest frame.
//!
//! Here: the types the modules share and the choice of ring a layout
//! makes; reading the transmit virtqueue is `transmit`'s, writing the
//! receive virtqueue `receive`'s, notifications both ways `notify`'s.

pub use ring::DescriptorFault;

mod dirty_log;
mod memory;
mod packed;
pub(crate) mod ring;
mod split;
mod tail;
pub use dirty_log::DirtyLog;
pub use tail::{HEAD, LEAVE_MIN};

/// A guest's memory as a vhost-user port maps it: each region with a
/// dirty log that is empty until a migrating front end hands over its log
/// (`SET_LOG_BASE`); from then on, while `LOG_ALL` is on, every write
/// through `vm-memory` (receive buffers, used rings) marks its pages in
/// the front end's log.
pub type GuestMemoryMmap = vm_memory::GuestMemoryMmap<DirtyLog>;

/// Why a virtqueue write did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VirtqError {
    /// The guest posted no (or too few) receive buffers: its ring is full.
    #[error("the guest's receive virtqueue has no free buffers")]
    RingFull,
    /// No guest is connected, or its queue is not set up.
    #[error("no guest is connected")]
    NotReady,
    /// A descriptor the guest posted is unusable (outside its memory,
    /// read-only, or the chain is malformed).
    #[error("bad receive descriptor: {0}")]
    BadDescriptor(DescriptorFault),
    /// A guest without mergeable buffers posted a chain too short for the
    /// frame.
    #[error("receive buffer too small for the frame")]
    TooSmall,
}

/// Which virtqueue layout the front end negotiated
/// (`VIRTIO_F_RING_PACKED`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// Descriptor table, available ring, used ring.
    #[default]
    Split,
    /// One ring of descriptors both sides write.
    Packed,
}

impl Layout {
    /// As views name it.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Split => "split",
            Layout::Packed => "packed",
        }
    }
}

/// Runs `$body` with `$ring` bound to the type of ring `$layout` names.
macro_rules! on_ring {
    ($layout:expr, $ring:ident => $body:expr) => {
        match $layout {
            Layout::Split => {
                type $ring = SplitRing;
                $body
            }
            Layout::Packed => {
                type $ring = PackedRing;
                $body
            }
        }
    };
}

// After `on_ring!`, which they use.
mod notify;
mod receive;
mod transmit;
pub use notify::{set_kicks, used_mark, wait_available, wants_signal};
pub use receive::{write_batch, write_batch_from, write_frame};
pub use transmit::{complete_batch, read_batch, read_batch_leaving, read_frame, Held, ReadBurst};

#[cfg(test)]
mod tests;
