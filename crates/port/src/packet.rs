//! The packet: a buffer and the metadata the switch learned about its frame
//! where it entered — parsed once, read by every later stage (forwarding,
//! RSS, GRO, GSO, delivery), as Open vSwitch's `dp_packet` carries its
//! `miniflow` and the kernel's skb its header offsets.

use crate::pool::Buf;
use hvnet_offload::{CsumState, OffloadInfo};
use hvnet_wire::ethernet::{MAX_VLAN_TAGS, VLAN_TAG_LEN};
use hvnet_wire::{Layers, MacAddr};

/// An 802.1Q tag's TPID, as it is on the wire.
const TPID_8021Q: [u8; 2] = [0x81, 0x00];

/// A frame's outer tag, as a port's VLAN classification reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OuterTag {
    /// No tag.
    Untagged,
    /// An 802.1Q tag (TPID 0x8100) with this VID (0: priority only).
    Dot1q(u16),
    /// Another tag (802.1ad, TPID 0x88a8).
    Other,
}

/// What is known about a frame: one cache line (see the assertion below),
/// read by every stage and moved with the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Header stack: L2 length, EtherType and VLAN tags; the IP header's
    /// offset, length and protocol; the transport header's offset; for a
    /// VXLAN frame, the inner frame's stack as well.
    pub layers: Layers,
    /// Segmentation still owed and checksum state.
    pub offload: OffloadInfo,
    /// RSS (Toeplitz) hash, once a stage computed it.
    pub hash: Option<u32>,
    /// For a frame a tunnel endpoint decapsulated: where it came from (as
    /// Open vSwitch's tunnel metadata, `flow_tnl`).
    pub tunnel: Option<TunnelMeta>,
    /// The VLAN the switch forwards it in, given at its ingress port (the
    /// port's access VLAN, its tag's, or a trunk's native VLAN); 0 until
    /// then, and for the untagged domain.
    pub vlan: u16,
}

// A frame's metadata fits one cache line: every stage reads it, and it
// moves with the frame from the read to the write (a few bytes more per
// frame were measured to cost several percent on the vhost-user path).
const _: () = assert!(std::mem::size_of::<Meta>() <= 64);

/// What a decapsulated frame's outer headers said: the VNI, and where
/// the outer headers still are — in front of the inner frame in its
/// buffer, since taking them off moved no byte — for the rarer readers of
/// the remote endpoint and UDP port ([`Packet::tunnel_source`]). Eight
/// bytes, so that the metadata stays in one cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunnelMeta {
    /// The VXLAN network identifier.
    pub vni: u32,
    /// Bytes of outer headers it arrived with.
    pub outer_len: std::num::NonZeroU16,
    /// Where the outer IP header starts in the buffer's storage.
    pub outer_ip: u16,
}

/// A frame and its metadata.
#[derive(Debug)]
pub struct Packet {
    /// The buffer holding the frame.
    pub buf: Buf,
    /// Its metadata.
    pub meta: Meta,
}

impl Packet {
    /// Parses `buf`'s frame (the one parse it gets: a VXLAN frame's inner
    /// stack too) and wraps it.
    pub fn parse(buf: Buf, offload: OffloadInfo) -> Result<Packet, (Buf, hvnet_wire::Error)> {
        Packet::parse_on(buf, offload, hvnet_wire::vxlan::PORT)
    }

    /// [`Packet::parse`] at a receiver whose VXLAN is on UDP port `port`
    /// (a tunnel endpoint's own).
    pub fn parse_on(
        buf: Buf,
        offload: OffloadInfo,
        port: u16,
    ) -> Result<Packet, (Buf, hvnet_wire::Error)> {
        match Layers::parse_on(buf.frame(), port) {
            Ok(layers) => Ok(Packet::parsed(buf, layers, offload)),
            Err(e) => Err((buf, e)),
        }
    }

    /// Wraps a frame whose header stack is known already (a decapsulated
    /// frame's, parsed with its outer headers).
    pub fn parsed(buf: Buf, layers: Layers, offload: OffloadInfo) -> Packet {
        Packet {
            buf,
            meta: Meta {
                layers,
                offload,
                hash: None,
                tunnel: None,
                vlan: 0,
            },
        }
    }
    /// The frame.
    pub fn frame(&self) -> &[u8] {
        self.buf.frame()
    }
    /// Frame length.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// True for an empty frame.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Destination MAC.
    pub fn dst(&self) -> MacAddr {
        mac_at(self.frame(), 0)
    }
    /// Source MAC.
    pub fn src(&self) -> MacAddr {
        mac_at(self.frame(), 6)
    }
    /// True if the frame carries an 802.1Q/802.1ad tag.
    pub fn tagged(&self) -> bool {
        self.meta.layers.outer_vlan().is_some()
    }
    /// The outer tag as a port's VLAN classification reads it: an
    /// 802.1Q tag's VID, another tag (802.1ad), or none. From the parse
    /// (`meta.layers`), and the TPID's two bytes for a tagged frame.
    #[inline]
    pub fn outer_tag(&self) -> OuterTag {
        match self.meta.layers.outer_vlan() {
            None => OuterTag::Untagged,
            Some(vid) if self.frame()[12..14] == TPID_8021Q => OuterTag::Dot1q(vid),
            Some(_) => OuterTag::Other,
        }
    }

    /// Makes the frame wear `want` as its outer 802.1Q tag (`None`: no
    /// tag): the tag taken off, pushed (into the buffer's headroom) or
    /// its VID rewritten (the priority bits kept), and the metadata kept
    /// true — the layer offsets, a partial checksum's start. Only the
    /// addresses move; a payload left pending stays so. False, and
    /// nothing changed, when a tag could not be pushed (no headroom, or
    /// two tags already). The frame's outer tag, if any, is 802.1Q (what
    /// ingress classification let through).
    pub fn set_vlan_tag(&mut self, want: Option<u16>) -> bool {
        let have = self.meta.layers.outer_vlan();
        match (have, want) {
            (None, None) => true,
            (Some(_), None) => {
                let f = self.buf.held_mut();
                f.copy_within(0..12, VLAN_TAG_LEN);
                self.buf.shrink_front(VLAN_TAG_LEN);
                self.meta.layers.pop_vlan();
                self.shift_csum(false);
                true
            }
            (Some(h), Some(w)) => {
                if h != w {
                    let f = self.buf.held_mut();
                    let tci = u16::from_be_bytes([f[14], f[15]]) & 0xf000 | (w & 0x0fff);
                    f[14..16].copy_from_slice(&tci.to_be_bytes());
                    self.meta.layers.set_outer_vlan(Some(w));
                }
                true
            }
            (None, Some(w)) => {
                if self.meta.layers.l2().vlans[MAX_VLAN_TAGS - 1].is_some()
                    || !self.buf.grow_front(VLAN_TAG_LEN)
                {
                    return false;
                }
                let f = self.buf.held_mut();
                f.copy_within(VLAN_TAG_LEN..VLAN_TAG_LEN + 12, 0);
                f[12..14].copy_from_slice(&TPID_8021Q);
                f[14..16].copy_from_slice(&(w & 0x0fff).to_be_bytes());
                self.meta.layers.push_vlan(w);
                self.shift_csum(true);
                true
            }
        }
    }

    /// A partial checksum's start, from the frame's start, after a tag
    /// was pushed (`later`) or taken off.
    fn shift_csum(&mut self, later: bool) {
        if let CsumState::Partial { start, .. } = &mut self.meta.offload.csum {
            let by = VLAN_TAG_LEN as u16;
            *start = if later {
                start.saturating_add(by)
            } else {
                start.saturating_sub(by)
            };
        }
    }

    /// For a decapsulated frame, the remote endpoint it came from (the
    /// outer source address) and the outer UDP source port, read from the
    /// outer headers in front of the frame (a tag pushed since wrote only
    /// over the VXLAN header's last bytes).
    pub fn tunnel_source(&self) -> Option<(std::net::IpAddr, u16)> {
        use hvnet_wire::{Ipv4Packet, Ipv6Packet};
        let t = self.meta.tunnel?;
        let ip = self.buf.storage().get(usize::from(t.outer_ip)..)?;
        let (remote, ip_len) = match ip.first()? >> 4 {
            4 => {
                let p = Ipv4Packet::new_checked(ip).ok()?;
                (std::net::IpAddr::from(p.src()), p.header_len())
            }
            6 => {
                let p = Ipv6Packet::new_checked(ip).ok()?;
                let ext = p.extensions().ok()?;
                (
                    std::net::IpAddr::from(p.src()),
                    hvnet_wire::ipv6::HEADER_LEN + ext.len,
                )
            }
            _ => return None,
        };
        let udp = ip.get(ip_len..ip_len + 2)?;
        Some((remote, u16::from_be_bytes([udp[0], udp[1]])))
    }

    /// Ethernet through transport header length (a GSO header's `hdr_len`).
    pub fn header_len(&self) -> usize {
        self.meta.layers.payload_offset()
    }
}

/// The MAC address at byte `at` of frame `f`.
pub(crate) fn mac_at(f: &[u8], at: usize) -> MacAddr {
    let mut m = [0u8; 6];
    m.copy_from_slice(&f[at..at + 6]);
    MacAddr(m)
}

impl AsRef<[u8]> for Packet {
    fn as_ref(&self) -> &[u8] {
        self.buf.frame()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Home, Pool, PoolCaps, SizeClass};
    use hvnet_offload::testutil::TcpSpec;

    fn packet(pool: &mut Pool, frame: &[u8], offload: OffloadInfo) -> Packet {
        let mut b = pool.take(SizeClass::Small).expect("a buffer");
        b.fill(frame);
        Packet::parse(b, offload).expect("parses")
    }

    /// A TCP frame, tagged with `vlan` or not, with a partial checksum.
    fn frame(vlan: Option<u16>) -> (Vec<u8>, OffloadInfo) {
        let spec = TcpSpec {
            vlan,
            ..TcpSpec::default()
        };
        let l2 = if vlan.is_some() { 18 } else { 14 };
        let info = OffloadInfo {
            gso: None,
            csum: CsumState::Partial {
                start: l2 + 20,
                offset: 16,
            },
        };
        (spec.build(), info)
    }

    #[test]
    fn a_decapsulated_frame_reads_its_remote_and_port_from_the_outer_headers_in_place() {
        let mut pool = Pool::new(Home::new(PoolCaps::DEFAULT));
        let (inner, info) = frame(None);
        let outer = hvnet_offload::testutil::vxlan_wrap(&inner, 42, 49_999, 1, true);
        let p = packet(&mut pool, &outer, OffloadInfo::NONE);
        let (off, inner_layers) = p.meta.layers.inner().expect("VXLAN");
        let outer_ip = (p.buf.start() + p.meta.layers.l2_len()) as u16;
        let mut buf = p.buf;
        buf.keep_range(off..outer.len());
        let mut d = Packet::parsed(buf, inner_layers, info);
        d.meta.tunnel = Some(TunnelMeta {
            vni: 42,
            outer_len: std::num::NonZeroU16::new(off as u16).unwrap(),
            outer_ip,
        });
        let remote = std::net::IpAddr::from([10, 99, 0, 1]);
        assert_eq!(d.frame(), &inner[..]);
        assert_eq!(d.tunnel_source(), Some((remote, 49_999)));
        // A tag pushed into the headroom leaves the outer IP and UDP
        // headers whole.
        assert!(d.set_vlan_tag(Some(7)));
        assert_eq!(d.tunnel_source(), Some((remote, 49_999)));
    }

    #[test]
    fn pushing_popping_and_rewriting_a_tag_keep_the_metadata_true() {
        let mut pool = Pool::new(Home::new(PoolCaps::DEFAULT));
        let (plain, plain_info) = frame(None);
        let (tagged, tagged_info) = frame(Some(10));
        let mut p = packet(&mut pool, &plain, plain_info);
        assert_eq!(p.outer_tag(), OuterTag::Untagged);
        assert!(p.set_vlan_tag(None));
        assert_eq!(p.frame(), &plain[..]);
        // Pushed: the bytes and the stack as if the frame had come tagged.
        assert!(p.set_vlan_tag(Some(10)));
        assert_eq!(p.frame(), &tagged[..]);
        assert_eq!(p.meta.layers, Layers::parse(&tagged).unwrap());
        assert_eq!(p.meta.offload, tagged_info);
        assert_eq!(p.outer_tag(), OuterTag::Dot1q(10));
        // Rewritten: the priority bits stay.
        p.buf.held_mut()[14] |= 0xa0;
        assert!(p.set_vlan_tag(Some(20)));
        assert_eq!(&p.frame()[14..16], &[0xa0, 20]);
        assert_eq!(p.meta.layers, Layers::parse(p.frame()).unwrap());
        assert_eq!(p.outer_tag(), OuterTag::Dot1q(20));
        // Taken off: the frame as it was.
        assert!(p.set_vlan_tag(None));
        assert_eq!(p.frame(), &plain[..]);
        assert_eq!(p.meta.layers, Layers::parse(&plain).unwrap());
        assert_eq!(p.meta.offload, plain_info);
        // A frame read tagged, untagged.
        let mut t = packet(&mut pool, &tagged, tagged_info);
        assert!(t.set_vlan_tag(None));
        assert_eq!(t.frame(), &plain[..]);
        assert_eq!((t.meta.layers, t.meta.offload), (p.meta.layers, plain_info));
    }

    #[test]
    fn a_tag_is_not_pushed_without_headroom_or_over_two_tags() {
        let mut pool = Pool::new(Home::new(PoolCaps::DEFAULT));
        let (tagged, info) = frame(Some(10));
        let mut qinq = tagged[..12].to_vec();
        qinq.extend_from_slice(&[0x88, 0xa8, 0, 30]);
        qinq.extend_from_slice(&tagged[12..]);
        let mut p = packet(&mut pool, &qinq, info);
        assert_eq!(p.outer_tag(), OuterTag::Other);
        let mut popped = packet(&mut pool, &qinq, info);
        assert!(popped.set_vlan_tag(None));
        assert_eq!(popped.frame(), &tagged[..]);
        assert!(p.set_vlan_tag(None) && p.set_vlan_tag(None));
        // Two tags: a third is refused, nothing changed.
        let mut two = packet(&mut pool, &qinq, info);
        two.meta.layers.set_outer_vlan(None);
        assert!(!two.set_vlan_tag(Some(5)));
        assert_eq!(two.frame(), &qinq[..]);
        // The headroom used up: refused.
        let mut full = packet(&mut pool, &tagged, info);
        assert!(full.set_vlan_tag(None));
        while full.buf.grow_front(1) {}
        let before = full.frame().to_vec();
        let l = full.meta.layers;
        assert!(!full.set_vlan_tag(Some(5)));
        assert_eq!((full.frame(), full.meta.layers), (&before[..], l));
    }
}
