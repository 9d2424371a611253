//! IPv6 headers (RFC 8200) and the extension headers a switch must step
//! over: hop-by-hop options, routing, destination options and fragment.

use crate::checksum::{self, Sum};
use crate::error::{be16, be32, put16, put32, Error, Result};

/// Fixed header length.
pub const HEADER_LEN: usize = 40;
/// Most extension headers followed before a packet is refused.
pub const MAX_EXT_HEADERS: usize = 8;

/// Next-header values of the extension headers we walk.
pub mod next_header {
    /// Hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// Routing header.
    pub const ROUTING: u8 = 43;
    /// Fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Destination options.
    pub const DEST_OPTS: u8 = 60;
    /// No next header.
    pub const NONE: u8 = 59;
}

mod field {
    use core::ops::Range;
    pub const VER_TC_FLOW: usize = 0;
    pub const LENGTH: usize = 4;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

/// A zero-copy view of an IPv6 packet.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// What walking the extension headers found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extensions {
    /// The upper-layer protocol after the last extension header.
    pub protocol: u8,
    /// Bytes of extension headers (the upper layer starts at 40 + this).
    pub len: usize,
    /// A fragment header was present.
    pub fragment: bool,
    /// How many extension headers there were.
    pub count: usize,
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
    /// Checks version and that the payload length fits in the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.b();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::BadVersion);
        }
        if HEADER_LEN + self.payload_len() as usize > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Version nibble.
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        ((be16(self.b(), 0) >> 4) & 0xff) as u8
    }
    /// Flow label.
    pub fn flow_label(&self) -> u32 {
        be32(self.b(), field::VER_TC_FLOW) & 0x000f_ffff
    }
    /// The first word: version, traffic class, flow label.
    pub fn first_word(&self) -> u32 {
        be32(self.b(), field::VER_TC_FLOW)
    }
    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        be16(self.b(), field::LENGTH)
    }
    /// The next-header field of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.b()[field::NXT_HDR]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[field::HOP_LIMIT]
    }
    /// Source.
    pub fn src(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.b()[field::SRC]);
        a
    }
    /// Destination.
    pub fn dst(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.b()[field::DST]);
        a
    }
    /// Walks hop-by-hop, routing, destination-options and fragment headers
    /// up to the upper-layer protocol.
    pub fn extensions(&self) -> Result<Extensions> {
        let b = self.b();
        let end = (HEADER_LEN + self.payload_len() as usize).min(b.len());
        let mut proto = self.next_header();
        let mut off = HEADER_LEN;
        let mut fragment = false;
        let mut count = 0;
        loop {
            let len = match proto {
                next_header::HOP_BY_HOP | next_header::ROUTING | next_header::DEST_OPTS => {
                    if off + 2 > end {
                        return Err(Error::Truncated);
                    }
                    (b[off + 1] as usize + 1) * 8
                }
                next_header::FRAGMENT => {
                    fragment = true;
                    8
                }
                _ => {
                    return Ok(Extensions {
                        protocol: proto,
                        len: off - HEADER_LEN,
                        fragment,
                        count,
                    });
                }
            };
            if count == MAX_EXT_HEADERS {
                return Err(Error::TooDeep);
            }
            if off + len > end {
                return Err(Error::Truncated);
            }
            proto = b[off];
            off += len;
            count += 1;
        }
    }
    /// The pseudo-header sum for an upper-layer length.
    pub fn pseudo_header(&self, next_header: u8, l4_len: u32) -> Sum {
        checksum::pseudo_header_v6(self.src(), self.dst(), next_header, l4_len)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version, traffic class and flow label at once.
    pub fn set_first_word(&mut self, version: u8, traffic_class: u8, flow_label: u32) {
        let w = ((version as u32) << 28) | ((traffic_class as u32) << 20) | (flow_label & 0xf_ffff);
        put32(self.buffer.as_mut(), field::VER_TC_FLOW, w);
    }
    /// Sets payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::LENGTH, v);
    }
    /// Sets the fixed header's next-header field.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    /// Sets the source.
    pub fn set_src(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a);
    }
    /// Sets the destination.
    pub fn set_dst(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a);
    }
}

/// The fields of an IPv6 header without extensions, for building packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repr {
    /// Source.
    pub src: [u8; 16],
    /// Destination.
    pub dst: [u8; 16],
    /// Next header.
    pub next_header: u8,
    /// Bytes after the fixed header.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
}

impl Repr {
    /// Reads the fixed header.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            payload_len: p.payload_len() as usize,
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }
    /// Header length on the wire.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the fixed header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_first_word(6, self.traffic_class, self.flow_label);
        p.set_payload_len(self.payload_len as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src(self.src);
        p.set_dst(self.dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(next: u8, ext: &[u8], payload: usize) -> Vec<u8> {
        let repr = Repr {
            src: [0xfd, 0xaa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            dst: [0xfd, 0xaa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            next_header: next,
            payload_len: ext.len() + payload,
            hop_limit: 8,
            traffic_class: 0x12,
            flow_label: 0xabcde,
        };
        let mut buf = vec![0u8; 40];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        buf.extend_from_slice(ext);
        buf.resize(40 + ext.len() + payload, 0x61);
        buf
    }

    #[test]
    fn test_deconstruct_and_etherparse_agrees() {
        let buf = packet(6, &[], 20);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.traffic_class(), 0x12);
        assert_eq!(p.flow_label(), 0xabcde);
        assert_eq!(p.hop_limit(), 8);
        let (h, _) = etherparse::Ipv6Header::from_slice(&buf).unwrap();
        assert_eq!(h.traffic_class, 0x12);
        assert_eq!(h.flow_label.value(), 0xabcde);
        assert_eq!(h.payload_length, 20);
        assert_eq!(Repr::parse(&p).unwrap().next_header, 6);
    }

    #[test]
    fn walks_extension_headers() {
        // hop-by-hop (8) -> routing (16) -> dest opts (8) -> fragment (8) -> TCP
        let mut ext = vec![next_header::ROUTING, 0, 1, 4, 0, 0, 0, 0];
        ext.extend_from_slice(&[
            next_header::DEST_OPTS,
            1,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ]);
        ext.extend_from_slice(&[next_header::FRAGMENT, 0, 1, 4, 0, 0, 0, 0]);
        ext.extend_from_slice(&[6, 0, 0, 1, 0, 0, 0, 7]);
        let buf = packet(next_header::HOP_BY_HOP, &ext, 20);
        let e = Packet::new_checked(&buf[..]).unwrap().extensions().unwrap();
        assert_eq!(
            e,
            Extensions {
                protocol: 6,
                len: 40,
                fragment: true,
                count: 4
            }
        );
    }

    #[test]
    fn truncated_extension_is_an_error() {
        let ext = [6u8, 4, 0, 0, 0, 0, 0, 0]; // claims 40 bytes
        let buf = packet(next_header::DEST_OPTS, &ext, 4);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.extensions().unwrap_err(), Error::Truncated);
        assert_eq!(
            Packet::new_checked(&buf[..30]).unwrap_err(),
            Error::Truncated
        );
    }
}
