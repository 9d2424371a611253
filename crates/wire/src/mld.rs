//! MLD messages (RFC 2710 version 1, RFC 3810 version 2) as a snooping
//! switch reads them, and the general query its querier sends. They are
//! ICMPv6 messages: the payload [`crate::Layers`] found behind the IPv6
//! header and its extension headers (MLD's hop-by-hop router alert), of
//! protocol 58; every other ICMPv6 type (neighbour discovery above all) is
//! not MLD and is left alone.
//!
//! ```
//! use hvnet_wire::{mld, membership::Message, Layers};
//! let q = mld::general_query([2, 0, 0, 0, 0, 1], 10_000);
//! let l = Layers::parse(&q).unwrap();
//! let n = l.net().unwrap();
//! let (src, dst) = (q[22..38].try_into().unwrap(), q[38..54].try_into().unwrap());
//! let m = mld::parse(&q[n.offset + n.header_len..n.end], src, dst).unwrap();
//! assert!(matches!(m, Some(Message::Query { group: None, max_resp_ms: 10_000, .. })));
//! ```

use crate::checksum::{pseudo_header_v6, verifies};
use crate::membership::{is_group, Error, Message, QueryVersion, Records};
use crate::nd::ICMPV6;
use core::net::{IpAddr, Ipv6Addr};

/// Message types.
pub mod kind {
    /// A multicast listener query (both versions).
    pub const QUERY: u8 = 130;
    /// A version 1 listener report.
    pub const V1_REPORT: u8 = 131;
    /// A version 1 listener done.
    pub const DONE: u8 = 132;
    /// A version 2 listener report.
    pub const V2_REPORT: u8 = 143;
}

/// The link-scope all-nodes group general queries go to.
pub const ALL_NODES: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// True for an ICMPv6 type that is MLD's.
pub fn is_mld(icmp_type: u8) -> bool {
    matches!(
        icmp_type,
        kind::QUERY | kind::V1_REPORT | kind::DONE | kind::V2_REPORT
    )
}

/// What an ICMPv6 message `icmp` from `src` to `dst` says, if it is MLD
/// (`None` for any other ICMPv6 type), after its length and checksum were
/// checked.
pub fn parse(icmp: &[u8], src: [u8; 16], dst: [u8; 16]) -> Result<Option<Message<'_>>, Error> {
    match icmp.first() {
        Some(&t) if is_mld(t) => {}
        _ => return Ok(None),
    }
    if icmp.len() < 8 {
        return Err(Error::Truncated);
    }
    let len = u32::try_from(icmp.len()).map_err(|_| Error::Truncated)?;
    if !verifies(pseudo_header_v6(src, dst, ICMPV6, len).add_bytes(icmp)) {
        return Err(Error::Checksum);
    }
    if icmp[0] == kind::V2_REPORT {
        let n = u16::from_be_bytes([icmp[6], icmp[7]]);
        return Ok(Some(Message::Report(Records::checked(&icmp[8..], n, 16)?)));
    }
    let Some(addr) = icmp.get(8..24) else {
        return Err(Error::Truncated);
    };
    let group = IpAddr::V6(Ipv6Addr::from(
        <[u8; 16]>::try_from(addr).map_err(|_| Error::Truncated)?,
    ));
    let code = u16::from_be_bytes([icmp[4], icmp[5]]);
    Ok(Some(match icmp[0] {
        kind::QUERY => {
            let (version, max_resp_ms) = match icmp.len() {
                24..=27 => (QueryVersion::V2, u32::from(code)),
                _ => {
                    let sources = usize::from(u16::from_be_bytes([icmp[26], icmp[27]]));
                    if icmp.len() < 28 + 16 * sources {
                        return Err(Error::Truncated);
                    }
                    (QueryVersion::V3, decode_code(code))
                }
            };
            let group = match group {
                IpAddr::V6(a) if a.is_unspecified() => None,
                g if is_group(g) => Some(g),
                _ => return Err(Error::Group),
            };
            Message::Query {
                group,
                max_resp_ms,
                version,
            }
        }
        _ if !is_group(group) => return Err(Error::Group),
        kind::DONE => Message::Leave(group),
        _ => Message::Join(group),
    }))
}

/// MLDv2's maximum response code (RFC 3810 §5.1.3): milliseconds, as a
/// floating-point value from 32768 on.
fn decode_code(code: u16) -> u32 {
    if code < 0x8000 {
        u32::from(code)
    } else {
        let (exp, mant) = (u32::from((code >> 12) & 7), u32::from(code & 0x0fff));
        (mant | 0x1000) << (exp + 3)
    }
}

/// A 24-byte MLDv1 message of type `kind` with maximum response delay
/// `max_resp_ms` about `group`, from `src` to `dst` (its checksum
/// covers them).
pub fn message(
    kind: u8,
    max_resp_ms: u16,
    group: [u8; 16],
    src: [u8; 16],
    dst: [u8; 16],
) -> [u8; 24] {
    let mut m = [0u8; 24];
    m[0] = kind;
    m[4..6].copy_from_slice(&max_resp_ms.to_be_bytes());
    m[8..24].copy_from_slice(&group);
    fill_checksum(&mut m, src, dst);
    m
}

/// Fills in ICMPv6 message `m`'s checksum for a packet from `src` to `dst`.
pub fn fill_checksum(m: &mut [u8], src: [u8; 16], dst: [u8; 16]) {
    m[2..4].copy_from_slice(&[0, 0]);
    let sum = pseudo_header_v6(src, dst, ICMPV6, m.len() as u32)
        .add_bytes(m)
        .finish();
    m[2..4].copy_from_slice(&sum.to_be_bytes());
}

/// `msg` (an MLD message, its checksum as it is) in an Ethernet frame
/// from `src_mac` and an IPv6 packet from `src` to `dst`, hop limit 1,
/// behind a hop-by-hop header with the router alert option (RFC 2711),
/// as MLD is sent.
pub fn frame(src_mac: [u8; 6], src: [u8; 16], dst: [u8; 16], msg: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + 48 + msg.len());
    f.extend_from_slice(&crate::membership::group_mac(IpAddr::V6(dst.into())));
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    let mut ip = [0u8; 48];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&((8 + msg.len()) as u16).to_be_bytes());
    ip[6] = 0; // hop-by-hop options
    ip[7] = 1;
    ip[8..24].copy_from_slice(&src);
    ip[24..40].copy_from_slice(&dst);
    // Next header ICMPv6, 8 bytes; router alert "MLD" (value 0); PadN.
    ip[40..48].copy_from_slice(&[ICMPV6, 0, 5, 2, 0, 0, 1, 0]);
    f.extend_from_slice(&ip);
    f.extend_from_slice(msg);
    f
}

/// The link-local address a querier sends from: `mac`'s modified EUI-64
/// interface identifier under fe80::/64 (RFC 4291 §2.5.6). MLD's
/// listeners take queries only from a link-local address.
pub fn link_local(mac: [u8; 6]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xfe;
    a[1] = 0x80;
    a[8..11].copy_from_slice(&[mac[0] ^ 2, mac[1], mac[2]]);
    a[11] = 0xff;
    a[12] = 0xfe;
    a[13..16].copy_from_slice(&mac[3..6]);
    a
}

/// The MLDv1 general query a querier sends (RFC 2710 §3.6): to all
/// nodes, from `src_mac` and its link-local address, answers due within
/// `max_resp_ms`.
pub fn general_query(src_mac: [u8; 6], max_resp_ms: u16) -> Vec<u8> {
    let src = link_local(src_mac);
    let m = message(kind::QUERY, max_resp_ms, [0; 16], src, ALL_NODES);
    frame(src_mac, src, ALL_NODES, &m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::{Effect, RecordType};
    use crate::Layers;

    const SRC: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];

    fn g(s: &str) -> [u8; 16] {
        s.parse::<Ipv6Addr>().unwrap().octets()
    }

    fn ip(a: [u8; 16]) -> IpAddr {
        IpAddr::V6(a.into())
    }

    fn v2_report(records: &[(u8, [u8; 16], u16)]) -> Vec<u8> {
        let mut m = vec![kind::V2_REPORT, 0, 0, 0, 0, 0];
        m.extend_from_slice(&(records.len() as u16).to_be_bytes());
        for &(t, grp, n) in records {
            m.extend_from_slice(&[t, 0]);
            m.extend_from_slice(&n.to_be_bytes());
            m.extend_from_slice(&grp);
            for _ in 0..n {
                m.extend_from_slice(&SRC);
            }
        }
        fill_checksum(&mut m, SRC, g("ff02::16"));
        m
    }

    #[test]
    fn test_parse() {
        let grp = g("ff0e::1:2");
        let m = message(kind::V1_REPORT, 0, grp, SRC, grp);
        assert_eq!(parse(&m, SRC, grp), Ok(Some(Message::Join(ip(grp)))));
        let all_routers = g("ff02::2");
        let m = message(kind::DONE, 0, grp, SRC, all_routers);
        assert_eq!(
            parse(&m, SRC, all_routers),
            Ok(Some(Message::Leave(ip(grp))))
        );
        let r = v2_report(&[(4, grp, 0), (3, g("ff0e::9"), 0)]);
        let Ok(Some(Message::Report(recs))) = parse(&r, SRC, g("ff02::16")) else {
            panic!("a report");
        };
        let got: Vec<_> = recs.map(|r| (r.kind, r.effect())).collect();
        assert_eq!(
            got,
            [
                (RecordType::ToExclude, Effect::Join),
                (RecordType::ToInclude, Effect::Leave)
            ]
        );
        // Neighbour discovery is not MLD.
        assert_eq!(parse(&[135, 0, 0, 0], SRC, ALL_NODES), Ok(None));
    }

    #[test]
    fn malformed_messages_are_refused() {
        let grp = g("ff0e::1:2");
        let m = message(kind::V1_REPORT, 0, grp, SRC, grp);
        // The checksum covers the addresses.
        assert_eq!(parse(&m, SRC, ALL_NODES), Err(Error::Checksum));
        assert_eq!(parse(&m[..20], SRC, grp), Err(Error::Checksum));
        let mut short = m[..20].to_vec();
        fill_checksum(&mut short, SRC, grp);
        assert_eq!(parse(&short, SRC, grp), Err(Error::Truncated));
        let not_group = g("2001:db8::1");
        let m = message(kind::V1_REPORT, 0, not_group, SRC, grp);
        assert_eq!(parse(&m, SRC, grp), Err(Error::Group));
        let mut r = v2_report(&[(4, grp, 2)]);
        r.truncate(r.len() - 16);
        fill_checksum(&mut r, SRC, g("ff02::16"));
        assert_eq!(parse(&r, SRC, g("ff02::16")), Err(Error::Truncated));
    }

    #[test]
    fn test_emit() {
        let q = general_query([2, 0, 0, 0, 0, 1], 10_000);
        assert_eq!(&q[..6], &[0x33, 0x33, 0, 0, 0, 1]);
        let l = Layers::parse(&q).unwrap();
        let n = l.net().unwrap();
        assert_eq!((n.header_len, n.protocol, n.end), (48, ICMPV6, q.len()));
        let src = link_local([2, 0, 0, 0, 0, 1]);
        assert_eq!(
            Ipv6Addr::from(src),
            "fe80::ff:fe00:1".parse::<Ipv6Addr>().unwrap()
        );
        let m = parse(&q[n.offset + n.header_len..], src, ALL_NODES).unwrap();
        assert_eq!(
            m,
            Some(Message::Query {
                group: None,
                max_resp_ms: 10_000,
                version: QueryVersion::V2
            })
        );
        let e = etherparse::SlicedPacket::from_ethernet(&q).unwrap();
        assert!(matches!(e.net, Some(etherparse::NetSlice::Ipv6(_))));
    }
}
