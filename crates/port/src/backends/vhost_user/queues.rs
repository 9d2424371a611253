//! A vhost-user port as the datapath sees it ([`Device`]): its transmit
//! virtqueues read a batch per wake-up under one lock, the used ring
//! published and the guest signalled once per batch (when its event
//! index asks for it), and kicks off while the queue is being read; its
//! receive virtqueues written a batch at a time, the guest signalled once
//! after it.

use super::virtq::{self, VirtqError};
use super::VhostUserPort;
use crate::device::{Caps, Device, Link, Receiver, Transmitter, TxOptions};
use crate::outgoing::SendError;
use crate::outgoing::{BatchOptions, OutFrame, Slices, Written};
use crate::packet::Packet;
use crate::pool::Pending;
use crate::pool::{Pool, SizeClass, HEADROOM};
use crate::status::DeviceStatus;
use crate::vnet::{check, RecvError, VNET_HDR_LEN};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vhost_user_backend::VringT;
use virtio_queue::QueueT;
use vm_memory::GuestAddressSpace;

impl Device for VhostUserPort {
    fn kind(&self) -> &'static str {
        "vhost-user"
    }
    fn close(&self) {
        self.close_socket();
    }

    fn name(&self) -> &str {
        self.socket().to_str().unwrap_or("?")
    }

    fn num_queues(&self) -> usize {
        self.sh.pairs
    }

    fn active_queues(&self) -> usize {
        VhostUserPort::active_queues(self)
    }

    fn caps(&self) -> Caps {
        let g = self.guest_offloads();
        Caps {
            csum: g.csum,
            gso: g.tso,
        }
    }

    fn notify_changes(&self, counter: Arc<AtomicU64>) {
        VhostUserPort::notify_changes(self, counter)
    }

    /// Up while a front end is connected; down, not gone, without one (a
    /// guest's hypervisor that restarts reconnects).
    fn link(&self) -> Link {
        if self.is_connected() {
            Link::Up
        } else {
            Link::Down
        }
    }

    fn guest_present(&self) -> bool {
        VhostUserPort::guest_present(self)
    }

    fn status(&self) -> DeviceStatus {
        DeviceStatus {
            vhost_user: Some(VhostUserPort::status(self)),
            ..DeviceStatus::default()
        }
    }

    /// The guest's driver sets its MTU (`ip link set eth0 mtu …` inside it).
    fn other_side_sets_mtu(&self) -> bool {
        true
    }

    /// One copy guest to guest: the receive virtqueue's writer copies a
    /// payload left in the sending guest's memory from there.
    fn writes_pending(&self) -> bool {
        true
    }

    /// A disconnect and a reconnect both kick.
    fn wait_link(&self, q: usize, timeout: Duration) {
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        let _ = hvnet_sys::poll_readable(self.tx_kick_fd(q), ms);
        self.consume_kicks(q);
    }

    fn receiver(self: Arc<Self>, q: usize) -> Box<dyn Receiver> {
        Box::new(VirtqReceiver {
            port: self,
            q,
            held: virtq::Held::default(),
            held_on: 0,
        })
    }

    fn transmitter(self: Arc<Self>, q: usize, _opts: TxOptions) -> Box<dyn Transmitter> {
        Box::new(VirtqTransmitter {
            port: self,
            q,
            slices: Slices::default(),
        })
    }
}

/// Reads a guest's transmit virtqueue.
struct VirtqReceiver {
    port: Arc<VhostUserPort>,
    q: usize,
    /// Chains the last batch holds back until its end.
    held: virtq::Held,
    /// The connection they came on.
    held_on: u64,
}

impl Receiver for VirtqReceiver {
    /// Up to `max` chains under one lock of the virtqueue, each copied
    /// into a buffer (or its head only, its payload left in the guest's
    /// memory until [`Receiver::end_batch`]: one copy guest to guest) and
    /// returned used at once (or at the end of the batch); the guest is
    /// signalled once after them.
    fn recv_batch(
        &mut self,
        pool: &mut Pool,
        max: usize,
        out: &mut Vec<Result<Packet, RecvError>>,
    ) -> Result<(), RecvError> {
        if self.q == 0 {
            for mac in self.port.sh.take_announcements() {
                out.push(announcement(pool, mac));
            }
        }
        let Some((vring, mem)) = self.port.vring(2 * self.q + 1) else {
            return Err(RecvError::WouldBlock);
        };
        let layout = self.port.layout();
        let holding = &self.port.sh.tx_holding[self.q];
        let burst = {
            let mut st = vring.get_mut();
            if !st.get_queue().ready() || !st.is_enabled() {
                return Err(RecvError::WouldBlock);
            }
            // Said before the chains are taken: a stop of the queue from
            // now on waits for them.
            holding.store(true, Ordering::Release);
            let mem = mem.memory().into_inner();
            self.held_on = self.port.connections();
            virtq::read_batch_leaving(
                st.get_queue_mut(),
                &mem,
                layout,
                pool,
                max,
                out,
                &mut self.held,
            )
        };
        if self.held.is_empty() {
            holding.store(false, Ordering::Release);
        }
        if burst.signal {
            let _ = vring.signal_used_queue();
        }
        burst.end
    }

    /// The chains the batch held go back used, in one publication (unless
    /// the front end reconnected meanwhile: they belong to a ring that
    /// is no more).
    fn end_batch(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let holding = &self.port.sh.tx_holding[self.q];
        let vring = self.port.vring(2 * self.q + 1);
        let signal = match vring.as_ref() {
            Some((vring, mem)) if self.port.connections() == self.held_on => {
                let mut st = vring.get_mut();
                let guard = mem.memory();
                let layout = self.port.layout();
                virtq::complete_batch(st.get_queue_mut(), &guard, layout, &mut self.held)
            }
            _ => false,
        };
        self.held.clear();
        holding.store(false, Ordering::Release);
        if let (true, Some((vring, _))) = (signal, vring) {
            let _ = vring.signal_used_queue();
        }
    }

    fn wait_fd(&self) -> RawFd {
        self.port.tx_kick_fd(self.q)
    }

    fn woken(&mut self) {
        self.port.consume_kicks(self.q);
        self.port.disable_tx_kicks(self.q);
    }

    fn poll(&mut self, budget: Duration) -> bool {
        self.port.poll_tx(self.q, budget)
    }

    fn rearm(&mut self) -> bool {
        let more = self.port.enable_tx_kicks(self.q);
        if more {
            self.port.disable_tx_kicks(self.q);
        }
        more
    }
}

/// A migrated guest's announcement, as if the guest had sent it (no
/// offloads in its virtio-net header).
fn announcement(pool: &mut Pool, mac: [u8; 6]) -> Result<Packet, RecvError> {
    let frame = hvnet_wire::arp::rarp_announcement(hvnet_wire::MacAddr(mac));
    let mut buf = pool.take(SizeClass::Small).ok_or(RecvError::NoBuffer)?;
    let n = VNET_HDR_LEN + frame.len();
    let storage = buf.storage_mut();
    storage[..VNET_HDR_LEN].fill(0);
    storage[VNET_HDR_LEN..n].copy_from_slice(&frame);
    buf.set_len(n - HEADROOM);
    check(buf, n)
}

/// Writes a guest's receive virtqueue.
struct VirtqTransmitter {
    port: Arc<VhostUserPort>,
    q: usize,
    slices: Slices,
}

impl Transmitter for VirtqTransmitter {
    fn send_batch(
        &mut self,
        frames: &[OutFrame<'_>],
        how: BatchOptions,
        done: &mut dyn FnMut(Result<Written, SendError>),
    ) {
        let (port, q) = (&self.port, self.q);
        // The payloads frames left in a sending guest's memory, copied
        // from there (the slices hold the rest of each frame).
        let mut tails: smallvec::SmallVec<[Option<&Pending>; 64]> = smallvec::SmallVec::new();
        if frames.iter().any(|f| pending(f).is_some()) {
            tails.extend(frames.iter().map(pending));
        }
        let tails = &tails[..];
        self.slices.write(frames, done, |slices, done| {
            write_held(port, q, slices, tails, how.hold, done)
        });
    }

    fn flush(&mut self) {
        self.port.signal_receive(self.q);
    }
}

/// The payload a frame left in a sending guest's memory, if any.
fn pending<'a>(f: &OutFrame<'a>) -> Option<&'a Pending> {
    match f {
        OutFrame::Packet(p) => p.buf.pending(),
        _ => None,
    }
}

/// Writes serialised frames into queue `q`'s receive virtqueue, waiting
/// for room for up to `hold` (one deadline for the whole batch).
fn write_held(
    port: &VhostUserPort,
    q: usize,
    frames: &[&[std::io::IoSlice<'_>]],
    tails: &[Option<&Pending>],
    hold: Option<Duration>,
    done: &mut dyn FnMut(Result<(), SendError>),
) {
    // Under one lock until the ring is full; then, holding, wait for
    // room and go on from the frame that found it full, or else give up
    // the rest of the batch. The clock is read only once the ring was
    // found full; one deadline for the whole batch.
    let mut deadline = None;
    let mut at = 0;
    while at < frames.len() {
        let mut full = false;
        let n = port.write_batch(
            q,
            &frames[at..],
            tails.get(at..).unwrap_or(&[]),
            &mut |r| match r {
                Err(VirtqError::RingFull) => full = true,
                r => done(r.map_err(|e| match e {
                    VirtqError::BadDescriptor(f) => SendError::BadDescriptor(f),
                    _ => SendError::Failed,
                })),
            },
        );
        at += n;
        if !full {
            continue;
        }
        // The frame that found the ring full: wait for room (if
        // holding) and write it again, or give it up.
        let retry = hold.is_some_and(|wait| {
            if wait.is_zero() {
                return false;
            }
            let now = Instant::now();
            let end = *deadline.get_or_insert(now + wait);
            let left = end.saturating_duration_since(now);
            !left.is_zero() && port.wait_for_room(q, left)
        });
        if retry {
            at -= 1;
        } else {
            // This frame and the rest of the batch: the guest has posted
            // nothing since, so they find the ring as full (DPDK's
            // enqueue burst stops there too) without a pass over the
            // ring each; with a zero hold the caller keeps them, in
            // order.
            for _ in at - 1..frames.len() {
                done(Err(SendError::Full));
            }
            return;
        }
    }
}
