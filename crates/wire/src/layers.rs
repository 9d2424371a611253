//! One pass over a frame's header stack: where each layer starts and how
//! long it is, and for a VXLAN frame its inner stack too. Every engine
//! (GRO, GSO, RSS, checksum, VXLAN) starts here, so a frame is parsed once
//! and malformed input is refused in one place.

use crate::error::Result;
use crate::ethernet::{EtherType, Frame, L2, MAX_VLAN_TAGS, VLAN_TAG_LEN};
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

/// The header stack of one Ethernet frame, packed: it travels in every
/// packet's metadata, which is kept to one cache line (offsets in `u16`,
/// the transport header's offset and the IP packet's end derived from the
/// lengths). [`Layers::l2`], [`Layers::net`] and [`Layers::transport`]
/// unpack it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Layers {
    stack: Stack,
    vxlan: Option<Vxlan>,
}

impl core::fmt::Debug for Layers {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Layers")
            .field("l2", &self.l2())
            .field("net", &self.net())
            .field("transport", &self.transport())
            .field("vxlan", &self.vxlan)
            .finish()
    }
}

/// A VXLAN frame's inner header stack, found when the outer one was parsed
/// and kept beside it, so decapsulation, RSS, GRO and GSO read it instead
/// of walking the inner headers again. [`Vxlan::inner`] unpacks it. One
/// level deep: a VXLAN frame inside a VXLAN frame is found when the outer
/// one is taken off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vxlan {
    /// The UDP destination port it was found on (IANA's, or a tunnel
    /// endpoint's own).
    pub port: u16,
    /// Offset of the inner Ethernet header in the outer frame.
    pub inner_offset: u16,
    /// What parsing the inner headers gave: malformed ones make a bad
    /// VXLAN frame, not one nobody looked into.
    inner: Result<Stack>,
}

/// No tag in this slot of [`Stack::vlans`] (a VID has 12 bits).
const NO_TAG: u16 = u16::MAX;
/// [`Stack::net`]: IPv4.
const NET_V4: u8 = 1;
/// [`Stack::net`]: IPv6.
const NET_V6: u8 = 2;
/// [`Stack::net`]: the packet is a fragment.
const NET_FRAGMENT: u8 = 0x80;

/// One frame's header stack in 14 bytes, offsets from its own start: the
/// IP header follows the link layer, the transport header the IP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stack {
    /// EtherType after the tags, as on the wire.
    ethertype: u16,
    /// VIDs, outer first; [`NO_TAG`] for none.
    vlans: [u16; MAX_VLAN_TAGS],
    l2_len: u8,
    /// 0 for no network layer, else [`NET_V4`] or [`NET_V6`], with
    /// [`NET_FRAGMENT`].
    net: u8,
    net_header_len: u16,
    /// The IP length field: IPv4's total length, IPv6's payload length.
    net_len: u16,
    protocol: u8,
    /// Transport header length; 0 for none (TCP's is at least 20, UDP's 8).
    l4_len: u8,
}

impl Stack {
    fn l2(&self) -> L2 {
        let mut vlans = [None; MAX_VLAN_TAGS];
        for (v, &p) in vlans.iter_mut().zip(&self.vlans) {
            *v = (p != NO_TAG).then_some(p);
        }
        L2 {
            ethertype: EtherType::from(self.ethertype),
            header_len: usize::from(self.l2_len),
            vlans,
        }
    }

    fn net(&self) -> Option<Net> {
        let offset = usize::from(self.l2_len);
        let (kind, end) = match self.net & !NET_FRAGMENT {
            NET_V4 => (NetKind::Ipv4, offset + usize::from(self.net_len)),
            NET_V6 => (
                NetKind::Ipv6,
                offset + ipv6::HEADER_LEN + usize::from(self.net_len),
            ),
            _ => return None,
        };
        Some(Net {
            kind,
            offset,
            header_len: usize::from(self.net_header_len),
            end,
            protocol: self.protocol,
            fragment: self.net & NET_FRAGMENT != 0,
        })
    }

    fn transport(&self) -> Option<Transport> {
        if self.l4_len == 0 {
            return None;
        }
        Some(Transport {
            protocol: self.protocol,
            offset: usize::from(self.l2_len) + usize::from(self.net_header_len),
            header_len: usize::from(self.l4_len),
        })
    }

    /// Packs what a parse found; an error for lengths no frame of 64 KiB
    /// has room for (an IPv6 header chain past 64 KiB).
    #[inline(always)]
    fn pack(l2: L2, net: Option<Net>, transport: Option<Transport>) -> Result<Stack> {
        let mut vlans = [NO_TAG; MAX_VLAN_TAGS];
        for (p, v) in vlans.iter_mut().zip(&l2.vlans) {
            *p = v.map_or(NO_TAG, |v| v & 0x0fff);
        }
        let too_long = |_| crate::Error::BadHeaderLen;
        let l2_len = u8::try_from(l2.header_len).map_err(too_long)?;
        let (kind, net_header_len, net_len, protocol) = match net {
            Some(n) => {
                debug_assert_eq!(n.offset, l2.header_len, "IP follows the link layer");
                let (kind, len) = match n.kind {
                    NetKind::Ipv4 => (NET_V4, n.end - n.offset),
                    NetKind::Ipv6 => (NET_V6, n.end - n.offset - ipv6::HEADER_LEN),
                };
                let fragment = if n.fragment { NET_FRAGMENT } else { 0 };
                (
                    kind | fragment,
                    u16::try_from(n.header_len).map_err(too_long)?,
                    u16::try_from(len).map_err(too_long)?,
                    n.protocol,
                )
            }
            None => (0, 0, 0, 0),
        };
        let l4_len = match transport {
            Some(t) => u8::try_from(t.header_len).map_err(too_long)?,
            None => 0,
        };
        Ok(Stack {
            ethertype: u16::from(l2.ethertype),
            vlans,
            l2_len,
            net: kind,
            net_header_len,
            net_len,
            protocol,
            l4_len,
        })
    }
}

impl Vxlan {
    /// The inner frame's header stack, offsets counted from the inner
    /// Ethernet header, or why it is malformed.
    pub fn inner(&self) -> Result<Layers> {
        Ok(Layers {
            stack: self.inner?,
            vxlan: None,
        })
    }
}

impl Layers {
    /// Parses an Ethernet frame, and the inner frame of VXLAN on IANA's
    /// port. Errors only for headers that claim to be there and are
    /// malformed; an unknown EtherType or protocol simply ends the stack
    /// early (and malformed inner headers are [`Vxlan::inner`]'s `None`).
    pub fn parse(frame: &[u8]) -> Result<Layers> {
        Layers::parse_on(frame, vxlan::PORT)
    }

    /// [`Layers::parse`] for a receiver whose VXLAN is on UDP port `port`
    /// (a tunnel endpoint's own).
    pub fn parse_on(frame: &[u8], port: u16) -> Result<Layers> {
        let mut l = Layers::EMPTY;
        l.parse_into(frame, port)?;
        Ok(l)
    }

    /// An empty stack, no header parsed: only a place to parse into
    /// ([`Layers::parse_into`]), never a frame's stack.
    pub const EMPTY: Layers = Layers {
        stack: Stack {
            ethertype: 0,
            vlans: [NO_TAG; MAX_VLAN_TAGS],
            l2_len: 0,
            net: 0,
            net_header_len: 0,
            net_len: 0,
            protocol: 0,
            l4_len: 0,
        },
        vxlan: None,
    };

    /// [`Layers::parse_on`] into this stack, where it stays (a packet's
    /// metadata parsed in its place: a stack written field by field and
    /// then moved whole waits for its stores to land, several times a
    /// frame). On an error the stack is left as it was.
    #[inline]
    pub fn parse_into(&mut self, frame: &[u8], port: u16) -> Result<()> {
        self.stack = Layers::parse_stack(frame)?;
        self.vxlan = self.vxlan_of(frame, port);
        Ok(())
    }

    /// Link layer.
    #[inline]
    pub fn l2(&self) -> L2 {
        self.stack.l2()
    }
    /// The outer VLAN tag's VID, if tagged (what the switch asks most).
    #[inline]
    pub fn outer_vlan(&self) -> Option<u16> {
        let v = self.stack.vlans[0];
        (v != NO_TAG).then_some(v)
    }
    /// Sets where the IP packet ends (its length field was rewritten: a
    /// frame cut to fewer segments). Metadata only; `end` is at least the
    /// IP header's end and the packet at most 64 KiB.
    pub fn set_net_end(&mut self, end: usize) {
        let s = &mut self.stack;
        let at = usize::from(s.l2_len);
        let len = match s.net & !NET_FRAGMENT {
            NET_V4 => end.saturating_sub(at),
            NET_V6 => end.saturating_sub(at + ipv6::HEADER_LEN),
            _ => return,
        };
        debug_assert!(len <= usize::from(u16::MAX), "an IP packet past 64 KiB");
        s.net_len = u16::try_from(len).unwrap_or(u16::MAX);
    }
    /// Sets the outer tag's VID (`None`: as if the outer slot were empty).
    /// Metadata only; the caller rewrites the tag's bytes.
    pub fn set_outer_vlan(&mut self, vid: Option<u16>) {
        self.stack.vlans[0] = vid.map_or(NO_TAG, |v| v & 0x0fff);
    }
    /// Bytes of Ethernet header, tags included.
    #[inline]
    pub fn l2_len(&self) -> usize {
        usize::from(self.stack.l2_len)
    }
    /// EtherType after the tags.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(self.stack.ethertype)
    }
    /// The IP packet's upper-layer protocol (after IPv6 extension
    /// headers), if the EtherType is IPv4 or IPv6: [`Layers::net`]'s
    /// `protocol` without building the rest, for a per-frame check.
    #[inline]
    pub fn ip_protocol(&self) -> Option<u8> {
        matches!(self.stack.net & !NET_FRAGMENT, NET_V4 | NET_V6).then_some(self.stack.protocol)
    }
    /// Network layer, if the EtherType is IPv4 or IPv6.
    #[inline]
    pub fn net(&self) -> Option<Net> {
        self.stack.net()
    }
    /// Transport layer, if TCP or UDP in an unfragmented (or first) packet.
    #[inline]
    pub fn transport(&self) -> Option<Transport> {
        self.stack.transport()
    }
    /// For a VXLAN frame, where its inner frame is and the inner stack,
    /// parsed in the same pass.
    #[inline]
    pub fn vxlan(&self) -> Option<Vxlan> {
        self.vxlan
    }
    /// The same stack without its VXLAN inner stack (what the inner
    /// frame's own parse gives, for comparing).
    pub fn without_vxlan(self) -> Layers {
        Layers {
            vxlan: None,
            ..self
        }
    }

    /// Looks into a parsed frame for VXLAN on `port` and parses its inner
    /// stack (a new header, not one walked again: the outer stack ends at
    /// UDP).
    pub fn with_vxlan(mut self, frame: &[u8], port: u16) -> Layers {
        self.vxlan = self.vxlan_of(frame, port);
        self
    }

    /// The VXLAN inner stack of this frame, by its own stack (read from
    /// the outer headers alone), if it is VXLAN on `port`.
    #[inline]
    fn vxlan_of(&self, frame: &[u8], port: u16) -> Option<Vxlan> {
        let off = self.find_vxlan(frame, port)?;
        // The inner frame ends with the outer IP packet (what follows is
        // the outer frame's padding).
        let end = self.net().map_or(frame.len(), |n| n.end);
        let inner = frame.get(off..end).ok_or(crate::Error::Truncated);
        Some(Vxlan {
            port,
            inner_offset: u16::try_from(off).ok()?,
            inner: inner.and_then(Layers::parse_stack),
        })
    }

    /// The inner frame's offset and header stack, for a VXLAN frame whose
    /// inner headers are well formed.
    pub fn inner(&self) -> Option<(usize, Layers)> {
        let v = self.vxlan?;
        Some((usize::from(v.inner_offset), v.inner().ok()?))
    }

    /// One frame's own header stack (not looking into VXLAN).
    #[inline(always)]
    fn parse_stack(frame: &[u8]) -> Result<Stack> {
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
        Stack::pack(l2, net, transport)
    }

    /// The stack once an 802.1Q tag of VLAN `vid` was pushed in front of
    /// the frame's tags (at byte 12): one more tag, every later header 4
    /// bytes further on. Metadata only; the caller moves the bytes.
    pub fn push_vlan(&mut self, vid: u16) {
        let vlans = &mut self.stack.vlans;
        debug_assert!(vlans[MAX_VLAN_TAGS - 1] == NO_TAG, "no room for a tag");
        vlans.copy_within(0..MAX_VLAN_TAGS - 1, 1);
        vlans[0] = vid & 0x0fff;
        self.shift(VLAN_TAG_LEN as u8, true);
    }

    /// The stack once the frame's outer tag was taken off: every later
    /// header 4 bytes nearer. Metadata only; the caller moves the bytes.
    pub fn pop_vlan(&mut self) {
        let vlans = &mut self.stack.vlans;
        debug_assert!(vlans[0] != NO_TAG, "no tag to take off");
        vlans.copy_within(1.., 0);
        vlans[MAX_VLAN_TAGS - 1] = NO_TAG;
        self.shift(VLAN_TAG_LEN as u8, false);
    }

    /// Moves every header after the Ethernet addresses `by` bytes on
    /// (`later`) or back: the link layer's length, and the inner frame's
    /// offset (the rest follow them).
    fn shift(&mut self, by: u8, later: bool) {
        let l2 = &mut self.stack.l2_len;
        *l2 = if later {
            *l2 + by
        } else {
            l2.saturating_sub(by)
        };
        if let Some(v) = self.vxlan.as_mut() {
            let by = u16::from(by);
            v.inner_offset = if later {
                v.inner_offset + by
            } else {
                v.inner_offset.saturating_sub(by)
            };
        }
    }

    /// Offset of the first byte after all headers (the L4 payload), or of
    /// whatever follows the last header we understood.
    pub fn payload_offset(&self) -> usize {
        let s = &self.stack;
        let l2 = usize::from(s.l2_len);
        if s.net == 0 {
            l2
        } else {
            l2 + usize::from(s.net_header_len) + usize::from(s.l4_len)
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
        match self.vxlan {
            Some(v) if v.port == port => Some(usize::from(v.inner_offset)),
            _ => self.find_vxlan(frame, port),
        }
    }

    fn find_vxlan(&self, frame: &[u8], port: u16) -> Option<usize> {
        let t = self.transport()?;
        if t.protocol != ip_protocol::UDP {
            return None;
        }
        let u = udp::Packet::new_unchecked(&frame[t.offset..]);
        if u.dst_port() != port {
            return None;
        }
        let v_off = t.offset + udp::HEADER_LEN;
        // Within the IP packet: what follows its end is padding.
        let end = self.net().map_or(frame.len(), |n| n.end.min(frame.len()));
        vxlan::Packet::new_checked(frame.get(v_off..end)?).ok()?;
        Some(v_off + vxlan::HEADER_LEN)
    }
}

#[cfg(test)]
#[path = "layers_tests.rs"]
mod tests;
