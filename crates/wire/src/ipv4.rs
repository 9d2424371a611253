//! IPv4 headers (RFC 791), options included.

use crate::checksum::{self, Sum};
use crate::error::{be16, put16, Error, Result};

/// Minimum header length.
pub const HEADER_LEN: usize = 20;
/// The Don't Fragment bit of the flags/fragment-offset word.
pub const DF: u16 = 0x4000;
/// The More Fragments bit.
pub const MF: u16 = 0x2000;
/// Fragment offset bits.
pub const FRAG_OFFSET: u16 = 0x1fff;

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

/// Offset of the checksum field inside the header.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM;

/// A zero-copy view of an IPv4 packet.
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

    /// Checks version, IHL and that the header fits. The total-length field
    /// may be shorter than the buffer (Ethernet padding) but not longer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 4 {
            return Err(Error::BadVersion);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::BadHeaderLen);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        let tl = self.total_len() as usize;
        if tl < hl {
            return Err(Error::BadLength);
        }
        if tl > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Version nibble.
    pub fn version(&self) -> u8 {
        self.b()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        ((self.b()[field::VER_IHL] & 0x0f) as usize) * 4
    }
    /// The whole TOS byte (DSCP and ECN).
    pub fn tos(&self) -> u8 {
        self.b()[field::TOS]
    }
    /// ECN bits.
    pub fn ecn(&self) -> u8 {
        self.tos() & 3
    }
    /// Total length field.
    pub fn total_len(&self) -> u16 {
        be16(self.b(), field::LENGTH)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.b(), field::IDENT)
    }
    /// Flags and fragment offset word.
    pub fn flags_frag(&self) -> u16 {
        be16(self.b(), field::FLG_OFF)
    }
    /// Don't Fragment.
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & DF != 0
    }
    /// True for any fragment (MF set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (MF | FRAG_OFFSET) != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }
    /// Upper-layer protocol number.
    pub fn protocol(&self) -> u8 {
        self.b()[field::PROTOCOL]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.b()[field::SRC]);
        a
    }
    /// Destination address.
    pub fn dst(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.b()[field::DST]);
        a
    }
    /// The option bytes (empty when IHL is 5).
    pub fn options(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.header_len()]
    }
    /// True when the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::verifies(Sum::ZERO.add_bytes(&self.b()[..self.header_len()]))
    }
    /// The payload as delimited by the total-length field.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len() as usize]
    }
    /// The pseudo-header sum for an upper-layer length.
    pub fn pseudo_header(&self, l4_len: u32) -> Sum {
        checksum::pseudo_header_v4(self.src(), self.dst(), self.protocol(), l4_len)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets version 4 and the header length in bytes (a multiple of 4).
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.bm()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }
    /// Sets the TOS byte.
    pub fn set_tos(&mut self, v: u8) {
        self.bm()[field::TOS] = v;
    }
    /// Sets total length.
    pub fn set_total_len(&mut self, v: u16) {
        put16(self.bm(), field::LENGTH, v);
    }
    /// Sets identification.
    pub fn set_ident(&mut self, v: u16) {
        put16(self.bm(), field::IDENT, v);
    }
    /// Sets the flags/fragment-offset word.
    pub fn set_flags_frag(&mut self, v: u16) {
        put16(self.bm(), field::FLG_OFF, v);
    }
    /// Sets TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.bm()[field::TTL] = v;
    }
    /// Sets the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.bm()[field::PROTOCOL] = v;
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.bm(), field::CHECKSUM, v);
    }
    /// Sets the source.
    pub fn set_src(&mut self, a: [u8; 4]) {
        self.bm()[field::SRC].copy_from_slice(&a);
    }
    /// Sets the destination.
    pub fn set_dst(&mut self, a: [u8; 4]) {
        self.bm()[field::DST].copy_from_slice(&a);
    }
    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = checksum::checksum(&self.b()[..hl]);
        self.set_checksum(c);
    }
}

/// The fields of an option-less IPv4 header, for building packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repr {
    /// Source.
    pub src: [u8; 4],
    /// Destination.
    pub dst: [u8; 4],
    /// Upper-layer protocol.
    pub protocol: u8,
    /// Bytes after the header.
    pub payload_len: usize,
    /// TTL.
    pub ttl: u8,
    /// TOS byte.
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
}

impl Repr {
    /// Reads a header (options are skipped, not kept).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            payload_len: p.total_len() as usize - p.header_len(),
            ttl: p.ttl(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
        })
    }
    /// Header length on the wire.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header with a valid checksum.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_version_and_header_len(HEADER_LEN);
        p.set_tos(self.tos);
        p.set_total_len((HEADER_LEN + self.payload_len) as u16);
        p.set_ident(self.ident);
        p.set_flags_frag(if self.dont_frag { DF } else { 0 });
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src(self.src);
        p.set_dst(self.dst);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 192.168.1.200 -> 192.168.1.100, TCP, 120 bytes, DF, TTL 8: the IPv4
    // header of the kernel GRO selftest's data packets.
    static PACKET_BYTES: [u8; 20] = [
        0x45, 0x00, 0x00, 0x78, 0x00, 0x00, 0x40, 0x00, 0x08, 0x06, 0xee, 0x03, 0xc0, 0xa8, 0x01,
        0xc8, 0xc0, 0xa8, 0x01, 0x64,
    ];

    fn with_payload() -> Vec<u8> {
        let mut v = PACKET_BYTES.to_vec();
        v.resize(120, 0x61);
        v
    }

    #[test]
    fn test_deconstruct() {
        let buf = with_payload();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 120);
        assert!(p.dont_frag());
        assert!(!p.is_fragment());
        assert_eq!(p.ttl(), 8);
        assert_eq!(p.protocol(), 6);
        assert_eq!(p.src(), [192, 168, 1, 200]);
        assert_eq!(p.dst(), [192, 168, 1, 100]);
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 100);
    }

    #[test]
    fn test_emit_matches_bytes_and_etherparse() {
        let repr = Repr {
            src: [192, 168, 1, 200],
            dst: [192, 168, 1, 100],
            protocol: 6,
            payload_len: 100,
            ttl: 8,
            tos: 0,
            ident: 0,
            dont_frag: true,
        };
        let mut buf = vec![0u8; 120];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..20], &PACKET_BYTES[..]);
        let (h, _) = etherparse::Ipv4Header::from_slice(&buf).unwrap();
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        assert_eq!(
            Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(),
            repr
        );
    }

    #[test]
    fn options_are_visible() {
        let mut buf = with_payload();
        // Insert a 12-byte timestamp option, as the kernel selftest does.
        let opt = [0x44, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        buf.splice(20..20, opt);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_version_and_header_len(32);
        p.set_total_len(132);
        p.fill_checksum();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.options(), &opt);
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 100);
    }

    #[test]
    fn bad_inputs() {
        let buf = with_payload();
        assert_eq!(
            Packet::new_checked(&buf[..19]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&buf[..100]).unwrap_err(),
            Error::Truncated
        );
        let mut b = buf.clone();
        b[0] = 0x44;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadHeaderLen
        );
        b[0] = 0x65;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadVersion);
        let mut b = buf;
        b[3] = 10;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadLength);
    }
}
