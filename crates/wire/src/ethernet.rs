//! Ethernet II frames and 802.1Q / 802.1ad tags.

use crate::error::{be16, put16, Error, Result};

/// A MAC address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// True for group (multicast and broadcast) addresses.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl core::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl core::str::FromStr for MacAddr {
    type Err = Error;
    fn from_str(s: &str) -> Result<MacAddr> {
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for b in out.iter_mut() {
            let p = parts.next().ok_or(Error::BadLength)?;
            *b = u8::from_str_radix(p, 16).map_err(|_| Error::BadLength)?;
        }
        if parts.next().is_some() {
            return Err(Error::BadLength);
        }
        Ok(MacAddr(out))
    }
}

/// EtherType values we act on; anything else stays representable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// 0x0800
    Ipv4,
    /// 0x0806
    Arp,
    /// 0x86dd
    Ipv6,
    /// 0x8100, a customer VLAN tag.
    Vlan,
    /// 0x88a8, a service VLAN tag (QinQ).
    QinQ,
    /// Any other value.
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            0x8100 => EtherType::Vlan,
            0x88a8 => EtherType::QinQ,
            o => EtherType::Unknown(o),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> u16 {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Vlan => 0x8100,
            EtherType::QinQ => 0x88a8,
            EtherType::Unknown(o) => o,
        }
    }
}

/// Length of the untagged Ethernet header.
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;
/// Most tags followed before a frame is refused.
pub const MAX_VLAN_TAGS: usize = 2;

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
}

/// A zero-copy view of an Ethernet frame.
#[derive(Debug, Clone, Copy)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking it; accessors may panic on short
    /// buffers. Use on buffers you built.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer after checking it holds the 14-byte header.
    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        let f = Frame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks the buffer is long enough for the untagged header.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Destination address.
    pub fn dst(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        MacAddr(a)
    }

    /// Source address.
    pub fn src(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        MacAddr(a)
    }

    /// The outer EtherType (a VLAN TPID if the frame is tagged).
    pub fn ethertype(&self) -> EtherType {
        be16(self.buffer.as_ref(), field::ETHERTYPE).into()
    }

    /// Walks the VLAN tags: returns the VLAN IDs found (outer first, 0 where
    /// absent), the EtherType after the tags, and the full L2 header length.
    pub fn walk_tags(&self) -> Result<L2> {
        let b = self.buffer.as_ref();
        let mut off = field::ETHERTYPE;
        let mut vlans = [None; MAX_VLAN_TAGS];
        let mut n = 0;
        loop {
            if b.len() < off + 2 {
                return Err(Error::Truncated);
            }
            let et = EtherType::from(be16(b, off));
            match et {
                EtherType::Vlan | EtherType::QinQ => {
                    if n == MAX_VLAN_TAGS {
                        return Err(Error::TooDeep);
                    }
                    if b.len() < off + 2 + VLAN_TAG_LEN {
                        return Err(Error::Truncated);
                    }
                    vlans[n] = Some(be16(b, off + 2) & 0x0fff);
                    n += 1;
                    off += VLAN_TAG_LEN;
                }
                _ => {
                    return Ok(L2 {
                        ethertype: et,
                        header_len: off + 2,
                        vlans,
                    });
                }
            }
        }
    }

    /// The frame after the untagged header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination address.
    pub fn set_dst(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.0);
    }
    /// Sets the source address.
    pub fn set_src(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.0);
    }
    /// Sets the outer EtherType.
    pub fn set_ethertype(&mut self, t: EtherType) {
        put16(self.buffer.as_mut(), field::ETHERTYPE, t.into());
    }
}

/// What the L2 header walk found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2 {
    /// EtherType of the payload, after any tags.
    pub ethertype: EtherType,
    /// Bytes of Ethernet header including tags.
    pub header_len: usize,
    /// VLAN IDs, outer first.
    pub vlans: [Option<u16>; MAX_VLAN_TAGS],
}

/// The fields of an untagged Ethernet header, for building frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repr {
    /// Destination.
    pub dst: MacAddr,
    /// Source.
    pub src: MacAddr,
    /// EtherType.
    pub ethertype: EtherType,
}

impl Repr {
    /// Reads the untagged header.
    pub fn parse<T: AsRef<[u8]>>(f: &Frame<T>) -> Result<Repr> {
        f.check_len()?;
        Ok(Repr {
            dst: f.dst(),
            src: f.src(),
            ethertype: f.ethertype(),
        })
    }
    /// Header length on the wire.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, f: &mut Frame<T>) {
        f.set_dst(self.dst);
        f.set_src(self.src);
        f.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static FRAME_BYTES: [u8; 18] = [
        0xaa, 0x00, 0x00, 0x00, 0x00, 0x01, 0xaa, 0x00, 0x00, 0x00, 0x00, 0x02, 0x81, 0x00, 0x20,
        0x64, 0x08, 0x00,
    ];

    #[test]
    fn test_deconstruct() {
        let f = Frame::new_checked(&FRAME_BYTES[..]).unwrap();
        assert_eq!(f.dst().to_string(), "aa:00:00:00:00:01");
        assert_eq!(f.src().to_string(), "aa:00:00:00:00:02");
        assert_eq!(f.ethertype(), EtherType::Vlan);
        let l2 = f.walk_tags().unwrap();
        assert_eq!(l2.ethertype, EtherType::Ipv4);
        assert_eq!(l2.header_len, 18);
        assert_eq!(l2.vlans, [Some(100), None]);
    }

    #[test]
    fn test_construct_and_round_trip() {
        let mut buf = [0u8; 14];
        let repr = Repr {
            dst: "aa:00:00:00:00:01".parse().unwrap(),
            src: "aa:00:00:00:00:02".parse().unwrap(),
            ethertype: EtherType::Ipv6,
        };
        repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
        assert_eq!(
            Repr::parse(&Frame::new_checked(&buf[..]).unwrap()).unwrap(),
            repr
        );
        assert_eq!(&buf[12..], &[0x86, 0xdd]);
    }

    #[test]
    fn truncated_and_too_deep() {
        assert_eq!(
            Frame::new_checked(&FRAME_BYTES[..13]).unwrap_err(),
            Error::Truncated
        );
        let f = Frame::new_checked(&FRAME_BYTES[..16]).unwrap();
        assert_eq!(f.walk_tags().unwrap_err(), Error::Truncated);
        let mut deep = vec![0u8; 12];
        for _ in 0..3 {
            deep.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
        }
        deep.extend_from_slice(&[0x08, 0x00]);
        assert_eq!(
            Frame::new_checked(&deep[..])
                .unwrap()
                .walk_tags()
                .unwrap_err(),
            Error::TooDeep
        );
    }
}
