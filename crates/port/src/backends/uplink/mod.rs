//! Uplink ports: the switch's way out to the physical side, on an existing
//! Linux interface (a NIC; in tests and the lab, a veth whose other end is
//! an "external host"). Each receive queue is an AF_PACKET socket carrying
//! the same 12-byte virtio-net header as a TAP queue ([`hvnet_sys::packet`]),
//! so frames are read and checked exactly as a guest's are
//! ([`crate::vnet::check`]) — except at a tunnel endpoint, whose sockets
//! read whole frames without the header ([`whole_frame`]); the
//! sockets form a fanout group, so the kernel spreads flows over the
//! queues by their hash and each queue has its own thread.
//!
//! The link follows the device: it is down while the device is down (the
//! sockets see `ENETDOWN` and then nothing), up again when the device comes
//! back, and gone for good when the device is deleted.

mod bpf;
pub mod netqueue;
pub mod rss_fanout;
pub mod socket_batch;
pub mod whole_frame;

use crate::device::{Device, Link, Receiver, Transmitter, TxOptions};
use crate::fd_tx::FdTransmitter;
use crate::packet::Packet;
use crate::pool::Pool;
use crate::status::DeviceStatus;
use crate::vnet::{read_up_to, RecvError};
use hvnet_sys::{Fanout, FrameQueue, PacketError, RxHeader};
use netqueue::Filters;
use socket_batch::{Framing, SocketBatchReader};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// How an uplink's receive queues read frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UplinkRead {
    /// Frames behind a virtio-net header, up to `batch` per
    /// `recvmmsg(2)`, each into a buffer that holds 64 KiB (the device's
    /// GRO, or a peer's GSO frames).
    Vnet {
        /// Frames per system call, at most [`READ_BATCH`].
        batch: usize,
    },
    /// Whole frames, no header, up to `batch` per `recvmmsg(2)`
    /// ([`whole_frame`]): a tunnel endpoint on UDP port `tunnel`,
    /// whose peers may hand over tunnelled GSO frames. Frames are sent
    /// through send-only sockets with a virtio-net header.
    Whole {
        /// The endpoint's UDP port.
        tunnel: u16,
        /// Frames per system call, at most [`READ_BATCH`].
        batch: usize,
    },
}

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
    /// How the queues are read.
    read: UplinkRead,
    /// Send-only sockets, one per queue, when the receive sockets carry no
    /// virtio-net header ([`UplinkRead::Whole`]); else the queues send.
    senders: Vec<FrameQueue>,
    /// The device's MTU, as last read (what a whole frame's segments must
    /// fit).
    mtu: AtomicU16,
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
    /// (when there are several queues), read as `read` says.
    pub fn open(
        device: &str,
        queues: usize,
        spread: Spread,
        read: UplinkRead,
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
        let (header, senders) = match read {
            UplinkRead::Whole { .. } => (RxHeader::Aux, hvnet_sys::open_senders(device, queues)?),
            _ => (RxHeader::Vnet, Vec::new()),
        };
        let queues = hvnet_sys::open_uplink(device, queues, fanout, header)?;
        let ifindex =
            hvnet_sys::packet::ifindex(device).ok_or(PacketError::NoDevice(device.into()))?;
        let port = UplinkPort {
            device: device.into(),
            ifindex,
            queues,
            filters: None,
            rss,
            read,
            senders,
            mtu: AtomicU16::new(device_mtu(device).unwrap_or(1500)),
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

    /// Frames read per system call, at most.
    pub fn read_batch(&self) -> usize {
        match self.read {
            UplinkRead::Vnet { batch } | UplinkRead::Whole { batch, .. } => {
                batch.clamp(1, READ_BATCH)
            }
        }
    }

    /// The device's MTU as last read (at open, and whenever the link's
    /// state is checked).
    pub fn mtu(&self) -> u16 {
        self.mtu.load(Relaxed)
    }

    /// The socket queue `i`'s frames are sent through.
    pub fn sender(&self, i: usize) -> &FrameQueue {
        self.senders.get(i).unwrap_or(&self.queues[i])
    }

    /// Frames the kernel dropped at queue `i`'s socket since the last call
    /// (its buffer full, or a frame it could not hand over with the
    /// socket's header); 0 if the count cannot be read.
    pub fn kernel_drops(&self, i: usize) -> u64 {
        hvnet_sys::socket_drops(&self.queues[i]).map_or(0, u64::from)
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

    /// The device's state now (its index, then whether it is up with
    /// carrier), asked of the kernel in this namespace.
    /// Its interface's index (as it was when opened).
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    pub fn link_state(&self) -> LinkState {
        if hvnet_sys::packet::ifindex(&self.device) != Some(self.ifindex) {
            return LinkState::Gone;
        }
        let Some((running, mtu)) = hvnet_sys::packet::link_flags_mtu(&self.device) else {
            return LinkState::Gone;
        };
        if let Ok(m) = u16::try_from(mtu) {
            self.mtu.store(m, Relaxed);
        }
        if running {
            LinkState::Up
        } else {
            LinkState::Down
        }
    }
}

impl Device for UplinkPort {
    fn kind(&self) -> &'static str {
        "uplink+af_packet"
    }

    fn name(&self) -> &str {
        &self.device
    }

    fn num_queues(&self) -> usize {
        self.queues.len()
    }

    fn faces_wire(&self) -> bool {
        true
    }

    fn link(&self) -> Link {
        match self.link_state() {
            LinkState::Up => Link::Up,
            LinkState::Down => Link::Down,
            LinkState::Gone => Link::Gone,
        }
    }

    fn receiver(self: Arc<Self>, q: usize) -> Box<dyn Receiver> {
        let framing = match self.read {
            UplinkRead::Vnet { .. } => Framing::Vnet,
            UplinkRead::Whole { tunnel, .. } => Framing::Whole { tunnel },
        };
        let reader = SocketBatchReader::new(framing, self.read_batch());
        Box::new(UplinkReceiver {
            port: self,
            q,
            reader,
        })
    }

    /// Sockets take a batch per `sendmmsg(2)`.
    fn transmitter(self: Arc<Self>, q: usize, _opts: TxOptions) -> Box<dyn Transmitter> {
        Box::new(FdTransmitter::mmsg(self, UplinkPort::sender, q))
    }

    fn status(&self) -> DeviceStatus {
        let spread = if self.filters.is_some() {
            "netqueue"
        } else if self.spreads_by_rss() {
            "rss"
        } else {
            "flow hash"
        };
        DeviceStatus {
            frames_per_read: Some(self.read_batch()),
            spread: Some(spread),
            ..DeviceStatus::default()
        }
    }

    fn filters(&self) -> Option<Filters> {
        UplinkPort::filters(self)
    }

    fn set_filters(&self, f: Filters) -> Result<(), String> {
        UplinkPort::set_filters(self, f).map_err(|e| e.to_string())
    }
}

/// Reads one uplink queue.
struct UplinkReceiver {
    port: Arc<UplinkPort>,
    q: usize,
    reader: SocketBatchReader,
}

impl Receiver for UplinkReceiver {
    fn recv_batch(
        &mut self,
        pool: &mut Pool,
        max: usize,
        out: &mut Vec<Result<Packet, RecvError>>,
    ) -> Result<(), RecvError> {
        let fq = self.port.queue(self.q);
        let mtu = self.port.mtu();
        read_up_to(max, out, || self.reader.read(fq, pool, mtu))
    }

    fn wait_fd(&self) -> RawFd {
        self.port.queue(self.q).raw_fd()
    }

    fn kernel_drops(&mut self) -> u64 {
        self.port.kernel_drops(self.q)
    }

    fn release(&mut self, pool: &mut Pool) {
        self.reader.release(pool)
    }
}

pub use socket_batch::READ_BATCH;

/// The MTU of `device` in this namespace.
pub fn device_mtu(device: &str) -> Option<u16> {
    u16::try_from(hvnet_sys::packet::link_flags_mtu(device)?.1).ok()
}
