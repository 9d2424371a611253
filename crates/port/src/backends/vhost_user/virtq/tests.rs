use super::*;
use crate::pool::{Home, PoolCaps};
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
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

/// A UDP frame behind a zeroed virtio-net header.
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
    for _ in 0..3 {
        assert!(matches!(
            read_frame(&mut q, &mem, &mut p),
            Err(RecvError::BadDescriptor)
        ));
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
        Err(VirtqError::BadDescriptor)
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
        let sent: Vec<Vec<u8>> = frames.iter().enumerate().map(|(i, &(len, _, _))| {
            let mut f = vec![0u8; VNET_HDR_LEN];
            f.extend(hvnet_offload::testutil::tcp4_frame(i as u32, i as u16, len, 0x18));
            f
        }).collect();
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
