//! What a vhost-user port knows of its front end and its guest: the
//! connection, the guest's memory, the features and offloads it
//! negotiated, the queue pairs it set up and uses, migration, and the
//! status views show.

use super::virtq::Layout;
use super::{GuestOffloads, VhostUserPort, VhostUserStatus, VirtqueueSizes};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use vhost::vhost_user::message::VhostUserVirtioFeatures;
use vhost_user_backend::VringT;
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryBackend, GuestMemoryRegion};

impl VhostUserPort {
    /// Queue pairs.
    pub fn num_queues(&self) -> usize {
        self.sh.pairs
    }

    /// True while a front end is connected.
    pub fn is_connected(&self) -> bool {
        self.sh.connected.load(Ordering::Acquire)
    }

    /// Front ends that connected so far.
    pub fn connections(&self) -> u64 {
        self.sh.connections.load(Ordering::Relaxed)
    }

    /// Memory tables set so far, and the guest memory the current one
    /// maps: (tables, regions, bytes).
    pub fn memory(&self) -> (u64, usize, u64) {
        let tables = self.sh.memory_tables.load(Ordering::Relaxed);
        let guard = self.sh.mem.read().expect("mem lock");
        let Some(mem) = guard.as_ref() else {
            return (tables, 0, 0);
        };
        let m = mem.memory();
        let bytes = m.iter().map(|r| r.len()).sum();
        (tables, m.num_regions(), bytes)
    }

    /// What the guest's driver accepted (and set since on its control
    /// queue).
    pub fn guest_offloads(&self) -> GuestOffloads {
        GuestOffloads::from_features(
            self.sh.acked.load(Ordering::Acquire),
            self.sh.offloads.load(Ordering::Acquire),
        )
    }

    /// Queue pairs the guest uses now (frames to it are spread over
    /// these): the leading pairs whose receive queue the guest set up and
    /// the front end enabled, no more than it set on the control queue.
    /// QEMU keeps the control queue and enables a pair's vrings
    /// (`SET_VRING_ENABLE`) when the guest asks for it; User-Mode Linux
    /// enables them all and passes the guest's command on.
    pub fn active_queues(&self) -> usize {
        if self.sh.pairs == 1 {
            return 1;
        }
        let set = match self.sh.active_pairs.load(Ordering::Acquire) {
            0 => self.sh.pairs,
            n => n.min(self.sh.pairs),
        };
        let all = self.sh.vrings.read().expect("vrings lock");
        (0..set)
            .take_while(|&p| {
                all[2 * p]
                    .as_ref()
                    .is_some_and(|v| v.get_ref().is_enabled())
            })
            .count()
            .max(1)
    }

    /// The virtqueue layout the front end negotiated.
    pub fn layout(&self) -> Layout {
        self.sh.layout()
    }

    /// Whether packed virtqueues are offered to the front ends that
    /// connect from now on (on unless turned off: User-Mode Linux's
    /// driver negotiates them and then starts its rings at base 0, which
    /// a packed ring cannot take).
    pub fn offer_packed(&self, on: bool) {
        self.sh.packed.store(on, Ordering::Release);
    }

    /// The feature bits the guest acknowledged.
    pub fn acked_features(&self) -> u64 {
        self.sh.acked.load(Ordering::Acquire)
    }

    /// True while the front end has dirty logging on (`LOG_ALL`): its
    /// guest is being migrated away.
    pub fn dirty_logging(&self) -> bool {
        self.acked_features() & VhostUserVirtioFeatures::LOG_ALL.bits() != 0
    }

    /// Announcements of a migrated guest's address the front end asked
    /// for (`SEND_RARP`) so far.
    pub fn announcements(&self) -> u64 {
        self.sh.announcements.load(Ordering::Relaxed)
    }

    /// True while a front end is connected and its guest's receive
    /// queue runs: the guest is here. A migrated guest's source front end
    /// stays connected with its rings stopped.
    pub fn guest_present(&self) -> bool {
        self.is_connected()
            && self.sh.vrings.read().expect("vrings lock")[0]
                .as_ref()
                .is_some_and(|v| v.get_ref().get_queue().ready())
    }

    /// `counter` is bumped whenever what the guest accepts changes.
    pub fn notify_changes(&self, counter: Arc<AtomicU64>) {
        *self.sh.changes.lock().expect("changes lock") = Some(counter);
    }

    /// The connection as views show it.
    pub fn status(&self) -> VhostUserStatus {
        let (memory_tables, memory_regions, memory_bytes) = self.memory();
        VhostUserStatus {
            socket: self.socket.clone(),
            mode: self.mode.name(),
            connected: self.is_connected(),
            connections: self.connections(),
            memory_tables,
            memory_regions,
            memory_bytes,
            acked_features: format!("{:#x}", self.acked_features()),
            ring_layout: self.layout().name(),
            guest_offloads: self.guest_offloads(),
            guest_present: self.guest_present(),
            dirty_logging: self.dirty_logging(),
            announcements: self.announcements(),
            virtqueues: (0..self.num_queues())
                .map(|q| {
                    let (rx, tx) = self.queue_sizes(q);
                    VirtqueueSizes { rx, tx }
                })
                .collect(),
        }
    }

    /// Virtqueue sizes of pair `q` as the guest set them up: (receive,
    /// transmit); 0 for a queue not set up.
    pub fn queue_sizes(&self, q: usize) -> (u16, u16) {
        let all = self.sh.vrings.read().expect("vrings lock");
        let size = |i: usize| {
            all[i]
                .as_ref()
                .map_or(0, |v| v.get_ref().get_queue().size())
        };
        (size(2 * q), size(2 * q + 1))
    }
}
