//! TAP ports: a VM's NIC as a hypervisor's device model holds it — the file
//! descriptors of a TAP device's queues, each opened with a 12-byte
//! virtio-net header.
//!
//! [`TapReader`] reads one frame with one `readv` into a small buffer with a
//! large one behind it and keeps whichever the frame needed (see
//! [`crate::pool`]); [`crate::vnet::check`] then validates the virtio-net
//! header against the frame and parses the frame, once, into a [`Packet`].
//! Past this boundary the engines trust the offsets.

use crate::device::{Device, Link, Receiver, Transmitter, TxOptions};
use crate::fd_tx::FdTransmitter;
use crate::packet::Packet;
use crate::pool::{Buf, Pool, SizeClass, HEADROOM};
use crate::vnet::{check, read_result, read_up_to, RecvError, VNET_HDR_LEN};
use hvnet_sys::FrameQueue;
use std::io::{self, IoSliceMut, Read};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

/// Reads frames from a TAP queue into pool buffers of the right class.
pub struct TapReader {
    small: Option<Buf>,
    large: Option<Buf>,
}

impl Default for TapReader {
    fn default() -> Self {
        Self::new()
    }
}

impl TapReader {
    /// A reader holding no buffers yet.
    pub fn new() -> TapReader {
        TapReader {
            small: None,
            large: None,
        }
    }

    /// Reads one frame and checks it ([`check`]).
    pub fn read(&mut self, q: &FrameQueue, pool: &mut Pool) -> Result<Packet, RecvError> {
        if self.small.is_none() {
            self.small = pool.take(SizeClass::Small);
        }
        if self.large.is_none() {
            self.large = pool.take(SizeClass::Large);
        }
        let (Some(s), Some(l)) = (&mut self.small, &mut self.large) else {
            return Err(RecvError::NoBuffer);
        };
        let small_len = SizeClass::Small.storage();
        let n = {
            let mut iov = [
                IoSliceMut::new(s.storage_mut()),
                IoSliceMut::new(&mut l.storage_mut()[small_len..]),
            ];
            q.file().read_vectored(&mut iov)
        };
        let n = read_result(n)?;
        let buf = if n <= small_len {
            let mut b = self.small.take().expect("checked above");
            b.set_len(n.saturating_sub(HEADROOM));
            b
        } else {
            // The frame overflowed into the large buffer: move the head
            // (at most 2 KiB) in front of it.
            let mut b = self.large.take().expect("checked above");
            let head = self.small.as_ref().expect("checked above").storage();
            b.storage_mut()[..small_len].copy_from_slice(head);
            b.set_len(n - HEADROOM);
            b
        };
        check(buf, n)
    }

    /// Gives the spare buffers back to `pool`'s cache.
    pub fn release(&mut self, pool: &mut Pool) {
        for b in [self.small.take(), self.large.take()].into_iter().flatten() {
            pool.keep(b);
        }
    }
}

/// A VM's NIC: the queues of one TAP device.
#[derive(Debug)]
pub struct TapPort {
    name: String,
    queues: Vec<FrameQueue>,
    /// A read found the device gone (its namespace deleted).
    gone: AtomicBool,
}

/// Why a TAP port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// Opening a queue failed.
    #[error("cannot open TAP {name} queue {queue}")]
    OpenQueue {
        /// Device name.
        name: String,
        /// Queue index.
        queue: usize,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Setting the virtio-net header size failed.
    #[error("cannot set the virtio-net header size on {0}")]
    SetVnetHdrSize(String, #[source] io::Error),
    /// Making the device persistent failed.
    #[error("cannot make TAP {0} persistent")]
    SetPersist(String, #[source] io::Error),
    /// Setting offload flags failed.
    #[error("cannot set offloads on {0}")]
    SetOffloadFlags(String, #[source] io::Error),
}

impl TapPort {
    /// Opens `queues` queues of TAP `name` (created if it does not exist;
    /// `hvtap%d` lets the kernel choose a free name), each with a 12-byte
    /// virtio-net header and the given TUN_F_* offloads, non-blocking.
    pub fn open(name: &str, queues: usize, offloads: u32) -> Result<TapPort, TapError> {
        let mut qs = Vec::with_capacity(queues);
        for i in 0..queues.max(1) {
            // A name with `%d` lets the kernel pick a free one for the
            // first queue; the others join the device it made.
            let name = qs.first().map_or(name, |q: &FrameQueue| q.name());
            let q = FrameQueue::open_tap(name).map_err(|source| TapError::OpenQueue {
                name: name.into(),
                queue: i,
                source,
            })?;
            q.set_vnet_hdr_size(VNET_HDR_LEN as i32)
                .map_err(|e| TapError::SetVnetHdrSize(name.into(), e))?;
            q.set_offload(offloads)
                .map_err(|e| TapError::SetOffloadFlags(name.into(), e))?;
            q.set_nonblocking(true)
                .map_err(|e| TapError::SetOffloadFlags(name.into(), e))?;
            qs.push(q);
        }
        let name = qs[0].name().to_string();
        Ok(TapPort::from_queues(&name, qs))
    }

    /// Opens `queues` queues of the existing TAP `name` inside the named
    /// network namespace `netns`: how a restarted switch re-attaches to a
    /// VM's persistent NIC, which kept its MAC and addresses meanwhile. The
    /// namespace is entered by a short-lived thread; the descriptors work
    /// from any namespace (and hold it alive while open).
    pub fn open_in(
        netns: &str,
        name: &str,
        queues: usize,
        offloads: u32,
    ) -> Result<TapPort, TapError> {
        let enter = |e: io::Error| TapError::OpenQueue {
            name: format!("{name} in network namespace {netns}"),
            queue: 0,
            source: e,
        };
        let ns = hvnet_sys::netns::open(netns).map_err(enter)?;
        TapPort::open_in_handle(&ns, netns, name, queues, offloads)
    }

    /// [`TapPort::open_in`] for the namespace whose handle is `ns` (one
    /// hvnet did not name: a container's), called `label` in errors.
    pub fn open_in_handle(
        ns: &std::fs::File,
        label: &str,
        name: &str,
        queues: usize,
        offloads: u32,
    ) -> Result<TapPort, TapError> {
        let enter = |e: io::Error| TapError::OpenQueue {
            name: format!("{name} in network namespace {label}"),
            queue: 0,
            source: e,
        };
        hvnet_sys::netns::run_in(ns, || TapPort::open(name, queues, offloads)).map_err(enter)?
    }

    /// Makes the device outlive this process's descriptors (a restarted
    /// switch re-attaches with [`TapPort::open_in`]).
    pub fn set_persist(&self, on: bool) -> Result<(), TapError> {
        self.queues[0]
            .set_persist(on)
            .map_err(|e| TapError::SetPersist(self.name.clone(), e))
    }

    /// A port over already opened queues (socketpairs in tests and fuzzing).
    pub fn from_queues(name: &str, queues: Vec<FrameQueue>) -> TapPort {
        TapPort {
            name: name.into(),
            queues,
            gone: AtomicBool::new(false),
        }
    }

    /// Changes the offloads the kernel may hand us (run time `port set tso`).
    pub fn set_offload(&self, offloads: u32) -> Result<(), TapError> {
        for q in &self.queues {
            q.set_offload(offloads)
                .map_err(|e| TapError::SetOffloadFlags(self.name.clone(), e))?;
        }
        Ok(())
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Queue `i`.
    pub fn queue(&self, i: usize) -> &FrameQueue {
        &self.queues[i]
    }

    /// Number of queues.
    pub fn num_queues(&self) -> usize {
        self.queues.len()
    }
}

impl Device for TapPort {
    fn kind(&self) -> &'static str {
        "tap+vnet_hdr"
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn num_queues(&self) -> usize {
        self.queues.len()
    }

    fn set_offloads(&self, csum: bool, tso: bool) -> Result<(), String> {
        self.set_offload(tap_offload_flags(csum, tso))
            .map_err(|e| format!("cannot change offloads: {e}"))
    }

    /// A TAP is up until a read finds it gone; it does not come back (its
    /// VM's namespace is gone).
    fn link(&self) -> Link {
        if self.gone.load(Relaxed) {
            Link::Gone
        } else {
            Link::Up
        }
    }

    fn receiver(self: Arc<Self>, q: usize) -> Box<dyn Receiver> {
        Box::new(TapReceiver {
            tap: self,
            q,
            reader: TapReader::new(),
        })
    }

    fn transmitter(self: Arc<Self>, q: usize, opts: TxOptions) -> Box<dyn Transmitter> {
        Box::new(FdTransmitter::writev(self, TapPort::queue, q, opts.uring))
    }
}

/// Reads one TAP queue: a frame per `read(2)`, the only way a TAP hands
/// frames over (it has no batched receive; `docs/perf/live-switch.md`
/// measured io_uring reads against it).
struct TapReceiver {
    tap: Arc<TapPort>,
    q: usize,
    reader: TapReader,
}

impl Receiver for TapReceiver {
    fn recv_batch(
        &mut self,
        pool: &mut Pool,
        max: usize,
        out: &mut Vec<Result<Packet, RecvError>>,
    ) -> Result<(), RecvError> {
        let (reader, fq) = (&mut self.reader, self.tap.queue(self.q));
        let r = read_up_to(max, out, || reader.read(fq, pool));
        if let Err(RecvError::Gone) = r {
            self.tap.gone.store(true, Relaxed);
        }
        r
    }

    fn wait_fd(&self) -> RawFd {
        self.tap.queue(self.q).raw_fd()
    }

    fn release(&mut self, pool: &mut Pool) {
        self.reader.release(pool);
    }
}

/// TUN_F_* flags for a port's offload settings: what the guest's vNIC
/// offers in its `ethtool -k` (tx checksumming, TSO).
pub fn tap_offload_flags(csum: bool, tso: bool) -> u32 {
    use hvnet_sys::offload::*;
    match (csum, tso) {
        // The kernel ignores TSO without CSUM; so do we.
        (false, _) => 0,
        (true, false) => CSUM,
        (true, true) => CSUM | TSO4 | TSO6 | TSO_ECN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Home, PoolCaps};
    use crate::vnet::send;
    use hvnet_offload::testutil::TcpSpec;
    use hvnet_offload::CsumState;
    use hvnet_wire::virtio_net::{self, Repr as VirtioNetHdr};
    use hvnet_wire::GsoType;

    #[test]
    fn offload_flags_are_exhaustive() {
        use hvnet_sys::offload::*;
        assert_eq!(tap_offload_flags(false, false), 0);
        assert_eq!(tap_offload_flags(false, true), 0);
        assert_eq!(tap_offload_flags(true, false), CSUM);
        assert_eq!(tap_offload_flags(true, true), CSUM | TSO4 | TSO6 | TSO_ECN);
    }

    fn tso_hdr() -> VirtioNetHdr {
        VirtioNetHdr {
            flags: virtio_net::flags::NEEDS_CSUM,
            gso_type: GsoType::TcpV4,
            hdr_len: 54,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
            num_buffers: 1,
            gso_ecn: false,
        }
    }

    #[test]
    fn send_then_read_over_a_socketpair_in_the_right_class() {
        let (a, b) = hvnet_sys::frame_socketpair().unwrap();
        let (qa, qb) = (FrameQueue::from_fd(a, "a"), FrameQueue::from_fd(b, "b"));
        qb.set_nonblocking(true).unwrap();
        let home = Home::new(PoolCaps { small: 4, large: 2 });
        let mut pool = Pool::new(home.clone());
        let mut r = TapReader::new();
        let big = TcpSpec {
            payload: vec![9; 3000],
            ..TcpSpec::default()
        }
        .build();
        let h = tso_hdr();
        send(&qa, &h, &[&big[..100], &big[100..]]).unwrap();
        let p = r.read(&qb, &mut pool).unwrap();
        assert_eq!(p.frame(), &big[..]);
        assert_eq!(p.buf.class(), SizeClass::Large);
        assert_eq!(p.meta.offload.gso.unwrap().size, 1448);
        assert_eq!(p.header_len(), 54);
        let small = TcpSpec {
            payload: vec![7; 100],
            ..TcpSpec::default()
        }
        .build();
        let plain = VirtioNetHdr {
            flags: virtio_net::flags::DATA_VALID,
            gso_type: GsoType::None,
            hdr_len: 0,
            gso_size: 0,
            csum_start: 0,
            csum_offset: 0,
            num_buffers: 1,
            gso_ecn: false,
        };
        send(&qa, &plain, &[&small]).unwrap();
        let q = r.read(&qb, &mut pool).unwrap();
        assert_eq!(q.frame(), &small[..]);
        assert_eq!(q.buf.class(), SizeClass::Small);
        assert_eq!(
            q.meta.offload.csum,
            CsumState::Unknown,
            "a guest's DATA_VALID is not believed"
        );
        assert!(matches!(r.read(&qb, &mut pool), Err(RecvError::WouldBlock)));
        // A header that lies about the frame is refused at the boundary.
        send(
            &qa,
            &VirtioNetHdr {
                csum_start: 5000,
                ..h
            },
            &[&big],
        )
        .unwrap();
        assert!(matches!(
            r.read(&qb, &mut pool),
            Err(RecvError::BadOffload(_))
        ));
        send(&qa, &h, &[]).unwrap();
        assert!(matches!(
            r.read(&qb, &mut pool),
            Err(RecvError::BadFrame(_))
        ));
        // A tiny gso_size is refused, not turned into thousands of segments.
        send(&qa, &VirtioNetHdr { gso_size: 8, ..h }, &[&big]).unwrap();
        assert!(matches!(
            r.read(&qb, &mut pool),
            Err(RecvError::TooManySegments)
        ));
        // With both packets held and the cap at 2 large buffers, the reader
        // has one spare large buffer and then none: it stops reading.
        let _held = (p, q);
        send(&qa, &h, &[&big]).unwrap();
        let p2 = r.read(&qb, &mut pool).unwrap();
        send(&qa, &h, &[&big]).unwrap();
        assert!(matches!(r.read(&qb, &mut pool), Err(RecvError::NoBuffer)));
        drop(p2);
        assert!(
            r.read(&qb, &mut pool).is_ok(),
            "a freed buffer is used again"
        );
    }
}
