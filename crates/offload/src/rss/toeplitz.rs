//! The Toeplitz hash (Microsoft RSS).
//!
//! For each set bit of the input, the 32 key bits starting at that bit's
//! position are XORed into the result. [`toeplitz`] does exactly that, bit
//! by bit, as the reference. [`Toeplitz`] precomputes, for every input byte
//! position and byte value, the XOR of the key windows of that byte's set
//! bits, so a hash is one table lookup and one XOR per input byte.

use super::RssError;

/// Microsoft's default 40-byte key, used by the RSS verification suite.
pub const DEFAULT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The most input bytes a key of `len` bytes can hash.
fn max_input(key_len: usize) -> usize {
    key_len - 4
}

/// The 32 key bits starting at bit `bit` of `key` (bits beyond its end
/// are 0): what an input bit at that position XORs into the hash.
pub fn window(key: &[u8], bit: usize) -> u32 {
    let byte = bit / 8;
    let mut w: u64 = 0;
    for i in 0..5 {
        w = (w << 8) | *key.get(byte + i).unwrap_or(&0) as u64;
    }
    ((w << (bit % 8)) >> 8) as u32
}

/// The Toeplitz hash of `input` under `key`, bit by bit (the reference).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let mut h = 0u32;
    for (i, &b) in input.iter().enumerate() {
        for bit in 0..8 {
            if b & (0x80 >> bit) != 0 {
                h ^= window(key, i * 8 + bit);
            }
        }
    }
    h
}

/// A Toeplitz hasher with its lookup tables built for one key.
#[derive(Clone)]
pub struct Toeplitz {
    table: Box<[[u32; 256]]>,
}

impl core::fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Toeplitz {{ max_input: {} }}", self.table.len())
    }
}

impl Toeplitz {
    /// Builds the tables for a 40- or 52-byte key.
    pub fn new(key: &[u8]) -> Result<Toeplitz, RssError> {
        if key.len() != 40 && key.len() != 52 {
            return Err(RssError::KeyLength(key.len()));
        }
        let n = max_input(key.len());
        let mut table = vec![[0u32; 256]; n].into_boxed_slice();
        for (pos, t) in table.iter_mut().enumerate() {
            let w: [u32; 8] = core::array::from_fn(|bit| window(key, pos * 8 + bit));
            for (v, slot) in t.iter_mut().enumerate() {
                *slot = (0..8)
                    .filter(|bit| v & (0x80 >> bit) != 0)
                    .fold(0, |h, bit| h ^ w[bit]);
            }
        }
        Ok(Toeplitz { table })
    }

    /// Hashes `input` (at most key length − 4 bytes; the rest is ignored).
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        input
            .iter()
            .zip(self.table.iter())
            .fold(0, |h, (&b, t)| h ^ t[b as usize])
    }
}
