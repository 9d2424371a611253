//! IGMP messages (RFC 2236 version 2, RFC 3376 version 3, and version 1's
//! report) as a snooping switch reads them, and the general query its
//! querier sends. The message is the IPv4 payload [`crate::Layers`] found
//! (`net.offset + net.header_len .. net.end`, protocol 2): nothing of the
//! frame is walked again.
//!
//! ```
//! use hvnet_wire::{igmp, membership::Message, Layers};
//! let q = igmp::general_query([2, 0, 0, 0, 0, 1], 100);
//! let l = Layers::parse(&q).unwrap();
//! let n = l.net().unwrap();
//! assert_eq!(n.protocol, igmp::PROTOCOL);
//! let m = igmp::parse(&q[n.offset + n.header_len..n.end]).unwrap();
//! assert!(matches!(m, Message::Query { group: None, max_resp_ms: 10_000, .. }));
//! ```

use crate::checksum::{checksum, verifies, Sum};
use crate::membership::{is_group, Error, Message, QueryVersion, Records};
use core::net::{IpAddr, Ipv4Addr};

/// IGMP's IP protocol number.
pub const PROTOCOL: u8 = 2;

/// Message types.
pub mod kind {
    /// A membership query (every version).
    pub const QUERY: u8 = 0x11;
    /// A version 1 membership report.
    pub const V1_REPORT: u8 = 0x12;
    /// A version 2 membership report.
    pub const V2_REPORT: u8 = 0x16;
    /// A version 2 leave group.
    pub const LEAVE: u8 = 0x17;
    /// A version 3 membership report.
    pub const V3_REPORT: u8 = 0x22;
}

/// The all-systems group general queries go to.
pub const ALL_SYSTEMS: [u8; 4] = [224, 0, 0, 1];

/// Length of the frame [`general_query`] builds: Ethernet, IPv4 with the
/// router alert option, the query, padding to Ethernet's 60 bytes.
pub const QUERY_FRAME: usize = 60;

/// What an IGMP message says, after its length and checksum were checked.
pub fn parse(msg: &[u8]) -> Result<Message<'_>, Error> {
    let Some(&t) = msg.first() else {
        return Err(Error::Truncated);
    };
    if !matches!(
        t,
        kind::QUERY | kind::V1_REPORT | kind::V2_REPORT | kind::LEAVE | kind::V3_REPORT
    ) {
        return Ok(Message::Other);
    }
    if msg.len() < 8 {
        return Err(Error::Truncated);
    }
    if !verifies(Sum::ZERO.add_bytes(msg)) {
        return Err(Error::Checksum);
    }
    let group = IpAddr::V4(Ipv4Addr::new(msg[4], msg[5], msg[6], msg[7]));
    let code = msg[1];
    match t {
        kind::QUERY => {
            let (version, max_resp_ms) = match msg.len() {
                8 if code == 0 => (QueryVersion::V1, 10_000),
                8 => (QueryVersion::V2, u32::from(code) * 100),
                9..=11 => return Err(Error::Truncated),
                _ => {
                    let sources = usize::from(u16::from_be_bytes([msg[10], msg[11]]));
                    if msg.len() < 12 + 4 * sources {
                        return Err(Error::Truncated);
                    }
                    (QueryVersion::V3, decode_code(code) * 100)
                }
            };
            let group = match group {
                IpAddr::V4(a) if a.is_unspecified() => None,
                g if is_group(g) => Some(g),
                _ => return Err(Error::Group),
            };
            Ok(Message::Query {
                group,
                max_resp_ms,
                version,
            })
        }
        kind::V3_REPORT => {
            let n = u16::from_be_bytes([msg[6], msg[7]]);
            Ok(Message::Report(Records::checked(&msg[8..], n, 4)?))
        }
        _ if !is_group(group) => Err(Error::Group),
        kind::LEAVE => Ok(Message::Leave(group)),
        _ => Ok(Message::Join(group)),
    }
}

/// IGMPv3's maximum response code (RFC 3376 §4.1.1): tenths of a second,
/// as a floating-point value from 128 on.
fn decode_code(code: u8) -> u32 {
    if code < 128 {
        u32::from(code)
    } else {
        let (exp, mant) = (u32::from((code >> 4) & 7), u32::from(code & 0x0f));
        (mant | 0x10) << (exp + 3)
    }
}

/// An 8-byte IGMPv1/v2 message of type `kind` with maximum response code
/// `code` about `group`, its checksum filled in.
pub fn message(kind: u8, code: u8, group: [u8; 4]) -> [u8; 8] {
    let mut m = [kind, code, 0, 0, group[0], group[1], group[2], group[3]];
    let sum = checksum(&m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    m
}

/// `msg` (an IGMP message, its checksum as it is) in an Ethernet frame
/// from `src_mac` and an IPv4 packet from `src` to `dst`, time to live 1,
/// with the router alert option (RFC 2113) that IGMPv2 and v3 carry.
pub fn frame(src_mac: [u8; 6], src: [u8; 4], dst: [u8; 4], msg: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + 24 + msg.len());
    f.extend_from_slice(&crate::membership::group_mac(IpAddr::V4(dst.into())));
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (24 + msg.len()) as u16;
    let mut ip = [0u8; 24];
    ip[0] = 0x46;
    ip[1] = 0xc0;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 1;
    ip[9] = PROTOCOL;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    ip[20..24].copy_from_slice(&[0x94, 0x04, 0, 0]);
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(msg);
    f
}

/// The IGMPv2 general query a querier sends (RFC 2236 §3): to all systems,
/// from `src_mac` and source address 0.0.0.0 (as the Linux bridge's own
/// querier sends it: any router present wins the election), answers due
/// within `max_resp_tenths` tenths of a second.
pub fn general_query(src_mac: [u8; 6], max_resp_tenths: u8) -> [u8; QUERY_FRAME] {
    let m = message(kind::QUERY, max_resp_tenths, [0; 4]);
    let f = frame(src_mac, [0; 4], ALL_SYSTEMS, &m);
    let mut out = [0u8; QUERY_FRAME];
    out[..f.len()].copy_from_slice(&f);
    out
}

/// An IGMPv3 report of `(record type, group, sources)` records (the
/// sources made up in 198.18.0.0/24), its checksum filled in: for tests,
/// fuzzing seeds and the lab.
pub fn v3_report(records: &[(u8, [u8; 4], u16)]) -> Vec<u8> {
    let mut m = vec![kind::V3_REPORT, 0, 0, 0, 0, 0];
    m.extend_from_slice(&(records.len() as u16).to_be_bytes());
    for &(t, grp, n) in records {
        m.extend_from_slice(&[t, 0]);
        m.extend_from_slice(&n.to_be_bytes());
        m.extend_from_slice(&grp);
        for i in 0..n {
            m.extend_from_slice(&[198, 18, 0, i as u8]);
        }
    }
    let sum = checksum(&m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::{Effect, RecordType};
    use crate::Layers;

    fn g(s: &str) -> IpAddr {
        IpAddr::V4(s.parse().unwrap())
    }

    #[test]
    fn test_parse() {
        let m = message(kind::V2_REPORT, 0, [239, 1, 2, 3]);
        assert_eq!(parse(&m), Ok(Message::Join(g("239.1.2.3"))));
        let m = message(kind::V1_REPORT, 0, [239, 1, 2, 3]);
        assert_eq!(parse(&m), Ok(Message::Join(g("239.1.2.3"))));
        let m = message(kind::LEAVE, 0, [239, 1, 2, 3]);
        assert_eq!(parse(&m), Ok(Message::Leave(g("239.1.2.3"))));
        let m = message(kind::QUERY, 0, [0; 4]);
        assert_eq!(
            parse(&m),
            Ok(Message::Query {
                group: None,
                max_resp_ms: 10_000,
                version: QueryVersion::V1
            })
        );
        let m = message(kind::QUERY, 10, [239, 1, 2, 3]);
        assert_eq!(
            parse(&m),
            Ok(Message::Query {
                group: Some(g("239.1.2.3")),
                max_resp_ms: 1000,
                version: QueryVersion::V2
            })
        );
        // DVMRP and others are not about membership.
        assert_eq!(parse(&[0x13, 0, 0]), Ok(Message::Other));
    }

    #[test]
    fn v3_reports_and_queries() {
        let r = v3_report(&[
            (4, [239, 1, 1, 1], 0),
            (3, [239, 1, 1, 2], 0),
            (1, [239, 1, 1, 3], 2),
        ]);
        let Ok(Message::Report(recs)) = parse(&r) else {
            panic!("a report");
        };
        assert_eq!(recs.len(), 3);
        let got: Vec<_> = recs.map(|r| (r.kind, r.group, r.effect())).collect();
        assert_eq!(
            got,
            [
                (RecordType::ToExclude, g("239.1.1.1"), Effect::Join),
                (RecordType::ToInclude, g("239.1.1.2"), Effect::Leave),
                (RecordType::IsInclude, g("239.1.1.3"), Effect::Join),
            ]
        );
        // A v3 query: 12 bytes, a floating-point code.
        let mut q = vec![kind::QUERY, 0x8c, 0, 0, 0, 0, 0, 0, 2, 125, 0, 0];
        let sum = checksum(&q);
        q[2..4].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(
            parse(&q),
            Ok(Message::Query {
                group: None,
                max_resp_ms: (0x1c << 3) * 100,
                version: QueryVersion::V3
            })
        );
    }

    #[test]
    fn malformed_messages_are_refused() {
        let m = message(kind::V2_REPORT, 0, [239, 1, 2, 3]);
        assert_eq!(parse(&m[..7]), Err(Error::Truncated));
        let mut bad = m;
        bad[7] ^= 1;
        assert_eq!(parse(&bad), Err(Error::Checksum));
        assert_eq!(
            parse(&message(kind::V2_REPORT, 0, [10, 0, 0, 1])),
            Err(Error::Group)
        );
        assert_eq!(
            parse(&message(kind::QUERY, 0, [10, 0, 0, 1])),
            Err(Error::Group)
        );
        // A record that runs past the end, and one that is no group.
        let mut r = v3_report(&[(4, [239, 1, 1, 1], 3)]);
        r.truncate(r.len() - 4);
        let sum = {
            r[2..4].copy_from_slice(&[0, 0]);
            checksum(&r)
        };
        r[2..4].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(parse(&r), Err(Error::Truncated));
        let r = v3_report(&[(4, [239, 1, 1, 1], 0), (4, [198, 18, 0, 1], 0)]);
        assert_eq!(parse(&r), Err(Error::Group));
        // A count of records beyond what is there.
        let mut r = v3_report(&[(4, [239, 1, 1, 1], 0)]);
        r[7] = 200;
        r[2..4].copy_from_slice(&[0, 0]);
        let sum = checksum(&r);
        r[2..4].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(parse(&r), Err(Error::Truncated));
    }

    #[test]
    fn test_emit() {
        let q = general_query([2, 0, 0, 0, 0, 1], 100);
        assert_eq!(&q[..6], &[1, 0, 0x5e, 0, 0, 1]);
        let l = Layers::parse(&q).unwrap();
        let n = l.net().unwrap();
        assert_eq!(
            (n.offset, n.header_len, n.end, n.protocol),
            (14, 24, 46, PROTOCOL)
        );
        let ip = crate::Ipv4Packet::new_checked(&q[14..46]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.ttl(), 1);
        // Checked against etherparse, an independent parser.
        let e = etherparse::SlicedPacket::from_ethernet(&q).unwrap();
        assert!(matches!(e.net, Some(etherparse::NetSlice::Ipv4(_))));
    }
}
