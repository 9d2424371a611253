//! The virtqueue engine alone: frames from one guest's transmit ring to
//! another guest's receive ring (mergeable buffers), bursts of 32, both
//! rings in memory, split or packed, the guests' drivers reduced to
//! moving their indices (split) or marking the burst's descriptors
//! available again (packed, as a driver must). Beside it, the same loop
//! over `virtio-queue` 0.18 (the crate the engine replaced; split rings
//! only), so a regression of either shows without root or guests. And
//! frames that need a large buffer (9000 B, 32 KiB), copied twice
//! (through a buffer) or once (their payload left in the sender's memory
//! and copied from there into the receiver's: one copy guest to guest).
//! Run: `cargo bench -p hvnet-port --bench virtqueue`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use hvnet_port::virtq::{self, GuestMemoryMmap, Layout};
use hvnet_port::{check, Home, Pool, PoolCaps, SizeClass, HEADROOM, VNET_HDR_LEN};
use std::io::IoSlice;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress};

const SIZE: u16 = 256;
const BURST: usize = 32;
const TX: u64 = 0x0;
const RX: u64 = 0x4000;
const TX_BUFS: u64 = 0x10_0000;
const RX_BUFS: u64 = 0x20_0000;
const BUF: u64 = 0x800;

/// Two guests' rings: a transmit ring whose chains each hold `frame`,
/// and a receive ring of buffers as long as the layout's; every
/// descriptor `i` is posted as head `i`, so a driver re-posts by moving
/// its available index.
struct Rings {
    mem: std::sync::Arc<GuestMemoryMmap>,
    tx: Queue,
    rx: Queue,
    tx_avail: u16,
    rx_avail: u16,
}

/// Where a [`Rings`] lays its buffers: ring size, each side's buffers
/// and their size, the memory's.
struct Lay {
    size: u16,
    tx_bufs: u64,
    rx_bufs: u64,
    buf: u64,
    memory: usize,
}

/// 2 KiB buffers, a ring of 256.
const SMALL: Lay = Lay {
    size: SIZE,
    tx_bufs: TX_BUFS,
    rx_bufs: RX_BUFS,
    buf: BUF,
    memory: 0x40_0000,
};

/// 64 KiB buffers, a ring of 64.
const LARGE: Lay = Lay {
    size: 64,
    tx_bufs: 0x10_0000,
    rx_bufs: 0x80_0000,
    buf: 0x1_0000,
    memory: 0x100_0000,
};

fn queue(base: u64) -> Queue {
    let mut q = Queue::new(SIZE).unwrap();
    q.set_size(SIZE);
    q.set_desc_table_address(Some(base as u32), Some(0));
    q.set_avail_ring_address(Some((base + 0x1000) as u32), Some(0));
    q.set_used_ring_address(Some((base + 0x2000) as u32), Some(0));
    q.set_ready(true);
    q
}

fn desc(mem: &GuestMemoryMmap, table: u64, i: u16, addr: u64, len: u32, flags: u16) {
    let mut raw = [0u8; 16];
    raw[..8].copy_from_slice(&addr.to_le_bytes());
    raw[8..12].copy_from_slice(&len.to_le_bytes());
    raw[12..14].copy_from_slice(&flags.to_le_bytes());
    mem.write_slice(&raw, GuestAddress(table + 16 * u64::from(i)))
        .unwrap();
}

impl Rings {
    fn new(frame: &[u8], lay: &Lay) -> Rings {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), lay.memory)]).unwrap();
        for i in 0..lay.size {
            let at = lay.tx_bufs + lay.buf * u64::from(i);
            mem.write_slice(frame, GuestAddress(at)).unwrap();
            desc(&mem, TX, i, at, frame.len() as u32, 0);
            desc(
                &mem,
                RX,
                i,
                lay.rx_bufs + lay.buf * u64::from(i),
                lay.buf as u32,
                2,
            );
            for base in [TX, RX] {
                mem.write_obj(
                    i.to_le(),
                    GuestAddress(base + 0x1000 + 4 + 2 * u64::from(i)),
                )
                .unwrap();
            }
        }
        let sized = |base| {
            let mut q = queue(base);
            q.set_size(lay.size);
            q
        };
        Rings {
            mem: std::sync::Arc::new(mem),
            tx: sized(TX),
            rx: sized(RX),
            tx_avail: 0,
            rx_avail: 0,
        }
    }

    /// The guests post a burst: the sender's frames, the receiver's
    /// buffers.
    fn post(&mut self) {
        self.tx_avail = self.tx_avail.wrapping_add(BURST as u16);
        self.rx_avail = self.rx_avail.wrapping_add(BURST as u16);
        self.mem
            .write_obj(self.tx_avail.to_le(), GuestAddress(TX + 0x1002))
            .unwrap();
        self.mem
            .write_obj(self.rx_avail.to_le(), GuestAddress(RX + 0x1002))
            .unwrap();
    }
}

/// A frame of `len` bytes behind a virtio-net header.
fn frame(len: usize) -> Vec<u8> {
    let mut f = vec![0u8; VNET_HDR_LEN];
    let payload = len - 54;
    f.extend(hvnet_offload::testutil::tcp4_frame(1, 1, payload, 0x18));
    f
}

/// Two guests' packed rings: every slot `i` a buffer of its own (the
/// sender's holding `frame`), made available again a burst at a time.
struct PackedRings {
    mem: GuestMemoryMmap,
    tx: Queue,
    rx: Queue,
    /// The drivers' next slot and wrap counter.
    tx_pos: (u16, bool),
    rx_pos: (u16, bool),
    frame_len: u32,
}

impl PackedRings {
    fn new(frame: &[u8]) -> PackedRings {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
        for i in 0..SIZE {
            mem.write_slice(frame, GuestAddress(TX_BUFS + BUF * u64::from(i)))
                .unwrap();
        }
        let mut tx = queue(TX);
        let mut rx = queue(RX);
        // Index 0, wrap counter 1: a fresh packed ring.
        tx.set_next_avail(1 << 15);
        rx.set_next_avail(1 << 15);
        PackedRings {
            mem,
            tx,
            rx,
            tx_pos: (0, true),
            rx_pos: (0, true),
            frame_len: frame.len() as u32,
        }
    }

    /// A driver makes `BURST` descriptors available from `pos`.
    fn post_ring(
        mem: &GuestMemoryMmap,
        ring: u64,
        bufs: u64,
        pos: &mut (u16, bool),
        len: u32,
        write: bool,
    ) {
        for _ in 0..BURST {
            let (slot, wrap) = *pos;
            let flags: u16 = if write { 2 } else { 0 } | if wrap { 1 << 7 } else { 1 << 15 };
            let mut raw = [0u8; 16];
            raw[..8].copy_from_slice(&(bufs + BUF * u64::from(slot)).to_le_bytes());
            raw[8..12].copy_from_slice(&len.to_le_bytes());
            raw[12..14].copy_from_slice(&slot.to_le_bytes());
            raw[14..16].copy_from_slice(&flags.to_le_bytes());
            mem.write_slice(&raw, GuestAddress(ring + 16 * u64::from(slot)))
                .unwrap();
            *pos = if slot + 1 == SIZE {
                (0, !wrap)
            } else {
                (slot + 1, wrap)
            };
        }
    }

    fn post(&mut self) {
        Self::post_ring(
            &self.mem,
            TX,
            TX_BUFS,
            &mut self.tx_pos,
            self.frame_len,
            false,
        );
        Self::post_ring(&self.mem, RX, RX_BUFS, &mut self.rx_pos, BUF as u32, true);
    }
}

type Frames = Vec<Result<hvnet_port::Packet, hvnet_port::RecvError>>;

/// hvnet's engine: a burst read, checked, written into the other ring.
fn hvnet_burst(r: &mut Rings, pool: &mut Pool, out: &mut Frames) {
    r.post();
    engine_burst(&r.mem, &mut r.tx, &mut r.rx, Layout::Split, pool, out);
}

/// The same on packed rings.
fn hvnet_burst_packed(r: &mut PackedRings, pool: &mut Pool, out: &mut Frames) {
    r.post();
    engine_burst(&r.mem, &mut r.tx, &mut r.rx, Layout::Packed, pool, out);
}

fn engine_burst(
    mem: &GuestMemoryMmap,
    tx: &mut Queue,
    rx: &mut Queue,
    layout: Layout,
    pool: &mut Pool,
    out: &mut Frames,
) {
    let old = virtq::used_mark(rx, layout);
    let burst = virtq::read_batch(tx, mem, layout, pool, BURST, out);
    black_box(burst.signal);
    let hdr = [0u8; VNET_HDR_LEN];
    let iovs: Vec<[IoSlice<'_>; 2]> = out
        .iter()
        .map(|p| {
            [
                IoSlice::new(&hdr),
                IoSlice::new(p.as_ref().unwrap().frame()),
            ]
        })
        .collect();
    let frames: Vec<&[IoSlice<'_>]> = iovs.iter().map(|f| &f[..]).collect();
    virtq::write_batch(rx, mem, layout, &frames, true, &mut |res| {
        res.unwrap();
    });
    black_box(virtq::wants_signal(rx, mem, layout, old));
    drop(frames);
    drop(iovs);
    out.clear();
}

/// The same loop over `virtio-queue`: a chain popped, its descriptors
/// copied into a buffer and checked, returned used one by one; each
/// frame written into a popped receive chain and added used.
fn virtio_queue_burst(r: &mut Rings, pool: &mut Pool, out: &mut Vec<hvnet_port::Packet>) {
    r.post();
    let mem = &*r.mem;
    while out.len() < BURST {
        let Some(chain) = r.tx.pop_descriptor_chain(mem) else {
            break;
        };
        let head = chain.head_index();
        let mut buf = pool.take(SizeClass::Small).unwrap();
        let mut at = 0;
        for d in chain {
            let len = d.len() as usize;
            mem.read_slice(&mut buf.storage_mut()[at..at + len], d.addr())
                .unwrap();
            at += len;
        }
        buf.set_len(at - HEADROOM);
        r.tx.add_used(mem, head, 0).unwrap();
        out.push(check(buf, at).unwrap());
    }
    black_box(r.tx.needs_notification(mem).unwrap());
    let hdr = [0u8; VNET_HDR_LEN];
    for p in out.iter() {
        let chain = r.rx.pop_descriptor_chain(mem).unwrap();
        let head = chain.head_index();
        let d = chain.into_iter().next().unwrap();
        mem.write_slice(&hdr, d.addr()).unwrap();
        mem.write_slice(p.frame(), GuestAddress(d.addr().0 + VNET_HDR_LEN as u64))
            .unwrap();
        mem.write_slice(&1u16.to_le_bytes(), GuestAddress(d.addr().0 + 10))
            .unwrap();
        r.rx.add_used(mem, head, (VNET_HDR_LEN + p.len()) as u32)
            .unwrap();
    }
    black_box(r.rx.needs_notification(mem).unwrap());
    out.clear();
}

fn ring_to_ring(c: &mut Criterion) {
    let mut g = c.benchmark_group("virtqueue_ring_to_ring");
    g.throughput(Throughput::Elements(BURST as u64));
    for len in [64usize, 1500] {
        let f = frame(len);
        let mut pool = Pool::new(Home::new(PoolCaps {
            small: 256,
            large: 4,
        }));
        let mut rings = Rings::new(&f, &SMALL);
        let mut out = Vec::with_capacity(BURST);
        g.bench_function(format!("hvnet_split/{len}B"), |b| {
            b.iter(|| hvnet_burst(&mut rings, &mut pool, &mut out))
        });
        let mut rings = PackedRings::new(&f);
        let mut out = Vec::with_capacity(BURST);
        g.bench_function(format!("hvnet_packed/{len}B"), |b| {
            b.iter(|| hvnet_burst_packed(&mut rings, &mut pool, &mut out))
        });
        let mut rings = Rings::new(&f, &SMALL);
        let mut out = Vec::with_capacity(BURST);
        g.bench_function(format!("virtio_queue/{len}B"), |b| {
            b.iter(|| virtio_queue_burst(&mut rings, &mut pool, &mut out))
        });
    }
    g.finish();
}

/// A burst of large frames through a buffer each: read whole, written
/// from the buffer.
fn large_two_copies(r: &mut Rings, pool: &mut Pool, out: &mut Frames) {
    r.post();
    engine_burst(&r.mem, &mut r.tx, &mut r.rx, Layout::Split, pool, out);
}

/// A burst of large frames copied once: heads into buffers, payloads
/// from the sender's memory straight into the receiver's, the sender's
/// chains given back after.
fn large_one_copy(r: &mut Rings, pool: &mut Pool, out: &mut Frames, held: &mut virtq::Held) {
    r.post();
    let mem = &r.mem;
    let burst = virtq::read_batch_leaving(&mut r.tx, mem, Layout::Split, pool, BURST, out, held);
    black_box(burst.signal);
    {
        let hdr = [0u8; VNET_HDR_LEN];
        let pkts: Vec<&hvnet_port::Packet> = out.iter().map(|p| p.as_ref().unwrap()).collect();
        let iovs: Vec<[IoSlice<'_>; 2]> = pkts
            .iter()
            .map(|p| [IoSlice::new(&hdr), IoSlice::new(p.buf.held())])
            .collect();
        let frames: Vec<&[IoSlice<'_>]> = iovs.iter().map(|f| &f[..]).collect();
        let tails: Vec<_> = pkts.iter().map(|p| p.buf.pending()).collect();
        virtq::write_batch_from(
            &mut r.rx,
            mem,
            Layout::Split,
            &frames,
            &tails,
            true,
            &mut |res| {
                res.unwrap();
            },
        );
    }
    out.clear();
    black_box(virtq::complete_batch(&mut r.tx, mem, Layout::Split, held));
}

fn large_frames(c: &mut Criterion) {
    let mut g = c.benchmark_group("virtqueue_large_frames");
    g.throughput(Throughput::Elements(BURST as u64));
    for len in [9000usize, 32768] {
        let f = frame(len);
        let mut pool = Pool::new(Home::new(PoolCaps {
            small: 64,
            large: 128,
        }));
        let mut rings = Rings::new(&f, &LARGE);
        let mut out = Vec::with_capacity(BURST);
        g.bench_function(format!("two_copies/{len}B"), |b| {
            b.iter(|| large_two_copies(&mut rings, &mut pool, &mut out))
        });
        let mut rings = Rings::new(&f, &LARGE);
        let mut held = virtq::Held::default();
        g.bench_function(format!("one_copy/{len}B"), |b| {
            b.iter(|| large_one_copy(&mut rings, &mut pool, &mut out, &mut held))
        });
    }
    g.finish();
}

criterion_group!(benches, ring_to_ring, large_frames);
criterion_main!(benches);
