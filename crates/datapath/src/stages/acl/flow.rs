//! What the ACL reads of a frame: its addresses, protocol, ports or ICMP
//! type, TCP flags, and for an ICMP error the flow of the packet it
//! quotes. The frame was parsed once at its port (`Layers`); only the
//! few bytes the parse did not keep (addresses, ports, flags, the ICMP
//! header and its quoted headers) are read here, by offset, with every
//! read bounds-checked: a short or lying frame gives `None` or a flow
//! without ports, never a panic.

use super::window::{Segment, MAX_WSCALE};
use hvnet_wire::layers::{Layers, NetKind};

/// IP protocol numbers the ACL knows by name.
pub mod proto {
    /// ICMP (IPv4).
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// IPv4 or IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// IPv4 (addresses in the low 32 bits of a `u128`).
    V4,
    /// IPv6.
    V6,
}

/// What the transport layer says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// TCP, with its flags byte and what window tracking reads.
    Tcp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// The flags byte (FIN 0x01, SYN 0x02, RST 0x04, ACK 0x10).
        flags: u8,
        /// Sequence, acknowledgement, window, payload length.
        seg: Segment,
    },
    /// UDP.
    Udp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
    },
    /// An ICMP query or its answer (echo, timestamp, ...): tracked by its
    /// identifier.
    IcmpQuery {
        /// Type.
        ty: u8,
        /// Code.
        code: u8,
        /// Identifier.
        id: u16,
    },
    /// An ICMP error (destination unreachable, time exceeded, parameter
    /// problem, IPv6 packet too big), with the flow of the packet it
    /// quotes when that could be read.
    IcmpError {
        /// Type.
        ty: u8,
        /// Code.
        code: u8,
        /// The quoted packet's flow.
        inner: Option<Tuple>,
    },
    /// Any other ICMP message (neighbour discovery, router
    /// advertisements, ...): matched by type, never tracked.
    IcmpOther {
        /// Type.
        ty: u8,
        /// Code.
        code: u8,
    },
    /// Another protocol, a non-first fragment, or a transport header that
    /// could not be read: addresses and protocol only.
    Other,
}

/// A flow's identity as the connection table keys it: family,
/// protocol, addresses and ports (an ICMP query's identifier in both
/// port slots).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tuple {
    /// IPv4 or IPv6.
    pub family: Family,
    /// IP protocol.
    pub proto: u8,
    /// Source address.
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Source port (an ICMP query's identifier).
    pub sport: u16,
    /// Destination port (an ICMP query's identifier).
    pub dport: u16,
}

impl Tuple {
    /// The same flow seen from the other end.
    pub fn reversed(self) -> Tuple {
        Tuple {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..self
        }
    }
}

/// One IP packet's view for the ACL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// IPv4 or IPv6.
    pub family: Family,
    /// IP protocol.
    pub proto: u8,
    /// Source address.
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// The transport layer.
    pub l4: L4,
}

impl Flow {
    /// Reads the flow of an IP frame from its parsed layers; `None` for a
    /// frame that is not IP (ARP, LLDP, ...), which the ACL lets pass.
    pub fn of(frame: &[u8], layers: &Layers) -> Option<Flow> {
        let net = layers.net()?;
        let (family, src, dst) = addresses(frame, net.kind, net.offset)?;
        let at = net.offset + net.header_len;
        let end = net.end.min(frame.len());
        // A later fragment has no transport header: addresses and
        // protocol only. (An IPv4 first fragment is read as a packet;
        // IPv6's fragments all go as `Other`.)
        let first = net.kind == NetKind::Ipv4
            && be16(frame, net.offset + 6).is_some_and(|f| f & 0x1fff == 0);
        let l4 = if net.fragment && !first {
            L4::Other
        } else {
            transport(frame, family, net.protocol, at, end, true)
        };
        Some(Flow {
            family,
            proto: net.protocol,
            src,
            dst,
            l4,
        })
    }

    /// The connection table's key for this packet, if it is tracked
    /// (TCP, UDP, ICMP queries, other protocols by address; not ICMP
    /// errors or other ICMP messages).
    pub fn tuple(&self) -> Option<Tuple> {
        let (sport, dport) = match self.l4 {
            L4::Tcp { sport, dport, .. } | L4::Udp { sport, dport } => (sport, dport),
            L4::IcmpQuery { id, .. } => (id, id),
            L4::IcmpError { .. } | L4::IcmpOther { .. } => return None,
            L4::Other => (0, 0),
        };
        Some(Tuple {
            family: self.family,
            proto: self.proto,
            src: self.src,
            dst: self.dst,
            sport,
            dport,
        })
    }

    /// The destination port rules match (TCP, UDP).
    pub fn dport(&self) -> Option<u16> {
        match self.l4 {
            L4::Tcp { dport, .. } | L4::Udp { dport, .. } => Some(dport),
            _ => None,
        }
    }

    /// ICMP type and code, for an ICMP message.
    pub fn icmp(&self) -> Option<(u8, u8)> {
        match self.l4 {
            L4::IcmpQuery { ty, code, .. }
            | L4::IcmpError { ty, code, .. }
            | L4::IcmpOther { ty, code } => Some((ty, code)),
            _ => None,
        }
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn addr(b: &[u8], at: usize, len: usize) -> Option<u128> {
    let s = b.get(at..at + len)?;
    Some(s.iter().fold(0u128, |a, &x| (a << 8) | u128::from(x)))
}

fn addresses(frame: &[u8], kind: NetKind, at: usize) -> Option<(Family, u128, u128)> {
    match kind {
        NetKind::Ipv4 => Some((
            Family::V4,
            addr(frame, at + 12, 4)?,
            addr(frame, at + 16, 4)?,
        )),
        NetKind::Ipv6 => Some((
            Family::V6,
            addr(frame, at + 8, 16)?,
            addr(frame, at + 24, 16)?,
        )),
    }
}

/// Whether an ICMP type is an error that quotes a packet.
fn icmp_error(family: Family, ty: u8) -> bool {
    match family {
        Family::V4 => matches!(ty, 3 | 4 | 5 | 11 | 12),
        Family::V6 => matches!(ty, 1..=4),
    }
}

/// Whether an ICMP type is a query or its answer (tracked by id).
fn icmp_query(family: Family, ty: u8) -> bool {
    match family {
        Family::V4 => matches!(ty, 0 | 8 | 13 | 14 | 15 | 16 | 17 | 18),
        Family::V6 => matches!(ty, 128 | 129),
    }
}

/// The transport layer at `at` (the packet ends at `end`); `outer`:
/// whether this is the frame's own packet (an ICMP error's quoted packet
/// is not looked into again).
fn transport(frame: &[u8], family: Family, proto: u8, at: usize, end: usize, outer: bool) -> L4 {
    let b = &frame[..end.min(frame.len())];
    let icmp = match family {
        Family::V4 => proto::ICMP,
        Family::V6 => proto::ICMPV6,
    };
    match proto {
        proto::TCP => match (be16(b, at), be16(b, at + 2)) {
            (Some(sport), Some(dport)) => {
                // The quoted header of an ICMP error may stop at 8
                // bytes: its flags and windows do not matter there.
                let flags = b.get(at + 13).copied().unwrap_or(0);
                L4::Tcp {
                    sport,
                    dport,
                    flags,
                    seg: segment(b, at, flags),
                }
            }
            _ => L4::Other,
        },
        proto::UDP => match (be16(b, at), be16(b, at + 2)) {
            (Some(sport), Some(dport)) => L4::Udp { sport, dport },
            _ => L4::Other,
        },
        p if p == icmp => {
            let (Some(&ty), Some(&code)) = (b.get(at), b.get(at + 1)) else {
                return L4::Other;
            };
            if icmp_query(family, ty) {
                match be16(b, at + 4) {
                    Some(id) => L4::IcmpQuery { ty, code, id },
                    None => L4::Other,
                }
            } else if icmp_error(family, ty) && outer {
                L4::IcmpError {
                    ty,
                    code,
                    inner: quoted(b, family, at + 8),
                }
            } else {
                L4::IcmpOther { ty, code }
            }
        }
        _ => L4::Other,
    }
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// What window tracking reads of the TCP header at `at` (the packet
/// ends where `b` does): zeros where the header is cut short.
fn segment(b: &[u8], at: usize, flags: u8) -> Segment {
    let header = b.get(at + 12).map_or(20, |d| usize::from(d >> 4) * 4);
    let wscale = if flags & hvnet_wire::tcp::flags::SYN != 0 {
        wscale(b.get(at + 20..at + header.max(20)).unwrap_or_default())
    } else {
        None
    };
    Segment {
        seq: be32(b, at + 4).unwrap_or(0),
        ack: be32(b, at + 8).unwrap_or(0),
        win: be16(b, at + 14).unwrap_or(0),
        len: u32::try_from(b.len().saturating_sub(at + header)).unwrap_or(u32::MAX),
        wscale,
    }
}

/// The window scale option among a SYN's TCP options, if it has one
/// (capped at 14, as RFC 7323 says a receiver takes a larger one).
fn wscale(mut opts: &[u8]) -> Option<u8> {
    while let Some(&kind) = opts.first() {
        match kind {
            0 => return None,
            1 => opts = &opts[1..],
            _ => {
                let len = usize::from(*opts.get(1)?);
                if len < 2 || len > opts.len() {
                    return None;
                }
                if kind == 3 && len == 3 {
                    return Some(opts[2].min(MAX_WSCALE));
                }
                opts = &opts[len..];
            }
        }
    }
    None
}

/// The flow of the packet an ICMP error quotes, starting at `at`: its IP
/// header (of the error's family; IPv6 without extension headers) and
/// the first 8 bytes of its transport header.
fn quoted(b: &[u8], family: Family, at: usize) -> Option<Tuple> {
    let (proto, src, dst, l4_at) = match family {
        Family::V4 => {
            let vihl = *b.get(at)?;
            if vihl >> 4 != 4 {
                return None;
            }
            let ihl = usize::from(vihl & 0x0f) * 4;
            if ihl < 20 {
                return None;
            }
            (
                *b.get(at + 9)?,
                addr(b, at + 12, 4)?,
                addr(b, at + 16, 4)?,
                at + ihl,
            )
        }
        Family::V6 => {
            if *b.get(at)? >> 4 != 6 {
                return None;
            }
            (
                *b.get(at + 6)?,
                addr(b, at + 8, 16)?,
                addr(b, at + 24, 16)?,
                at + 40,
            )
        }
    };
    let (sport, dport) = match transport(b, family, proto, l4_at, b.len(), false) {
        L4::Tcp { sport, dport, .. } | L4::Udp { sport, dport } => (sport, dport),
        L4::IcmpQuery { id, .. } => (id, id),
        L4::Other if !matches!(proto, proto::TCP | proto::UDP | proto::ICMP | proto::ICMPV6) => {
            (0, 0)
        }
        _ => return None,
    };
    Some(Tuple {
        family,
        proto,
        src,
        dst,
        sport,
        dport,
    })
}
