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

mod backend;
pub mod ctrlq;
mod queues;
mod relay;
pub mod virtq;

pub use crate::status::{GuestOffloads, VhostUserStatus, VirtqueueSizes};
use backend::serve;
use relay::{Front, Relay};
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use vhost::vhost_user::message::VhostUserVirtioFeatures;
use vhost_user_backend::VringT;
use virtio_bindings::virtio_config::{VIRTIO_F_IN_ORDER, VIRTIO_F_RING_PACKED, VIRTIO_F_VERSION_1};
use virtio_bindings::virtio_net::*;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};
use virtio_queue::QueueT;
use virtq::{GuestMemoryMmap, Layout, VirtqError};
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryRegion};
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

type Memory = GuestMemoryAtomic<GuestMemoryMmap>;
/// A virtqueue as the crate keeps it, over that memory.
type VringRwLock = vhost_user_backend::VringRwLock<Memory>;

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
    fn from_features(acked: u64, offloads: u64) -> GuestOffloads {
        let has = |b: u32| offloads & acked & (1u64 << b) != 0;
        GuestOffloads {
            csum: has(VIRTIO_NET_F_GUEST_CSUM),
            tso: has(VIRTIO_NET_F_GUEST_TSO4) && has(VIRTIO_NET_F_GUEST_TSO6),
            mergeable: acked & (1u64 << VIRTIO_NET_F_MRG_RXBUF) != 0,
        }
    }
}

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

/// Which side of the socket hvnet is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SocketMode {
    /// hvnet listens; the hypervisor connects (QEMU's `reconnect=1`
    /// chardev, libvirt's `mode='client'`).
    #[default]
    Server,
    /// The hypervisor listens; hvnet connects, and connects again with
    /// back-off whenever the connection or the socket goes away (Open
    /// vSwitch's `dpdkvhostuserclient`, libvirt's `mode='server'`): either
    /// side may restart.
    Client,
}

impl SocketMode {
    /// As topologies and views spell it.
    pub fn name(self) -> &'static str {
        match self {
            SocketMode::Server => "server",
            SocketMode::Client => "client",
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

/// Why a port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum VhostUserError {
    /// The socket could not be made.
    #[error("cannot listen on {0}: {1}")]
    Listen(PathBuf, String),
    /// An eventfd or the serving thread could not be made.
    #[error("vhost-user port: {0}")]
    Io(#[from] io::Error),
}

impl Drop for VhostUserPort {
    fn drop(&mut self) {
        self.close_socket();
    }
}

impl VhostUserPort {
    /// A port removed (`hvnet vm del`, a libvirt guest gone) takes its
    /// socket's thread, its connection and its descriptors with it: the
    /// thread, waiting for a front end or between attempts to reach one,
    /// sees the port closed and ends ([`crate::device::Device::close`], and the drop).
    pub(crate) fn close_socket(&self) {
        self.sh.closed.store(true, Ordering::Release);
        if let Some(l) = &self.sh.listener {
            // Wakes `accept` (EINVAL), which nothing else would.
            let _ = rustix::net::shutdown(l, rustix::net::Shutdown::Both);
        }
        if let Some(f) = self.sh.front.lock().expect("front lock").take() {
            let _ = f.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl VhostUserPort {
    /// Listens on `socket` for a guest's front end and serves it (and each
    /// one after it) on a thread of its own. `pairs` queue pairs; `mac`
    /// and `mtu` are what the device's configuration space tells the
    /// guest. The socket is root's only (whoever connects shares memory
    /// with the switch) until [`VhostUserPort::set_socket_access`] opens it.
    pub fn listen(
        name: &str,
        socket: &Path,
        pairs: usize,
        mac: [u8; 6],
        mtu: u16,
    ) -> Result<VhostUserPort, VhostUserError> {
        let listen_err = |e: io::Error| VhostUserError::Listen(socket.to_path_buf(), e.to_string());
        // Bind now, so that a guest started right after this returns finds
        // the socket; the serving thread accepts on it.
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket).map_err(listen_err)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
            .map_err(listen_err)?;
        Self::open(name, socket, Front::Listen(listener), pairs, mac, mtu)
    }

    /// Connects to `socket`, which the hypervisor serves, and serves the
    /// front end there; when the connection ends or cannot be made, tries
    /// again (after 50 ms, doubling to 2 s while it keeps failing) for as
    /// long as the port lives. Returns at once: the port is down until a
    /// connection is made.
    pub fn connect(
        name: &str,
        socket: &Path,
        pairs: usize,
        mac: [u8; 6],
        mtu: u16,
    ) -> Result<VhostUserPort, VhostUserError> {
        Self::open(
            name,
            socket,
            Front::Connect(socket.to_path_buf()),
            pairs,
            mac,
            mtu,
        )
    }

    /// Sets who may connect to a listening port's socket: its owner and
    /// group (unchanged where `None`) and its mode (as `chmod`), so that a
    /// hypervisor that does not run as root (libvirt's QEMU runs as
    /// `libvirt-qemu`) can.
    pub fn set_socket_access(
        &self,
        owner: Option<u32>,
        group: Option<u32>,
        mode: u32,
    ) -> Result<(), VhostUserError> {
        let err = |e: io::Error| VhostUserError::Listen(self.socket.clone(), e.to_string());
        use std::os::unix::fs::PermissionsExt;
        std::os::unix::fs::chown(&self.socket, owner, group).map_err(err)?;
        std::fs::set_permissions(&self.socket, std::fs::Permissions::from_mode(mode)).map_err(err)
    }

    fn open(
        name: &str,
        socket: &Path,
        front: Front,
        pairs: usize,
        mac: [u8; 6],
        mtu: u16,
    ) -> Result<VhostUserPort, VhostUserError> {
        let mode = match front {
            Front::Listen(_) => SocketMode::Server,
            Front::Connect(_) => SocketMode::Client,
        };
        let kicks = || -> io::Result<Vec<(EventConsumer, EventNotifier)>> {
            (0..pairs)
                .map(|_| new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC))
                .collect()
        };
        let sh = Arc::new(Shared {
            name: name.to_string(),
            pairs,
            mac,
            mtu,
            mem: RwLock::new(None),
            vrings: RwLock::new(vec![None; 2 * pairs]),
            acked: AtomicU64::new(0),
            offloads: AtomicU64::new(0),
            active_pairs: std::sync::atomic::AtomicUsize::new(0),
            connected: AtomicBool::new(false),
            changes: Mutex::new(None),
            tx_kick: kicks()?,
            rx_kick: kicks()?,
            connections: AtomicU64::new(0),
            memory_tables: AtomicU64::new(0),
            rx_signalled: (0..pairs).map(|_| Default::default()).collect(),
            announce: Mutex::new(Vec::new()),
            announcing: AtomicBool::new(false),
            announcements: AtomicU64::new(0),
            packed: AtomicBool::new(true),
            tx_holding: (0..pairs).map(|_| AtomicBool::new(false)).collect(),
            closed: AtomicBool::new(false),
            listener: match &front {
                Front::Listen(l) => Some(l.try_clone()?),
                Front::Connect(_) => None,
            },
            front: Mutex::new(None),
        });
        let listen_err = |e: io::Error| VhostUserError::Listen(socket.to_path_buf(), e.to_string());
        // The crate's side of the relay: an abstract socket, private to
        // this process in practice (its name is not on any file system).
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let inner = SocketAddr::from_abstract_name(format!(
            "hvnet-vhost-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
        .map_err(listen_err)?;
        let inner_listener = UnixListener::bind_addr(&inner).map_err(listen_err)?;
        let listener = Relay {
            public: front,
            inner: vhost::vhost_user::Listener::from(inner_listener),
            inner_addr: inner,
        };
        let sh2 = Arc::clone(&sh);
        std::thread::Builder::new()
            .name(format!("{name}_vhost"))
            .spawn(move || serve(sh2, listener))
            .map_err(VhostUserError::Io)?;
        Ok(VhostUserPort {
            socket: socket.to_path_buf(),
            mode,
            sh,
        })
    }

    /// The port's socket: where it listens, or what it connects to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Which side of the socket the port is.
    pub fn mode(&self) -> SocketMode {
        self.mode
    }

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

    /// The eventfd that becomes readable when the guest kicks transmit
    /// queue `q` (the ingress worker polls it).
    pub fn tx_kick_fd(&self, q: usize) -> RawFd {
        self.sh.tx_kick[q].0.as_raw_fd()
    }

    /// The eventfd that becomes readable when the guest posts receive
    /// buffers on queue `q`.
    pub fn rx_kick_fd(&self, q: usize) -> RawFd {
        self.sh.rx_kick[q].0.as_raw_fd()
    }

    /// Clears the kick eventfds of queue `q` after a wake-up.
    pub fn consume_kicks(&self, q: usize) {
        let _ = self.sh.tx_kick[q].0.consume();
        let _ = self.sh.rx_kick[q].0.consume();
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

    pub(crate) fn vring(&self, index: usize) -> Option<(VringRwLock, Memory)> {
        if !self.is_connected() {
            return None;
        }
        let v = self.sh.vrings.read().expect("vrings lock")[index].clone()?;
        let mem = self.sh.mem.read().expect("mem lock").clone()?;
        Some((v, mem))
    }

    /// Makes the guest's transmit queue `q` kick again when it has more
    /// (before the worker sleeps); true if frames arrived meanwhile.
    pub fn enable_tx_kicks(&self, q: usize) -> bool {
        self.set_kicks(2 * q + 1, true)
    }

    /// Asks the guest to kick virtqueue `index` when it makes buffers
    /// available, or not to; on, true if some arrived meanwhile.
    fn set_kicks(&self, index: usize, on: bool) -> bool {
        let Some((vring, mem)) = self.vring(index) else {
            return false;
        };
        let st = vring.get_ref();
        virtq::set_kicks(st.get_queue(), &mem.memory(), self.layout(), on)
    }

    /// Watches the guest's transmit queue `q` for up to `budget` without
    /// a system call or a kick; true as soon as it holds a chain not yet
    /// taken. The vring stays read-locked meanwhile (the protocol's
    /// messages wait at most the budget).
    pub fn poll_tx(&self, q: usize, budget: std::time::Duration) -> bool {
        let Some((vring, mem)) = self.vring(2 * q + 1) else {
            return false;
        };
        let st = vring.get_ref();
        virtq::wait_available(st.get_queue(), &mem.memory(), self.layout(), budget)
    }

    /// No kicks while the worker is reading anyway.
    pub fn disable_tx_kicks(&self, q: usize) {
        self.set_kicks(2 * q + 1, false);
    }

    /// Waits up to `timeout` for the guest to post receive buffers on
    /// queue `q` (its receive virtqueue was full); true if it may have.
    /// The guest is asked to kick when it adds buffers.
    pub fn wait_for_room(&self, q: usize, timeout: std::time::Duration) -> bool {
        if self.vring(2 * q).is_none() {
            return false;
        }
        // Tell the guest what it has received so far (it frees buffers
        // only once it knows), then ask for a kick on new buffers.
        self.signal_receive(q);
        if self.set_kicks(2 * q, true) {
            return true;
        }
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        let ready = hvnet_sys::poll_readable(self.rx_kick_fd(q), ms).unwrap_or(false);
        let _ = self.sh.rx_kick[q].0.consume();
        ready
    }

    /// The receive side publishes a frame's chains in one step (see
    /// [`virtq::write_frame`]), outside the crate's count of what was
    /// added: whether the guest wants a signal is decided from the used
    /// index at the last signal.
    pub(crate) fn signal_receive(&self, q: usize) {
        let Some((vring, mem)) = self.vring(2 * q) else {
            return;
        };
        let st = vring.get_ref();
        let queue = st.get_queue();
        let layout = self.layout();
        let old = self.sh.rx_signalled[q].load(Ordering::Relaxed);
        let now = virtq::used_mark(queue, layout);
        if now == old {
            return;
        }
        if virtq::wants_signal(queue, &mem.memory(), layout, old) {
            let _ = st.signal_used_queue();
        }
        self.sh.rx_signalled[q].store(now, Ordering::Relaxed);
    }

    /// Writes frames (each virtio-net header first) into the guest's
    /// receive queue `q` — each into one descriptor chain, or as many as
    /// it needs when the guest takes mergeable buffers; nothing of a frame
    /// when the guest has too few buffers — under one lock of the
    /// virtqueue, reporting each result to
    /// `done` in order; stops after the first frame that finds the ring
    /// full (the caller may wait for room and go on from there). Returns
    /// how many frames were reported.
    pub fn write_batch(
        &self,
        q: usize,
        frames: &[&[IoSlice<'_>]],
        tails: &[Option<&crate::pool::Pending>],
        done: &mut dyn FnMut(Result<(), VirtqError>),
    ) -> usize {
        let Some((vring, mem)) = self.vring(2 * q) else {
            frames.iter().for_each(|_| done(Err(VirtqError::NotReady)));
            return frames.len();
        };
        let mergeable = self.guest_offloads().mergeable;
        let mut st = vring.get_mut();
        if !st.get_queue().ready() || !st.is_enabled() {
            frames.iter().for_each(|_| done(Err(VirtqError::NotReady)));
            return frames.len();
        }
        let guard = mem.memory();
        virtq::write_batch_from(
            st.get_queue_mut(),
            &guard,
            self.layout(),
            frames,
            tails,
            mergeable,
            done,
        )
    }
}
