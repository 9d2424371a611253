//! VXLAN headers (RFC 7348).

use crate::error::{Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 8;
/// IANA port.
pub const PORT: u16 = 4789;
/// The "I" flag: the VNI is valid.
pub const FLAG_I: u8 = 0x08;

/// A zero-copy view of a VXLAN header and its inner frame.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps without checks.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }
    /// Wraps after checking length and the I flag.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if p.flags() & FLAG_I == 0 {
            return Err(Error::BadHeaderLen);
        }
        Ok(p)
    }
    /// Flag byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// The 24-bit VXLAN network identifier.
    pub fn vni(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([0, b[4], b[5], b[6]])
    }
    /// The inner Ethernet frame.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes flags (I set), reserved zeros and the VNI.
    pub fn emit(&mut self, vni: u32) {
        let b = self.buffer.as_mut();
        b[..HEADER_LEN].fill(0);
        b[0] = FLAG_I;
        b[4..7].copy_from_slice(&vni.to_be_bytes()[1..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut b = [0u8; 8];
        Packet::new_unchecked(&mut b[..]).emit(0x123456);
        assert_eq!(b, [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0]);
        assert_eq!(Packet::new_checked(&b[..]).unwrap().vni(), 0x123456);
        assert!(Packet::new_checked(&[0u8; 8][..]).is_err());
    }
}
