//! A migrating front end against a real vhost-user port, over its socket:
//! rust-vmm's own front end (`vhost`'s `Frontend`, as cloud-hypervisor
//! drives a back end) with guest memory and rings in shared files. While
//! the front end has dirty logging on, every page the port writes (the
//! receive buffer, the used ring) is marked in the log it handed over;
//! a log that lies outside its shared memory, one too small for the
//! guest's memory, a memory table changed mid-migration and one whose
//! regions run past their files' ends are refused
//! (the connection ends, the port takes the next one); nothing kills the
//! switch.

use hvnet_port::{BatchOptions, Device, OutFrame, TxOptions, VhostUserPort};
use std::fs::File;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserDirtyLogRegion, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_queue::desc::{split::Descriptor, RawDescriptor};
use vm_memory::{Address, Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;

const MEM: usize = 0x20_0000;
const QUEUE: u16 = 16;
const RX_BUF: u64 = 0x10_0000;
const PAGE: u64 = 4096;
/// What the test's front end acknowledges.
const FEATURES: u64 = VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
    | (1 << virtio_bindings::virtio_config::VIRTIO_F_VERSION_1);
/// Log bytes for the guest's memory: a bit per 4 KiB page.
const LOG: u64 = (MEM as u64 / PAGE).div_ceil(8);

/// A shared file of `len` bytes, already unlinked.
fn shared(len: u64) -> File {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let path = format!(
        "/dev/shm/hvnet-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f.set_len(len).unwrap();
    f
}

/// The port's log on the test's output (`RUST_LOG=debug` for more).
fn log_to_stderr() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_test_writer()
        .try_init();
}

fn socket(name: &str) -> PathBuf {
    log_to_stderr();
    std::env::temp_dir().join(format!("hvnet-{name}-{}.sock", std::process::id()))
}

fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A guest: its memory in a shared file, and the front end's connection.
struct Guest {
    mem: GuestMemoryMmap,
    front: Frontend,
    _events: Vec<EventFd>,
}

impl Guest {
    /// Connects, negotiates and sets the memory table, as a front end
    /// does when its guest starts.
    fn connect(sock: &PathBuf) -> Guest {
        Guest::connect_with_file(sock, MEM as u64)
    }

    /// As [`Guest::connect`], with the guest's memory in a file of
    /// `file_len` bytes (shorter than the memory, for a hostile table).
    fn connect_with_file(sock: &PathBuf, file_len: u64) -> Guest {
        let file = shared(file_len);
        let mem = GuestMemoryMmap::from_ranges_with_files(&[(
            GuestAddress(0),
            MEM,
            Some(FileOffset::new(file, 0)),
        )])
        .unwrap();
        let mut front = Frontend::connect(sock, 3).unwrap();
        front.set_owner().unwrap();
        let offered = front.get_features().unwrap();
        assert_ne!(
            offered & VhostUserVirtioFeatures::LOG_ALL.bits(),
            0,
            "LOG_ALL offered"
        );
        front.set_features(FEATURES).unwrap();
        let proto = front.get_protocol_features().unwrap();
        assert!(
            proto.contains(VhostUserProtocolFeatures::LOG_SHMFD | VhostUserProtocolFeatures::RARP)
        );
        front
            .set_protocol_features(
                VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::LOG_SHMFD,
            )
            .unwrap();
        let region = mem.iter().next().unwrap();
        front
            .set_mem_table(&[VhostUserMemoryRegionInfo::from_guest_region(region).unwrap()])
            .unwrap();
        Guest {
            mem,
            front,
            _events: Vec::new(),
        }
    }

    /// The host address the front end names guest address `gpa` by.
    fn hva(&self, gpa: GuestAddress) -> u64 {
        self.mem.get_host_address(gpa).unwrap() as u64
    }

    /// Sets up receive queue 0 at `ring` (split layout: descriptors,
    /// the available ring after them, the used ring on the next page) with
    /// `QUEUE` one-page buffers from `RX_BUF` on, all posted.
    fn receive_queue(&mut self, ring: GuestAddress) {
        let write = virtio_bindings::virtio_ring::VRING_DESC_F_WRITE as u16;
        let (desc, avail, used) = layout(ring);
        for i in 0..QUEUE {
            let d = RawDescriptor::from(Descriptor::new(
                RX_BUF + u64::from(i) * PAGE,
                PAGE as u32,
                write,
                0,
            ));
            self.mem
                .write_obj(d, desc.unchecked_add(16 * u64::from(i)))
                .unwrap();
            self.mem
                .write_obj(i.to_le(), avail.unchecked_add(4 + 2 * u64::from(i)))
                .unwrap();
        }
        self.mem
            .write_obj(QUEUE.to_le(), avail.unchecked_add(2))
            .unwrap();
        let config = VringConfigData {
            queue_max_size: QUEUE,
            queue_size: QUEUE,
            flags: 0,
            desc_table_addr: self.hva(desc),
            used_ring_addr: self.hva(used),
            avail_ring_addr: self.hva(avail),
            log_addr: None,
        };
        let (call, kick) = (EventFd::new(0).unwrap(), EventFd::new(0).unwrap());
        self.front.set_vring_num(0, QUEUE).unwrap();
        self.front.set_vring_base(0, 0).unwrap();
        self.front.set_vring_addr(0, &config).unwrap();
        self.front.set_vring_call(0, &call).unwrap();
        self.front.set_vring_kick(0, &kick).unwrap();
        self.front.set_vring_enable(0, true).unwrap();
        self._events.extend([call, kick]);
    }

    /// Starts a migration as QEMU does: dirty logging on in the features,
    /// then the log handed over, `size` bytes of a shared file of
    /// `file_len`.
    fn start_logging(&self, size: u64, file_len: u64) -> (File, vhost::Result<()>) {
        self.front
            .set_features(FEATURES | VhostUserVirtioFeatures::LOG_ALL.bits())
            .unwrap();
        let log = shared(file_len);
        let r = self.front.set_log_base(
            0,
            Some(VhostUserDirtyLogRegion {
                mmap_size: size,
                mmap_offset: 0,
                mmap_handle: log.as_raw_fd(),
            }),
        );
        (log, r)
    }

    fn used_idx(&self, ring: GuestAddress) -> u16 {
        u16::from_le(self.mem.read_obj(layout(ring).2.unchecked_add(2)).unwrap())
    }
}

/// A split queue's descriptor table, available ring and used ring.
fn layout(ring: GuestAddress) -> (GuestAddress, GuestAddress, GuestAddress) {
    (
        ring,
        ring.unchecked_add(16 * u64::from(QUEUE)),
        ring.unchecked_add(PAGE),
    )
}

/// Whether page `gpa / 4096`'s bit is set in `log`.
fn logged(log: &File, gpa: u64) -> bool {
    let page = gpa / PAGE;
    let mut b = [0u8];
    log.read_exact_at(&mut b, page / 8).unwrap();
    b[0] & (1 << (page % 8)) != 0
}

/// One frame into the guest's receive queue 0, as the switch delivers.
fn deliver(port: &std::sync::Arc<VhostUserPort>) -> Result<(), hvnet_port::SendError> {
    let mut tx = Device::transmitter(std::sync::Arc::clone(port), 0, TxOptions::default());
    let mut frame = vec![0u8; 60];
    frame[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    let pieces = [IoSlice::new(&frame)];
    let frame = OutFrame::Pieces {
        pieces: &pieces,
        offload: Default::default(),
    };
    let result = tx.send(frame, BatchOptions::default()).map(|_| ());
    tx.flush();
    result
}

#[test]
fn a_migrating_front_ends_log_gets_every_page_the_port_writes() {
    let sock = socket("log");
    let port = std::sync::Arc::new(
        VhostUserPort::listen("log", &sock, 1, [2, 0, 0, 0, 0, 1], 1500).unwrap(),
    );
    let ring = GuestAddress(0x8000);
    let mut guest = Guest::connect(&sock);
    guest.receive_queue(ring);
    let (log, r) = guest.start_logging(LOG, PAGE);
    r.unwrap();
    eventually("the receive queue", || port.guest_present());
    assert!(port.dirty_logging());
    deliver(&port).unwrap();
    eventually("the frame", || guest.used_idx(ring) == 1);
    let used = layout(ring).2;
    assert!(logged(&log, RX_BUF), "the receive buffer's page");
    assert!(logged(&log, used.raw_value()), "the used ring's page");
    assert!(!logged(&log, RX_BUF + PAGE), "a buffer not written");
    assert!(!logged(&log, 0x18_0000), "memory never written");
    // The migration ends (LOG_ALL off, as QEMU after a failed one): the
    // next frame's pages are not marked.
    guest.front.set_features(FEATURES).unwrap();
    eventually("logging off", || !port.dirty_logging());
    deliver(&port).unwrap();
    eventually("the second frame", || guest.used_idx(ring) == 2);
    assert!(
        !logged(&log, RX_BUF + PAGE),
        "written after logging stopped"
    );
    let _ = std::fs::remove_file(&sock);
}

#[test]
fn logs_outside_their_memory_or_too_small_and_tables_changed_mid_migration_or_past_their_files_are_refused(
) {
    let sock = socket("bad-log");
    let port = std::sync::Arc::new(
        VhostUserPort::listen("bad", &sock, 1, [2, 0, 0, 0, 0, 1], 1500).unwrap(),
    );
    // A log that claims a MiB of a page-long file: writing past the
    // file's end would be SIGBUS.
    let guest = Guest::connect(&sock);
    let (_log, r) = guest.start_logging(1 << 20, PAGE);
    assert!(r.is_err(), "a log past its file's end is refused");
    eventually("the disconnect", || !port.is_connected());
    drop(guest);
    // A log too small for the guest's memory.
    let guest = Guest::connect(&sock);
    let (_log, r) = guest.start_logging(8, PAGE);
    assert!(r.is_err(), "a log too small for the memory is refused");
    eventually("the disconnect", || !port.is_connected());
    drop(guest);
    // A memory table changed while logging.
    let guest = Guest::connect(&sock);
    let (_log, r) = guest.start_logging(LOG, PAGE);
    r.unwrap();
    let region = guest.mem.iter().next().unwrap();
    let again = guest
        .front
        .set_mem_table(&[VhostUserMemoryRegionInfo::from_guest_region(region).unwrap()]);
    // Without REPLY_ACK the front end does not wait: the refusal shows as
    // the connection ending.
    drop(again);
    eventually("the disconnect", || !port.is_connected());
    drop(guest);
    // A memory table whose region runs past the end of its file: the
    // first read of a ring there would be SIGBUS.
    let guest = Guest::connect_with_file(&sock, PAGE);
    eventually("the disconnect", || !port.is_connected());
    drop(guest);
    // The port takes the next front end and delivers to it.
    let ring = GuestAddress(0x8000);
    let mut guest = Guest::connect(&sock);
    guest.receive_queue(ring);
    eventually("the receive queue", || port.guest_present());
    assert!(!port.dirty_logging());
    deliver(&port).unwrap();
    eventually("the frame", || guest.used_idx(ring) == 1);
    assert!(port.connections() >= 5);
    let _ = std::fs::remove_file(&sock);
}
