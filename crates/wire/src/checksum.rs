//! The Internet checksum (RFC 1071): a ones'-complement sum of 16-bit words.
//!
//! The sum is kept as a [`Sum`] accumulator so that a checksum can be built
//! from pieces — a pseudo-header, a header, payload fragments living in
//! different receive buffers — in any order. A piece that starts at an odd
//! byte offset of the checksummed region is byte-swapped before it is added
//! (RFC 1071 §2(B): the sum is independent of byte order up to a swap).
//!
//! The hot loop reads the data as native-endian `u32` words and adds them
//! into `u64` lanes, so no carry handling is needed inside the loop: the
//! compiler turns it into vector adds. Folding and the final byte swap happen
//! once per call.

/// A running ones'-complement sum, folded to 32 bits.
///
/// The value is the sum in network byte order semantics: `fold()` of it is
/// the 16-bit one's-complement sum as it would be read big-endian.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sum(u32);

impl Sum {
    /// The empty sum.
    pub const ZERO: Sum = Sum(0);

    /// A sum that starts from a known 16-bit value (for example an existing
    /// checksum field, un-complemented).
    pub const fn from_u16(v: u16) -> Sum {
        Sum(v as u32)
    }

    /// Adds `data` as if it started at an even offset of the checksummed
    /// region.
    #[inline]
    pub fn add_bytes(self, data: &[u8]) -> Sum {
        self.add_at(data, false)
    }

    /// Adds `data`; `odd` says whether it starts at an odd offset of the
    /// checksummed region.
    #[inline]
    pub fn add_at(self, data: &[u8], odd: bool) -> Sum {
        let s = fold32(sum_be(data));
        let s = if odd { swap16_in32(s) } else { s };
        self.combine(Sum(s))
    }

    /// Adds one big-endian 16-bit word.
    #[inline]
    pub fn add_u16(self, v: u16) -> Sum {
        self.combine(Sum(v as u32))
    }

    /// Adds a 32-bit value as two big-endian 16-bit words.
    #[inline]
    pub fn add_u32(self, v: u32) -> Sum {
        self.combine(Sum((v >> 16) + (v & 0xffff)))
    }

    /// Ones'-complement addition of two sums.
    #[inline]
    pub fn combine(self, other: Sum) -> Sum {
        let (s, carry) = self.0.overflowing_add(other.0);
        Sum(s + carry as u32)
    }

    /// Ones'-complement subtraction (RFC 1624): removes `other` from the sum.
    #[inline]
    pub fn remove(self, other: Sum) -> Sum {
        self.combine(Sum(!other.0))
    }

    /// The 16-bit ones'-complement sum (not complemented).
    #[inline]
    pub fn fold(self) -> u16 {
        let s = (self.0 >> 16) + (self.0 & 0xffff);
        let s = (s >> 16) + (s & 0xffff);
        s as u16
    }

    /// The value to store in a checksum field: the complement of the folded
    /// sum.
    #[inline]
    pub fn finish(self) -> u16 {
        !self.fold()
    }
}

/// The checksum of `data` alone, ready to be stored (RFC 1071).
pub fn checksum(data: &[u8]) -> u16 {
    Sum::ZERO.add_bytes(data).finish()
}

/// True when the ones'-complement sum over `data`, checksum field included,
/// verifies (folds to 0xffff).
pub fn verifies(sum: Sum) -> bool {
    sum.fold() == 0xffff
}

/// The pseudo-header sum for TCP/UDP over IPv4 (RFC 793 §3.1, RFC 768).
pub fn pseudo_header_v4(src: [u8; 4], dst: [u8; 4], protocol: u8, l4_len: u32) -> Sum {
    Sum::ZERO
        .add_bytes(&src)
        .add_bytes(&dst)
        .add_u16(protocol as u16)
        .add_u32(l4_len)
}

/// The pseudo-header sum for upper layers over IPv6 (RFC 8200 §8.1).
pub fn pseudo_header_v6(src: [u8; 16], dst: [u8; 16], next_header: u8, l4_len: u32) -> Sum {
    Sum::ZERO
        .add_bytes(&src)
        .add_bytes(&dst)
        .add_u32(l4_len)
        .add_u16(next_header as u16)
}

/// RFC 1624 eqn. 3: the new checksum field after a 16-bit word of the
/// covered data changed from `old` to `new`.
#[inline]
pub fn update_u16(check: u16, old: u16, new: u16) -> u16 {
    Sum::from_u16(!check)
        .remove(Sum::from_u16(old))
        .add_u16(new)
        .finish()
}

/// RFC 1624 for a 32-bit field (an address, a sequence number).
#[inline]
pub fn update_u32(check: u16, old: u32, new: u32) -> u16 {
    update_u16(
        update_u16(check, (old >> 16) as u16, (new >> 16) as u16),
        old as u16,
        new as u16,
    )
}

#[inline]
fn swap16_in32(s: u32) -> u32 {
    // `s` is already folded to 16 bits.
    ((s & 0xff) << 8) | ((s >> 8) & 0xff)
}

#[inline]
fn fold32(s: u64) -> u32 {
    let s = (s >> 32) + (s & 0xffff_ffff);
    let s = (s >> 32) + (s & 0xffff_ffff);
    let s = (s >> 16) + (s & 0xffff);
    let s = (s >> 16) + (s & 0xffff);
    s as u32
}

/// The ones'-complement sum of `data` in big-endian word order, as a `u64`
/// that still needs folding.
#[inline]
fn sum_be(data: &[u8]) -> u64 {
    let native = sum_native(data);
    if cfg!(target_endian = "little") {
        // A native (little-endian) sum of the words is the byte-swap of the
        // big-endian sum: fold to 16 bits first, then swap.
        let f = fold32(native);
        swap16_in32(f) as u64
    } else {
        native
    }
}

/// Sums `data` as native-endian 16-bit words (with an odd trailing byte
/// padded with zero *in network order*, i.e. as the high byte).
#[inline]
fn sum_native(data: &[u8]) -> u64 {
    const LANES: usize = 8;
    let mut acc = [0u64; LANES];
    let mut chunks = data.chunks_exact(4 * LANES);
    for c in &mut chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            let w = u32::from_ne_bytes([c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]]);
            *a += w as u64;
        }
    }
    let mut total: u64 = acc.iter().map(|&a| fold32(a) as u64).sum();
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(2);
    for w in &mut words {
        total += u16::from_ne_bytes([w[0], w[1]]) as u64;
    }
    if let [last] = words.remainder() {
        // The pad byte is zero and follows `last` in memory.
        total += u16::from_ne_bytes([*last, 0]) as u64;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straightforward reference: big-endian words into a u32, fold.
    fn reference(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for w in data.chunks(2) {
            let v = if w.len() == 2 {
                u16::from_be_bytes([w[0], w[1]])
            } else {
                (w[0] as u16) << 8
            };
            s += v as u32;
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the sum of 00 01 f2 03 f4 f5 f6 f7 is ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(Sum::ZERO.add_bytes(&data).fold(), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn ipv4_header_known_answer() {
        // The worked example from the IPv4 checksum literature (Wikipedia "IPv4 header checksum").
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0xb861);
        hdr[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert!(verifies(Sum::ZERO.add_bytes(&hdr)));
    }

    #[test]
    fn matches_reference_on_all_lengths_and_alignments() {
        let data: Vec<u8> = (0..2000u32).map(|i| (i * 7 + 13) as u8).collect();
        for start in 0..4 {
            for len in 0..300 {
                let d = &data[start..start + len];
                assert_eq!(checksum(d), reference(d), "start {start} len {len}");
            }
        }
        assert_eq!(checksum(&data), reference(&data));
    }

    #[test]
    fn pieces_at_odd_offsets_combine() {
        let data: Vec<u8> = (0..1001u32).map(|i| (i * 31 + 5) as u8).collect();
        for split in [0, 1, 2, 3, 499, 500, 1000, 1001] {
            let (a, b) = data.split_at(split);
            let s = Sum::ZERO.add_bytes(a).add_at(b, split % 2 == 1);
            assert_eq!(s.finish(), reference(&data), "split {split}");
        }
    }

    #[test]
    fn all_ones_and_carries() {
        let data = vec![0xffu8; 65536];
        assert_eq!(checksum(&data), reference(&data));
        let data = vec![0xfeu8; 65535];
        assert_eq!(checksum(&data), reference(&data));
    }

    #[test]
    fn incremental_update_matches_recompute() {
        let mut data: Vec<u8> = (0..64u32).map(|i| (i * 91 + 3) as u8).collect();
        let before = checksum(&data);
        let old = u16::from_be_bytes([data[10], data[11]]);
        data[10] = 0x12;
        data[11] = 0x34;
        assert_eq!(update_u16(before, old, 0x1234), checksum(&data));
        let old32 = u32::from_be_bytes([data[20], data[21], data[22], data[23]]);
        let c1 = checksum(&data);
        data[20..24].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        assert_eq!(update_u32(c1, old32, 0xdead_beef), checksum(&data));
    }

    proptest::proptest! {
        #[test]
        fn prop_matches_reference(data in proptest::collection::vec(proptest::num::u8::ANY, 0..3000)) {
            proptest::prop_assert_eq!(checksum(&data), reference(&data));
        }
    }
}
