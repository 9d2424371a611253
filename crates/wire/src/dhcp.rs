//! DHCP messages (RFC 2131, options RFC 2132), as far as a switch that
//! snoops leases needs them: who the message is for (`chaddr`), the
//! address given (`yiaddr`), its type and lease time.
//!
//! ```
//! use hvnet_wire::dhcp::{Message, MessageType};
//! let mut m = vec![0u8; 240];
//! m[0] = 2; // a reply
//! m[1] = 1; // Ethernet
//! m[2] = 6;
//! m[16..20].copy_from_slice(&[198, 18, 0, 9]);
//! m[28..34].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
//! m[236..240].copy_from_slice(&[99, 130, 83, 99]);
//! m.extend([53, 1, 5, 51, 4, 0, 0, 14, 16, 255]);
//! let msg = Message::new_checked(&m[..]).unwrap();
//! assert_eq!(msg.message_type(), Some(MessageType::Ack));
//! assert_eq!(msg.lease_secs(), Some(3600));
//! assert_eq!(msg.your_address(), [198, 18, 0, 9]);
//! ```

use crate::error::{Error, Result};
use crate::ethernet::MacAddr;

/// Bytes before the options: the BOOTP header and the magic cookie.
pub const OPTIONS_AT: usize = 240;
const COOKIE: [u8; 4] = [99, 130, 83, 99];

mod field {
    use core::ops::Range;
    pub const OP: usize = 0;
    pub const HTYPE: usize = 1;
    pub const HLEN: usize = 2;
    pub const YIADDR: Range<usize> = 16..20;
    pub const CHADDR: Range<usize> = 28..34;
    pub const COOKIE: Range<usize> = 236..240;
}

/// The DHCP message type (option 53).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageType {
    /// 1
    Discover,
    /// 2
    Offer,
    /// 3
    Request,
    /// 4
    Decline,
    /// 5: the server gives the address.
    Ack,
    /// 6
    Nak,
    /// 7: the client gives it back.
    Release,
    /// 8
    Inform,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for MessageType {
    fn from(v: u8) -> Self {
        use MessageType::*;
        match v {
            1 => Discover,
            2 => Offer,
            3 => Request,
            4 => Decline,
            5 => Ack,
            6 => Nak,
            7 => Release,
            8 => Inform,
            o => Unknown(o),
        }
    }
}

/// A zero-copy view of a DHCP message over Ethernet (the UDP payload).
#[derive(Debug, Clone, Copy)]
pub struct Message<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Message<T> {
    /// Wraps after checking the length, the magic cookie and that the
    /// client's hardware address is an Ethernet one.
    pub fn new_checked(buffer: T) -> Result<Message<T>> {
        let b = buffer.as_ref();
        if b.len() < OPTIONS_AT {
            return Err(Error::Truncated);
        }
        if b[field::COOKIE] != COOKIE || b[field::HTYPE] != 1 || b[field::HLEN] != 6 {
            return Err(Error::BadHeaderLen);
        }
        Ok(Message { buffer })
    }
    /// True for a server's reply (BOOTREPLY).
    pub fn is_reply(&self) -> bool {
        self.buffer.as_ref()[field::OP] == 2
    }
    /// The address the server gives the client.
    pub fn your_address(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::YIADDR]);
        a
    }
    /// The client's MAC.
    pub fn client_mac(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::CHADDR]);
        MacAddr(a)
    }
    /// Option `code`'s value, if the options (up to the end option or
    /// the buffer's end, pads skipped) hold it whole.
    pub fn option(&self, code: u8) -> Option<&[u8]> {
        let mut o = &self.buffer.as_ref()[OPTIONS_AT..];
        loop {
            match *o.first()? {
                255 => return None,
                0 => o = &o[1..],
                c => {
                    let len = usize::from(*o.get(1)?);
                    let value = o.get(2..2 + len)?;
                    if c == code {
                        return Some(value);
                    }
                    o = &o[2 + len..];
                }
            }
        }
    }
    /// The message type (option 53).
    pub fn message_type(&self) -> Option<MessageType> {
        match self.option(53)? {
            [t] => Some((*t).into()),
            _ => None,
        }
    }
    /// The lease time in seconds (option 51; `u32::MAX` is forever).
    pub fn lease_secs(&self) -> Option<u32> {
        let v: [u8; 4] = self.option(51)?.try_into().ok()?;
        Some(u32::from_be_bytes(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ACK as busybox udhcpd sends it (header, cookie, options), for
    /// 198.18.91.20 to 02:00:00:00:00:02, lease 600 s.
    fn ack() -> Vec<u8> {
        let mut m = vec![0u8; OPTIONS_AT];
        m[0] = 2;
        m[1] = 1;
        m[2] = 6;
        m[4..8].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        m[16..20].copy_from_slice(&[198, 18, 91, 20]);
        m[28..34].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        m[236..240].copy_from_slice(&COOKIE);
        m.extend([53, 1, 5, 54, 4, 198, 18, 91, 1, 0, 51, 4, 0, 0, 2, 88, 1, 4]);
        m.extend([255, 255, 255, 0, 255]);
        m
    }

    #[test]
    fn test_parse() {
        let m = ack();
        let msg = Message::new_checked(&m[..]).unwrap();
        assert!(msg.is_reply());
        assert_eq!(msg.message_type(), Some(MessageType::Ack));
        assert_eq!(msg.your_address(), [198, 18, 91, 20]);
        assert_eq!(msg.client_mac(), MacAddr([2, 0, 0, 0, 0, 2]));
        assert_eq!(msg.lease_secs(), Some(600));
        assert_eq!(msg.option(1), Some(&[255, 255, 255, 0][..]));
        assert_eq!(msg.option(3), None);
    }

    #[test]
    fn refuses_what_is_not_dhcp_over_ethernet_and_reads_cut_options_as_absent() {
        let m = ack();
        assert_eq!(
            Message::new_checked(&m[..239]).unwrap_err(),
            Error::Truncated
        );
        let mut no_cookie = m.clone();
        no_cookie[236] = 0;
        assert!(Message::new_checked(&no_cookie[..]).is_err());
        let mut token_ring = m.clone();
        token_ring[1] = 6;
        assert!(Message::new_checked(&token_ring[..]).is_err());
        for n in OPTIONS_AT..m.len() {
            let msg = Message::new_checked(&m[..n]).unwrap();
            let _ = (msg.message_type(), msg.lease_secs());
        }
        let cut = Message::new_checked(&m[..OPTIONS_AT + 13]).unwrap();
        assert_eq!(cut.lease_secs(), None, "its value cut short");
        let mut bad_len = m.clone();
        bad_len[OPTIONS_AT + 1] = 2;
        let msg = Message::new_checked(&bad_len[..]).unwrap();
        assert_eq!(msg.message_type(), None, "a type of two bytes");
    }
}
