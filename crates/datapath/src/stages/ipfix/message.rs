//! IPFIX messages (RFC 7011): the header, template sets and data sets of
//! hvnet's flow records. Written here rather than with a crate: the Rust
//! IPFIX crates parse (for collectors); none exports.
//!
//! Five templates: an IPv4, IPv6 and link-layer flow, and an IPv4 and
//! IPv6 flow that arrived through a VXLAN tunnel (with the VNI as RFC
//! 7133's `layer2SegmentId` and the outer addresses and ports in the
//! VMware enterprise elements Open vSwitch exports, 6876/891-897).

use super::{FlowKey, FlowRecord, TunnelKey};
use crate::acl::flow::Family;
use std::net::IpAddr;

/// IPFIX's version number.
pub const VERSION: u16 = 10;
/// Largest message sent (fits one unfragmented UDP datagram on a
/// 1500-byte path).
pub const MAX_MESSAGE: usize = 1400;
/// VMware's private enterprise number (Open vSwitch's tunnel elements).
pub const VMWARE: u32 = 6876;

/// Which template a record uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Template {
    /// IPv4 flow.
    V4 = 256,
    /// IPv6 flow.
    V6 = 257,
    /// A flow of neither (ARP, LLDP, ...): its link-layer fields.
    L2 = 258,
    /// IPv4 inside a VXLAN tunnel.
    V4Tunnel = 259,
    /// IPv6 inside a VXLAN tunnel.
    V6Tunnel = 260,
}

impl Template {
    const ALL: [Template; 5] = [
        Template::V4,
        Template::V6,
        Template::L2,
        Template::V4Tunnel,
        Template::V6Tunnel,
    ];

    /// The template a flow's record takes.
    pub fn of(k: &FlowKey) -> Template {
        match (k.family, k.tunnel.is_some()) {
            (None, _) => Template::L2,
            (Some(Family::V4), false) => Template::V4,
            (Some(Family::V6), false) => Template::V6,
            (Some(Family::V4), true) => Template::V4Tunnel,
            (Some(Family::V6), true) => Template::V6Tunnel,
        }
    }

    /// Its fields: (element id, length, enterprise).
    fn fields(self) -> Vec<(u16, u16, Option<u32>)> {
        let mut f = vec![
            (10, 4, None),  // ingressInterface
            (14, 4, None),  // egressInterface
            (58, 2, None),  // vlanId
            (56, 6, None),  // sourceMacAddress
            (80, 6, None),  // destinationMacAddress
            (256, 2, None), // ethernetType
        ];
        match self {
            Template::V4 | Template::V4Tunnel => f.extend([(8, 4, None), (12, 4, None)]),
            Template::V6 | Template::V6Tunnel => f.extend([(27, 16, None), (28, 16, None)]),
            Template::L2 => {}
        }
        if self != Template::L2 {
            // protocolIdentifier, sourceTransportPort, destinationTransportPort
            f.extend([(4, 1, None), (7, 2, None), (11, 2, None)]);
        }
        if matches!(self, Template::V4Tunnel | Template::V6Tunnel) {
            f.extend([
                (351, 8, None),         // layer2SegmentId (0x01: VXLAN, then the VNI)
                (891, 1, Some(VMWARE)), // tunnelType
                (893, 4, Some(VMWARE)), // tunnelSourceIPv4Address
                (894, 4, Some(VMWARE)), // tunnelDestinationIPv4Address
                (895, 1, Some(VMWARE)), // tunnelProtocolIdentifier
                (896, 2, Some(VMWARE)), // tunnelSourceTransportPort
                (897, 2, Some(VMWARE)), // tunnelDestinationTransportPort
            ]);
        }
        f.extend([
            (152, 8, None), // flowStartMilliseconds
            (153, 8, None), // flowEndMilliseconds
            (2, 8, None),   // packetDeltaCount
            (1, 8, None),   // octetDeltaCount (the IP packets' bytes)
            (352, 8, None), // layer2OctetDeltaCount (the frames' bytes)
            (136, 1, None), // flowEndReason
        ]);
        f
    }

    /// Bytes of one record.
    pub fn record_len(self) -> usize {
        self.fields().iter().map(|f| f.1 as usize).sum()
    }
}

/// Appends a template set with every template.
pub fn templates(out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&2u16.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    for t in Template::ALL {
        let fields = t.fields();
        out.extend_from_slice(&(t as u16).to_be_bytes());
        out.extend_from_slice(&(fields.len() as u16).to_be_bytes());
        for (id, len, ent) in fields {
            match ent {
                Some(e) => {
                    out.extend_from_slice(&(id | 0x8000).to_be_bytes());
                    out.extend_from_slice(&len.to_be_bytes());
                    out.extend_from_slice(&e.to_be_bytes());
                }
                None => {
                    out.extend_from_slice(&id.to_be_bytes());
                    out.extend_from_slice(&len.to_be_bytes());
                }
            }
        }
    }
    let len = (out.len() - start) as u16;
    out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// The options template that says how the flows were sampled (RFC 7011
/// §3.4.2.2), scoped to the observation domain: `samplingInterval` (as
/// NetFlow v9 collectors read it) and RFC 5477's
/// `samplingPacketInterval`/`samplingPacketSpace` (1 selected, N - 1
/// not), so that a collector scales the counts itself, as it does for
/// Open vSwitch's and vSphere's exports.
pub const SAMPLING_TEMPLATE: u16 = 261;

/// The sampling options template's fields, its scope first: (element id,
/// length).
const SAMPLING_FIELDS: [(u16, u16); 4] = [
    (149, 4), // observationDomainId (the scope)
    (34, 4),  // samplingInterval
    (305, 4), // samplingPacketInterval
    (306, 4), // samplingPacketSpace
];

/// Appends an options template set with the sampling template, then its
/// one data record: 1 in `sampling` frames metered in observation domain
/// `domain`.
pub fn sampling_options(out: &mut Vec<u8>, domain: u32, sampling: u32) {
    let sampling = sampling.max(1);
    let start = out.len();
    out.extend_from_slice(&3u16.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&SAMPLING_TEMPLATE.to_be_bytes());
    out.extend_from_slice(&(SAMPLING_FIELDS.len() as u16).to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes()); // scope field count
    for (id, len) in SAMPLING_FIELDS {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
    }
    let len = (out.len() - start) as u16;
    out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
    let start = out.len();
    out.extend_from_slice(&SAMPLING_TEMPLATE.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    for v in [domain, sampling, 1, sampling - 1] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    let len = (out.len() - start) as u16;
    out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// Why a flow's record was sent (`flowEndReason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// Idle for the idle timeout.
    Idle = 1,
    /// Active for the active timeout (the flow goes on).
    Active = 2,
    /// The exporter is stopping, or the cache was full.
    Forced = 4,
}

/// Appends one record of template `t`.
pub fn record(out: &mut Vec<u8>, k: &FlowKey, r: &FlowRecord, why: EndReason) {
    let t = Template::of(k);
    out.extend_from_slice(&(k.in_port + 1).to_be_bytes());
    out.extend_from_slice(&r.out_port.map_or(0u32, |p| p + 1).to_be_bytes());
    out.extend_from_slice(&k.vlan.to_be_bytes());
    out.extend_from_slice(&k.src_mac);
    out.extend_from_slice(&k.dst_mac);
    out.extend_from_slice(&k.ethertype.to_be_bytes());
    match t {
        Template::V4 | Template::V4Tunnel => {
            out.extend_from_slice(&(k.src as u32).to_be_bytes());
            out.extend_from_slice(&(k.dst as u32).to_be_bytes());
        }
        Template::V6 | Template::V6Tunnel => {
            out.extend_from_slice(&k.src.to_be_bytes());
            out.extend_from_slice(&k.dst.to_be_bytes());
        }
        Template::L2 => {}
    }
    if t != Template::L2 {
        out.push(k.proto);
        out.extend_from_slice(&k.sport.to_be_bytes());
        out.extend_from_slice(&k.dport.to_be_bytes());
    }
    // A link-layer flow through a tunnel (its ARP) has no tunnel
    // template: its record is the link-layer one.
    if let (Some(tun), Template::V4Tunnel | Template::V6Tunnel) = (&k.tunnel, t) {
        tunnel(out, tun);
    }
    out.extend_from_slice(&r.first_ms.to_be_bytes());
    out.extend_from_slice(&r.last_ms.to_be_bytes());
    out.extend_from_slice(&r.packets.to_be_bytes());
    out.extend_from_slice(&r.octets.to_be_bytes());
    out.extend_from_slice(&r.l2_octets.to_be_bytes());
    out.push(why as u8);
}

fn tunnel(out: &mut Vec<u8>, t: &TunnelKey) {
    out.extend_from_slice(&((1u64 << 56) | u64::from(t.vni)).to_be_bytes());
    out.push(1); // Open vSwitch's DPIF_IPFIX_TUNNEL_VXLAN
    let v4 = |a: IpAddr| match a {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(_) => [0; 4],
    };
    out.extend_from_slice(&v4(t.remote));
    out.extend_from_slice(&v4(t.local));
    out.push(17);
    out.extend_from_slice(&t.sport.to_be_bytes());
    out.extend_from_slice(&t.dport.to_be_bytes());
}

/// Writes the message header over `msg`'s first 16 bytes (its length
/// from `msg`).
pub fn header(msg: &mut [u8], export_secs: u32, sequence: u32, domain: u32) {
    msg[0..2].copy_from_slice(&VERSION.to_be_bytes());
    let len = msg.len() as u16;
    msg[2..4].copy_from_slice(&len.to_be_bytes());
    msg[4..8].copy_from_slice(&export_secs.to_be_bytes());
    msg[8..12].copy_from_slice(&sequence.to_be_bytes());
    msg[12..16].copy_from_slice(&domain.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(family: Option<Family>, tunnel: bool) -> FlowKey {
        FlowKey {
            in_port: 3,
            vlan: 10,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            ethertype: 0x0800,
            family,
            src: 0xc612_0001,
            dst: 0xc612_0002,
            proto: 6,
            sport: 1000,
            dport: 80,
            tunnel: tunnel.then(|| TunnelKey {
                remote: "198.18.9.2".parse().unwrap(),
                local: "198.18.9.1".parse().unwrap(),
                sport: 50000,
                dport: 4789,
                vni: 42,
            }),
        }
    }

    /// The sampling options: an options template set (ID 3) whose one
    /// template has its scope first, then its one data record, each set
    /// as long as it says, the record as long as its fields.
    #[test]
    fn the_sampling_options_say_one_in_n() {
        let mut out = Vec::new();
        sampling_options(&mut out, 7, 10);
        let u16_at = |i: usize| u16::from_be_bytes([out[i], out[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([out[i], out[i + 1], out[i + 2], out[i + 3]]);
        assert_eq!(
            (u16_at(0), u16_at(4), u16_at(6), u16_at(8)),
            (3, SAMPLING_TEMPLATE, 4, 1)
        );
        let set = u16_at(2) as usize;
        assert_eq!(set, 4 + 6 + 4 * SAMPLING_FIELDS.len());
        assert_eq!((u16_at(10), u16_at(14)), (149, 34));
        assert_eq!(
            (u16_at(set), u16_at(set + 2) as usize),
            (SAMPLING_TEMPLATE, out.len() - set)
        );
        let values: Vec<u32> = (0..4).map(|i| u32_at(set + 4 + 4 * i)).collect();
        assert_eq!(values, [7, 10, 1, 9]);
    }

    #[test]
    fn each_record_is_as_long_as_its_template_says() {
        let r = FlowRecord {
            first_ms: 1,
            last_ms: 2,
            packets: 3,
            octets: 4,
            l2_octets: 5,
            out_port: Some(1),
        };
        for (f, tun) in [
            (None, false),
            (None, true),
            (Some(Family::V4), false),
            (Some(Family::V6), false),
            (Some(Family::V4), true),
            (Some(Family::V6), true),
        ] {
            let k = key(f, tun);
            let mut out = Vec::new();
            record(&mut out, &k, &r, EndReason::Idle);
            assert_eq!(
                out.len(),
                Template::of(&k).record_len(),
                "{:?}",
                Template::of(&k)
            );
            // ingressInterface: the port's number plus one.
            assert_eq!(&out[..4], &4u32.to_be_bytes());
        }
    }

    #[test]
    fn the_template_set_lists_every_template_with_its_fields() {
        let mut out = Vec::new();
        templates(&mut out);
        assert_eq!(&out[..2], &2u16.to_be_bytes());
        assert_eq!(u16::from_be_bytes([out[2], out[3]]) as usize, out.len());
        let mut at = 4;
        let mut ids = Vec::new();
        while at < out.len() {
            let id = u16::from_be_bytes([out[at], out[at + 1]]);
            let n = u16::from_be_bytes([out[at + 2], out[at + 3]]);
            at += 4;
            for _ in 0..n {
                let ie = u16::from_be_bytes([out[at], out[at + 1]]);
                at += if ie & 0x8000 != 0 { 8 } else { 4 };
            }
            ids.push(id);
        }
        assert_eq!(at, out.len());
        assert_eq!(ids, vec![256, 257, 258, 259, 260]);
    }
}
