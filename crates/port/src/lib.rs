//! Ports: where frames enter and leave the switch.
//!
//! A [`TapPort`] is a VM's NIC as a hypervisor's device model holds it: the
//! file descriptors of a TAP device's queues, opened with a 12-byte
//! virtio-net header. [`recv`] reads one frame and checks its header against
//! the frame at the boundary ([`hvnet_offload::gso::validate_vnet`]); past
//! it, the engines trust the offsets. [`send`] writes a header and the
//! frame's pieces with one `writev`, so a coalesced frame goes out without
//! being copied together.
//!
//! Buffers come from a [`Pool`]: a receive buffer is taken from it, travels
//! through the switch (possibly held inside a GRO run), and is given back
//! after the write that delivers it.

#![forbid(unsafe_code)]

use crossbeam_queue::ArrayQueue;
use hvnet_offload::gso::{self, GsoError};
use hvnet_offload::OffloadInfo;
use hvnet_sys::TapQueue;
use hvnet_wire::virtio_net::{self, Repr as VirtioNetHdr};
use std::io::{self, IoSlice, Read, Write};
use std::sync::Arc;

/// Size of the virtio-net header on every hvnet TAP.
pub const VNET_HDR_LEN: usize = virtio_net::LEN_V1;
/// Largest frame a TAP can hand us (a 64 KiB GSO frame plus Ethernet).
pub const MAX_FRAME: usize = 65535 + 14 + 4;
/// Size of every pool buffer.
pub const BUF_SIZE: usize = VNET_HDR_LEN + MAX_FRAME;

/// A receive buffer: the virtio-net header area, then the frame.
#[derive(Debug)]
pub struct Buf {
    data: Vec<u8>,
    len: usize,
}

impl Buf {
    fn new() -> Buf {
        Buf {
            data: vec![0u8; BUF_SIZE],
            len: 0,
        }
    }
    /// The frame (after the header area).
    pub fn frame(&self) -> &[u8] {
        &self.data[VNET_HDR_LEN..VNET_HDR_LEN + self.len]
    }
    /// The frame, writable (for completing a checksum in place).
    pub fn frame_mut(&mut self) -> &mut [u8] {
        &mut self.data[VNET_HDR_LEN..VNET_HDR_LEN + self.len]
    }
    /// Replaces the frame with a copy of `bytes`.
    pub fn fill(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(MAX_FRAME);
        self.data[VNET_HDR_LEN..VNET_HDR_LEN + n].copy_from_slice(&bytes[..n]);
        self.len = n;
    }
    /// The whole storage (header area and frame), for a batched read to
    /// fill; see [`Buf::from_storage`].
    pub fn into_storage(self) -> Vec<u8> {
        self.data
    }
    /// The whole storage, writable, for a plain `read(2)` to fill.
    pub fn storage_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
    /// A buffer back from a batched read (storage of [`BUF_SIZE`] bytes).
    pub fn from_storage(data: Vec<u8>) -> Buf {
        debug_assert_eq!(data.len(), BUF_SIZE);
        Buf { data, len: 0 }
    }
    /// Frame length.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when no frame is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl AsRef<[u8]> for Buf {
    fn as_ref(&self) -> &[u8] {
        self.frame()
    }
}

/// A bounded pool of receive buffers, shared by the threads of a switch.
/// Allocation happens only when the pool is empty (start-up, or more frames
/// in flight than ever before); every buffer given back is reused.
#[derive(Clone)]
pub struct Pool {
    free: Arc<ArrayQueue<Buf>>,
}

impl Pool {
    /// A pool that keeps at most `capacity` idle buffers.
    pub fn new(capacity: usize) -> Pool {
        Pool {
            free: Arc::new(ArrayQueue::new(capacity.max(1))),
        }
    }
    /// Takes a buffer.
    pub fn take(&self) -> Buf {
        self.free.pop().unwrap_or_else(Buf::new)
    }
    /// Gives a buffer back.
    pub fn give(&self, mut b: Buf) {
        b.len = 0;
        let _ = self.free.push(b);
    }
    /// Idle buffers.
    pub fn idle(&self) -> usize {
        self.free.len()
    }
}

/// Why a received frame was refused.
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    /// Nothing to read now.
    #[error("no frame ready")]
    WouldBlock,
    /// The device is gone (the guest's namespace was deleted).
    #[error("the TAP device is gone")]
    Gone,
    /// Shorter than a virtio-net header, or an undefined header field.
    #[error("bad virtio-net header")]
    BadVnetHeader,
    /// A header that does not fit its frame.
    #[error("virtio-net header does not fit the frame: {0}")]
    BadOffload(GsoError),
    /// Any other read error.
    #[error("read from the TAP failed")]
    Read(#[source] io::Error),
}

/// One received frame and what its header said.
#[derive(Debug)]
pub struct Received {
    /// The frame's offload metadata.
    pub info: OffloadInfo,
    /// The header as read (for its `hdr_len`).
    pub vnet: VirtioNetHdr,
}

/// Reads one frame from a TAP queue into `buf`.
pub fn recv(q: &TapQueue, buf: &mut Buf) -> Result<Received, RecvError> {
    let n = q.file().read(&mut buf.data);
    received(buf, n)
}

/// Checks what a read (plain or batched) put into `buf`; `n` is the read's
/// result.
pub fn received(buf: &mut Buf, n: io::Result<usize>) -> Result<Received, RecvError> {
    let n = match n {
        Ok(0) => return Err(RecvError::Gone),
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(RecvError::WouldBlock),
        // EIO, EBADFD, ENODEV: the device went away with its namespace.
        Err(e) if matches!(e.raw_os_error(), Some(5) | Some(77) | Some(19)) => {
            return Err(RecvError::Gone)
        }
        Err(e) => return Err(RecvError::Read(e)),
    };
    if n < VNET_HDR_LEN {
        buf.len = 0;
        return Err(RecvError::BadVnetHeader);
    }
    buf.len = n - VNET_HDR_LEN;
    let vnet = VirtioNetHdr::parse(&buf.data[..VNET_HDR_LEN], VNET_HDR_LEN)
        .map_err(|_| RecvError::BadVnetHeader)?;
    let info = gso::validate_vnet(buf.frame(), &vnet).map_err(RecvError::BadOffload)?;
    Ok(Received { info, vnet })
}

/// The virtio-net header as bytes, for a batched write.
pub fn vnet_bytes(vnet: &VirtioNetHdr) -> [u8; VNET_HDR_LEN] {
    let mut hdr = [0u8; VNET_HDR_LEN];
    vnet.emit(&mut hdr, VNET_HDR_LEN);
    hdr
}

/// Writes a frame (a header and pieces) to a TAP queue in one `writev`.
pub fn send(q: &TapQueue, vnet: &VirtioNetHdr, pieces: &[&[u8]]) -> io::Result<()> {
    let mut hdr = [0u8; VNET_HDR_LEN];
    vnet.emit(&mut hdr, VNET_HDR_LEN);
    // On the stack for up to 64 pieces (a 64 KiB run of 1448-byte segments
    // has 45): no allocation per frame.
    let mut iov: smallvec::SmallVec<[IoSlice<'_>; 64]> = smallvec::SmallVec::new();
    iov.push(IoSlice::new(&hdr));
    iov.extend(pieces.iter().map(|p| IoSlice::new(p)));
    let total: usize = iov.iter().map(|s| s.len()).sum();
    let n = q.file().write_vectored(&iov)?;
    if n != total {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short write to TAP",
        ));
    }
    Ok(())
}

/// A VM's NIC: the queues of one TAP device.
#[derive(Debug)]
pub struct TapPort {
    name: String,
    queues: Vec<TapQueue>,
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
    /// Setting offload flags failed.
    #[error("cannot set offloads on {0}")]
    SetOffloadFlags(String, #[source] io::Error),
}

impl TapPort {
    /// Opens `queues` queues of TAP `name`, each with a 12-byte virtio-net
    /// header and the given TUN_F_* offloads, non-blocking.
    pub fn open(name: &str, queues: usize, offloads: u32) -> Result<TapPort, TapError> {
        let mut qs = Vec::with_capacity(queues);
        for i in 0..queues.max(1) {
            let q = TapQueue::open(name).map_err(|source| TapError::OpenQueue {
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
        Ok(TapPort { name, queues: qs })
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
    pub fn queue(&self, i: usize) -> &TapQueue {
        &self.queues[i]
    }

    /// Number of queues.
    pub fn num_queues(&self) -> usize {
        self.queues.len()
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
    use hvnet_offload::testutil::TcpSpec;
    use hvnet_wire::GsoType;

    #[test]
    fn offload_flags_are_exhaustive() {
        use hvnet_sys::offload::*;
        assert_eq!(tap_offload_flags(false, false), 0);
        assert_eq!(tap_offload_flags(false, true), 0);
        assert_eq!(tap_offload_flags(true, false), CSUM);
        assert_eq!(tap_offload_flags(true, true), CSUM | TSO4 | TSO6 | TSO_ECN);
    }

    #[test]
    fn send_then_recv_over_a_socketpair() {
        let (a, b) = hvnet_sys::frame_socketpair().unwrap();
        let (qa, qb) = (TapQueue::from_fd(a, "a"), TapQueue::from_fd(b, "b"));
        qb.set_nonblocking(true).unwrap();
        let f = TcpSpec {
            payload: vec![9; 3000],
            ..TcpSpec::default()
        }
        .build();
        let h = VirtioNetHdr {
            flags: virtio_net::flags::NEEDS_CSUM,
            gso_type: GsoType::TcpV4,
            hdr_len: 54,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
            num_buffers: 1,
            gso_ecn: false,
        };
        send(&qa, &h, &[&f[..100], &f[100..]]).unwrap();
        let pool = Pool::new(4);
        let mut buf = pool.take();
        let r = recv(&qb, &mut buf).unwrap();
        assert_eq!(buf.frame(), &f[..]);
        assert_eq!(r.info.gso.unwrap().size, 1448);
        assert!(matches!(recv(&qb, &mut buf), Err(RecvError::WouldBlock)));
        // A header that lies about the frame is refused at the boundary.
        send(
            &qa,
            &VirtioNetHdr {
                csum_start: 5000,
                ..h
            },
            &[&f],
        )
        .unwrap();
        assert!(matches!(recv(&qb, &mut buf), Err(RecvError::BadOffload(_))));
        send(&qa, &h, &[]).unwrap();
        assert!(matches!(recv(&qb, &mut buf), Err(RecvError::BadOffload(_))));
        pool.give(buf);
        assert_eq!(pool.idle(), 1);
    }
}
