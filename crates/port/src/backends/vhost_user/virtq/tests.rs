use super::receive::NUM_BUFFERS_OFFSET;
use super::*;
use crate::packet::Packet;
use crate::pool::Pool;
use crate::pool::{Home, PoolCaps};
use crate::vnet::{RecvError, VNET_HDR_LEN};
use std::io::IoSlice;
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use virtio_queue::Queue;
use virtio_queue::QueueT;
use vm_memory::{Address, Bytes, GuestAddress};

const NEXT: u16 = VRING_DESC_F_NEXT as u16;
const WRITE: u16 = VRING_DESC_F_WRITE as u16;
const BUF: u64 = 0x10_0000;

fn memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x20_0000)]).unwrap()
}

fn d(addr: u64, len: u32, flags: u16, next: u16) -> RawDescriptor {
    RawDescriptor::from(Descriptor::new(addr, len, flags, next))
}

fn pool() -> Pool {
    Pool::new(Home::new(PoolCaps { small: 8, large: 2 }))
}

/// TCP frames of the given payload lengths, frame `i` numbered `i`, each
/// behind a zeroed virtio-net header.
fn numbered_frames(lens: impl Iterator<Item = usize>) -> Vec<Vec<u8>> {
    lens.enumerate()
        .map(|(i, len)| {
            let mut f = vec![0u8; VNET_HDR_LEN];
            f.extend(hvnet_offload::testutil::tcp4_frame(
                i as u32, i as u16, len, 0x18,
            ));
            f
        })
        .collect()
}

/// A TCP frame behind a zeroed virtio-net header.
fn frame() -> Vec<u8> {
    let mut f = vec![0u8; VNET_HDR_LEN];
    f.extend(hvnet_offload::testutil::tcp4_frame(1, 1, 100, 0x18));
    f
}

#[test]
fn a_transmit_chain_in_two_pieces_becomes_one_checked_frame() {
    let mem = memory();
    let vq = MockSplitQueue::new(&mem, 16);
    let bytes = frame();
    mem.write_slice(&bytes[..VNET_HDR_LEN], GuestAddress(BUF))
        .unwrap();
    mem.write_slice(&bytes[VNET_HDR_LEN..], GuestAddress(BUF + 0x1000))
        .unwrap();
    vq.add_desc_chains(
        &[
            d(BUF, VNET_HDR_LEN as u32, NEXT, 1),
            d(BUF + 0x1000, (bytes.len() - VNET_HDR_LEN) as u32, 0, 0),
        ],
        0,
    )
    .unwrap();
    let mut q: Queue = vq.create_queue().unwrap();
    let mut p = pool();
    let pkt = read_frame(&mut q, &mem, &mut p).unwrap();
    assert_eq!(pkt.frame(), &bytes[VNET_HDR_LEN..]);
    assert_eq!(q.next_used(), 1);
    assert!(matches!(
        read_frame(&mut q, &mem, &mut p),
        Err(RecvError::WouldBlock)
    ));
}

#[test]
fn a_frame_with_no_buffer_free_stays_on_the_ring() {
    let mem = memory();
    let vq = MockSplitQueue::new(&mem, 16);
    let bytes = frame();
    mem.write_slice(&bytes, GuestAddress(BUF)).unwrap();
    vq.add_desc_chains(&[d(BUF, bytes.len() as u32, 0, 0)], 0)
        .unwrap();
    let mut q: Queue = vq.create_queue().unwrap();
    let mut none = Pool::new(Home::new(PoolCaps { small: 0, large: 0 }));
    assert!(matches!(
        read_frame(&mut q, &mem, &mut none),
        Err(RecvError::NoBuffer)
    ));
    assert_eq!((q.next_avail(), q.next_used()), (0, 0));
    let pkt = read_frame(&mut q, &mem, &mut pool()).unwrap();
    assert_eq!(pkt.frame(), &bytes[VNET_HDR_LEN..]);
    assert_eq!(q.next_used(), 1);
}

#[test]
fn hostile_transmit_chains_are_refused_and_given_back() {
    let mem = memory();
    let vq = MockSplitQueue::new(&mem, 16);
    vq.add_desc_chains(
        &[
            // Outside guest memory.
            d(0x4000_0000, 64, 0, 0),
            // Device-writable on the transmit side.
            d(BUF, 64, WRITE, 0),
            // Longer than any frame.
            d(BUF, 0x10_0000, 0, 0),
        ],
        0,
    )
    .unwrap();
    let mut q: Queue = vq.create_queue().unwrap();
    let mut p = pool();
    // Each refused for what is wrong with it (each its own drop reason).
    for want in [
        DescriptorFault::Memory,
        DescriptorFault::Direction,
        DescriptorFault::TooLong,
    ] {
        match read_frame(&mut q, &mem, &mut p) {
            Err(RecvError::BadDescriptor(f)) => assert_eq!(f, want),
            other => panic!("{want:?}: {other:?}"),
        }
    }
    assert_eq!(q.next_used(), 3, "every chain goes back used");
    drop(p);
}

#[test]
fn a_looping_chain_ends() {
    let mem = memory();
    let vq = MockSplitQueue::new(&mem, 4);
    // Descriptor 0 points at itself: the chain's time to live (the
    // queue size) ends it.
    vq.desc_table().store(0, d(BUF, 16, NEXT, 0)).unwrap();
    vq.avail().ring().ref_at(0).unwrap().store(0u16.to_le());
    vq.avail().idx().store(1u16.to_le());
    let mut q: Queue = vq.create_queue().unwrap();
    let r = read_frame(&mut q, &mem, &mut pool());
    // At most the queue size of descriptors was read, and the chain
    // went back.
    if let Ok(p) = r {
        assert!(p.len() + VNET_HDR_LEN <= 4 * 16);
    }
    assert_eq!(q.next_used(), 1);
}

#[test]
fn a_frame_spans_mergeable_buffers_with_their_count_in_the_header() {
    let mem = memory();
    let vq = MockSplitQueue::new(&mem, 16);
    vq.add_desc_chains(
        &[
            d(BUF, 1024, WRITE, 0),
            d(BUF + 0x1000, 1024, WRITE, 0),
            d(BUF + 0x2000, 1024, WRITE, 0),
        ],
        0,
    )
    .unwrap();
    let mut q: Queue = vq.create_queue().unwrap();
    let data: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
    let hdr = [0u8; VNET_HDR_LEN];
    write_frame(
        &mut q,
        &mem,
        &[IoSlice::new(&hdr), IoSlice::new(&data)],
        true,
    )
    .unwrap();
    assert_eq!(q.next_used(), 3);
    // The three chains are published with the used index moved once,
    // in order, with what each holds.
    let used = GuestAddress(q.used_ring());
    let idx: u16 = mem.read_obj(used.unchecked_add(2)).unwrap();
    assert_eq!(u16::from_le(idx), 3);
    for (i, want) in [(0u32, 1024u32), (1, 1024), (2, 2512 - 2048)] {
        let e: [u32; 2] = mem.read_obj(used.unchecked_add(4 + 8 * i as u64)).unwrap();
        assert_eq!((u32::from_le(e[0]), u32::from_le(e[1])), (i, want));
    }
    let mut n = [0u8; 2];
    mem.read_slice(&mut n, GuestAddress(BUF + NUM_BUFFERS_OFFSET))
        .unwrap();
    assert_eq!(u16::from_le_bytes(n), 3);
    let mut got = vec![0u8; 3072];
    for i in 0..3 {
        mem.read_slice(
            &mut got[i * 1024..(i + 1) * 1024],
            GuestAddress(BUF + 0x1000 * i as u64),
        )
        .unwrap();
    }
    assert_eq!(&got[VNET_HDR_LEN..VNET_HDR_LEN + 2500], &data[..]);
}

#[test]
fn a_full_ring_takes_nothing_and_a_short_buffer_is_refused() {
    let mem = memory();
    let vq = MockSplitQueue::new(&mem, 16);
    vq.add_desc_chains(&[d(BUF, 1024, WRITE, 0)], 0).unwrap();
    let mut q: Queue = vq.create_queue().unwrap();
    let data = vec![7u8; 3000];
    let hdr = [0u8; VNET_HDR_LEN];
    let iov = [IoSlice::new(&hdr), IoSlice::new(&data)];
    // Mergeable, but one 1 KiB buffer for 3 KiB: the ring is full, and
    // the buffer stays available for a smaller frame.
    assert!(matches!(
        write_frame(&mut q, &mem, &iov, true),
        Err(VirtqError::RingFull)
    ));
    assert_eq!((q.next_avail(), q.next_used()), (0, 0));
    // Not mergeable: the one buffer is too small for the frame.
    assert!(matches!(
        write_frame(&mut q, &mem, &iov, false),
        Err(VirtqError::TooSmall)
    ));
    // A read-only receive buffer is refused.
    vq.add_desc_chains(&[d(BUF, 4096, 0, 0)], 1).unwrap();
    assert!(matches!(
        write_frame(&mut q, &mem, &iov, true),
        Err(VirtqError::BadDescriptor(DescriptorFault::Direction))
    ));
}

/// `n` one-descriptor transmit chains, frame `i` with `i` in its
/// first payload byte (a hostile one where `bad` says).
fn post(vq: &MockSplitQueue<'_, GuestMemoryMmap>, mem: &GuestMemoryMmap, n: usize, bad: &[bool]) {
    let chains: Vec<RawDescriptor> = (0..n)
        .map(|i| {
            let mut f = frame();
            f[VNET_HDR_LEN + 54] = i as u8;
            let at = 0x18_0000 + 0x800 * i as u64;
            mem.write_slice(&f, GuestAddress(at)).unwrap();
            // Device-writable: a transmit chain the guest may not post.
            let flags = if bad.get(i).copied().unwrap_or(false) {
                WRITE
            } else {
                0
            };
            d(at, f.len() as u32, flags, 0)
        })
        .collect();
    if n > 0 {
        vq.add_desc_chains(&chains, 0).unwrap();
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
    /// Batches over a ring of `n` chains, `max` per batch, with a
    /// buffer cap that may run out mid-batch: every chain is taken
    /// once, in order (a frame or a refusal), the used index follows
    /// exactly what was taken, a batch that finds nothing takes
    /// nothing, and a chain left for want of a buffer is taken later.
    #[test]
    fn prop_batches_take_every_chain_once_in_order(
        n in 0usize..40,
        max in 1usize..70,
        cap in 0usize..12,
        bad in proptest::collection::vec(proptest::bool::weighted(0.2), 40),
    ) {
        let mem = memory();
        let vq = MockSplitQueue::new(&mem, 64);
        post(&vq, &mem, n, &bad);
        let mut q: Queue = vq.create_queue().unwrap();
        // The mock lays its used ring over the end of a 64-entry
        // available ring; a driver would not.
        q.set_used_ring_address(Some(0x1000), Some(0));
        let mut small = Pool::new(Home::new(PoolCaps { small: cap, large: 0 }));
        let mut out = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..200 {
            let ReadBurst { taken, end, .. } = read_batch(&mut q, &mem, Layout::Split, &mut small, max, &mut out);
            proptest::prop_assert_eq!(taken, out.len());
            proptest::prop_assert!(taken <= max);
            proptest::prop_assert_eq!(q.next_used() as usize, seen.len() + taken);
            for r in out.drain(..) {
                seen.push(r.map(|p| p.frame()[54]).ok());
            }
            match end {
                Ok(()) => proptest::prop_assert_eq!(taken, max),
                Err(RecvError::WouldBlock) => break,
                // The buffers went with the frames: a later batch,
                // with a fresh pool, takes the chain left behind.
                Err(RecvError::NoBuffer) => {
                    proptest::prop_assert!(seen.len() < n);
                    small = Pool::new(Home::new(PoolCaps { small: cap.max(1), large: 0 }));
                }
                Err(e) => proptest::prop_assert!(false, "{e}"),
            }
        }
        let want: Vec<Option<u8>> = (0..n).map(|i| (!bad[i]).then_some(i as u8)).collect();
        proptest::prop_assert_eq!(seen, want);
        // Nothing new: nothing taken, nothing used.
        let ReadBurst { taken, end, .. } = read_batch(&mut q, &mem, Layout::Split, &mut pool(), max, &mut out);
        proptest::prop_assert_eq!(taken, 0);
        proptest::prop_assert!(matches!(end, Err(RecvError::WouldBlock)));
        proptest::prop_assert_eq!(q.next_used() as usize, n);
    }
}

/// A posted chain: its descriptor slots, and its buffers (address,
/// length).
type Posted = (Vec<u16>, Vec<(u64, u32)>);

/// A guest's driver over a small split ring laid out by hand, so that
/// its indices start anywhere (wrap-around of the 16-bit indices and of
/// the ring's slots): it posts chains (direct, in pieces, or through an
/// indirect table) and takes used elements back, checking them.
struct Driver {
    size: u16,
    avail_idx: u16,
    used_seen: u16,
    /// Descriptor slots free; what each posted head holds.
    free: Vec<u16>,
    posted: std::collections::HashMap<u16, Posted>,
    next_buf: u64,
}

const DESC: u64 = 0x0;
const AVAIL: u64 = 0x1000;
const USED: u64 = 0x2000;
const INDIRECT: u64 = 0x3000;

impl Driver {
    fn new(mem: &GuestMemoryMmap, size: u16, start: u16) -> (Driver, Queue) {
        let mut q = Queue::new(size).unwrap();
        q.set_size(size);
        q.set_desc_table_address(Some(DESC as u32), Some(0));
        q.set_avail_ring_address(Some(AVAIL as u32), Some(0));
        q.set_used_ring_address(Some(USED as u32), Some(0));
        q.set_next_avail(start);
        q.set_next_used(start);
        q.set_ready(true);
        mem.write_obj(start.to_le(), GuestAddress(AVAIL + 2))
            .unwrap();
        mem.write_obj(start.to_le(), GuestAddress(USED + 2))
            .unwrap();
        let d = Driver {
            size,
            avail_idx: start,
            used_seen: start,
            free: (0..size).rev().collect(),
            posted: Default::default(),
            next_buf: 0x10_0000,
        };
        (d, q)
    }

    fn desc(mem: &GuestMemoryMmap, table: u64, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let raw = RawDescriptor::from(Descriptor::new(addr, len, flags, next));
        mem.write_obj(raw, GuestAddress(table + 16 * u64::from(i)))
            .unwrap();
    }

    /// Posts one chain of `pieces` buffers holding `bytes` (read-only)
    /// or `bytes.len()` bytes of room (`write`); false when the table is
    /// full.
    fn post(
        &mut self,
        mem: &GuestMemoryMmap,
        bytes: &[u8],
        pieces: usize,
        indirect: bool,
        write: bool,
    ) -> bool {
        let slots = if indirect { 1 } else { pieces };
        if self.free.len() < slots {
            return false;
        }
        let taken: Vec<u16> = (0..slots).map(|_| self.free.pop().unwrap()).collect();
        let head = taken[0];
        let cut = bytes.len().div_ceil(pieces).max(1);
        let mut bufs = Vec::new();
        for (k, piece) in bytes.chunks(cut).enumerate() {
            let at = self.next_buf;
            self.next_buf = (self.next_buf + 0x1000) % 0x40_0000;
            self.next_buf = self.next_buf.max(0x10_0000);
            mem.write_slice(piece, GuestAddress(at)).unwrap();
            bufs.push((at, piece.len() as u32));
            let _ = k;
        }
        let flags = if write { WRITE } else { 0 };
        let (table, ids): (u64, Vec<u16>) = if indirect {
            let table = INDIRECT + 0x100 * u64::from(head);
            Driver::desc(mem, DESC, head, table, 16 * bufs.len() as u32, 4, 0);
            (table, (0..bufs.len() as u16).collect())
        } else {
            (DESC, taken.clone())
        };
        for (k, &(at, len)) in bufs.iter().enumerate() {
            let last = k + 1 == bufs.len();
            let next = if last { 0 } else { ids[k + 1] };
            Driver::desc(
                mem,
                table,
                ids[k],
                at,
                len,
                flags | if last { 0 } else { NEXT },
                next,
            );
        }
        let slot = self.avail_idx % self.size;
        mem.write_obj(head.to_le(), GuestAddress(AVAIL + 4 + 2 * u64::from(slot)))
            .unwrap();
        self.avail_idx = self.avail_idx.wrapping_add(1);
        mem.write_obj(self.avail_idx.to_le(), GuestAddress(AVAIL + 2))
            .unwrap();
        self.posted.insert(head, (taken, bufs));
        true
    }

    /// The used elements published since the last call: each chain's
    /// buffers and the length the device wrote.
    fn reclaim(&mut self, mem: &GuestMemoryMmap) -> Vec<(Vec<(u64, u32)>, u32)> {
        let idx = u16::from_le(mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap());
        let mut out = Vec::new();
        while self.used_seen != idx {
            let slot = self.used_seen % self.size;
            let e: [u32; 2] = mem
                .read_obj(GuestAddress(USED + 4 + 8 * u64::from(slot)))
                .unwrap();
            let (slots, bufs) = self
                .posted
                .remove(&(u32::from_le(e[0]) as u16))
                .expect("a posted head");
            self.free.extend(slots);
            out.push((bufs, u32::from_le(e[1])));
            self.used_seen = self.used_seen.wrapping_add(1);
        }
        out
    }
}

fn read_bufs(mem: &GuestMemoryMmap, bufs: &[(u64, u32)], mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for &(at, len) in bufs {
        let k = n.min(len as usize);
        let mut b = vec![0u8; k];
        mem.read_slice(&mut b, GuestAddress(at)).unwrap();
        out.extend(b);
        n -= k;
    }
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Frames through a 16-entry transmit ring whose indices start
    /// anywhere: chains in one to three pieces, direct or through an
    /// indirect table, posted as room allows and read in bursts of any
    /// size, arrive whole and in order, and every chain comes back used
    /// exactly once.
    #[test]
    fn prop_transmit_ring_delivers_every_frame_in_order(
        start in proptest::num::u16::ANY,
        frames in proptest::collection::vec((1usize..1400, 1usize..4, proptest::bool::ANY), 1..60),
        bursts in proptest::collection::vec(1usize..20, 1..40),
    ) {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
        let (mut drv, mut q) = Driver::new(&mem, 16, start);
        let sent = numbered_frames(frames.iter().map(|&(len, _, _)| len));
        let (mut posted, mut got, mut used) = (0, Vec::new(), 0);
        let mut p = Pool::new(Home::new(PoolCaps { small: 4096, large: 4 }));
        for round in 0..2000 {
            while posted < sent.len() && drv.post(&mem, &sent[posted], frames[posted].1, frames[posted].2, false) {
                posted += 1;
            }
            let mut out = Vec::new();
            let max = bursts[round % bursts.len()];
            let burst = read_batch(&mut q, &mem, Layout::Split, &mut p, max, &mut out);
            proptest::prop_assert_eq!(burst.taken, out.len());
            for r in out {
                got.push(r.map(|pkt| pkt.frame().to_vec()).expect("a good frame"));
            }
            for (_, len) in drv.reclaim(&mem) {
                proptest::prop_assert_eq!(len, 0);
                used += 1;
            }
            if got.len() == sent.len() {
                break;
            }
        }
        proptest::prop_assert_eq!(used, sent.len());
        let want: Vec<Vec<u8>> = sent.iter().map(|f| f[VNET_HDR_LEN..].to_vec()).collect();
        proptest::prop_assert_eq!(got, want);
        proptest::prop_assert_eq!(q.next_avail(), start.wrapping_add(sent.len() as u16));
    }

    /// Frames written into a 16-entry receive ring whose indices start
    /// anywhere, into mergeable buffers of any size (eight of them hold
    /// the largest frame) posted direct or in pieces: the guest finds each frame whole in the buffers it is
    /// told of, `num_buffers` of them, in order; a frame that finds too
    /// few buffers waits and is written whole once more are posted.
    #[test]
    fn prop_receive_ring_fills_mergeable_buffers_in_order(
        start in proptest::num::u16::ANY,
        lens in proptest::collection::vec(1usize..3000, 1..40),
        room in 400usize..1600,
        pieces in 1usize..3,
    ) {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
        let (mut drv, mut q) = Driver::new(&mem, 16, start);
        let frames: Vec<Vec<u8>> = lens.iter().enumerate()
            .map(|(i, &n)| (0..n).map(|k| (i * 7 + k) as u8).collect())
            .collect();
        let hdr = [0u8; VNET_HDR_LEN];
        let (mut at, mut seen) = (0, Vec::new());
        let mut pending: Vec<(Vec<(u64, u32)>, u32)> = Vec::new();
        for _ in 0..4000 {
            while drv.post(&mem, &vec![0u8; room], pieces, false, true) {}
            if at < frames.len() {
                let iov = [IoSlice::new(&hdr), IoSlice::new(&frames[at])];
                match write_frame(&mut q, &mem, &iov, true) {
                    Ok(()) => at += 1,
                    Err(VirtqError::RingFull) => {}
                    Err(e) => proptest::prop_assert!(false, "{e}"),
                }
            }
            pending.extend(drv.reclaim(&mem));
            // A frame's first buffer says how many buffers it took.
            while let Some((first, len)) = pending.first().cloned() {
                let head = read_bufs(&mem, &first, VNET_HDR_LEN);
                let n = u16::from_le_bytes([head[10], head[11]]) as usize;
                proptest::prop_assert!(n >= 1);
                if pending.len() < n {
                    break;
                }
                let mut bytes = read_bufs(&mem, &first, len as usize);
                for (bufs, len) in &pending[1..n] {
                    bytes.extend(read_bufs(&mem, bufs, *len as usize));
                }
                pending.drain(..n);
                seen.push(bytes[VNET_HDR_LEN..].to_vec());
            }
            if seen.len() == frames.len() {
                break;
            }
        }
        proptest::prop_assert_eq!(seen, frames);
    }
}

// Packed rings (virtio 1.1, 2.8).

/// Descriptor flags of a packed ring.
const P_NEXT: u16 = 1;
const P_WRITE: u16 = 2;
const P_INDIRECT: u16 = 4;
const P_AVAIL: u16 = 1 << 7;
const P_USED: u16 = 1 << 15;
/// The wrap counter's bit in a position (index | wrap << 15).
const P_WRAP: u16 = 1 << 15;
/// Where the packed driver lays its ring and event suppression areas.
const RING: u64 = 0x0;
const DRIVER_EVENT: u64 = 0x1000;
const DEVICE_EVENT: u64 = 0x2000;
/// Event suppression flags (`desc_event_flags`).
const EVENT_ENABLE: u16 = 0;
const EVENT_DISABLE: u16 = 1;
const EVENT_DESC: u16 = 2;

/// A used descriptor as the driver reads it back.
#[derive(Debug)]
struct PackedUsed {
    id: u16,
    /// The buffers of the chain posted with that id.
    bufs: Vec<(u64, u32)>,
    /// Element length as written, and whether `WRITE` was set (without
    /// it the length is reserved and the driver reads none).
    len: u32,
    write: bool,
}

/// A guest's driver over a small packed ring laid out by hand, as the
/// virtio 1.1 spec's driver works it (Packed Virtqueues: Supplying
/// Buffers, Receiving Used Buffers): a chain in consecutive slots linked
/// by `NEXT`, the buffer id in every descriptor (as Linux writes it) or
/// only in the last (as the spec requires), `AVAIL` its wrap counter and
/// `USED` the inverse, the first descriptor's flags written last; an
/// indirect table as one slot. Used descriptors are read at its next
/// used slot and skip as many slots as the chain took. Its position
/// starts anywhere, with either wrap counter, so chains cross the ring's
/// end and the counters flip.
struct PackedDriver {
    size: u16,
    avail_at: u16,
    avail_wrap: bool,
    used_at: u16,
    used_wrap: bool,
    /// Slots not holding a posted chain.
    free_slots: u16,
    /// Buffer ids free (reused last-in first-out, so ids and slots
    /// part ways), and the slots and buffers of each id posted.
    free_ids: Vec<u16>,
    posted: std::collections::HashMap<u16, (u16, Vec<(u64, u32)>)>,
    next_buf: u64,
    /// The id only in a chain's last descriptor, the others holding
    /// another.
    id_in_last_only: bool,
}

impl PackedDriver {
    fn new(mem: &GuestMemoryMmap, size: u16, index: u16, wrap: bool) -> (PackedDriver, Queue) {
        let mut q = Queue::new(size).unwrap();
        q.set_size(size);
        q.set_desc_table_address(Some(RING as u32), Some(0));
        q.set_avail_ring_address(Some(DRIVER_EVENT as u32), Some(0));
        q.set_used_ring_address(Some(DEVICE_EVENT as u32), Some(0));
        let pos = index | if wrap { P_WRAP } else { 0 };
        q.set_next_avail(pos);
        q.set_next_used(pos);
        q.set_ready(true);
        // The ring as rounds before left it: the slots behind the
        // position used in this round, the others in the round before
        // (neither available nor, to the driver, newly used).
        for i in 0..size {
            let round = if i < index { wrap } else { !wrap };
            let stale = if round { P_AVAIL | P_USED } else { 0 };
            mem.write_obj(stale.to_le(), GuestAddress(RING + 16 * u64::from(i) + 14))
                .unwrap();
        }
        let d = PackedDriver {
            size,
            avail_at: index,
            avail_wrap: wrap,
            used_at: index,
            used_wrap: wrap,
            free_slots: size,
            free_ids: (0..size).rev().collect(),
            posted: Default::default(),
            next_buf: 0x10_0000,
            id_in_last_only: false,
        };
        (d, q)
    }

    /// The driver's position as the queue keeps it.
    fn pos(&self) -> u16 {
        self.avail_at | if self.avail_wrap { P_WRAP } else { 0 }
    }

    /// The id the next chain gets (an indirect table is placed by it).
    fn next_id(&self) -> u16 {
        *self.free_ids.last().unwrap()
    }

    fn table(id: u16) -> u64 {
        INDIRECT + 0x100 * u64::from(id)
    }

    /// Writes a descriptor's address, length and id; its flags apart.
    fn desc(mem: &GuestMemoryMmap, at: u64, addr: u64, len: u32, id: u16) {
        let mut raw = [0u8; 14];
        raw[0..8].copy_from_slice(&addr.to_le_bytes());
        raw[8..12].copy_from_slice(&len.to_le_bytes());
        raw[12..14].copy_from_slice(&id.to_le_bytes());
        mem.write_slice(&raw, GuestAddress(at)).unwrap();
    }

    fn flags(mem: &GuestMemoryMmap, at: u64, flags: u16) {
        mem.write_obj(flags.to_le(), GuestAddress(at + 14)).unwrap();
    }

    /// Makes `ring` (address, length, flags of its own: `NEXT`, `WRITE`,
    /// `INDIRECT`) available as one chain in consecutive slots, holding
    /// `bufs`; its id, or `None` when the ring has no room.
    fn post_raw(
        &mut self,
        mem: &GuestMemoryMmap,
        ring: &[(u64, u32, u16)],
        bufs: Vec<(u64, u32)>,
    ) -> Option<u16> {
        let slots = ring.len() as u16;
        if slots > self.free_slots || self.free_ids.is_empty() {
            return None;
        }
        let id = self.free_ids.pop().unwrap();
        let mut first = None;
        for (k, &(addr, len, flags)) in ring.iter().enumerate() {
            let at = RING + 16 * u64::from(self.avail_at);
            let flags = flags | if self.avail_wrap { P_AVAIL } else { P_USED };
            let last = k + 1 == ring.len();
            let id = if self.id_in_last_only && !last {
                !id
            } else {
                id
            };
            PackedDriver::desc(mem, at, addr, len, id);
            match first {
                None => first = Some((at, flags)),
                Some(_) => PackedDriver::flags(mem, at, flags),
            }
            self.avail_at += 1;
            if self.avail_at == self.size {
                self.avail_at = 0;
                self.avail_wrap = !self.avail_wrap;
            }
        }
        // The device sees the chain when its first flags are written.
        let (at, flags) = first.expect("a descriptor");
        PackedDriver::flags(mem, at, flags);
        self.free_slots -= slots;
        self.posted.insert(id, (slots, bufs));
        Some(id)
    }

    /// Places `bytes` in `pieces` fresh buffers (at least one).
    fn buffers(&mut self, mem: &GuestMemoryMmap, bytes: &[u8], pieces: usize) -> Vec<(u64, u32)> {
        let cut = bytes.len().div_ceil(pieces).max(1);
        let mut bufs = Vec::new();
        for piece in bytes.chunks(cut) {
            let at = self.next_buf;
            self.next_buf = (self.next_buf + 0x1000) % 0x40_0000;
            self.next_buf = self.next_buf.max(0x10_0000);
            mem.write_slice(piece, GuestAddress(at)).unwrap();
            bufs.push((at, piece.len() as u32));
        }
        bufs
    }

    /// Posts one chain of `pieces` buffers holding `bytes` (read-only)
    /// or `bytes.len()` bytes of room (`write`), direct or through an
    /// indirect table; false when the ring has no room.
    fn post(
        &mut self,
        mem: &GuestMemoryMmap,
        bytes: &[u8],
        pieces: usize,
        indirect: bool,
        write: bool,
    ) -> bool {
        let slots = if indirect {
            1
        } else {
            pieces.min(bytes.len().max(1))
        };
        if self.free_slots < slots as u16 || self.free_ids.is_empty() {
            return false;
        }
        let bufs = self.buffers(mem, bytes, pieces);
        let flags = if write { P_WRITE } else { 0 };
        let ring: Vec<(u64, u32, u16)> = if indirect {
            let table = PackedDriver::table(self.next_id());
            for (k, &(at, len)) in bufs.iter().enumerate() {
                let d = table + 16 * k as u64;
                PackedDriver::desc(mem, d, at, len, 0);
                PackedDriver::flags(mem, d, flags);
            }
            vec![(table, 16 * bufs.len() as u32, P_INDIRECT)]
        } else {
            let last = bufs.len() - 1;
            bufs.iter()
                .enumerate()
                .map(|(k, &(at, len))| (at, len, flags | if k < last { P_NEXT } else { 0 }))
                .collect()
        };
        self.post_raw(mem, &ring, bufs).is_some()
    }

    /// The used descriptors the device wrote since the last call, in
    /// order: one at the next used slot has `AVAIL` and `USED` both the
    /// used wrap counter; its id says which chain, whose slots are
    /// skipped.
    fn reclaim(&mut self, mem: &GuestMemoryMmap) -> Vec<PackedUsed> {
        let mut out = Vec::new();
        loop {
            let at = RING + 16 * u64::from(self.used_at);
            let flags = u16::from_le(mem.read_obj::<u16>(GuestAddress(at + 14)).unwrap());
            let w = self.used_wrap;
            if (flags & P_AVAIL != 0) != w || (flags & P_USED != 0) != w {
                return out;
            }
            let len = u32::from_le(mem.read_obj::<u32>(GuestAddress(at + 8)).unwrap());
            let id = u16::from_le(mem.read_obj::<u16>(GuestAddress(at + 12)).unwrap());
            let (slots, bufs) = self.posted.remove(&id).expect("a posted buffer id");
            self.free_slots += slots;
            self.free_ids.push(id);
            let next = self.used_at + slots;
            if next >= self.size {
                self.used_wrap = !self.used_wrap;
            }
            self.used_at = next % self.size;
            out.push(PackedUsed {
                id,
                bufs,
                len,
                write: flags & P_WRITE != 0,
            });
        }
    }

    /// Sets the driver's event suppression: flags, and the position
    /// `off_wrap` for `EVENT_DESC`.
    fn events(mem: &GuestMemoryMmap, flags: u16, off_wrap: u16) {
        mem.write_obj(off_wrap.to_le(), GuestAddress(DRIVER_EVENT))
            .unwrap();
        mem.write_obj(flags.to_le(), GuestAddress(DRIVER_EVENT + 2))
            .unwrap();
    }
}

fn packed_memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Frames through a 16-entry packed transmit ring whose position and
    /// wrap counter start anywhere: chains in one to three pieces,
    /// direct or through an indirect table, the id in every descriptor
    /// or the last, posted as room allows and read in bursts of any
    /// size, arrive whole and in order; every buffer id comes back used
    /// exactly once, length 0, and the guest is told (its event flags
    /// ask for every used buffer).
    #[test]
    fn prop_packed_transmit_ring_delivers_every_frame_in_order(
        index in 0u16..16,
        wrap in proptest::bool::ANY,
        id_in_last_only in proptest::bool::ANY,
        frames in proptest::collection::vec((1usize..1400, 1usize..4, proptest::bool::ANY), 1..60),
        bursts in proptest::collection::vec(1usize..20, 1..40),
    ) {
        let mem = packed_memory();
        let (mut drv, mut q) = PackedDriver::new(&mem, 16, index, wrap);
        drv.id_in_last_only = id_in_last_only;
        let sent = numbered_frames(frames.iter().map(|&(len, _, _)| len));
        let (mut posted, mut got, mut used) = (0, Vec::new(), 0);
        let mut p = Pool::new(Home::new(PoolCaps { small: 4096, large: 4 }));
        for round in 0..2000 {
            while posted < sent.len() && drv.post(&mem, &sent[posted], frames[posted].1, frames[posted].2, false) {
                posted += 1;
            }
            let mut out = Vec::new();
            let max = bursts[round % bursts.len()];
            let burst = read_batch(&mut q, &mem, Layout::Packed, &mut p, max, &mut out);
            proptest::prop_assert_eq!(burst.taken, out.len());
            proptest::prop_assert!(burst.taken <= max);
            proptest::prop_assert_eq!(burst.signal, burst.taken > 0);
            for r in out {
                got.push(r.map(|pkt| pkt.frame().to_vec()).expect("a good frame"));
            }
            for u in drv.reclaim(&mem) {
                proptest::prop_assert_eq!((u.len, u.write), (0, false));
                used += 1;
            }
            // Reading and the queue's position keep pace with the driver.
            proptest::prop_assert_eq!(q.next_avail(), drv.used_at | if drv.used_wrap { P_WRAP } else { 0 });
            if got.len() == sent.len() {
                break;
            }
        }
        proptest::prop_assert_eq!(used, sent.len());
        proptest::prop_assert!(drv.posted.is_empty(), "every buffer id came back");
        let want: Vec<Vec<u8>> = sent.iter().map(|f| f[VNET_HDR_LEN..].to_vec()).collect();
        proptest::prop_assert_eq!(got, want);
        proptest::prop_assert_eq!(q.next_avail(), drv.pos());
        proptest::prop_assert_eq!(q.next_used(), drv.pos());
    }

    /// Frames written in batches into a 16-entry packed receive ring
    /// whose position and wrap counter start anywhere, into mergeable
    /// buffers of any size (eight of them hold the largest frame) posted
    /// direct, in pieces or through an indirect table, a few at a time:
    /// the guest finds each frame whole in the buffers it is told of,
    /// `num_buffers` of them, in order; a frame that finds too few
    /// buffers waits (nothing of it is used) and is written whole once
    /// more are posted.
    #[test]
    fn prop_packed_receive_ring_fills_mergeable_buffers_in_order(
        index in 0u16..16,
        wrap in proptest::bool::ANY,
        lens in proptest::collection::vec(1usize..3000, 1..40),
        room in 400usize..1600,
        pieces in 1usize..3,
        indirect in proptest::bool::ANY,
        per_round in 1usize..17,
        batch in 1usize..4,
    ) {
        let mem = packed_memory();
        let (mut drv, mut q) = PackedDriver::new(&mem, 16, index, wrap);
        let frames: Vec<Vec<u8>> = lens.iter().enumerate()
            .map(|(i, &n)| (0..n).map(|k| (i * 7 + k) as u8).collect())
            .collect();
        let hdr = [0u8; VNET_HDR_LEN];
        let (mut at, mut seen) = (0, Vec::new());
        let mut pending: Vec<PackedUsed> = Vec::new();
        for _ in 0..4000 {
            for _ in 0..per_round {
                if !drv.post(&mem, &vec![0u8; room], pieces, indirect, true) {
                    break;
                }
            }
            if at < frames.len() {
                let end = (at + batch).min(frames.len());
                let iovs: Vec<[IoSlice<'_>; 2]> = frames[at..end]
                    .iter()
                    .map(|f| [IoSlice::new(&hdr), IoSlice::new(f)])
                    .collect();
                let refs: Vec<&[IoSlice<'_>]> = iovs.iter().map(|v| &v[..]).collect();
                let mut results = Vec::new();
                let n = write_batch(&mut q, &mem, Layout::Packed, &refs, true, &mut |r| results.push(r));
                proptest::prop_assert_eq!(n, results.len());
                for (k, r) in results.into_iter().enumerate() {
                    match r {
                        Ok(()) => at += 1,
                        // Only the last frame reported finds the ring full.
                        Err(VirtqError::RingFull) if k + 1 == n => {}
                        Err(e) => proptest::prop_assert!(false, "{e}"),
                    }
                }
            }
            let got = drv.reclaim(&mem);
            proptest::prop_assert_eq!(q.next_avail(), drv.used_at | if drv.used_wrap { P_WRAP } else { 0 });
            pending.extend(got);
            // A frame's first buffer says how many buffers it took.
            while let Some(first) = pending.first() {
                proptest::prop_assert!(first.write);
                let head = read_bufs(&mem, &first.bufs, VNET_HDR_LEN);
                let n = u16::from_le_bytes([head[10], head[11]]) as usize;
                proptest::prop_assert!(n >= 1);
                if pending.len() < n {
                    break;
                }
                let mut bytes = Vec::new();
                for u in &pending[..n] {
                    let cap: u32 = u.bufs.iter().map(|b| b.1).sum();
                    proptest::prop_assert!(u.len <= cap);
                    let len = if u.write { u.len } else { 0 };
                    bytes.extend(read_bufs(&mem, &u.bufs, len as usize));
                }
                pending.drain(..n);
                seen.push(bytes[VNET_HDR_LEN..].to_vec());
            }
            if seen.len() == frames.len() {
                break;
            }
        }
        proptest::prop_assert_eq!(seen, frames);
        proptest::prop_assert!(pending.is_empty());
        proptest::prop_assert_eq!(q.next_avail(), drv.used_at | if drv.used_wrap { P_WRAP } else { 0 });
    }
}

/// Reads a packed transmit ring in one burst of up to 8 chains: the
/// frames (or why each was refused) and the used descriptors returned.
fn packed_read(
    mem: &GuestMemoryMmap,
    q: &mut Queue,
    drv: &mut PackedDriver,
) -> (Vec<Result<Vec<u8>, RecvError>>, Vec<PackedUsed>) {
    let mut out = Vec::new();
    read_batch(q, mem, Layout::Packed, &mut pool(), 8, &mut out);
    let frames = out
        .into_iter()
        .map(|r| r.map(|p| p.frame().to_vec()))
        .collect();
    (frames, drv.reclaim(mem))
}

/// What reading made of each chain, against the good frame `good`.
fn outcomes(frames: &[Result<Vec<u8>, RecvError>], good: &[u8]) -> Vec<&'static str> {
    frames
        .iter()
        .map(|r| match r {
            Ok(f) if f[..] == good[VNET_HDR_LEN..] => "frame",
            Ok(_) => "another frame",
            Err(RecvError::BadDescriptor(_)) => "refused",
            Err(_) => "another error",
        })
        .collect()
}

/// A hostile chain, laid by the driver: its ring descriptors (with any
/// indirect table written first).
type Hostile = fn(&GuestMemoryMmap, &PackedDriver) -> Vec<(u64, u32, u16)>;

/// Hostile packed transmit chains, each posted between two good frames
/// on a ring whose position starts just before its end (so a chain of
/// several slots crosses it and the wrap counters flip): the chain is
/// refused, goes back used (length 0, its slots skipped), and reading
/// goes on with the next chain.
#[test]
fn hostile_packed_transmit_chains_are_refused_and_given_back() {
    let cases: [(&str, DescriptorFault, Hostile); 8] = [
        (
            "a buffer outside guest memory",
            DescriptorFault::Memory,
            |_, _| vec![(0x4000_0000, 64, 0)],
        ),
        (
            "a buffer crossing the end of guest memory",
            DescriptorFault::Memory,
            |_, _| vec![(BUF, 16, P_NEXT), (0x40_0000 - 32, 64, 0)],
        ),
        (
            "a device-writable buffer",
            DescriptorFault::Direction,
            |mem, _| {
                mem.write_slice(&frame(), GuestAddress(BUF)).unwrap();
                vec![(BUF, frame().len() as u32, P_WRITE)]
            },
        ),
        (
            "a device-writable second piece",
            DescriptorFault::Direction,
            |mem, _| {
                mem.write_slice(&frame(), GuestAddress(BUF)).unwrap();
                vec![
                    (BUF, 20, P_NEXT),
                    (BUF + 20, frame().len() as u32 - 20, P_WRITE),
                ]
            },
        ),
        (
            "a nested indirect table",
            DescriptorFault::Indirect,
            |mem, drv| {
                let table = PackedDriver::table(drv.next_id());
                PackedDriver::desc(mem, table, BUF, 64, 0);
                PackedDriver::flags(mem, table, P_INDIRECT);
                vec![(table, 16, P_INDIRECT)]
            },
        ),
        (
            "an indirect table length not a multiple of 16",
            DescriptorFault::IndirectLen,
            |mem, drv| {
                let table = PackedDriver::table(drv.next_id());
                PackedDriver::desc(mem, table, BUF, 64, 0);
                PackedDriver::flags(mem, table, 0);
                vec![(table, 24, P_INDIRECT)]
            },
        ),
        (
            "an indirect table outside guest memory",
            DescriptorFault::Memory,
            |_, _| vec![(0x4000_0000, 32, P_INDIRECT)],
        ),
        (
            "an indirect descriptor after the first",
            DescriptorFault::Indirect,
            |mem, drv| {
                let table = PackedDriver::table(drv.next_id());
                PackedDriver::desc(mem, table, BUF, 64, 0);
                PackedDriver::flags(mem, table, 0);
                vec![(BUF, 12, P_NEXT), (table, 16, P_INDIRECT)]
            },
        ),
    ];
    let good = frame();
    for (name, fault, hostile) in cases {
        for (index, wrap) in [(15, false), (15, true), (0, true), (7, false)] {
            let mem = packed_memory();
            let (mut drv, mut q) = PackedDriver::new(&mem, 16, index, wrap);
            assert!(drv.post(&mem, &good, 1, false, false));
            let ring = hostile(&mem, &drv);
            let bad = drv.post_raw(&mem, &ring, Vec::new()).unwrap();
            assert!(drv.post(&mem, &good, 2, false, false));
            let (frames, used) = packed_read(&mem, &mut q, &mut drv);
            assert_eq!(
                outcomes(&frames, &good),
                ["frame", "refused", "frame"],
                "{name} at {index}/{wrap}"
            );
            assert!(
                matches!(frames[1], Err(RecvError::BadDescriptor(f)) if f == fault),
                "{name}: {:?}",
                frames[1]
            );
            assert_eq!(used.len(), 3, "{name}: every chain goes back used");
            assert_eq!((used[1].id, used[1].len), (bad, 0), "{name}");
            assert!(drv.posted.is_empty(), "{name}");
            assert_eq!(
                q.next_avail(),
                drv.pos(),
                "{name}: the slots it took are skipped"
            );
        }
    }
}

/// An indirect descriptor with `NEXT` set, which a driver must not post
/// (Packed Virtqueues, Indirect Descriptors: no `INDIRECT` in a list
/// linked by `NEXT`): the chain its `NEXT` flag makes (the indirect slot
/// and the slot after it) is refused and goes back whole, and the slot
/// after it is not read as a chain of its own.
#[test]
fn a_packed_indirect_descriptor_with_next_set_is_refused_with_its_chain() {
    let mem = packed_memory();
    let (mut drv, mut q) = PackedDriver::new(&mem, 16, 15, false);
    let good = frame();
    let table = PackedDriver::table(drv.next_id());
    mem.write_slice(&good, GuestAddress(BUF)).unwrap();
    PackedDriver::desc(&mem, table, BUF, good.len() as u32, 0);
    PackedDriver::flags(&mem, table, 0);
    // The slot after it holds a whole frame, as a stray chain would.
    mem.write_slice(&good, GuestAddress(BUF + 0x1000)).unwrap();
    let ring = [
        (table, 16, P_INDIRECT | P_NEXT),
        (BUF + 0x1000, good.len() as u32, 0),
    ];
    let bad = drv.post_raw(&mem, &ring, Vec::new()).unwrap();
    assert!(drv.post(&mem, &good, 1, false, false));
    let (frames, used) = packed_read(&mem, &mut q, &mut drv);
    assert_eq!(outcomes(&frames, &good), ["refused", "frame"]);
    assert_eq!(used.len(), 2);
    assert_eq!((used[0].id, used[0].len), (bad, 0));
    assert_eq!(q.next_avail(), drv.pos());
}

/// A chain whose `NEXT` flags go around the whole ring: refused once
/// it took as many slots as the ring has, all of them given back in one
/// used descriptor (the wrap counters flip once), and the ring goes on.
#[test]
fn a_packed_chain_around_the_whole_ring_is_refused_and_given_back() {
    for (index, wrap) in [(0, true), (9, false), (15, true)] {
        let mem = packed_memory();
        let (mut drv, mut q) = PackedDriver::new(&mem, 16, index, wrap);
        let bytes = frame();
        mem.write_slice(&bytes, GuestAddress(BUF)).unwrap();
        let ring = vec![(BUF, 16, P_NEXT); 16];
        let bad = drv.post_raw(&mem, &ring, Vec::new()).unwrap();
        assert_eq!(drv.free_slots, 0);
        let (frames, used) = packed_read(&mem, &mut q, &mut drv);
        assert_eq!(outcomes(&frames, &bytes), ["refused"]);
        assert_eq!(used.len(), 1);
        assert_eq!((used[0].id, used[0].len), (bad, 0));
        assert_eq!(drv.free_slots, 16, "every slot given back");
        assert_eq!(drv.pos(), index | if wrap { 0 } else { P_WRAP });
        assert_eq!(q.next_avail(), drv.pos());
        // The ring goes on, a round later.
        assert!(drv.post(&mem, &bytes, 3, false, false));
        let (frames, used) = packed_read(&mem, &mut q, &mut drv);
        assert_eq!(outcomes(&frames, &bytes), ["frame"]);
        assert_eq!(used.len(), 1);
        assert_eq!(q.next_avail(), drv.pos());
    }
}

/// A transmit chain that finds no pool buffer stays available, unread,
/// and is read whole by a later burst.
#[test]
fn a_packed_frame_with_no_buffer_free_stays_on_the_ring() {
    let mem = packed_memory();
    let (mut drv, mut q) = PackedDriver::new(&mem, 16, 15, true);
    let bytes = frame();
    assert!(drv.post(&mem, &bytes, 2, false, false));
    let mut none = Pool::new(Home::new(PoolCaps { small: 0, large: 0 }));
    let mut out = Vec::new();
    let burst = read_batch(&mut q, &mem, Layout::Packed, &mut none, 4, &mut out);
    assert_eq!(burst.taken, 0);
    assert!(matches!(burst.end, Err(RecvError::NoBuffer)));
    assert!(!burst.signal);
    assert!(drv.reclaim(&mem).is_empty());
    assert_eq!(q.next_avail(), 15 | P_WRAP);
    let (frames, used) = packed_read(&mem, &mut q, &mut drv);
    assert_eq!(outcomes(&frames, &bytes), ["frame"]);
    assert_eq!(used.len(), 1);
    assert_eq!(q.next_avail(), 1);
}

/// On the receive side a read-only buffer, or one too short for the
/// frame without mergeable buffers, is refused and goes back used and
/// empty; a frame with no buffer at all finds the ring full.
#[test]
fn packed_receive_refuses_unusable_buffers_and_gives_them_back() {
    let mem = packed_memory();
    let (mut drv, mut q) = PackedDriver::new(&mem, 16, 15, false);
    let hdr = [0u8; VNET_HDR_LEN];
    let data = vec![7u8; 3000];
    let iov = [IoSlice::new(&hdr), IoSlice::new(&data)];
    let write = |q: &mut Queue, mergeable: bool| {
        let mut result = None;
        write_batch(q, &mem, Layout::Packed, &[&iov], mergeable, &mut |r| {
            result = Some(r)
        });
        result.unwrap()
    };
    assert!(matches!(write(&mut q, true), Err(VirtqError::RingFull)));
    assert!(drv.post(&mem, &[0u8; 4096], 2, false, false));
    assert!(matches!(
        write(&mut q, true),
        Err(VirtqError::BadDescriptor(DescriptorFault::Direction))
    ));
    assert!(drv.post(&mem, &[0u8; 1024], 1, true, true));
    assert!(matches!(write(&mut q, false), Err(VirtqError::TooSmall)));
    let used = drv.reclaim(&mem);
    assert_eq!(used.len(), 2);
    assert!(used.iter().all(|u| u.len == 0 && !u.write));
    assert_eq!(q.next_avail(), drv.pos());
    // Mergeable, the too-short buffer waits for more.
    assert!(drv.post(&mem, &[0u8; 1024], 1, true, true));
    assert!(matches!(write(&mut q, true), Err(VirtqError::RingFull)));
    assert!(drv.reclaim(&mem).is_empty());
    assert!(drv.post(&mem, &[0u8; 2048], 2, false, true));
    assert!(write(&mut q, true).is_ok());
    let used = drv.reclaim(&mem);
    assert_eq!(
        used.iter().map(|u| (u.len, u.write)).collect::<Vec<_>>(),
        [(1024, true), (3012 - 1024, true)]
    );
    assert_eq!(read_bufs(&mem, &used[0].bufs, 12)[10..12], [2, 0]);
}

/// Interrupts and kicks on a packed ring: the driver's event flags
/// decide whether the guest is told of used descriptors (ENABLE always,
/// DISABLE never, DESC once the used side passed the position it
/// gave, wrap counter included); the device's flags say whether it
/// wants kicks, and turning them on reports a chain made available
/// meanwhile.
#[test]
fn packed_event_suppression_decides_signals_and_kicks() {
    let mem = packed_memory();
    let (mut drv, mut q) = PackedDriver::new(&mem, 16, 14, true);
    let bytes = frame();
    for _ in 0..3 {
        assert!(drv.post(&mem, &bytes, 1, false, false));
    }
    let old = used_mark(&q, Layout::Packed);
    assert_eq!(old, 14 | P_WRAP);
    PackedDriver::events(&mem, EVENT_DISABLE, 0);
    let mut out = Vec::new();
    let burst = read_batch(&mut q, &mem, Layout::Packed, &mut pool(), 8, &mut out);
    assert_eq!(burst.taken, 3);
    assert!(!burst.signal, "the driver asked for no interrupt");
    assert_eq!(drv.reclaim(&mem).len(), 3);
    // Used descriptors at 14 and 15 (wrap 1) and 0 (wrap 0): the used
    // side stands at 1, wrap 0.
    let now = used_mark(&q, Layout::Packed);
    assert_eq!(now, 1);
    let signal = |flags: u16, off_wrap: u16| {
        PackedDriver::events(&mem, flags, off_wrap);
        wants_signal(&q, &mem, Layout::Packed, old)
    };
    assert!(signal(EVENT_ENABLE, 0));
    assert!(!signal(EVENT_DISABLE, 0));
    for (off_wrap, want) in [
        (14 | P_WRAP, true),
        (15 | P_WRAP, true),
        (0, true),
        (1, false),
        (13 | P_WRAP, false),
        (2, false),
        (P_WRAP, false),
    ] {
        assert_eq!(signal(EVENT_DESC, off_wrap), want, "off_wrap {off_wrap:#x}");
    }
    // Nothing new since the last signal: nothing to tell.
    PackedDriver::events(&mem, EVENT_ENABLE, 0);
    assert!(!wants_signal(&q, &mem, Layout::Packed, now));
    // A burst itself reads the driver's position.
    assert!(drv.post(&mem, &bytes, 1, false, false));
    PackedDriver::events(&mem, EVENT_DESC, 1);
    let burst = read_batch(&mut q, &mem, Layout::Packed, &mut pool(), 8, &mut out);
    assert!(burst.taken == 1 && burst.signal);
    assert!(drv.post(&mem, &bytes, 1, false, false));
    PackedDriver::events(&mem, EVENT_DESC, 1);
    let burst = read_batch(&mut q, &mem, Layout::Packed, &mut pool(), 8, &mut out);
    assert!(burst.taken == 1 && !burst.signal);
    assert_eq!(drv.reclaim(&mem).len(), 2);

    let device_flags =
        || u16::from_le(mem.read_obj::<u16>(GuestAddress(DEVICE_EVENT + 2)).unwrap());
    assert!(!set_kicks(&q, &mem, Layout::Packed, false));
    assert_eq!(device_flags(), EVENT_DISABLE);
    assert!(
        !set_kicks(&q, &mem, Layout::Packed, true),
        "nothing available"
    );
    assert_eq!(device_flags(), EVENT_ENABLE);
    assert!(drv.post(&mem, &bytes, 2, false, false));
    assert!(!set_kicks(&q, &mem, Layout::Packed, false));
    assert_eq!(device_flags(), EVENT_DISABLE);
    assert!(
        set_kicks(&q, &mem, Layout::Packed, true),
        "a chain arrived meanwhile"
    );
    assert_eq!(device_flags(), EVENT_ENABLE);
}

mod one_copy;
