//! TCP headers (RFC 9293), options included.

use crate::checksum::Sum;
use crate::error::{be16, be32, put16, put32, Error, Result};

/// Minimum header length.
pub const HEADER_LEN: usize = 20;
/// Offset of the checksum field.
pub const CHECKSUM_OFFSET: usize = 16;

/// Flag bits, as in the low byte of the data-offset/flags word.
pub mod flags {
    /// FIN
    pub const FIN: u8 = 0x01;
    /// SYN
    pub const SYN: u8 = 0x02;
    /// RST
    pub const RST: u8 = 0x04;
    /// PSH
    pub const PSH: u8 = 0x08;
    /// ACK
    pub const ACK: u8 = 0x10;
    /// URG
    pub const URG: u8 = 0x20;
    /// ECE
    pub const ECE: u8 = 0x40;
    /// CWR
    pub const CWR: u8 = 0x80;
}

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const OFF_FLAGS: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
}

/// A zero-copy view of a TCP segment.
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
    /// Checks the fixed header and the options fit.
    pub fn check_len(&self) -> Result<()> {
        let b = self.b();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::BadHeaderLen);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        Ok(())
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.b(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), field::DST_PORT)
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.b(), field::SEQ)
    }
    /// Acknowledgment number.
    pub fn ack(&self) -> u32 {
        be32(self.b(), field::ACK)
    }
    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        ((self.b()[field::OFF_FLAGS] >> 4) as usize) * 4
    }
    /// The flag byte (CWR … FIN).
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }
    /// Data offset, reserved bits and flags as one word, as Linux's
    /// `tcp_flag_word` compares them.
    pub fn flag_word(&self) -> u16 {
        be16(self.b(), field::OFF_FLAGS)
    }
    /// Window.
    pub fn window(&self) -> u16 {
        be16(self.b(), field::WINDOW)
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM)
    }
    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be16(self.b(), field::URGENT)
    }
    /// The raw option bytes.
    pub fn options(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.header_len()]
    }
    /// The options, decoded.
    pub fn option_iter(&self) -> OptionIter<'_> {
        OptionIter {
            rest: self.options(),
        }
    }
    /// The data after the header.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
    /// Verifies the checksum over the whole buffer given the pseudo-header.
    pub fn verify_checksum(&self, pseudo: Sum) -> bool {
        crate::checksum::verifies(pseudo.add_bytes(self.b()))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        put16(self.bm(), field::SRC_PORT, v)
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        put16(self.bm(), field::DST_PORT, v)
    }
    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        put32(self.bm(), field::SEQ, v)
    }
    /// Sets the acknowledgment number.
    pub fn set_ack(&mut self, v: u32) {
        put32(self.bm(), field::ACK, v)
    }
    /// Sets the header length (a multiple of 4), clearing reserved bits.
    pub fn set_header_len(&mut self, len: usize) {
        self.bm()[field::OFF_FLAGS] = ((len / 4) as u8) << 4;
    }
    /// Sets the flag byte.
    pub fn set_flags(&mut self, f: u8) {
        self.bm()[field::FLAGS] = f;
    }
    /// Sets the window.
    pub fn set_window(&mut self, v: u16) {
        put16(self.bm(), field::WINDOW, v)
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.bm(), field::CHECKSUM, v)
    }
    /// Sets the urgent pointer.
    pub fn set_urgent(&mut self, v: u16) {
        put16(self.bm(), field::URGENT, v)
    }
    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self, pseudo: Sum) {
        self.set_checksum(0);
        let c = pseudo.add_bytes(self.b()).finish();
        self.set_checksum(c);
    }
}

/// A decoded TCP option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// End of option list.
    End,
    /// No-operation.
    Nop,
    /// Maximum segment size.
    Mss(u16),
    /// Window scale shift.
    WindowScale(u8),
    /// SACK permitted.
    SackPermitted,
    /// SACK blocks, raw.
    Sack(&'a [u8]),
    /// Timestamps: value and echo reply.
    Timestamp(u32, u32),
    /// Anything else: kind and data.
    Unknown(u8, &'a [u8]),
}

/// Iterator over TCP options; yields `Err` once on a malformed option.
pub struct OptionIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for OptionIter<'a> {
    type Item = Result<TcpOption<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        let (&kind, tail) = self.rest.split_first()?;
        match kind {
            0 => {
                self.rest = &[];
                Some(Ok(TcpOption::End))
            }
            1 => {
                self.rest = tail;
                Some(Ok(TcpOption::Nop))
            }
            _ => {
                let len = match tail.first() {
                    Some(&l) if l >= 2 && l as usize <= self.rest.len() => l as usize,
                    _ => {
                        self.rest = &[];
                        return Some(Err(Error::BadHeaderLen));
                    }
                };
                let data = &self.rest[2..len];
                self.rest = &self.rest[len..];
                Some(Ok(match (kind, data.len()) {
                    (2, 2) => TcpOption::Mss(be16(data, 0)),
                    (3, 1) => TcpOption::WindowScale(data[0]),
                    (4, 0) => TcpOption::SackPermitted,
                    (5, _) => TcpOption::Sack(data),
                    (8, 8) => TcpOption::Timestamp(be32(data, 0), be32(data, 4)),
                    _ => TcpOption::Unknown(kind, data),
                }))
            }
        }
    }
}

/// The fields of a TCP header, for building segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flag byte.
    pub flags: u8,
    /// Window.
    pub window: u16,
    /// Raw options, padded to a multiple of 4 by the caller.
    pub options: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Reads the header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &'a Packet<&'a T>) -> Result<Repr<'a>> {
        p.check_len()?;
        let b: &'a [u8] = p.buffer.as_ref();
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq(),
            ack: p.ack(),
            flags: p.flags(),
            window: p.window(),
            options: &b[HEADER_LEN..p.header_len()],
        })
    }
    /// Header length on the wire.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }
    /// Writes the header (checksum left zero: fill it once the payload is in).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq(self.seq);
        p.set_ack(self.ack);
        p.set_header_len(self.buffer_len());
        p.set_flags(self.flags);
        p.set_window(self.window);
        p.set_checksum(0);
        p.set_urgent(0);
        p.bm()[HEADER_LEN..self.buffer_len()].copy_from_slice(self.options);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::pseudo_header_v4;

    #[test]
    fn test_round_trip_with_options_and_checksum() {
        let opts = [1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9];
        let repr = Repr {
            src_port: 1500,
            dst_port: 8000,
            seq: 100,
            ack: 100,
            flags: flags::ACK | flags::PSH,
            window: 65535,
            options: &opts,
        };
        let mut buf = vec![0u8; repr.buffer_len() + 10];
        buf[repr.buffer_len()..].copy_from_slice(b"0123456789");
        let mut p = Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut p);
        let ph = pseudo_header_v4([10, 0, 0, 1], [10, 0, 0, 2], 6, 42);
        p.fill_checksum(ph);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum(ph));
        assert_eq!(Repr::parse(&p).unwrap(), repr);
        let o: Vec<_> = p.option_iter().collect::<Result<_>>().unwrap();
        assert_eq!(
            o,
            vec![TcpOption::Nop, TcpOption::Nop, TcpOption::Timestamp(7, 9)]
        );
        assert_eq!(p.payload(), b"0123456789");
        // etherparse computes the same checksum independently.
        let (h, _) = etherparse::TcpHeader::from_slice(&buf).unwrap();
        let c = h
            .calc_checksum_ipv4_raw([10, 0, 0, 1], [10, 0, 0, 2], b"0123456789")
            .unwrap();
        assert_eq!(c, Packet::new_checked(&buf[..]).unwrap().checksum());
    }

    #[test]
    fn malformed_options_and_lengths() {
        let mut buf = [0u8; 24];
        buf[12] = 0x60;
        buf[20] = 2;
        buf[21] = 9; // MSS option claiming 9 bytes
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.option_iter().next(), Some(Err(Error::BadHeaderLen)));
        buf[12] = 0x40;
        assert_eq!(
            Packet::new_checked(&buf[..]).unwrap_err(),
            Error::BadHeaderLen
        );
        buf[12] = 0x70;
        assert_eq!(Packet::new_checked(&buf[..]).unwrap_err(), Error::Truncated);
    }
}
