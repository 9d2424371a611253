//! The tunnel endpoint as a port: a device over its underlay's, whose
//! receivers decapsulate what the underlay's read (answering ARP for the
//! endpoint themselves) and whose transmitters encapsulate what the switch
//! sends. Everything else — link, queues, NetQueue filters, status — is
//! the underlay's.

use super::encap::TunnelScratch;
use super::{Received, TunnelTap, Vtep, VtepConfig, SOLICIT_EVERY};
use crate::device::{Caps, Device, Link, Receiver, TraceMark, Transmitter, TxOptions};
use crate::filters::Filters;
use crate::outgoing::SendError;
use crate::outgoing::{BatchOptions, OutFrame, Written};
use crate::packet::Packet;
use crate::pool::Pool;
use crate::status::DeviceStatus;
use crate::vnet::RecvError;
use hvnet_offload::vxlan::{OUTER_LEN, OUTER_LEN_V6};
use std::os::fd::RawFd;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A VXLAN tunnel endpoint over an underlay device (an uplink).
#[derive(Debug)]
pub struct VxlanPort {
    underlay: Arc<dyn Device>,
    vtep: Arc<Vtep>,
}

impl VxlanPort {
    /// An endpoint with `cfg`'s settings over `underlay`, nothing resolved
    /// or learned yet; its frames written into `tap` (whole, the kernel
    /// segmenting them where needed) where there is one, else segmented
    /// here and sent through the underlay's sockets.
    pub fn new(underlay: Arc<dyn Device>, cfg: VtepConfig, tap: Option<TunnelTap>) -> VxlanPort {
        VxlanPort {
            underlay,
            vtep: Arc::new(Vtep::new(cfg, tap)),
        }
    }

    /// The endpoint's tables, for the control plane (BGP EVPN) and the
    /// views.
    pub fn endpoint(&self) -> &Arc<Vtep> {
        &self.vtep
    }
}

impl Device for VxlanPort {
    fn kind(&self) -> &'static str {
        self.underlay.kind()
    }
    fn name(&self) -> &str {
        self.underlay.name()
    }
    fn num_queues(&self) -> usize {
        self.underlay.num_queues()
    }
    fn active_queues(&self) -> usize {
        self.underlay.active_queues()
    }
    /// An endpoint is the physical side, whatever its underlay.
    fn faces_wire(&self) -> bool {
        true
    }
    fn caps(&self) -> Caps {
        self.underlay.caps()
    }
    fn set_offloads(&self, csum: bool, tso: bool) -> Result<(), String> {
        self.underlay.set_offloads(csum, tso)
    }
    fn notify_changes(&self, counter: Arc<AtomicU64>) {
        self.underlay.notify_changes(counter)
    }
    fn link(&self) -> Link {
        self.underlay.link()
    }
    fn wait_link(&self, q: usize, timeout: Duration) {
        self.underlay.wait_link(q, timeout)
    }
    fn status(&self) -> DeviceStatus {
        self.underlay.status()
    }
    fn filters(&self) -> Option<Filters> {
        self.underlay.filters()
    }
    fn set_filters(&self, f: Filters) -> Result<(), String> {
        self.underlay.set_filters(f)
    }
    /// The endpoint's TAP goes with the port at once (an uplink added
    /// again later makes its own); the underlay closes what it closes.
    fn close(&self) {
        self.vtep.close_tap();
        self.underlay.close();
    }
    fn overhead(&self) -> usize {
        if self.vtep.cfg.local.is_ipv6() {
            OUTER_LEN_V6
        } else {
            OUTER_LEN
        }
    }

    fn receiver(self: Arc<Self>, q: usize) -> Box<dyn Receiver> {
        Box::new(VxlanReceiver {
            rx: Arc::clone(&self.underlay).receiver(q),
            tx: None,
            underlay: Arc::clone(&self.underlay),
            vtep: Arc::clone(&self.vtep),
            q,
            read: Vec::new(),
            next_solicit: Instant::now(),
            marks: Vec::new(),
        })
    }

    fn transmitter(self: Arc<Self>, q: usize, opts: TxOptions) -> Box<dyn Transmitter> {
        Box::new(VxlanTransmitter {
            tx: Arc::clone(&self.underlay).transmitter(q, opts),
            vtep: Arc::clone(&self.vtep),
            scratch: TunnelScratch::default(),
        })
    }
}

/// One queue of the endpoint, read: the underlay's frames, decapsulated.
struct VxlanReceiver {
    rx: Box<dyn Receiver>,
    /// The underlay's transmitter for this queue, for the endpoint's own
    /// frames (ARP), made when first needed.
    tx: Option<Box<dyn Transmitter>>,
    underlay: Arc<dyn Device>,
    vtep: Arc<Vtep>,
    q: usize,
    /// What the underlay's receiver read, before decapsulation.
    read: Vec<Result<Packet, RecvError>>,
    next_solicit: Instant,
    /// The last batch's frames marked for a trace.
    marks: Vec<TraceMark>,
}

impl VxlanReceiver {
    fn tx(&mut self) -> &mut dyn Transmitter {
        let (underlay, q) = (&self.underlay, self.q);
        &mut **self
            .tx
            .get_or_insert_with(|| Arc::clone(underlay).transmitter(q, TxOptions::default()))
    }
}

impl Receiver for VxlanReceiver {
    fn recv_batch(
        &mut self,
        pool: &mut Pool,
        max: usize,
        out: &mut Vec<Result<Packet, RecvError>>,
    ) -> Result<(), RecvError> {
        let mut read = std::mem::take(&mut self.read);
        let end = self.rx.recv_batch(pool, max, &mut read);
        let now = Instant::now();
        self.marks.clear();
        for r in read.drain(..) {
            let r = r.and_then(|pkt| match self.vtep.receive(pkt, now) {
                Received::Inner(inner) => Ok(inner),
                Received::Traced(inner, mark, remote) => {
                    self.marks.push(TraceMark {
                        index: out.len(),
                        token: mark.token,
                        synthetic: mark.kind == hvnet_offload::vxlan::MARK_SYNTHETIC,
                    });
                    self.vtep.marked_from(mark.token, remote);
                    Ok(inner)
                }
                Received::Report => Err(RecvError::Consumed),
                Received::Neighbour(reply) => {
                    if let Some(reply) = reply {
                        // A reply that cannot be written now is asked for
                        // again.
                        let vtep = Arc::clone(&self.vtep);
                        vtep.send_reply(self.tx(), &reply);
                    }
                    Err(RecvError::Consumed)
                }
                Received::Drop(why) => Err(why.into()),
            });
            out.push(r);
        }
        self.read = read;
        end
    }

    fn wait_fd(&self) -> RawFd {
        self.rx.wait_fd()
    }
    fn woken(&mut self) {
        self.rx.woken()
    }
    fn poll(&mut self, budget: Duration) -> bool {
        self.rx.poll(budget)
    }
    fn rearm(&mut self) -> bool {
        self.rx.rearm()
    }
    fn kernel_drops(&mut self) -> u64 {
        self.rx.kernel_drops()
    }
    fn release(&mut self, pool: &mut Pool) {
        self.rx.release(pool)
    }

    /// The first queue resolves the endpoint's peers.
    fn ticks(&self) -> bool {
        self.q == 0
    }

    fn tick(&mut self, now: Instant) {
        if now >= self.next_solicit || self.vtep.take_flood_changed() {
            let vtep = Arc::clone(&self.vtep);
            vtep.solicit(self.tx());
            self.next_solicit = now + SOLICIT_EVERY;
        }
    }

    fn trace_marks(&mut self, out: &mut Vec<TraceMark>) {
        out.append(&mut self.marks);
    }

    fn report_trace(&mut self, token: u16, payload: &[u8]) {
        let vtep = Arc::clone(&self.vtep);
        vtep.send_report(self.tx(), token, payload);
    }
}

/// One queue of the endpoint, written: each frame encapsulated to the
/// remotes it goes to.
struct VxlanTransmitter {
    tx: Box<dyn Transmitter>,
    vtep: Arc<Vtep>,
    scratch: TunnelScratch,
}

impl Transmitter for VxlanTransmitter {
    fn send_batch(
        &mut self,
        frames: &[OutFrame<'_>],
        how: BatchOptions,
        done: &mut dyn FnMut(Result<Written, SendError>),
    ) {
        for f in frames {
            done(self.vtep.send(&mut *self.tx, f, how, &mut self.scratch));
        }
    }

    fn flush(&mut self) {
        self.tx.flush()
    }

    fn send_traced(
        &mut self,
        pkt: &Packet,
        mark: hvnet_offload::vxlan::OuterMark,
    ) -> Option<Result<String, SendError>> {
        Some(self.vtep.send_marked(&mut *self.tx, pkt, mark))
    }
}
