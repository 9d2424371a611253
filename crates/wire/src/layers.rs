//! One pass over a frame's header stack: where each layer starts and how
//! long it is. Every engine (GRO, GSO, RSS, checksum, VXLAN) starts here, so
//! a frame is parsed once and malformed input is refused in one place.

use crate::error::Result;
use crate::ethernet::{EtherType, Frame, L2};
use crate::{ipv4, ipv6, tcp, udp, vxlan};

/// IP protocol numbers we act on.
pub mod ip_protocol {
    /// TCP
    pub const TCP: u8 = 6;
    /// UDP
    pub const UDP: u8 = 17;
}

/// The network layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetKind {
    /// IPv4
    Ipv4,
    /// IPv6
    Ipv6,
}

/// Where the network header is and what it says about the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    /// IPv4 or IPv6.
    pub kind: NetKind,
    /// Offset of the IP header in the frame.
    pub offset: usize,
    /// IP header length: IHL × 4, or 40 plus extension headers.
    pub header_len: usize,
    /// End of the IP packet by its length field (≤ the frame length; the
    /// rest is link-layer padding).
    pub end: usize,
    /// The upper-layer protocol.
    pub protocol: u8,
    /// This is a fragment (IPv4 MF/offset, or an IPv6 fragment header).
    pub fragment: bool,
}

/// Where the transport header is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transport {
    /// IP protocol number.
    pub protocol: u8,
    /// Offset of the transport header in the frame.
    pub offset: usize,
    /// Header length (TCP data offset, 8 for UDP).
    pub header_len: usize,
}

/// The header stack of one Ethernet frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layers {
    /// Link layer.
    pub l2: L2,
    /// Network layer, if the EtherType is IPv4 or IPv6.
    pub net: Option<Net>,
    /// Transport layer, if TCP or UDP in an unfragmented (or first) packet.
    pub transport: Option<Transport>,
}

impl Layers {
    /// Parses an Ethernet frame. Errors only for headers that claim to be
    /// there and are malformed; an unknown EtherType or protocol simply ends
    /// the stack early.
    pub fn parse(frame: &[u8]) -> Result<Layers> {
        let l2 = Frame::new_checked(frame)?.walk_tags()?;
        let off = l2.header_len;
        let net = match l2.ethertype {
            EtherType::Ipv4 => {
                let p = ipv4::Packet::new_checked(&frame[off..])?;
                Some(Net {
                    kind: NetKind::Ipv4,
                    offset: off,
                    header_len: p.header_len(),
                    end: off + p.total_len() as usize,
                    protocol: p.protocol(),
                    fragment: p.is_fragment(),
                })
            }
            EtherType::Ipv6 => {
                let p = ipv6::Packet::new_checked(&frame[off..])?;
                let ext = p.extensions()?;
                Some(Net {
                    kind: NetKind::Ipv6,
                    offset: off,
                    header_len: ipv6::HEADER_LEN + ext.len,
                    end: off + ipv6::HEADER_LEN + p.payload_len() as usize,
                    protocol: ext.protocol,
                    fragment: ext.fragment,
                })
            }
            _ => None,
        };
        let transport = match net {
            Some(n) if !n.fragment => {
                let t_off = n.offset + n.header_len;
                let body = &frame[t_off..n.end];
                match n.protocol {
                    ip_protocol::TCP => {
                        let t = tcp::Packet::new_checked(body)?;
                        Some(Transport {
                            protocol: n.protocol,
                            offset: t_off,
                            header_len: t.header_len(),
                        })
                    }
                    ip_protocol::UDP => {
                        udp::Packet::new_checked(body)?;
                        Some(Transport {
                            protocol: n.protocol,
                            offset: t_off,
                            header_len: udp::HEADER_LEN,
                        })
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        Ok(Layers { l2, net, transport })
    }

    /// Offset of the first byte after all headers (the L4 payload), or of
    /// whatever follows the last header we understood.
    pub fn payload_offset(&self) -> usize {
        match (self.transport, self.net) {
            (Some(t), _) => t.offset + t.header_len,
            (None, Some(n)) => n.offset + n.header_len,
            _ => self.l2.header_len,
        }
    }

    /// If this is a VXLAN packet (UDP to port 4789), the offset of the inner
    /// Ethernet frame.
    pub fn vxlan_inner_offset(&self, frame: &[u8]) -> Option<usize> {
        self.vxlan_inner_offset_on(frame, vxlan::PORT)
    }

    /// [`Layers::vxlan_inner_offset`] for VXLAN on another UDP port (a
    /// tunnel endpoint knows its own; everything else assumes IANA's).
    pub fn vxlan_inner_offset_on(&self, frame: &[u8], port: u16) -> Option<usize> {
        let t = self.transport?;
        if t.protocol != ip_protocol::UDP {
            return None;
        }
        let u = udp::Packet::new_unchecked(&frame[t.offset..]);
        if u.dst_port() != port {
            return None;
        }
        let v_off = t.offset + udp::HEADER_LEN;
        vxlan::Packet::new_checked(&frame[v_off..]).ok()?;
        Some(v_off + vxlan::HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn v4_tcp_frame(payload: usize, pad: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12] = 0x08;
        let mut ip = vec![0u8; 20];
        let repr = ipv4::Repr {
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            protocol: 6,
            payload_len: 20 + payload,
            ttl: 64,
            tos: 0,
            ident: 1,
            dont_frag: true,
        };
        repr.emit(&mut ipv4::Packet::new_unchecked(&mut ip[..]));
        f.extend_from_slice(&ip);
        let mut t = vec![0u8; 20];
        t[12] = 0x50;
        f.extend_from_slice(&t);
        f.resize(f.len() + payload + pad, 0);
        f
    }

    #[test]
    fn parses_tcp_over_ipv4_with_padding() {
        let f = v4_tcp_frame(6, 4);
        let l = Layers::parse(&f).unwrap();
        let n = l.net.unwrap();
        assert_eq!((n.offset, n.header_len, n.end), (14, 20, 14 + 46));
        let t = l.transport.unwrap();
        assert_eq!((t.offset, t.header_len), (34, 20));
        assert_eq!(l.payload_offset(), 54);
        assert!(l.vxlan_inner_offset(&f).is_none());
    }

    #[test]
    fn truncated_ip_is_an_error() {
        let f = v4_tcp_frame(100, 0);
        assert_eq!(Layers::parse(&f[..100]).unwrap_err(), Error::Truncated);
        assert_eq!(Layers::parse(&f[..30]).err(), Some(Error::Truncated));
        assert_eq!(Layers::parse(&f).err(), None);
    }

    #[test]
    fn unknown_ethertype_ends_the_stack() {
        let mut f = v4_tcp_frame(10, 0);
        f[12] = 0x88;
        f[13] = 0xb5;
        let l = Layers::parse(&f).unwrap();
        assert!(l.net.is_none() && l.transport.is_none());
        assert_eq!(l.payload_offset(), 14);
    }

    proptest::proptest! {
        #[test]
        fn prop_parse_never_panics_and_offsets_fit(data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            if let Ok(l) = Layers::parse(&data) {
                if let (Some(n), Some(t)) = (l.net, l.transport) {
                    proptest::prop_assert!(t.offset + t.header_len <= n.end && n.end <= data.len());
                }
                let _ = l.vxlan_inner_offset(&data);
            }
            let _ = crate::pretty::Pretty(&data).to_string();
        }
    }
}
