//! LACPDUs (IEEE 802.1AX-2020 §6.4.2, the Link Aggregation Control
//! Protocol's one frame): what a team member and its partner on the
//! physical switch tell each other of their systems, keys, ports and
//! states. The view covers the payload after the Ethernet header (the
//! frame goes to [`DST`], EtherType [`ETHERTYPE`], subtype [`SUBTYPE`]).
//!
//! Written here, not taken from a crate: neither smoltcp nor etherparse
//! has Slow Protocols. Parse untrusted input only through
//! [`Packet::new_checked`] (the lengths and TLV headers the parse reads are
//! checked there); a version above 1 is read as version 1, as the standard
//! asks of a receiver (§6.4.2.3).
//!
//! ```
//! use hvnet_wire::lacp::{Packet, Repr, Info, State};
//! use hvnet_wire::MacAddr;
//! let actor = Info { system_priority: 65535, system: MacAddr([2, 0, 0, 0, 0, 1]), key: 1,
//!     port_priority: 255, port: 1, state: State(State::ACTIVITY | State::AGGREGATION) };
//! let pdu = Repr { actor, partner: Info::default(), collector_max_delay: 0 };
//! let mut buf = [0u8; hvnet_wire::lacp::LEN];
//! pdu.emit(&mut Packet::new_unchecked(&mut buf[..]));
//! assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()), pdu);
//! ```

use crate::ethernet::MacAddr;

/// The Slow Protocols multicast address LACPDUs are sent to.
pub const DST: MacAddr = MacAddr([0x01, 0x80, 0xc2, 0x00, 0x00, 0x02]);
/// The Slow Protocols EtherType.
pub const ETHERTYPE: u16 = 0x8809;
/// The Slow Protocols subtype of LACP.
pub const SUBTYPE: u8 = 1;
/// A LACPDU's length after the Ethernet header (the frame is padded to it).
pub const LEN: usize = 110;
/// Bytes a parse reads: subtype, version, the actor's and the partner's
/// TLVs (the rest is the collector's, which nothing here depends on).
const READ_LEN: usize = 44;

mod field {
    use core::ops::Range;
    pub const SUBTYPE: usize = 0;
    pub const VERSION: usize = 1;
    pub const ACTOR: Range<usize> = 2..22;
    pub const PARTNER: Range<usize> = 22..42;
    pub const COLLECTOR: Range<usize> = 42..58;
    pub const TERMINATOR: Range<usize> = 58..60;
}

/// Why bytes are not a LACPDU: one reason each, each counted apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// Shorter than the actor's and the partner's TLVs.
    Truncated,
    /// Another Slow Protocol (a marker PDU, OAM).
    NotLacp,
    /// Version 0, which no LACP has.
    BadVersion,
    /// The actor TLV's type or length is not LACP's (1, 20).
    BadActor,
    /// The partner TLV's type or length is not LACP's (2, 20).
    BadPartner,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "LACPDU truncated",
            Error::NotLacp => "not a LACPDU (another slow protocol)",
            Error::BadVersion => "LACP version 0",
            Error::BadActor => "bad actor information TLV",
            Error::BadPartner => "bad partner information TLV",
        })
    }
}

impl std::error::Error for Error {}

/// An actor's or partner's state octet (§6.4.2.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct State(pub u8);

impl State {
    /// Active LACP (sends whether or not the partner does).
    pub const ACTIVITY: u8 = 0x01;
    /// Short timeout: asks the partner for a LACPDU a second.
    pub const TIMEOUT: u8 = 0x02;
    /// The link may be aggregated (not an individual link).
    pub const AGGREGATION: u8 = 0x04;
    /// In sync: the link is in the right aggregate.
    pub const SYNCHRONIZATION: u8 = 0x08;
    /// Collecting frames from the link.
    pub const COLLECTING: u8 = 0x10;
    /// Distributing frames on the link.
    pub const DISTRIBUTING: u8 = 0x20;
    /// The partner information is the default, none received.
    pub const DEFAULTED: u8 = 0x40;
    /// The receive machine's partner information expired.
    pub const EXPIRED: u8 = 0x80;

    /// True if every bit of `bits` is set.
    pub fn has(self, bits: u8) -> bool {
        self.0 & bits == bits
    }
}

/// One side's information TLV: who it is, which aggregate its port may
/// join (the key), and its state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Info {
    /// System priority (lower wins).
    pub system_priority: u16,
    /// System identifier (a MAC address of the system).
    pub system: MacAddr,
    /// Operational key: ports with the same key may aggregate.
    pub key: u16,
    /// Port priority.
    pub port_priority: u16,
    /// Port number.
    pub port: u16,
    /// State.
    pub state: State,
}

impl Info {
    fn read(b: &[u8]) -> Info {
        let be = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
        Info {
            system_priority: be(2),
            system: MacAddr(b[4..10].try_into().expect("six bytes")),
            key: be(10),
            port_priority: be(12),
            port: be(14),
            state: State(b[16]),
        }
    }

    fn write(&self, tlv: u8, b: &mut [u8]) {
        b[0] = tlv;
        b[1] = 20;
        b[2..4].copy_from_slice(&self.system_priority.to_be_bytes());
        b[4..10].copy_from_slice(&self.system.0);
        b[10..12].copy_from_slice(&self.key.to_be_bytes());
        b[12..14].copy_from_slice(&self.port_priority.to_be_bytes());
        b[14..16].copy_from_slice(&self.port.to_be_bytes());
        b[16] = self.state.0;
        b[17..20].fill(0);
    }
}

/// A zero-copy view of a LACPDU (after the Ethernet header).
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps without checks (a buffer being built).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps after checking the subtype, version and both TLVs' headers.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let b = buffer.as_ref();
        if b.is_empty() {
            return Err(Error::Truncated);
        }
        if b[field::SUBTYPE] != SUBTYPE {
            return Err(Error::NotLacp);
        }
        if b.len() < READ_LEN {
            return Err(Error::Truncated);
        }
        if b[field::VERSION] == 0 {
            return Err(Error::BadVersion);
        }
        if b[field::ACTOR][..2] != [1, 20] {
            return Err(Error::BadActor);
        }
        if b[field::PARTNER][..2] != [2, 20] {
            return Err(Error::BadPartner);
        }
        Ok(Packet { buffer })
    }

    /// The actor: the sender.
    pub fn actor(&self) -> Info {
        Info::read(&self.buffer.as_ref()[field::ACTOR])
    }

    /// The partner: what the sender knows of the receiver.
    pub fn partner(&self) -> Info {
        Info::read(&self.buffer.as_ref()[field::PARTNER])
    }

    /// The collector's maximum delay, in tens of microseconds (0 when the
    /// PDU was cut before it).
    pub fn collector_max_delay(&self) -> u16 {
        let b = self.buffer.as_ref();
        let at = field::COLLECTOR.start + 2;
        b.get(at..at + 2)
            .map_or(0, |d| u16::from_be_bytes([d[0], d[1]]))
    }
}

/// A LACPDU's fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Repr {
    /// The sender.
    pub actor: Info,
    /// What the sender knows of the receiver.
    pub partner: Info,
    /// The sender's collector delay, tens of microseconds.
    pub collector_max_delay: u16,
}

impl Repr {
    /// Reads a checked PDU.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            actor: p.actor(),
            partner: p.partner(),
            collector_max_delay: p.collector_max_delay(),
        }
    }

    /// Writes all [`LEN`] bytes: version 1, the three TLVs, the
    /// terminator and zero padding.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let b = &mut p.buffer.as_mut()[..LEN];
        b.fill(0);
        b[field::SUBTYPE] = SUBTYPE;
        b[field::VERSION] = 1;
        self.actor.write(1, &mut b[field::ACTOR]);
        self.partner.write(2, &mut b[field::PARTNER]);
        let c = &mut b[field::COLLECTOR];
        c[0] = 3;
        c[1] = 16;
        c[2..4].copy_from_slice(&self.collector_max_delay.to_be_bytes());
        b[field::TERMINATOR].fill(0);
    }

    /// The whole Ethernet frame from `src` (a member's own address).
    pub fn frame(&self, src: MacAddr) -> [u8; 14 + LEN] {
        let mut f = [0u8; 14 + LEN];
        f[0..6].copy_from_slice(&DST.0);
        f[6..12].copy_from_slice(&src.0);
        f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        self.emit(&mut Packet::new_unchecked(&mut f[14..]));
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A LACPDU Open vSwitch 3.x sent (bond0, lacp=active, lacp-time=fast),
    /// after the Ethernet header: system 36:5c:6d:07:b3:4e priority 65534,
    /// key 3, port 3; partner 02:00:00:00:00:01 key 1 port 1 in sync.
    static PACKET_BYTES: [u8; 60] = [
        0x01, 0x01, // subtype, version
        0x01, 0x14, 0xff, 0xfe, 0x36, 0x5c, 0x6d, 0x07, 0xb3, 0x4e, 0x00, 0x03, 0xff, 0xff, 0x00,
        0x03, 0x3f, 0x00, 0x00, 0x00, // actor
        0x02, 0x14, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0xff, 0x00,
        0x01, 0x3d, 0x00, 0x00, 0x00, // partner
        0x03, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, // collector
        0x00, 0x00, // terminator
    ];

    fn repr() -> Repr {
        Repr {
            actor: Info {
                system_priority: 0xfffe,
                system: MacAddr([0x36, 0x5c, 0x6d, 0x07, 0xb3, 0x4e]),
                key: 3,
                port_priority: 0xffff,
                port: 3,
                state: State(0x3f),
            },
            partner: Info {
                system_priority: 0xffff,
                system: MacAddr([2, 0, 0, 0, 0, 1]),
                key: 1,
                port_priority: 0xff,
                port: 1,
                state: State(0x3d),
            },
            collector_max_delay: 0,
        }
    }

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.actor().key, 3);
        assert_eq!(p.partner().port, 1);
        assert!(p.actor().state.has(State::COLLECTING | State::DISTRIBUTING));
        assert!(!p.partner().state.has(State::TIMEOUT));
    }

    #[test]
    fn test_construct() {
        let mut buf = [0xaau8; LEN];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..60], &PACKET_BYTES[..]);
        assert!(buf[60..].iter().all(|&b| b == 0), "padding is zero");
    }

    #[test]
    fn test_parse() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(Repr::parse(&p), repr());
    }

    #[test]
    fn test_emit() {
        let f = repr().frame(MacAddr([2, 0, 0, 0, 0, 9]));
        assert_eq!(&f[0..6], &DST.0);
        assert_eq!(&f[12..14], &[0x88, 0x09]);
        let back = Repr::parse(&Packet::new_checked(&f[14..]).unwrap());
        assert_eq!(back, repr());
    }

    #[test]
    fn malformed_pdus_are_refused_each_for_its_reason() {
        let err = |b: &[u8]| Packet::new_checked(b).unwrap_err();
        assert_eq!(err(&[]), Error::Truncated);
        assert_eq!(err(&PACKET_BYTES[..43]), Error::Truncated);
        let mut marker = PACKET_BYTES;
        marker[0] = 2;
        assert_eq!(err(&marker), Error::NotLacp);
        let mut v0 = PACKET_BYTES;
        v0[1] = 0;
        assert_eq!(err(&v0), Error::BadVersion);
        let mut actor = PACKET_BYTES;
        actor[3] = 19;
        assert_eq!(err(&actor), Error::BadActor);
        let mut partner = PACKET_BYTES;
        partner[22] = 9;
        assert_eq!(err(&partner), Error::BadPartner);
        // A later version is read as version 1; a PDU cut after the
        // partner's TLV still reads.
        let mut v2 = PACKET_BYTES;
        v2[1] = 2;
        assert_eq!(Repr::parse(&Packet::new_checked(&v2[..]).unwrap()), repr());
        let cut = Packet::new_checked(&PACKET_BYTES[..44]).unwrap();
        assert_eq!(cut.collector_max_delay(), 0);
    }
}
