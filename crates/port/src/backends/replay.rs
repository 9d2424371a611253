//! A port over in-memory queues: what a test or a capture replays into the
//! switch, and what the switch sent, kept for the test to read. It needs no
//! root, no device and no thread of its own, so the single-threaded
//! harness and its fuzz target drive it beside TAP queues, and a capture
//! (`from_pcap`) replays through the real datapath.
//!
//! It is also what the port interface asks of any backend, written in this
//! crate alone: frames arrive checked by [`crate::vnet::check`] as a TAP's
//! do; a queue's readiness is a socket that holds one byte per pushed
//! frame, so a switch thread may poll it; the link and what the other
//! side takes are set by the test; a queue whose room is used up answers
//! [`SendError::Full`] as a guest's full receive virtqueue does.

use crate::device::{Caps, Device, Link, Receiver, Transmitter, TxOptions};
use crate::outgoing::SendError;
use crate::outgoing::{BatchOptions, OutFrame, Written};
use crate::packet::Packet;
use crate::pool::{Pool, SizeClass, HEADROOM};
use crate::vnet::{check, RecvError, VNET_HDR_LEN};
use hvnet_sys::FrameQueue;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One queue: frames waiting to be read, frames sent, and the room left
/// on the far side.
#[derive(Debug, Default)]
struct Queue {
    inbound: VecDeque<Vec<u8>>,
    sent: Vec<Vec<u8>>,
    /// Frames the far side still takes (`None`: no limit).
    room: Option<usize>,
}

/// The far side's state, shared by the port's receivers and transmitters.
#[derive(Debug)]
struct Shared {
    queues: Vec<Queue>,
    link: Link,
    caps: Caps,
}

/// A port over in-memory queues (see the module's documentation).
#[derive(Debug)]
pub struct ReplayPort {
    name: String,
    shared: Mutex<Shared>,
    /// Per queue: the end polled by the switch, and the end a push writes
    /// its readiness byte into.
    ready: Vec<(FrameQueue, FrameQueue)>,
}

impl ReplayPort {
    /// A port named `name` with `queues` empty queues, link up, every
    /// offload taken.
    pub fn new(name: &str, queues: usize) -> std::io::Result<ReplayPort> {
        let ready = (0..queues.max(1))
            .map(|_| {
                let (a, b) = hvnet_sys::frame_socketpair()?;
                let (a, b) = (FrameQueue::from_fd(a, name), FrameQueue::from_fd(b, name));
                a.set_nonblocking(true)?;
                b.set_nonblocking(true)?;
                Ok((a, b))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(ReplayPort {
            name: name.into(),
            shared: Mutex::new(Shared {
                queues: (0..ready.len()).map(|_| Queue::default()).collect(),
                link: Link::Up,
                caps: Caps::ALL,
            }),
            ready,
        })
    }

    /// A one-queue port whose inbound frames are a capture's, each behind
    /// an all-zero virtio-net header (no offload asked for), in order.
    pub fn from_pcap(name: &str, path: &std::path::Path) -> Result<ReplayPort, ReplayError> {
        let file = std::fs::File::open(path).map_err(ReplayError::Io)?;
        let mut reader = pcap_file::pcap::PcapReader::new(file).map_err(ReplayError::Pcap)?;
        let port = ReplayPort::new(name, 1).map_err(ReplayError::Io)?;
        while let Some(p) = reader.next_packet() {
            let p = p.map_err(ReplayError::Pcap)?;
            let mut bytes = vec![0u8; VNET_HDR_LEN];
            bytes.extend_from_slice(&p.data);
            port.push(0, bytes);
        }
        Ok(port)
    }

    /// The far side sends `bytes` (virtio-net header, then the frame) on
    /// queue `q` (modulo the queues).
    pub fn push(&self, q: usize, bytes: Vec<u8>) {
        let q = q % self.ready.len();
        self.lock().queues[q].inbound.push_back(bytes);
        // One readiness byte per frame; a full socket already says "ready".
        let _ = self.ready[q].1.file().write(&[1]);
    }

    /// Frames waiting to be read on queue `q`.
    pub fn pending(&self, q: usize) -> usize {
        self.lock().queues[q % self.ready.len()].inbound.len()
    }

    /// Takes what the switch sent, as `(queue, virtio-net header and frame)`.
    pub fn take_sent(&self) -> Vec<(usize, Vec<u8>)> {
        let mut s = self.lock();
        s.queues
            .iter_mut()
            .enumerate()
            .flat_map(|(i, q)| std::mem::take(&mut q.sent).into_iter().map(move |f| (i, f)))
            .collect()
    }

    /// Sets the link, as a device going down or away would.
    pub fn set_link(&self, link: Link) {
        self.lock().link = link;
    }

    /// Sets what the far side takes (a guest's driver that refused an
    /// offload).
    pub fn set_caps(&self, caps: Caps) {
        self.lock().caps = caps;
    }

    /// Limits what queue `q`'s far side takes from now on to `frames`
    /// (`None`: no limit), as a guest's receive virtqueue with that many
    /// free buffers.
    pub fn set_room(&self, q: usize, frames: Option<usize>) {
        self.lock().queues[q % self.ready.len()].room = frames;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().expect("replay port lock")
    }
}

/// Why a capture could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Opening the file, or making the port's queues.
    #[error("cannot open the capture: {0}")]
    Io(std::io::Error),
    /// The file is not a pcap capture.
    #[error("not a pcap capture: {0}")]
    Pcap(pcap_file::PcapError),
}

impl Device for ReplayPort {
    fn kind(&self) -> &'static str {
        "replay"
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn num_queues(&self) -> usize {
        self.ready.len()
    }

    fn caps(&self) -> Caps {
        self.lock().caps
    }

    fn link(&self) -> Link {
        self.lock().link
    }

    fn wait_link(&self, _q: usize, timeout: Duration) {
        std::thread::sleep(timeout.min(Duration::from_millis(10)));
    }

    fn receiver(self: Arc<Self>, q: usize) -> Box<dyn Receiver> {
        Box::new(ReplayReceiver { port: self, q })
    }

    fn transmitter(self: Arc<Self>, q: usize, _opts: TxOptions) -> Box<dyn Transmitter> {
        Box::new(ReplayTransmitter { port: self, q })
    }
}

struct ReplayReceiver {
    port: Arc<ReplayPort>,
    q: usize,
}

impl Receiver for ReplayReceiver {
    fn recv_batch(
        &mut self,
        pool: &mut Pool,
        max: usize,
        out: &mut Vec<Result<Packet, RecvError>>,
    ) -> Result<(), RecvError> {
        for _ in 0..max {
            let mut s = self.port.lock();
            match s.link {
                Link::Up => {}
                Link::Down => return Err(RecvError::LinkDown),
                Link::Gone => return Err(RecvError::Gone),
            }
            let Some(bytes) = s.queues[self.q].inbound.front() else {
                return Err(RecvError::WouldBlock);
            };
            let frame_len = bytes.len().saturating_sub(VNET_HDR_LEN);
            let class = if frame_len <= SizeClass::Small.storage() - HEADROOM {
                SizeClass::Small
            } else {
                SizeClass::Large
            };
            // The frame stays queued until a buffer takes it.
            let Some(mut buf) = pool.take(class) else {
                return Err(RecvError::NoBuffer);
            };
            let bytes = s.queues[self.q]
                .inbound
                .pop_front()
                .expect("looked at above");
            drop(s);
            if bytes.len() > buf.storage().len() {
                out.push(Err(RecvError::BadFrame(hvnet_wire::Error::Truncated)));
                continue;
            }
            // The header lands in the headroom, as a TAP read puts it.
            buf.storage_mut()[..bytes.len()].copy_from_slice(&bytes);
            buf.set_len(frame_len);
            out.push(check(buf, bytes.len()));
        }
        Ok(())
    }

    fn wait_fd(&self) -> RawFd {
        self.port.ready[self.q].0.raw_fd()
    }

    fn woken(&mut self) {
        let mut sink = [0u8; 64];
        while matches!(self.port.ready[self.q].0.file().read(&mut sink), Ok(n) if n > 0) {}
    }
}

struct ReplayTransmitter {
    port: Arc<ReplayPort>,
    q: usize,
}

impl Transmitter for ReplayTransmitter {
    fn send_batch(
        &mut self,
        frames: &[OutFrame<'_>],
        _how: BatchOptions,
        done: &mut dyn FnMut(Result<Written, SendError>),
    ) {
        let mut s = self.port.lock();
        let up = s.link == Link::Up;
        for f in frames {
            let q = &mut s.queues[self.q];
            if !up {
                done(Err(SendError::Failed));
                continue;
            }
            if q.room == Some(0) {
                done(Err(SendError::Full));
                continue;
            }
            if let Some(r) = &mut q.room {
                *r -= 1;
            }
            // As a TAP's reader gets it: the virtio-net header, then the
            // frame.
            let mut bytes = f.vnet_header().to_vec();
            let mut pieces: Vec<std::io::IoSlice<'_>> = Vec::new();
            f.push_pieces(&mut pieces);
            pieces.iter().for_each(|p| bytes.extend_from_slice(p));
            q.sent.push(bytes);
            done(Ok(Written::one(f.len())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Home, PoolCaps};
    use hvnet_offload::testutil::TcpSpec;
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    use std::io::IoSlice;

    fn read_all(port: &Arc<ReplayPort>, pool: &mut Pool) -> Vec<Result<Packet, RecvError>> {
        let mut rx = Arc::clone(port).receiver(0);
        let mut out = Vec::new();
        assert!(matches!(
            rx.recv_batch(pool, 64, &mut out),
            Err(RecvError::WouldBlock)
        ));
        out
    }

    #[test]
    fn a_capture_replays_frame_by_frame_and_a_bad_one_is_refused_alone() {
        let frames: Vec<Vec<u8>> = (0..5u32)
            .map(|i| {
                TcpSpec {
                    seq: 1000 + i * 100,
                    payload: vec![i as u8; 100],
                    ..TcpSpec::default()
                }
                .build()
            })
            .collect();
        let path = std::env::temp_dir().join(format!("hvnet-replay-{}.pcap", std::process::id()));
        {
            let f = std::fs::File::create(&path).unwrap();
            let mut w = PcapWriter::with_header(f, PcapHeader::default()).unwrap();
            for (i, f) in frames.iter().enumerate() {
                let ts = Duration::from_millis(i as u64);
                w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
                    .unwrap();
            }
            // A frame cut inside its IP header.
            w.write_packet(&PcapPacket::new(Duration::ZERO, 20, &frames[0][..20]))
                .unwrap();
        }
        let port = Arc::new(ReplayPort::from_pcap("cap", &path).unwrap());
        std::fs::remove_file(&path).unwrap();
        assert_eq!(port.pending(0), 6);
        let mut pool = Pool::new(Home::new(PoolCaps {
            small: 16,
            large: 2,
        }));
        let got = read_all(&port, &mut pool);
        assert_eq!(got.len(), 6);
        for (want, got) in frames.iter().zip(&got) {
            assert_eq!(got.as_ref().unwrap().frame(), &want[..]);
        }
        assert!(
            matches!(got[5], Err(RecvError::BadFrame(_))),
            "{:?}",
            got[5]
        );
        assert!(matches!(
            ReplayPort::from_pcap("x", std::path::Path::new("/nonexistent.pcap")),
            Err(ReplayError::Io(_))
        ));
    }

    #[test]
    fn frames_wait_for_buffers_and_a_full_far_side_says_full() {
        let port = Arc::new(ReplayPort::new("r", 2).unwrap());
        let f = TcpSpec::default().build();
        let mut bytes = vec![0u8; VNET_HDR_LEN];
        bytes.extend_from_slice(&f);
        for _ in 0..3 {
            port.push(1, bytes.clone());
        }
        // One small buffer: one frame read, the others wait (not lost).
        let mut pool = Pool::new(Home::new(PoolCaps { small: 1, large: 0 }));
        let mut rx = Arc::clone(&port).receiver(1);
        let mut out = Vec::new();
        assert!(matches!(
            rx.recv_batch(&mut pool, 8, &mut out),
            Err(RecvError::NoBuffer)
        ));
        assert_eq!((out.len(), port.pending(1)), (1, 2));
        let mut tx = Arc::clone(&port).transmitter(0, TxOptions::default());
        port.set_room(0, Some(1));
        let piece = [IoSlice::new(&f)];
        let frame = OutFrame::Pieces {
            pieces: &piece,
            offload: Default::default(),
        };
        let how = BatchOptions::default();
        assert_eq!(tx.send(frame, how), Ok(Written::one(f.len())));
        assert_eq!(tx.send(frame, how), Err(SendError::Full));
        port.set_link(Link::Down);
        assert_eq!(tx.send(frame, how), Err(SendError::Failed));
        assert!(matches!(
            rx.recv_batch(&mut pool, 8, &mut out),
            Err(RecvError::LinkDown)
        ));
        // Written behind the header that describes it.
        let mut want = frame.vnet_header().to_vec();
        want.extend_from_slice(&f);
        assert_eq!(port.take_sent(), vec![(0, want)]);
    }
}
