//! What a snooping switch (RFC 4541) reads in IGMP ([`crate::igmp`]) and
//! MLD ([`crate::mld`]) messages, in one vocabulary for both families:
//! a query, a join or a leave of one group, or a version 3 / version 2
//! report of group records. Snooping here is per group (*,G), as the
//! Linux bridge's and Open vSwitch's: a record's sources are counted, not
//! kept.
//!
//! Parsing validates a whole message (length, checksum, every record in
//! bounds, every group a group address) before it answers, so that a
//! [`Records`] iterator cannot fail halfway.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an IGMP or MLD message was refused (counted as `bad_igmp` or
/// `bad_mld`, and the frame dropped, as the Linux bridge does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// Shorter than its type's fixed part, or its records run past its end.
    Truncated,
    /// The checksum does not verify.
    Checksum,
    /// A report, leave or record names an address that is not a group
    /// (or a query a group that is neither a group nor unspecified).
    Group,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "membership message truncated",
            Error::Checksum => "membership message checksum wrong",
            Error::Group => "membership message names no group",
        })
    }
}

impl std::error::Error for Error {}

/// A query's version, as its length and fields tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryVersion {
    /// IGMPv1 (a maximum response code of zero).
    V1,
    /// IGMPv2, or MLDv1.
    V2,
    /// IGMPv3, or MLDv2 (sources may follow).
    V3,
}

/// One message, as snooping acts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// A querier asks: for every group (`group` `None`, a general query)
    /// or one; answers are due within `max_resp_ms`.
    Query {
        /// The group asked about; `None` for a general query.
        group: Option<IpAddr>,
        /// The maximum response delay, in milliseconds.
        max_resp_ms: u32,
        /// Its version.
        version: QueryVersion,
    },
    /// An IGMPv1/v2 membership report or an MLDv1 report: a member of
    /// this group.
    Join(IpAddr),
    /// An IGMPv2 leave or an MLDv1 done: no longer a member.
    Leave(IpAddr),
    /// An IGMPv3 or MLDv2 report: its group records.
    Report(Records<'a>),
    /// Some other message of the protocol (IGMP's DVMRP, mtrace): not
    /// about membership, switched as any frame.
    Other,
}

/// A group record's type (RFC 3376 §4.2.12, RFC 3810 §5.2.12).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordType {
    /// MODE_IS_INCLUDE
    IsInclude,
    /// MODE_IS_EXCLUDE
    IsExclude,
    /// CHANGE_TO_INCLUDE_MODE
    ToInclude,
    /// CHANGE_TO_EXCLUDE_MODE
    ToExclude,
    /// ALLOW_NEW_SOURCES
    Allow,
    /// BLOCK_OLD_SOURCES
    Block,
    /// A type the RFCs do not define: the record is ignored.
    Unknown(u8),
}

impl From<u8> for RecordType {
    fn from(v: u8) -> RecordType {
        match v {
            1 => RecordType::IsInclude,
            2 => RecordType::IsExclude,
            3 => RecordType::ToInclude,
            4 => RecordType::ToExclude,
            5 => RecordType::Allow,
            6 => RecordType::Block,
            x => RecordType::Unknown(x),
        }
    }
}

/// What a record means for a (*,G) member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// A member (exclude mode, or include mode of some sources).
    Join,
    /// Not a member any more: include mode of no sources.
    Leave,
    /// Nothing (an unknown record type).
    None,
}

/// One group record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its type.
    pub kind: RecordType,
    /// The group.
    pub group: IpAddr,
    /// How many sources it lists.
    pub sources: u16,
}

impl Record {
    /// The record's meaning for (*,G) snooping, as the Linux bridge reads
    /// it (`br_ip4_multicast_igmp3_report` in IGMPv2 mode): include mode
    /// of no sources is a leave, any other known record a join.
    pub fn effect(&self) -> Effect {
        match self.kind {
            RecordType::Unknown(_) => Effect::None,
            RecordType::IsInclude | RecordType::ToInclude if self.sources == 0 => Effect::Leave,
            _ => Effect::Join,
        }
    }
}

/// The group records of a validated report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Records<'a> {
    /// The records, back to back.
    bytes: &'a [u8],
    /// Records not yet read.
    left: u16,
    /// Bytes of one address: 4 (IGMP) or 16 (MLD).
    addr_len: usize,
}

impl<'a> Records<'a> {
    /// The `count` records at the start of `bytes`, each checked to lie
    /// within it and to name a group.
    pub(crate) fn checked(
        bytes: &'a [u8],
        count: u16,
        addr_len: usize,
    ) -> Result<Records<'a>, Error> {
        let r = Records {
            bytes,
            left: count,
            addr_len,
        };
        let mut at = 0;
        for _ in 0..count {
            let (rec, len) = r.read(at).ok_or(Error::Truncated)?;
            if !is_group(rec.group) {
                return Err(Error::Group);
            }
            at += len;
        }
        Ok(r)
    }

    /// The record at `at` and its length, if it fits.
    fn read(&self, at: usize) -> Option<(Record, usize)> {
        let b = self.bytes.get(at..)?;
        let fixed = 4 + self.addr_len;
        let head = b.get(..fixed)?;
        let (aux, sources) = (usize::from(head[1]), u16::from_be_bytes([head[2], head[3]]));
        let len = fixed + usize::from(sources) * self.addr_len + aux * 4;
        if b.len() < len {
            return None;
        }
        let group = match self.addr_len {
            4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&head[4..8]).ok()?)),
            _ => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&head[4..20]).ok()?)),
        };
        Some((
            Record {
                kind: RecordType::from(head[0]),
                group,
                sources,
            },
            len,
        ))
    }

    /// How many records there are left.
    pub fn len(&self) -> usize {
        usize::from(self.left)
    }

    /// True when none are left.
    pub fn is_empty(&self) -> bool {
        self.left == 0
    }
}

impl Iterator for Records<'_> {
    type Item = Record;
    fn next(&mut self) -> Option<Record> {
        if self.left == 0 {
            return None;
        }
        // Checked when made: every record fits.
        let (rec, len) = self.read(0)?;
        self.bytes = &self.bytes[len..];
        self.left -= 1;
        Some(rec)
    }
}

/// True for a group (multicast) address.
pub fn is_group(a: IpAddr) -> bool {
    a.is_multicast()
}

/// True for a group that is never snooped and always flooded: IPv4's
/// local network control block 224.0.0.0/24 (RFC 4541 §2.1.2), and IPv6
/// groups of interface-, link-local or reserved scope (ff00::/16 to
/// ff02::/16 in each flag combination: all nodes, solicited nodes, MLDv2
/// reports), so that neighbour discovery never depends on a report seen.
pub fn is_link_local(group: IpAddr) -> bool {
    match group {
        IpAddr::V4(a) => {
            let o = a.octets();
            o[0] == 224 && o[1] == 0 && o[2] == 0
        }
        IpAddr::V6(a) => a.octets()[1] & 0x0f <= 2,
    }
}

/// The Ethernet address IP group `group` is sent to (RFC 1112 §6.4,
/// RFC 2464 §7).
pub fn group_mac(group: IpAddr) -> [u8; 6] {
    match group {
        IpAddr::V4(a) => {
            let o = a.octets();
            [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
        }
        IpAddr::V6(a) => {
            let o = a.octets();
            [0x33, 0x33, o[12], o[13], o[14], o[15]]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_groups() {
        let v4 = |s: &str| IpAddr::V4(s.parse().unwrap());
        let v6 = |s: &str| IpAddr::V6(s.parse().unwrap());
        assert!(is_link_local(v4("224.0.0.1")));
        assert!(is_link_local(v4("224.0.0.251")));
        assert!(!is_link_local(v4("224.0.1.1")));
        assert!(!is_link_local(v4("239.1.2.3")));
        assert!(is_link_local(v6("ff02::1")));
        assert!(is_link_local(v6("ff02::1:ff00:1")));
        assert!(is_link_local(v6("ff12::1234")));
        assert!(!is_link_local(v6("ff05::1:3")));
        assert!(!is_link_local(v6("ff0e::1234")));
        assert_eq!(group_mac(v4("239.129.2.3")), [1, 0, 0x5e, 1, 2, 3]);
        assert_eq!(group_mac(v6("ff0e::1:2:3")), [0x33, 0x33, 0, 2, 0, 3]);
    }

    #[test]
    fn record_effects_follow_the_linux_bridge() {
        let g = IpAddr::V4("239.1.1.1".parse().unwrap());
        let r = |kind, sources| {
            Record {
                kind,
                group: g,
                sources,
            }
            .effect()
        };
        assert_eq!(r(RecordType::ToExclude, 0), Effect::Join);
        assert_eq!(r(RecordType::IsExclude, 0), Effect::Join);
        assert_eq!(r(RecordType::ToInclude, 0), Effect::Leave);
        assert_eq!(r(RecordType::IsInclude, 0), Effect::Leave);
        assert_eq!(r(RecordType::IsInclude, 2), Effect::Join);
        assert_eq!(r(RecordType::Allow, 1), Effect::Join);
        assert_eq!(r(RecordType::Block, 1), Effect::Join);
        assert_eq!(r(RecordType::Unknown(9), 0), Effect::None);
    }
}
