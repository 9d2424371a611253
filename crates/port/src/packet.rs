//! The packet: a buffer and the metadata the switch learned about its frame
//! where it entered — parsed once, read by every later stage (forwarding,
//! RSS, GRO, GSO, delivery), as Open vSwitch's `dp_packet` carries its
//! `miniflow` and the kernel's skb its header offsets.

use crate::pool::Buf;
use hvnet_offload::OffloadInfo;
use hvnet_wire::{Layers, MacAddr};

/// What is known about a frame.
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
}

/// What a decapsulated frame's outer headers said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunnelMeta {
    /// The VXLAN network identifier.
    pub vni: u32,
    /// Bytes of outer headers it arrived with.
    pub outer_len: u16,
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
        self.meta.layers.l2.vlans[0].is_some()
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
