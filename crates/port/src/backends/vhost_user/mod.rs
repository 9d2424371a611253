//! vhost-user ports: a real guest's virtio-net device, served from hvnet.
//!
//! The guest's hypervisor (QEMU, User-Mode Linux's `virtio_uml`,
//! cloud-hypervisor, DPDK's `virtio_user`) connects to the port's socket
//! and shares the guest's memory and virtqueues. hvnet copies what the
//! guest's transmit virtqueue holds into its own buffers (the one copy on
//! the way in) and writes frames straight into the buffers the guest
//! posted on its receive virtqueue (the one copy on the way out): that
//! receive virtqueue is the vNIC ring, and a frame that finds it empty is
//! dropped and counted, as a physical NIC's ring would.
//!
//! The protocol (messages, memory table, vring set-up, kick and call
//! eventfds) is rust-vmm's `vhost-user-backend`; descriptor chains are
//! walked with `virtio-queue` over `vm-memory`, which bound every access to
//! the guest's memory. What is hvnet's: the features a hypervisor's switch
//! offers, and moving frames between descriptor chains and hvnet's
//! buffers with the virtio-net header checked at the boundary, as for TAP
//! ports ([`crate::vnet::check`]).
//!
//! A relay sits between the front end and the crate ([`relay`]): it
//! passes each message through (descriptors attached) and adapts two the
//! crate would refuse and drop the connection over — User-Mode Linux's
//! `SET_MEM_TABLE` with room for two regions whatever it uses (trimmed),
//! and QEMU's `SET_VRING_ENABLE` sent before the features are set (held
//! until they are). DPDK's messages pass unchanged.
//!
//! Threads: the crate runs one event thread per queue pair; it only turns
//! the guest's kicks into wake-ups of the datapath's threads (the ingress
//! worker of that pair, which reads the transmit virtqueue; room on the
//! receive virtqueue). A new connection gets a fresh protocol handler (the
//! crate's handler serves one front end): a guest that restarts
//! reconnects to the same socket.
//!
//! Here: what the protocol handler and the datapath share, and the port.
//! Its socket and serving thread are `socket`'s; the features offered,
//! `features`'s; what it knows of its front end and guest,
//! `connection`'s; its virtqueues as the datapath reaches them,
//! `vrings`'s; the datapath's view of it, `queues`'s; the protocol
//! handler, `backend`'s.

mod backend;
mod connection;
pub mod ctrlq;
mod features;
mod queues;
mod relay;
mod socket;
pub mod virtq;
mod vrings;

pub use crate::status::{GuestOffloads, VhostUserStatus, VirtqueueSizes};
pub use features::{offered_features, MAX_QUEUE_SIZE};
pub use socket::{SocketMode, VhostUserError};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use virtio_bindings::virtio_config::VIRTIO_F_RING_PACKED;
use virtq::{GuestMemoryMmap, Layout};
use vm_memory::GuestMemoryAtomic;
use vmm_sys_util::event::{EventConsumer, EventNotifier};

type Memory = GuestMemoryAtomic<GuestMemoryMmap>;
/// A virtqueue as the crate keeps it, over that memory.
type VringRwLock = vhost_user_backend::VringRwLock<Memory>;

/// Everything the protocol handler and the datapath share.
struct Shared {
    name: String,
    pairs: usize,
    mac: [u8; 6],
    mtu: u16,
    /// The guest's memory, once the front end sent its table.
    mem: RwLock<Option<Memory>>,
    /// The current connection's vrings by virtqueue index (receive queue
    /// `2i`, transmit queue `2i + 1`), known from their first event.
    vrings: RwLock<Vec<Option<VringRwLock>>>,
    acked: AtomicU64,
    /// The offloads the guest takes: its acknowledged features until it
    /// sets others on its control queue.
    offloads: AtomicU64,
    /// Queue pairs the guest set on the control queue when the front end
    /// hands it to the back end (User-Mode Linux does); 0 until it does.
    active_pairs: std::sync::atomic::AtomicUsize,
    connected: AtomicBool,
    /// Bumped when what the guest accepts changes (the switch re-reads
    /// its settings).
    changes: Mutex<Option<Arc<AtomicU64>>>,
    /// Per queue pair: the guest kicked its transmit queue.
    tx_kick: Vec<(EventConsumer, EventNotifier)>,
    /// Per queue pair: the guest posted receive buffers.
    rx_kick: Vec<(EventConsumer, EventNotifier)>,
    /// Connections so far.
    connections: AtomicU64,
    /// Memory tables the front end set so far (one per connection, more
    /// when its guest's memory changes: hotplug).
    memory_tables: AtomicU64,
    /// Per queue pair: the receive queue's used index when the guest was
    /// last signalled.
    rx_signalled: Vec<std::sync::atomic::AtomicU16>,
    /// Addresses the front end asked to announce (`SEND_RARP`), not yet
    /// sent into the switch; `announcing` says there are some.
    announce: Mutex<Vec<[u8; 6]>>,
    announcing: AtomicBool,
    /// Announcements asked for so far.
    announcements: AtomicU64,
    /// Packed virtqueues are offered.
    packed: AtomicBool,
    /// Per queue pair: its transmit queue's reader holds chains back
    /// until the end of its batch (payloads left in place); stopping the
    /// queue waits for them to go back used.
    tx_holding: Vec<AtomicBool>,
    /// The port was removed: its socket's thread ends.
    closed: AtomicBool,
    /// The listening socket (a server port's), to wake its thread's
    /// `accept` when the port is removed.
    listener: Option<UnixListener>,
    /// The current front end's connection, to end it when the port is
    /// removed.
    front: Mutex<Option<std::os::unix::net::UnixStream>>,
}

impl Shared {
    /// The front end asks (`SEND_RARP`, after a live migration brought the
    /// guest here) that the guest's address be announced: queue 0's
    /// reader sends a reverse-ARP broadcast from it into the switch, as if
    /// the guest had sent it, so that this switch, the wire and the
    /// switches behind it learn where the guest is now.
    fn announce(&self, mac: [u8; 6]) {
        self.announce.lock().expect("announce lock").push(mac);
        self.announcing.store(true, Ordering::Release);
        self.announcements.fetch_add(1, Ordering::Relaxed);
        tracing::info!(port = %self.name, mac = %hvnet_wire::MacAddr(mac), "announcing the migrated guest's address");
        let _ = self.tx_kick[0].1.notify();
    }

    /// The announcements asked for since the last call.
    fn take_announcements(&self) -> Vec<[u8; 6]> {
        if !self.announcing.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *self.announce.lock().expect("announce lock"))
    }

    /// The virtqueue layout the front end negotiated.
    fn layout(&self) -> Layout {
        if self.acked.load(Ordering::Acquire) & (1u64 << VIRTIO_F_RING_PACKED) != 0 {
            Layout::Packed
        } else {
            Layout::Split
        }
    }

    fn changed(&self) {
        if let Some(c) = self.changes.lock().expect("changes lock").as_ref() {
            c.fetch_add(1, Ordering::Release);
        }
    }
}

/// A vhost-user port: its socket and the guest's virtqueues once a front
/// end is connected.
pub struct VhostUserPort {
    socket: PathBuf,
    mode: SocketMode,
    sh: Arc<Shared>,
}

impl std::fmt::Debug for VhostUserPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VhostUserPort")
            .field("name", &self.sh.name)
            .field("socket", &self.socket)
            .finish()
    }
}
