//! ARP for IPv4 over Ethernet (RFC 826): the only kind a tunnel endpoint
//! answers and asks with. Other hardware or protocol types are refused by
//! [`Packet::new_checked`].
//!
//! ```
//! use hvnet_wire::arp::{Operation, Packet, Repr};
//! use hvnet_wire::MacAddr;
//! let req = Repr { op: Operation::Request, sender_mac: MacAddr([2, 0, 0, 0, 0, 1]),
//!     sender_ip: [198, 18, 0, 1], target_mac: MacAddr([0; 6]), target_ip: [198, 18, 0, 2] };
//! let mut buf = [0u8; 28];
//! req.emit(&mut Packet::new_unchecked(&mut buf[..]));
//! assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()), Ok(req));
//! ```

use crate::error::{Error, Result};
use crate::ethernet::MacAddr;

/// Length of an Ethernet/IPv4 ARP packet.
pub const LEN: usize = 28;

mod field {
    use core::ops::Range;
    pub const HTYPE: Range<usize> = 0..2;
    pub const PTYPE: Range<usize> = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Range<usize> = 6..8;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

/// ARP operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Who has `target_ip`?
    Request,
    /// `sender_ip` is at `sender_mac`.
    Reply,
    /// Anything else (kept representable).
    Unknown(u16),
}

impl From<u16> for Operation {
    fn from(v: u16) -> Self {
        match v {
            1 => Operation::Request,
            2 => Operation::Reply,
            o => Operation::Unknown(o),
        }
    }
}

impl From<Operation> for u16 {
    fn from(o: Operation) -> u16 {
        match o {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Unknown(v) => v,
        }
    }
}

/// A zero-copy view of an ARP packet.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps without checks.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }
    /// Wraps after checking the length and that this is Ethernet/IPv4 ARP.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        let b = p.buffer.as_ref();
        if b.len() < LEN {
            return Err(Error::Truncated);
        }
        if b[field::HTYPE] != [0, 1]
            || b[field::PTYPE] != [8, 0]
            || b[field::HLEN] != 6
            || b[field::PLEN] != 4
        {
            return Err(Error::BadHeaderLen);
        }
        Ok(p)
    }
    fn bytes<const N: usize>(&self, r: core::ops::Range<usize>) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buffer.as_ref()[r]);
        out
    }
    /// The operation.
    pub fn operation(&self) -> Operation {
        u16::from_be_bytes(self.bytes(field::OPER)).into()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set(&mut self, r: core::ops::Range<usize>, v: &[u8]) {
        self.buffer.as_mut()[r].copy_from_slice(v);
    }
}

/// An Ethernet/IPv4 ARP packet's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repr {
    /// Request or reply.
    pub op: Operation,
    /// Sender hardware address.
    pub sender_mac: MacAddr,
    /// Sender protocol address.
    pub sender_ip: [u8; 4],
    /// Target hardware address (zero in a request).
    pub target_mac: MacAddr,
    /// Target protocol address.
    pub target_ip: [u8; 4],
}

impl Repr {
    /// Reads a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        Ok(Repr {
            op: p.operation(),
            sender_mac: MacAddr(p.bytes(field::SHA)),
            sender_ip: p.bytes(field::SPA),
            target_mac: MacAddr(p.bytes(field::THA)),
            target_ip: p.bytes(field::TPA),
        })
    }
    /// The Ethernet frame that carries it, as its sender sends it: from
    /// `sender_mac`, to everyone for a request, else to `target_mac`.
    pub fn frame(&self) -> [u8; 14 + LEN] {
        let mut f = [0u8; 14 + LEN];
        let dst = match self.op {
            Operation::Request => MacAddr::BROADCAST,
            _ => self.target_mac,
        };
        f[0..6].copy_from_slice(&dst.0);
        f[6..12].copy_from_slice(&self.sender_mac.0);
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        self.emit(&mut Packet::new_unchecked(&mut f[14..]));
        f
    }
    /// Writes all 28 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set(field::HTYPE, &[0, 1]);
        p.set(field::PTYPE, &[8, 0]);
        p.buffer.as_mut()[field::HLEN] = 6;
        p.buffer.as_mut()[field::PLEN] = 4;
        p.set(field::OPER, &u16::from(self.op).to_be_bytes());
        p.set(field::SHA, &self.sender_mac.0);
        p.set(field::SPA, &self.sender_ip);
        p.set(field::THA, &self.target_mac.0);
        p.set(field::TPA, &self.target_ip);
    }
}

/// Bytes of the frame [`rarp_announcement`] builds: a minimum Ethernet
/// frame (without its FCS).
pub const ANNOUNCEMENT_LEN: usize = 60;

/// The frame a hypervisor sends for a guest that has just arrived on a
/// host after a live migration (QEMU's `announce-self`, DPDK's vhost
/// library on `SEND_RARP`): a broadcast reverse-ARP request (RFC 903,
/// EtherType 0x8035) from `mac`, asking for its own address, so that every
/// switch on the way learns where `mac` is now.
pub fn rarp_announcement(mac: MacAddr) -> [u8; ANNOUNCEMENT_LEN] {
    let mut f = [0u8; ANNOUNCEMENT_LEN];
    f[0..6].copy_from_slice(&MacAddr::BROADCAST.0);
    f[6..12].copy_from_slice(&mac.0);
    f[12..14].copy_from_slice(&0x8035u16.to_be_bytes());
    // Operation 3: reverse request; no protocol addresses.
    Repr {
        op: Operation::Unknown(3),
        sender_mac: mac,
        sender_ip: [0; 4],
        target_mac: mac,
        target_ip: [0; 4],
    }
    .emit(&mut Packet::new_unchecked(&mut f[14..14 + LEN]));
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU's announcement (`announce_self_create`) for 52:54:00:12:34:56,
    /// byte for byte.
    #[test]
    fn a_migrated_guests_announcement_is_qemus() {
        let mac = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
        let f = rarp_announcement(MacAddr(mac));
        let mut want = vec![0xff; 6];
        want.extend(mac);
        want.extend([0x80, 0x35, 0, 1, 8, 0, 6, 4, 0, 3]);
        want.extend(mac);
        want.extend([0; 4]);
        want.extend(mac);
        want.extend([0; 4]);
        want.resize(ANNOUNCEMENT_LEN, 0);
        assert_eq!(f.to_vec(), want);
    }

    /// A request captured from Linux (`arping`): who has 198.18.1.1? tell
    /// 198.18.1.2 at 7a:5e:1c:9b:3f:10.
    static REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x7a, 0x5e, 0x1c, 0x9b, 0x3f, 0x10, 198,
        18, 1, 2, 0, 0, 0, 0, 0, 0, 198, 18, 1, 1,
    ];

    #[test]
    fn test_parse() {
        let r = Repr::parse(&Packet::new_checked(&REQUEST[..]).unwrap()).unwrap();
        assert_eq!(r.op, Operation::Request);
        assert_eq!(r.sender_mac, MacAddr([0x7a, 0x5e, 0x1c, 0x9b, 0x3f, 0x10]));
        assert_eq!(
            (r.sender_ip, r.target_ip),
            ([198, 18, 1, 2], [198, 18, 1, 1])
        );
    }

    #[test]
    fn test_emit() {
        let r = Repr::parse(&Packet::new_checked(&REQUEST[..]).unwrap()).unwrap();
        let mut buf = [0u8; LEN];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, REQUEST);
    }

    #[test]
    fn refuses_what_is_not_ethernet_ipv4_arp() {
        assert_eq!(
            Packet::new_checked(&REQUEST[..27]).unwrap_err(),
            Error::Truncated
        );
        let mut ipv6 = REQUEST;
        ipv6[2] = 0x86;
        assert!(Packet::new_checked(&ipv6[..]).is_err());
        let mut odd = REQUEST;
        odd[7] = 9;
        let p = Packet::new_checked(&odd[..]).unwrap();
        assert_eq!(p.operation(), Operation::Unknown(9));
    }
}
