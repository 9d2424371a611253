//! The protocol handler: rust-vmm's back-end trait over the port's shared
//! state, one per connection, and the thread that accepts front ends.

use super::ctrlq::{self, Command};
use super::relay::{relay, Front, Relay};
use super::virtq::GuestMemoryMmap;
use super::VringRwLock;
use super::{offered_features, Memory, Shared, MAX_QUEUE_SIZE};
use std::io;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost_user_backend::{VhostUserBackend, VhostUserDaemon, VringT};
use virtio_bindings::virtio_net::VIRTIO_NET_S_LINK_UP;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{EventConsumer, EventNotifier};

/// The crate's back-end trait, over the shared state. One per connection.
#[derive(Clone)]
pub(super) struct Backend {
    sh: Arc<Shared>,
    /// Exit events of this connection's event threads.
    exits: Arc<Mutex<Exits>>,
    /// The back end's request channel the front end gave.
    channel: Arc<Mutex<Option<vhost::vhost_user::Backend>>>,
}

/// A connection's exit events: their notifiers (to stop its event
/// threads when the front end goes) and the read ends the crate leaks
/// (closed once its handler is gone; see `hvnet_sys::exit_event`).
#[derive(Default)]
pub(super) struct Exits {
    notifiers: Vec<EventNotifier>,
    leaked: Vec<hvnet_sys::exit_event::LeakedConsumer>,
}

impl VhostUserBackend for Backend {
    type Bitmap = super::virtq::DirtyLog;
    type Vring = VringRwLock;

    fn num_queues(&self) -> usize {
        // Receive and transmit per pair, then the control queue.
        2 * self.sh.pairs + 1
    }

    fn max_queue_size(&self) -> usize {
        MAX_QUEUE_SIZE as usize
    }

    fn features(&self) -> u64 {
        offered_features(self.sh.packed.load(Ordering::Acquire))
    }

    fn acked_features(&self, features: u64) {
        // A migrating front end sets the features again with only
        // `LOG_ALL` turned on (and off): what the guest set since on its
        // control queue stands.
        let log_all = VhostUserVirtioFeatures::LOG_ALL.bits();
        // Writes are marked only while the front end migrates the guest.
        if let Some(mem) = self.sh.mem.read().expect("mem lock").as_ref() {
            for region in mem.memory().iter() {
                // The region's own log (`MmapRegion::bitmap`), not a slice of it.
                let log: &super::virtq::DirtyLog = vm_memory::MmapRegion::bitmap(region);
                log.set_logging(features & log_all != 0);
            }
        }
        let before = self.sh.acked.swap(features, Ordering::AcqRel);
        if before != 0 && before | log_all == features | log_all {
            return;
        }
        self.sh.offloads.store(features, Ordering::Release);
        self.sh.active_pairs.store(0, Ordering::Release);
        self.sh.changed();
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        // BACKEND_REQ: User-Mode Linux allocates the interrupt of its
        // virtqueues' call descriptors only when it sets up the back end's
        // request channel (without it, its driver fails to probe).
        // LOG_SHMFD and RARP: live migration (the guest's pages written
        // here are marked in the front end's log; its address announced on
        // the destination).
        VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::BACKEND_REQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::LOG_SHMFD
            | VhostUserProtocolFeatures::RARP
    }

    fn reset_device(&self) {
        self.sh.acked.store(0, Ordering::Release);
        self.sh.changed();
    }

    fn set_event_idx(&self, _enabled: bool) {}

    /// `GET_VRING_BASE`: a transmit queue whose reader holds chains back
    /// (payloads it left in the guest's memory until the end of its
    /// batch) is stopped once they went back used, so that the position
    /// the front end is told and the used ring agree. A worker's batch
    /// takes microseconds; a second at most is waited.
    fn stop_vring(&self, queue_index: u32) -> io::Result<()> {
        let q = queue_index as usize;
        if q % 2 == 1 {
            if let Some(holding) = self.sh.tx_holding.get(q / 2) {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
                while holding.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_micros(20));
                }
            }
        }
        Ok(())
    }

    fn set_backend_req_fd(&self, channel: vhost::vhost_user::Backend) {
        // Kept open for the connection's life: User-Mode Linux takes the
        // channel's end of file for a broken connection and removes its
        // NIC.
        *self.channel.lock().expect("channel lock") = Some(channel);
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        let cfg = config_space(&self.sh);
        let start = (offset as usize).min(cfg.len());
        let end = (start + size as usize).min(cfg.len());
        let mut out = cfg[start..end].to_vec();
        out.resize(size as usize, 0);
        out
    }

    fn update_memory(&self, mem: Memory) -> io::Result<()> {
        *self.sh.mem.write().expect("mem lock") = Some(mem);
        self.sh.memory_tables.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn queues_per_thread(&self) -> Vec<u64> {
        // One event thread per pair; the first also serves the control
        // queue (rare commands).
        let ctrl = 1u64 << (2 * self.sh.pairs);
        (0..self.sh.pairs)
            .map(|i| (0b11u64 << (2 * i)) | if i == 0 { ctrl } else { 0 })
            .collect()
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        // A pipe whose read end (which the crate keeps and never closes)
        // is closed once this connection's handler is gone.
        let (c, n, leaked) = hvnet_sys::exit_event::exit_event().ok()?;
        let keep = n.try_clone().ok()?;
        let mut exits = self.exits.lock().expect("exits lock");
        exits.notifiers.push(keep);
        exits.leaked.push(leaked);
        Some((c, n))
    }

    fn handle_event(
        &self,
        device_event: u16,
        _evset: EventSet,
        vrings: &[VringRwLock],
        thread_id: usize,
    ) -> io::Result<()> {
        let pair = thread_id;
        if pair >= self.sh.pairs {
            return Ok(());
        }
        // The pair's vrings are known from its first event on; later
        // events (a kick per frame or so) take only the read lock.
        let known =
            |all: &Vec<Option<VringRwLock>>| all[2 * pair].is_some() && all[2 * pair + 1].is_some();
        if !known(&self.sh.vrings.read().expect("vrings lock")) {
            let mut all = self.sh.vrings.write().expect("vrings lock");
            for (i, v) in vrings.iter().enumerate().take(2) {
                let slot = &mut all[2 * pair + i];
                if slot.is_none() {
                    self.resume_at_used(v);
                    *slot = Some(v.clone());
                }
            }
        }
        match device_event {
            0 => self.sh.rx_kick[pair].1.notify()?,
            1 => self.sh.tx_kick[pair].1.notify()?,
            2 if pair == 0 => {
                if let Some(ctrl) = vrings.get(2) {
                    self.serve_control(ctrl);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Backend {
    /// A front end that reconnects (to a restarted switch, or as a server
    /// whose back end came back) may set its rings' base to 0 while their
    /// used index, in its memory, says how far the last back end got
    /// (DPDK's `virtio_user` does). Taking the base as it is would find
    /// more chains available than the ring holds, and read nothing again;
    /// so, as DPDK's vhost library does, the ring resumes where its used
    /// index stands (a base that is the used index, as QEMU restores it,
    /// changes nothing): a frame the old back end had taken and not yet
    /// marked used is sent again (transmit) or lost (receive).
    fn resume_at_used(&self, vring: &VringRwLock) {
        use virtio_queue::QueueT;
        let Some(mem) = self.sh.mem.read().expect("mem lock").clone() else {
            return;
        };
        let mut st = vring.get_mut();
        let queue = st.get_queue_mut();
        // A packed ring has no used index: its base is where both sides
        // stand.
        if !queue.ready() || self.sh.layout() == super::Layout::Packed {
            return;
        }
        let Ok(used) = queue.used_idx(&*mem.memory(), Ordering::Acquire) else {
            return;
        };
        if (queue.next_avail(), queue.next_used()) != (used.0, used.0) {
            tracing::info!(port = %self.sh.name, base = queue.next_avail(), used = used.0,
                "the front end's ring base is not its used index: resuming at the used index");
            queue.set_next_avail(used.0);
            queue.set_next_used(used.0);
        }
    }

    /// Answers the guest's control commands and applies them.
    fn serve_control(&self, ctrl: &VringRwLock) {
        let Some(mem) = self.sh.mem.read().expect("mem lock").clone() else {
            return;
        };
        let sh = &self.sh;
        let mut st = ctrl.get_mut();
        let guard = mem.memory();
        let served = ctrlq::serve(st.get_queue_mut(), &guard, &mut |c| match c {
            Command::Accepted => true,
            Command::QueuePairs(n) if (1..=sh.pairs).contains(&usize::from(n)) => {
                sh.active_pairs.store(usize::from(n), Ordering::Release);
                tracing::info!(port = %sh.name, pairs = n, "guest set its queue pairs");
                sh.changed();
                true
            }
            Command::GuestOffloads(bits) => {
                sh.offloads.store(bits, Ordering::Release);
                tracing::info!(port = %sh.name, offloads = %format!("{bits:#x}"), "guest set its offloads");
                sh.changed();
                true
            }
            Command::QueuePairs(_) | Command::Refused => false,
        });
        if served > 0 && st.needs_notification().unwrap_or(true) {
            let _ = st.signal_used_queue();
        }
    }
}

/// `struct virtio_net_config`: MAC, status (link up), queue pairs, MTU.
fn config_space(sh: &Shared) -> [u8; 12] {
    let mut c = [0u8; 12];
    c[..6].copy_from_slice(&sh.mac);
    c[6..8].copy_from_slice(&(VIRTIO_NET_S_LINK_UP as u16).to_le_bytes());
    c[8..10].copy_from_slice(&(sh.pairs as u16).to_le_bytes());
    c[10..12].copy_from_slice(&sh.mtu.to_le_bytes());
    c
}

/// First and longest wait between a client port's attempts to connect.
const RECONNECT_FIRST: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// The next front end: accepted on the port's socket, or, for a client
/// port, connected to the hypervisor's (again and again, the wait doubling
/// while the socket is missing or refuses).
/// `None` once the port is closed.
fn next_front(sh: &Shared, public: &Front) -> Option<UnixStream> {
    let mut wait = RECONNECT_FIRST;
    loop {
        if sh.closed.load(Ordering::Acquire) {
            return None;
        }
        let r = match public {
            Front::Listen(l) => l.accept().map(|(s, _)| s),
            Front::Connect(path) => UnixStream::connect(path),
        };
        match r {
            Ok(s) => return Some(s),
            Err(_) if sh.closed.load(Ordering::Acquire) => return None,
            Err(e) => {
                match public {
                    Front::Listen(_) => {
                        tracing::warn!(port = %sh.name, error = %e, "vhost-user accept failed")
                    }
                    // A hypervisor not (yet, or any more) serving its
                    // socket is the normal case: said once per outage.
                    Front::Connect(_) if wait == RECONNECT_FIRST => {
                        tracing::info!(port = %sh.name, error = %e, "vhost-user socket not reached; trying again")
                    }
                    Front::Connect(_) => {}
                }
                std::thread::sleep(wait);
                wait = (wait * 2).min(RECONNECT_MAX);
            }
        }
    }
}

/// Takes front ends one after another, each served by a fresh handler
/// through the relay.
pub(super) fn serve(sh: Arc<Shared>, mut relay_ends: Relay) {
    while let Some(front) = next_front(&sh, &relay_ends.public) {
        let back = match UnixStream::connect_addr(&relay_ends.inner_addr) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(port = %sh.name, error = %e, "vhost-user relay failed");
                continue;
            }
        };
        let exits = Arc::new(Mutex::new(Exits::default()));
        connection(&sh, &mut relay_ends, front, back, &exits);
        // The crate's handler is gone (its threads joined) when nothing
        // but this holds the connection's exit events: the read ends it
        // abandoned are closed. Otherwise they are left open, not closed
        // under a thread that may still poll them.
        if Arc::strong_count(&exits) == 1 {
            for leaked in exits.lock().expect("exits lock").leaked.drain(..) {
                leaked.close();
            }
        }
    }
}

/// One front end's connection, from a fresh handler to its end.
fn connection(
    sh: &Arc<Shared>,
    relay_ends: &mut Relay,
    front: UnixStream,
    back: UnixStream,
    exits: &Arc<Mutex<Exits>>,
) {
    let backend = Backend {
        sh: Arc::clone(sh),
        exits: Arc::clone(exits),
        channel: Arc::new(Mutex::new(None)),
    };
    let mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
    let mut daemon = match VhostUserDaemon::new(sh.name.clone(), backend, mem) {
        Ok(d) => d,
        Err(e) => {
            // Out of descriptors or threads: this front end is let go
            // (it reconnects), the port keeps its socket.
            tracing::warn!(port = %sh.name, error = %e, "vhost-user connection failed");
            std::thread::sleep(RECONNECT_FIRST);
            return;
        }
    };
    if let Err(e) = daemon.start(&mut relay_ends.inner) {
        tracing::warn!(port = %sh.name, error = %e, "vhost-user connection failed");
        return;
    }
    // Front end to crate through the relay; the crate's replies go
    // back as they are.
    let (f2, b2, held) = match (front.try_clone(), back.try_clone(), front.try_clone()) {
        (Ok(f), Ok(b), Ok(h)) => (f, b, h),
        _ => return,
    };
    let sh2 = Arc::clone(sh);
    std::thread::spawn(move || {
        if let Err(e) = relay(&sh2, &front, &back) {
            if e.kind() != io::ErrorKind::UnexpectedEof {
                tracing::warn!(port = %sh2.name, error = %e, "vhost-user front end refused");
            }
        }
        let _ = back.shutdown(std::net::Shutdown::Both);
        let _ = front.shutdown(std::net::Shutdown::Both);
    });
    std::thread::spawn(move || {
        let _ = io::copy(&mut &b2, &mut &f2);
        let _ = f2.shutdown(std::net::Shutdown::Both);
    });
    // Connected first: whoever sees the count grow sees it connected
    // (until it disconnects).
    sh.connected.store(true, Ordering::Release);
    sh.connections.fetch_add(1, Ordering::Release);
    tracing::info!(port = %sh.name, "guest connected");
    if let Ok(f) = held.try_clone() {
        *sh.front.lock().expect("front lock") = Some(f);
    }
    if sh.closed.load(Ordering::Acquire) {
        // Removed while it connected: what the removal missed.
        let _ = held.shutdown(std::net::Shutdown::Both);
    }
    let r = daemon.wait();
    sh.front.lock().expect("front lock").take();
    sh.connected.store(false, Ordering::Release);
    for v in sh.vrings.write().expect("vrings lock").iter_mut() {
        *v = None;
    }
    *sh.mem.write().expect("mem lock") = None;
    for r in &sh.rx_signalled {
        r.store(0, Ordering::Relaxed);
    }
    sh.acked.store(0, Ordering::Release);
    sh.changed();
    for e in exits.lock().expect("exits lock").notifiers.iter() {
        let _ = e.notify();
    }
    // Wake the datapath so it notices.
    for (_, n) in sh.tx_kick.iter().chain(sh.rx_kick.iter()) {
        let _ = n.notify();
    }
    match r {
        Ok(()) => tracing::info!(port = %sh.name, "guest disconnected"),
        Err(e) => tracing::info!(port = %sh.name, error = %e, "guest disconnected"),
    }
}
