//! UDP headers (RFC 768).

use crate::checksum::Sum;
use crate::error::{be16, put16, Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 8;
/// Offset of the checksum field.
pub const CHECKSUM_OFFSET: usize = 6;

/// A zero-copy view of a UDP datagram.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps without checks.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }
    /// Wraps after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the header fits and the length field is sane.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = self.len() as usize;
        if l < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if l > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
    /// Length field (header and data).
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }
    /// True when the length field says there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() as usize == HEADER_LEN
    }
    /// Checksum field (0 = none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), CHECKSUM_OFFSET)
    }
    /// The data, as delimited by the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len() as usize]
    }
    /// Verifies the checksum (a zero field passes: no checksum was sent).
    pub fn verify_checksum(&self, pseudo: Sum) -> bool {
        self.checksum() == 0
            || crate::checksum::verifies(
                pseudo.add_bytes(&self.buffer.as_ref()[..self.len() as usize]),
            )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 0, v)
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 2, v)
    }
    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 4, v)
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), CHECKSUM_OFFSET, v)
    }
    /// Computes the checksum over the datagram; a computed 0 is sent as
    /// 0xffff (RFC 768).
    pub fn fill_checksum(&mut self, pseudo: Sum) {
        self.set_checksum(0);
        let l = self.len() as usize;
        let c = pseudo.add_bytes(&self.buffer.as_ref()[..l]).finish();
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::pseudo_header_v4;

    #[test]
    fn test_round_trip_and_etherparse() {
        let mut buf = vec![0u8; 8 + 5];
        buf[8..].copy_from_slice(b"hello");
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(5000);
        p.set_dst_port(4789);
        p.set_len(13);
        let ph = pseudo_header_v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 13);
        p.fill_checksum(ph);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum(ph));
        assert_eq!(p.payload(), b"hello");
        let (h, _) = etherparse::UdpHeader::from_slice(&buf).unwrap();
        let c = h
            .calc_checksum_ipv4_raw([10, 0, 0, 1], [10, 0, 0, 2], b"hello")
            .unwrap();
        assert_eq!(c, p.checksum());
    }

    #[test]
    fn bad_lengths() {
        let mut buf = [0u8; 8];
        buf[5] = 7;
        assert_eq!(Packet::new_checked(&buf[..]).unwrap_err(), Error::BadLength);
        buf[5] = 9;
        assert_eq!(Packet::new_checked(&buf[..]).unwrap_err(), Error::Truncated);
    }
}
