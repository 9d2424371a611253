//! Delivery into a guest: the receive queue's delivery thread (the VM's
//! "vCPU"), and the batch writer it shares with ingress workers that
//! deliver an idle queue's frames themselves.
//!
//! Per item: a GSO frame for a guest that does not take it whole is
//! segmented, each segment written as it is made; every other frame is
//! prepared (partial checksums completed for a guest without checksum
//! offload, `DATA_VALID` for checksums hvnet verified) and written with
//! one vectored write — all of a batch in one system call with the
//! io_uring writer. Buffers go home as the items are dropped.

use crate::counters::{add, EgressCounters};
use crate::ring::{Consumer, Slot};
use crate::switch::{Port, PortSettings, RingItem, RxOverflow, Switch, BACKPRESSURE_WAIT, BATCH};
use crate::tunnel::{TunnelScratch, Vtep};
use hvnet_offload::gso::{self, CsumMode};
use hvnet_offload::{csum, CsumState, GsoInfo};
use hvnet_port::{Device, Packet, VhostUserPort, VirtqError, VNET_HDR_LEN};
use hvnet_sys::{BatchWriter, FrameQueue};
use std::io::{self, IoSlice};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Scratch space kept between batches, so delivering allocates nothing in
/// steady state.
#[derive(Default)]
pub(crate) struct Scratch {
    vnets: Vec<[u8; VNET_HDR_LEN]>,
    results: Vec<io::Result<usize>>,
    iov: Vec<IoSlice<'static>>,
    spans: Vec<(usize, usize)>,
    frames: Vec<&'static [IoSlice<'static>]>,
    /// Tunnelled GSO frames and their segments.
    tunnelled: TunnelScratch,
}

/// Where a receive queue's frames are written: a TAP or uplink queue's
/// descriptor, or a vhost-user guest's receive virtqueue.
#[derive(Clone, Copy)]
pub(crate) enum Out<'a> {
    Fd(&'a FrameQueue),
    Virtq(&'a VhostUserPort, usize),
}

/// Why a frame was not written.
enum WriteFail {
    /// The guest's receive virtqueue had no free buffer.
    RingFull,
    Error,
}

impl<'a> Out<'a> {
    /// Queue `q` of `dev`.
    pub(crate) fn of(dev: &'a Device, q: usize) -> Out<'a> {
        match dev {
            Device::VhostUser(v) => Out::Virtq(v, q),
            Device::Tap(t) => Out::Fd(t.queue(q)),
            Device::Uplink(u) => Out::Fd(u.sender(q)),
        }
    }

    /// Writes one frame given as I/O slices, virtio-net header first. A
    /// guest's full receive virtqueue is waited on (up to
    /// [`BACKPRESSURE_WAIT`]) when its port holds frames rather than drop
    /// them (`rx_overflow = "backpressure"`).
    fn write(self, iov: &[IoSlice<'_>], hold: bool) -> Result<(), WriteFail> {
        match self {
            Out::Fd(fq) => hvnet_port::write_frame(fq, iov).map_err(|_| WriteFail::Error),
            Out::Virtq(v, q) => {
                // The clock is read only once the ring was found full.
                let mut deadline = None;
                loop {
                    match v.write(q, iov) {
                        Ok(()) => return Ok(()),
                        Err(VirtqError::RingFull) if hold => {
                            let now = std::time::Instant::now();
                            let end = *deadline.get_or_insert(now + BACKPRESSURE_WAIT);
                            let left = end.saturating_duration_since(now);
                            if left.is_zero() || !v.wait_for_room(q, left) {
                                return Err(WriteFail::RingFull);
                            }
                        }
                        Err(VirtqError::RingFull) => return Err(WriteFail::RingFull),
                        Err(_) => return Err(WriteFail::Error),
                    }
                }
            }
        }
    }

    /// Writes a header and a frame's pieces.
    fn send(
        self,
        vnet: &hvnet_wire::virtio_net::Repr,
        pieces: &[&[u8]],
        hold: bool,
    ) -> Result<(), WriteFail> {
        let hdr = hvnet_port::vnet_bytes(vnet);
        let mut iov: smallvec::SmallVec<[IoSlice<'_>; 64]> = smallvec::SmallVec::new();
        iov.push(IoSlice::new(&hdr));
        iov.extend(pieces.iter().map(|p| IoSlice::new(p)));
        self.write(&iov, hold)
    }

    /// After a batch: a vhost-user guest is told what it received (when
    /// its event index asks for it).
    fn done(self) {
        if let Out::Virtq(v, q) = self {
            v.signal(q, true);
        }
    }
}

/// The delivery thread of one guest receive queue.
pub(crate) fn deliver_loop(sw: &Switch, port: &Port, q: usize) {
    let ring = &port.rxq[q].rings;
    ring.reset_use();
    let mut consumer = Consumer::attach(ring);
    let out = Out::of(&port.dev, q);
    let mut writer = match out {
        Out::Fd(fq) if sw.io.uring_write => BatchWriter::new(fq.file(), BATCH as u32).ok(),
        _ => None,
    };
    let c = &*ring.delivery;
    let mut batch: Vec<Slot<RingItem>> = Vec::with_capacity(BATCH);
    let mut scratch = Scratch::default();
    let mut gen = u64::MAX;
    let mut s = port.settings();
    while !sw.stopping() {
        consumer.pop_batch(ring, &mut batch, BATCH);
        if batch.is_empty() {
            consumer.wait(ring, Duration::from_millis(100));
            continue;
        }
        let now_gen = sw.settings_gen.load(Ordering::Acquire);
        if now_gen != gen {
            gen = now_gen;
            s = port.effective_settings();
        }
        let (r1, r2) = batch
            .iter()
            .fold((0, 0), |(a, b), x| (a + x.r1 as usize, b + x.r2 as usize));
        if port.is_up() {
            deliver_batch(
                out,
                port.tunnel.as_ref(),
                writer.as_mut(),
                c,
                &s,
                &mut batch,
                &mut scratch,
            );
        } else {
            for x in batch.drain(..) {
                add(&c.drop_port_down, x.item.sources());
            }
        }
        ring.release(r1, r2);
    }
    consumer.drain(ring, &mut batch);
    for x in batch.drain(..) {
        add(&c.drop_port_down, x.item.sources());
    }
}

/// Reuses a vector's allocation for references of another lifetime. It
/// must be empty; the in-place `collect` keeps the capacity.
fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().map(|_| unreachable!()).collect()
}

/// Delivers `items` into the guest through `out`, counting into `c`, and
/// empties `items`.
pub(crate) fn deliver_batch(
    out: Out<'_>,
    tunnel: Option<&Vtep>,
    writer: Option<&mut BatchWriter>,
    c: &EgressCounters,
    s: &PortSettings,
    items: &mut Vec<Slot<RingItem>>,
    scratch: &mut Scratch,
) {
    if let (Some(vtep), Out::Fd(fq)) = (tunnel, out) {
        for mut slot in items.drain(..) {
            vtep.deliver(fq, c, &mut slot.item, s.csum, &mut scratch.tunnelled);
        }
        return;
    }
    let vnets = &mut scratch.vnets;
    vnets.clear();
    for slot in items.iter_mut() {
        let vnet = match &mut slot.item {
            RingItem::Frame {
                segment: Some(_), ..
            } => [0u8; VNET_HDR_LEN],
            RingItem::Frame { pkt, segment: None } => prepare(pkt, s, c),
            RingItem::Coalesced(co) => {
                if !s.csum {
                    co.fill_checksums();
                }
                hvnet_port::vnet_bytes(&co.info.to_vnet(co.header().len() as u16))
            }
        };
        vnets.push(vnet);
    }
    let results = &mut scratch.results;
    results.clear();
    match writer {
        Some(w) => {
            let mut iov: Vec<IoSlice<'_>> = recycle(std::mem::take(&mut scratch.iov));
            let spans = &mut scratch.spans;
            spans.clear();
            for (slot, vnet) in items.iter().zip(vnets.iter()) {
                if matches!(
                    slot.item,
                    RingItem::Frame {
                        segment: Some(_),
                        ..
                    }
                ) {
                    continue;
                }
                let start = iov.len();
                push_iov(&mut iov, &slot.item, vnet);
                spans.push((start, iov.len()));
            }
            let mut frames: Vec<&[IoSlice<'_>]> = recycle(std::mem::take(&mut scratch.frames));
            frames.extend(spans.iter().map(|&(a, b)| &iov[a..b]));
            let ok = w.write_batch(&frames, results).is_ok();
            scratch.frames = recycle(frames);
            scratch.iov = recycle(iov);
            if !ok {
                // Nothing is written twice: a failed batch counts as failed
                // writes for the frames it did not report on.
                results.resize_with(scratch.spans.len(), || {
                    Err(io::Error::other("batched write failed"))
                });
            }
            // Results come in the order the frames were written.
            let mut written = results.drain(..);
            for slot in items.drain(..) {
                if let RingItem::Frame {
                    pkt,
                    segment: Some(g),
                } = &slot.item
                {
                    deliver_segmented(out, c, s, pkt, *g);
                    continue;
                }
                let r = match written.next() {
                    Some(Ok(_)) => Ok(()),
                    _ => Err(WriteFail::Error),
                };
                count(c, &slot.item, r);
            }
        }
        None => {
            for (slot, vnet) in items.drain(..).zip(vnets.iter()) {
                if let RingItem::Frame {
                    pkt,
                    segment: Some(g),
                } = &slot.item
                {
                    deliver_segmented(out, c, s, pkt, *g);
                    continue;
                }
                let mut iov: smallvec::SmallVec<[IoSlice<'_>; 96]> = smallvec::SmallVec::new();
                push_iov(&mut iov, &slot.item, vnet);
                let r = out.write(&iov, s.rx_overflow == RxOverflow::Backpressure);
                count(c, &slot.item, r);
            }
        }
    }
    out.done();
}

/// The virtio-net header for a frame, after completing its checksum if
/// the guest cannot.
fn prepare(pkt: &mut Packet, s: &PortSettings, c: &EgressCounters) -> [u8; VNET_HDR_LEN] {
    let info = &mut pkt.meta.offload;
    if let CsumState::Partial { start, offset } = info.csum {
        if !s.csum
            && info.gso.is_none()
            && csum::complete_partial(pkt.buf.frame_mut(), start, offset).is_ok()
        {
            add(&c.csum_completed, 1);
            pkt.meta.offload.csum = CsumState::Good;
        }
    }
    let info = pkt.meta.offload;
    if info.csum == CsumState::Good {
        add(&c.data_valid_frames, 1);
    }
    let hdr_len = info.gso.map_or(0, |_| pkt.header_len() as u16);
    hvnet_port::vnet_bytes(&info.to_vnet(hdr_len))
}

fn push_iov<'a>(iov: &mut impl Extend<IoSlice<'a>>, item: &'a RingItem, vnet: &'a [u8]) {
    iov.extend([IoSlice::new(vnet)]);
    match item {
        RingItem::Frame { pkt, .. } => iov.extend([IoSlice::new(pkt.frame())]),
        RingItem::Coalesced(co) => {
            iov.extend([IoSlice::new(co.header())]);
            iov.extend(co.segments.iter().map(|seg| IoSlice::new(seg.bytes())));
        }
    }
}

fn count(c: &EgressCounters, item: &RingItem, r: Result<(), WriteFail>) {
    let n = item.sources();
    match r {
        Ok(()) => {}
        Err(WriteFail::RingFull) => return add(&c.drop_virtqueue_full, n),
        Err(WriteFail::Error) => return add(&c.drop_write_error, n),
    }
    match item {
        RingItem::Frame { pkt, .. } => {
            add(&c.delivered_frames, 1);
            add(&c.delivered_bytes, pkt.len() as u64);
            add(&c.delivered_source_frames, 1);
            if pkt.meta.offload.gso.is_some() {
                add(&c.gso_intact_frames, 1);
            }
        }
        RingItem::Coalesced(co) => {
            let len = co.len() as u64;
            add(&c.delivered_frames, 1);
            add(&c.delivered_bytes, len);
            add(&c.delivered_source_frames, n);
            add(&c.lro_frames, 1);
            add(&c.lro_bytes, len);
            add(&c.lro_segments, n);
        }
    }
}

/// A GSO frame for a guest that does not take it whole: segmented on the
/// way in, each segment written as it is made.
fn deliver_segmented(out: Out<'_>, c: &EgressCounters, s: &PortSettings, pkt: &Packet, g: GsoInfo) {
    let mode = if s.csum {
        CsumMode::Partial
    } else {
        CsumMode::Full
    };
    let mut written = 0u64;
    let mut failed = None;
    let r = gso::segment_parsed(pkt.frame(), &pkt.meta.layers, g, mode, &mut |seg| {
        let vnet = seg.info.to_vnet(0);
        match out.send(
            &vnet,
            &[seg.header, seg.payload],
            s.rx_overflow == RxOverflow::Backpressure,
        ) {
            Ok(()) => {
                written += 1;
                add(
                    &c.delivered_bytes,
                    (seg.header.len() + seg.payload.len()) as u64,
                );
            }
            Err(e) => failed = Some(e),
        }
    });
    match (r, failed) {
        (_, Some(WriteFail::RingFull)) => add(&c.drop_virtqueue_full, 1),
        (Err(_), _) | (_, Some(WriteFail::Error)) => add(&c.drop_write_error, 1),
        (Ok(_), None) => {
            add(&c.segmented_frames, 1);
            add(&c.segments_out, written);
            add(&c.delivered_frames, written);
            add(&c.delivered_source_frames, 1);
        }
    }
}
