//! One copy guest to guest, against the driver models: frames read from
//! one guest's transmit ring with their payloads left in its memory,
//! written into another guest's receive ring from there, the sender's
//! chains given back only after.

use super::*;
use std::sync::Arc;

/// A transmit driver of either layout, as this test drives it.
trait TxDriver {
    fn post_tx(
        &mut self,
        mem: &GuestMemoryMmap,
        bytes: &[u8],
        pieces: usize,
        indirect: bool,
    ) -> bool;
    /// Chains given back since the last call (each with nothing written).
    fn given_back(&mut self, mem: &GuestMemoryMmap) -> usize;
}

impl TxDriver for Driver {
    fn post_tx(
        &mut self,
        mem: &GuestMemoryMmap,
        bytes: &[u8],
        pieces: usize,
        indirect: bool,
    ) -> bool {
        self.post(mem, bytes, pieces, indirect, false)
    }
    fn given_back(&mut self, mem: &GuestMemoryMmap) -> usize {
        let used = self.reclaim(mem);
        assert!(used.iter().all(|&(_, len)| len == 0));
        used.len()
    }
}

impl TxDriver for PackedDriver {
    fn post_tx(
        &mut self,
        mem: &GuestMemoryMmap,
        bytes: &[u8],
        pieces: usize,
        indirect: bool,
    ) -> bool {
        self.post(mem, bytes, pieces, indirect, false)
    }
    fn given_back(&mut self, mem: &GuestMemoryMmap) -> usize {
        let used = self.reclaim(mem);
        assert!(used.iter().all(|u| (u.len, u.write) == (0, false)));
        used.len()
    }
}

/// The payload a packet left in the sending guest's memory.
fn tail(p: &Packet) -> Option<&crate::pool::Pending> {
    p.buf.pending()
}

/// Frames of `lens` (payload bytes, pieces, through an indirect table)
/// from a transmit ring of `layout` into a split receive ring of 2 KiB
/// mergeable buffers, in bursts of `bursts`. Frames the receive ring had
/// no room for are copied out of the sender's memory and written in the
/// next round, as the datapath keeps them.
fn one_copy(
    layout: Layout,
    lens: &[(usize, usize, bool)],
    bursts: &[usize],
) -> Result<(), proptest::test_runner::TestCaseError> {
    let tx_mem = Arc::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap());
    let rx_mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
    let (mut tx, mut txq): (Box<dyn TxDriver>, Queue) = match layout {
        Layout::Split => {
            let (d, q) = Driver::new(&tx_mem, 16, 65530);
            (Box::new(d), q)
        }
        Layout::Packed => {
            let (d, q) = PackedDriver::new(&tx_mem, 16, 13, true);
            (Box::new(d), q)
        }
    };
    let (mut rx, mut rxq) = Driver::new(&rx_mem, 16, 7);
    let sent = numbered_frames(lens.iter().map(|&(len, _, _)| len));
    let mut p = Pool::new(Home::new(PoolCaps {
        small: 4096,
        large: 64,
    }));
    let mut held = Held::default();
    let hdr = [0u8; VNET_HDR_LEN];
    let (mut posted, mut given, mut left) = (0, 0, 0);
    let mut carry: Vec<Packet> = Vec::new();
    let mut seen: Vec<Vec<u8>> = Vec::new();
    // The receive ring's used chains not yet read into frames.
    let mut rx_used = Vec::new();
    for round in 0..4000 {
        while posted < sent.len()
            && tx.post_tx(&tx_mem, &sent[posted], lens[posted].1, lens[posted].2)
        {
            posted += 1;
        }
        while rx.post(&rx_mem, &[0u8; 2048], 1, false, true) {}
        let mut out = Vec::new();
        let max = bursts[round % bursts.len()];
        read_batch_leaving(&mut txq, &tx_mem, layout, &mut p, max, &mut out, &mut held);
        let mut pkts = std::mem::take(&mut carry);
        let fresh = pkts.len();
        pkts.extend(out.into_iter().map(|r| r.expect("a good frame")));
        // Frames longer than their head leave their payload; chains from
        // the first of them on are held, the ones before went back.
        let first = pkts[fresh..].iter().position(|p| p.buf.pending().is_some());
        for pk in &pkts[fresh..] {
            let leaves = pk.len() > LEAVE_MIN;
            proptest::prop_assert_eq!(pk.buf.pending().is_some(), leaves);
            proptest::prop_assert_eq!(pk.buf.held().len(), if leaves { HEAD } else { pk.len() });
            left += usize::from(pk.buf.pending().is_some());
        }
        let back = tx.given_back(&tx_mem);
        proptest::prop_assert_eq!(back, first.unwrap_or(pkts.len() - fresh));
        proptest::prop_assert_eq!(held.len(), pkts.len() - fresh - back);
        given += back;
        let mut written = 0;
        {
            let iovs: Vec<[IoSlice<'_>; 2]> = pkts
                .iter()
                .map(|pk| [IoSlice::new(&hdr), IoSlice::new(pk.buf.held())])
                .collect();
            let refs: Vec<&[IoSlice<'_>]> = iovs.iter().map(|v| &v[..]).collect();
            let tails: Vec<Option<&crate::pool::Pending>> = pkts.iter().map(tail).collect();
            write_batch_from(
                &mut rxq,
                &rx_mem,
                Layout::Split,
                &refs,
                &tails,
                true,
                &mut |r| {
                    if r.is_ok() {
                        written += 1;
                    }
                },
            );
        }
        // What found no room is kept past the batch: copied out first.
        carry = pkts.split_off(written);
        for pk in &mut carry {
            pk.buf.fill_pending();
        }
        proptest::prop_assert_eq!(tx.given_back(&tx_mem), 0, "held until the batch ends");
        complete_batch(&mut txq, &tx_mem, layout, &mut held);
        proptest::prop_assert!(held.is_empty());
        given += tx.given_back(&tx_mem);
        rx_used.extend(rx.reclaim(&rx_mem));
        while let Some((first, len)) = rx_used.first().cloned() {
            let head = read_bufs(&rx_mem, &first, VNET_HDR_LEN);
            let n = u16::from_le_bytes([head[10], head[11]]) as usize;
            if rx_used.len() < n {
                break;
            }
            let mut bytes = read_bufs(&rx_mem, &first, len as usize);
            for (bufs, len) in &rx_used[1..n] {
                bytes.extend(read_bufs(&rx_mem, bufs, *len as usize));
            }
            rx_used.drain(..n);
            seen.push(bytes[VNET_HDR_LEN..].to_vec());
        }
        if seen.len() == sent.len() {
            break;
        }
    }
    let want: Vec<Vec<u8>> = sent.iter().map(|f| f[VNET_HDR_LEN..].to_vec()).collect();
    proptest::prop_assert_eq!(seen, want);
    proptest::prop_assert_eq!(given, sent.len(), "every chain went back once");
    proptest::prop_assert!(left > 0 || lens.iter().all(|&(len, _, _)| len + 54 <= LEAVE_MIN));
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Split and packed transmit rings, frames short and long (a third
    /// longer than [`LEAVE_MIN`]) in one to
    /// three pieces or an indirect table, bursts of any size: every
    /// frame arrives whole and in order, each chain goes back once.
    #[test]
    fn prop_frames_are_copied_once_guest_to_guest(
        packed in proptest::bool::ANY,
        lens in proptest::collection::vec((1usize..3000, 1usize..4, proptest::bool::ANY), 1..50),
        bursts in proptest::collection::vec(1usize..20, 1..20),
    ) {
        let layout = if packed { Layout::Packed } else { Layout::Split };
        one_copy(layout, &lens, &bursts)?;
    }
}

/// A VXLAN frame a guest sends (headers inside headers, which may reach
/// past the head) is read whole, and nothing is held for it.
#[test]
fn a_vxlan_frame_from_a_guest_is_read_whole() {
    let mem = Arc::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap());
    let (mut drv, mut q) = Driver::new(&mem, 16, 0);
    let inner = hvnet_offload::testutil::tcp4_frame(1, 1, 2500, 0x18);
    let mut f = vec![0u8; VNET_HDR_LEN];
    f.extend(hvnet_offload::testutil::vxlan_wrap(
        &inner, 42, 40000, 7, false,
    ));
    assert!(f.len() > VNET_HDR_LEN + LEAVE_MIN);
    assert!(drv.post(&mem, &f, 2, false, false));
    let mut out = Vec::new();
    let mut held = Held::default();
    read_batch_leaving(
        &mut q,
        &mem,
        Layout::Split,
        &mut pool(),
        8,
        &mut out,
        &mut held,
    );
    let pk = out.pop().unwrap().expect("a good frame");
    assert!(pk.meta.layers.vxlan().is_some());
    assert!(pk.buf.pending().is_none(), "read whole");
    assert_eq!(pk.frame(), &f[VNET_HDR_LEN..]);
    assert!(held.is_empty());
    assert_eq!(drv.given_back(&mem), 1);
}
