//! Uplink ports: the switch's way out to the physical side, on an existing
//! Linux interface (a NIC; in tests and the lab, a veth whose other end is
//! an "external host"). Each receive queue is an AF_PACKET socket carrying
//! the same 12-byte virtio-net header as a TAP queue ([`hvnet_sys::packet`]),
//! so frames are read and checked exactly as a guest's are
//! ([`crate::tap::check`]); the sockets form a fanout group, so the kernel
//! spreads flows over the queues by their hash and each queue has its own
//! thread.
//!
//! The link follows the device: it is down while the device is down (the
//! sockets see `ENETDOWN` and then nothing), up again when the device comes
//! back, and gone for good when the device is deleted.

use crate::netqueue::{self, Filters};
use crate::packet::Packet;
use crate::pool::{Buf, Pool, SizeClass, HEADROOM};
use crate::rss_fanout;
use crate::tap::{check, read_result, RecvError};
use hvnet_sys::{Fanout, FrameQueue, PacketError};
use std::io::IoSliceMut;
use std::sync::Mutex;

/// How an uplink's receive queues share what arrives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spread {
    /// By the kernel's flow hash (a flow stays on one queue).
    FlowHash,
    /// By NetQueue's filters (a VM's MAC to its queue, the rest to 0).
    NetQueue(Filters),
    /// By RSS: the Toeplitz hash of the flow (the inner flow at a tunnel
    /// endpoint) through a 128-entry indirection table, as a NIC does.
    Rss {
        /// The uplink is a VXLAN tunnel endpoint on this UDP port.
        tunnel: Option<u16>,
    },
}

/// An uplink: the packet sockets of one interface.
#[derive(Debug)]
pub struct UplinkPort {
    device: String,
    ifindex: u32,
    queues: Vec<FrameQueue>,
    /// NetQueue's filters, when the queues are spread by them (else by the
    /// kernel's flow hash, or by RSS).
    filters: Option<Mutex<Filters>>,
    /// Spread by RSS (Toeplitz): `Some(tunnel)`, the inner flow's when a
    /// tunnel endpoint (on that UDP port).
    rss: Option<Option<u16>>,
    /// Every frame fits a small buffer: read this many per system call
    /// ([`BatchReader`]); else one per call into a large buffer.
    read_batch: Option<usize>,
}

/// Where an uplink's device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Administratively and operationally up.
    Up,
    /// Present but down (or without carrier).
    Down,
    /// Deleted (or replaced by another device of the same name).
    Gone,
}

impl UplinkPort {
    /// Opens `queues` receive queues on `device`, spread as `spread` says
    /// (when there are several queues). `read_batch`: every frame the
    /// device delivers fits a small buffer (its GRO is off and its MTU
    /// standard), so the queues are read with `recvmmsg`, up to this many
    /// frames a call (at most [`READ_BATCH`]).
    pub fn open(
        device: &str,
        queues: usize,
        spread: Spread,
        read_batch: Option<usize>,
    ) -> Result<UplinkPort, PacketError> {
        let (filters, rss) = match spread {
            _ if queues < 2 => (None, None),
            Spread::FlowHash => (None, None),
            Spread::NetQueue(f) => (Some(f), None),
            Spread::Rss { tunnel } => (None, Some(tunnel)),
        };
        let fanout = if filters.is_some() || rss.is_some() {
            Fanout::Program
        } else {
            Fanout::Hash
        };
        let queues = hvnet_sys::open_uplink(device, queues, fanout)?;
        let ifindex =
            hvnet_sys::packet::ifindex(device).ok_or(PacketError::NoDevice(device.into()))?;
        let port = UplinkPort {
            device: device.into(),
            ifindex,
            queues,
            filters: None,
            rss,
            read_batch: read_batch.map(|n| n.clamp(1, READ_BATCH)),
        };
        if let Some(tunnel) = rss {
            let n = port.queues.len() as u32;
            let prog = rss_fanout::program(&hvnet_offload::rss::DEFAULT_KEY, n, tunnel);
            port.load(&prog)?;
        }
        match filters {
            None => Ok(port),
            Some(f) => {
                port.install(&f)?;
                Ok(UplinkPort {
                    filters: Some(Mutex::new(f)),
                    ..port
                })
            }
        }
    }

    fn install(&self, f: &Filters) -> Result<(), PacketError> {
        self.load(&netqueue::program(f))
    }

    fn load(&self, prog: &[hvnet_sys::BpfInsn]) -> Result<(), PacketError> {
        hvnet_sys::set_fanout_program(&self.queues[0], prog).map_err(|source| PacketError::Sys {
            call: "PACKET_FANOUT_DATA",
            device: self.device.clone(),
            source,
        })
    }

    /// True when the queues are spread by RSS (the Toeplitz hash, with
    /// Microsoft's default key and a 128-entry table).
    pub fn spreads_by_rss(&self) -> bool {
        self.rss.is_some()
    }

    /// Frames read per system call when the queues are read in batches
    /// ([`BatchReader`]).
    pub fn read_batch(&self) -> Option<usize> {
        self.read_batch
    }

    /// NetQueue's filters now, if the queues are spread by filters.
    pub fn filters(&self) -> Option<Filters> {
        self.filters
            .as_ref()
            .map(|f| f.lock().expect("filters lock").clone())
    }

    /// Replaces the filters (at run time: the kernel switches programs
    /// atomically). Refused when the queues are spread by hash.
    pub fn set_filters(&self, f: Filters) -> Result<(), PacketError> {
        let Some(cur) = &self.filters else {
            return Err(PacketError::Sys {
                call: "set_filters",
                device: self.device.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "this uplink spreads its queues by flow hash, not by filters",
                ),
            });
        };
        let mut cur = cur.lock().expect("filters lock");
        self.install(&f)?;
        *cur = f;
        Ok(())
    }

    /// The interface.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Queue `i`.
    pub fn queue(&self, i: usize) -> &FrameQueue {
        &self.queues[i]
    }

    /// Number of receive queues.
    pub fn num_queues(&self) -> usize {
        self.queues.len()
    }

    /// The device's state now (from sysfs: its index, then `operstate`).
    pub fn link_state(&self) -> LinkState {
        let dir = std::path::Path::new("/sys/class/net").join(&self.device);
        let index = std::fs::read_to_string(dir.join("ifindex"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        if index != Some(self.ifindex) {
            return LinkState::Gone;
        }
        match std::fs::read_to_string(dir.join("operstate")).as_deref() {
            // "unknown": a device that reports no operational state (tun,
            // dummy) is up when its flags say so.
            Ok("up\n") | Ok("unknown\n") => LinkState::Up,
            _ => LinkState::Down,
        }
    }
}

/// Most frames read per `recvmmsg(2)`.
pub const READ_BATCH: usize = 32;

/// Reads an uplink queue in batches: up to `batch` (at most [`READ_BATCH`]) wire-sized
/// frames per `recvmmsg(2)` into small buffers, handed out one by one, each
/// checked and parsed as [`crate::tap::check`] does for a TAP read. For
/// uplinks whose frames always fit a small buffer (the device's GRO off,
/// an MTU up to 2018): a frame the kernel had to cut is refused
/// (`BadFrame`), never passed on short.
pub struct BatchReader {
    batch: usize,
    spare: Vec<Buf>,
    ready: std::collections::VecDeque<(Buf, usize, bool)>,
    lens: [usize; READ_BATCH],
    truncated: [bool; READ_BATCH],
}

impl BatchReader {
    /// A reader of up to `batch` frames per call, holding no buffers yet.
    pub fn new(batch: usize) -> BatchReader {
        BatchReader {
            batch: batch.clamp(1, READ_BATCH),
            spare: Vec::with_capacity(READ_BATCH),
            ready: std::collections::VecDeque::with_capacity(READ_BATCH),
            lens: [0; READ_BATCH],
            truncated: [false; READ_BATCH],
        }
    }

    /// The next frame: from the last batch read, or from a new one.
    pub fn read(&mut self, q: &FrameQueue, pool: &mut Pool) -> Result<Packet, RecvError> {
        if self.ready.is_empty() {
            self.fill(q, pool)?;
        }
        let (mut buf, n, truncated) = self.ready.pop_front().ok_or(RecvError::WouldBlock)?;
        if truncated || n < HEADROOM {
            return Err(RecvError::BadFrame(hvnet_wire::Error::Truncated));
        }
        buf.set_len(n - HEADROOM);
        check(buf, n)
    }

    fn fill(&mut self, q: &FrameQueue, pool: &mut Pool) -> Result<(), RecvError> {
        while self.spare.len() < self.batch {
            match pool.take(SizeClass::Small) {
                Some(b) => self.spare.push(b),
                None => break,
            }
        }
        if self.spare.is_empty() {
            return Err(RecvError::NoBuffer);
        }
        let n = {
            let mut iov: smallvec::SmallVec<[IoSliceMut<'_>; READ_BATCH]> = self
                .spare
                .iter_mut()
                .map(|b| IoSliceMut::new(b.storage_mut()))
                .collect();
            hvnet_sys::recv_frames(q, &mut iov, &mut self.lens, &mut self.truncated)
        };
        // recvmmsg reports "nothing ready" as 0 frames; only an error says
        // the device is gone or down.
        match n {
            Ok(0) => Err(RecvError::WouldBlock),
            n => {
                let n = read_result(n)?;
                for (i, b) in self.spare.drain(..n).enumerate() {
                    self.ready.push_back((b, self.lens[i], self.truncated[i]));
                }
                Ok(())
            }
        }
    }

    /// Gives the buffers it holds back to `pool`'s cache.
    pub fn release(&mut self, pool: &mut Pool) {
        for b in self.spare.drain(..) {
            pool.keep(b);
        }
        for (b, _, _) in self.ready.drain(..) {
            pool.keep(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Home, PoolCaps};
    use crate::tap::send;
    use hvnet_offload::testutil::TcpSpec;
    use hvnet_wire::virtio_net::Repr as VirtioNetHdr;

    #[test]
    fn batch_reads_keep_order_and_refuse_what_was_cut() {
        let (a, b) = hvnet_sys::frame_socketpair().unwrap();
        let (qa, qb) = (FrameQueue::from_fd(a, "a"), FrameQueue::from_fd(b, "b"));
        qb.set_nonblocking(true).unwrap();
        let mut pool = Pool::new(Home::new(PoolCaps {
            small: 64,
            large: 2,
        }));
        let mut r = BatchReader::new(READ_BATCH);
        let hdr = VirtioNetHdr::default();
        let frames: Vec<Vec<u8>> = (0..3)
            .map(|i| {
                TcpSpec {
                    payload: vec![i; 100 + usize::from(i)],
                    ..TcpSpec::default()
                }
                .build()
            })
            .collect();
        for f in &frames {
            send(&qa, &hdr, &[f]).unwrap();
        }
        // Larger than a small buffer: the kernel cuts it, the reader refuses it.
        let big = TcpSpec {
            payload: vec![7; 3000],
            ..TcpSpec::default()
        }
        .build();
        send(&qa, &hdr, &[&big]).unwrap();
        send(&qa, &hdr, &[&frames[0]]).unwrap();
        for f in &frames {
            assert_eq!(r.read(&qb, &mut pool).unwrap().frame(), &f[..]);
        }
        assert!(matches!(
            r.read(&qb, &mut pool),
            Err(RecvError::BadFrame(_))
        ));
        assert_eq!(r.read(&qb, &mut pool).unwrap().frame(), &frames[0][..]);
        assert!(matches!(r.read(&qb, &mut pool), Err(RecvError::WouldBlock)));
        r.release(&mut pool);
    }
}
