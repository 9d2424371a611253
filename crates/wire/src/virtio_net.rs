//! The virtio-net header (virtio 1.x §5.1.6) that precedes every frame on a
//! TAP opened with `IFF_VNET_HDR`.
//!
//! Fields are little-endian and read by offset rather than through a
//! `#[repr(C)]` cast: the header sits at arbitrary offsets inside receive
//! buffers, and a reference to a misaligned `u16` would be undefined
//! behaviour. Two layouts exist: the legacy 10-byte one, and the 12-byte one
//! with `num_buffers` (virtio 1.0, or legacy with `VIRTIO_NET_F_MRG_RXBUF`).

use crate::error::{Error, Result};

/// The 10-byte legacy header.
pub const LEN_LEGACY: usize = 10;
/// The 12-byte header with `num_buffers`.
pub const LEN_V1: usize = 12;
/// The 24-byte header with the hash report and the UDP tunnel offsets
/// (`virtio_net_hdr_v1_hash_tunnel`, virtio 1.4; Linux 6.17's TAP with
/// `TUNSETVNETHDRSZ` 24): what a tunnelled GSO frame needs.
pub const LEN_TUNNEL: usize = 24;

/// `gso_type` bits of a tunnelled GSO frame (the outer network layer),
/// with the inner frame's own type beside them.
pub mod tunnel {
    /// Inside UDP over IPv4 (`VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4`).
    pub const GSO_UDP_TUNNEL_IPV4: u8 = 0x20;
    /// Inside UDP over IPv6 (`VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV6`).
    pub const GSO_UDP_TUNNEL_IPV6: u8 = 0x40;
    /// `flags`: the outer UDP checksum is partial (its field holds the
    /// pseudo-header sum), to be completed per segment
    /// (`VIRTIO_NET_HDR_F_UDP_TUNNEL_CSUM`).
    pub const F_UDP_TUNNEL_CSUM: u8 = 0x08;
}

/// `flags` bits.
pub mod flags {
    /// The checksum at `csum_start + csum_offset` must be completed.
    pub const NEEDS_CSUM: u8 = 1;
    /// The checksum has been validated.
    pub const DATA_VALID: u8 = 2;
    /// `csum_start`/`csum_offset` carry RSC coalescing info.
    pub const RSC_INFO: u8 = 4;
}

/// The GSO kind of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GsoType {
    /// Not a GSO frame.
    #[default]
    None,
    /// TCP over IPv4.
    TcpV4,
    /// UDP fragmentation offload (UFO, obsolete).
    Udp,
    /// TCP over IPv6.
    TcpV6,
    /// UDP segmentation offload (USO).
    UdpL4,
}

impl GsoType {
    /// The wire value (without the ECN bit).
    pub const fn value(self) -> u8 {
        match self {
            GsoType::None => 0,
            GsoType::TcpV4 => 1,
            GsoType::Udp => 3,
            GsoType::TcpV6 => 4,
            GsoType::UdpL4 => 5,
        }
    }
}

/// The ECN bit of `gso_type`: the TCP frame had CWR set.
pub const GSO_ECN: u8 = 0x80;

/// A decoded virtio-net header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Repr {
    /// `flags` byte.
    pub flags: u8,
    /// GSO type.
    pub gso_type: GsoType,
    /// The ECN bit of `gso_type`.
    pub gso_ecn: bool,
    /// Bytes of headers (Ethernet to end of L4) in a GSO frame.
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where checksumming starts, from the start of the frame.
    pub csum_start: u16,
    /// Where the checksum is stored, from `csum_start`.
    pub csum_offset: u16,
    /// Buffers used for this frame (12-byte layout only; 1 otherwise).
    pub num_buffers: u16,
}

impl Repr {
    /// Reads a header of `len` bytes (10 or 12) from the start of `buf`.
    /// Unknown `gso_type` values are an error; everything else is checked
    /// against the frame by the port that receives it.
    pub fn parse(buf: &[u8], len: usize) -> Result<Repr> {
        if len != LEN_LEGACY && len != LEN_V1 {
            return Err(Error::BadVnetHeader);
        }
        if buf.len() < len {
            return Err(Error::Truncated);
        }
        let le = |at: usize| u16::from_le_bytes([buf[at], buf[at + 1]]);
        let gso_ecn = buf[1] & GSO_ECN != 0;
        let gso_type = match buf[1] & !GSO_ECN {
            0 => GsoType::None,
            1 => GsoType::TcpV4,
            3 => GsoType::Udp,
            4 => GsoType::TcpV6,
            5 => GsoType::UdpL4,
            _ => return Err(Error::BadVnetHeader),
        };
        Ok(Repr {
            flags: buf[0],
            gso_type,
            gso_ecn,
            hdr_len: le(2),
            gso_size: le(4),
            csum_start: le(6),
            csum_offset: le(8),
            num_buffers: if len == LEN_V1 { le(10) } else { 1 },
        })
    }

    /// Writes the header into the first `len` (10 or 12) bytes of `buf`.
    /// Made as two words and stored with two stores: a header written
    /// field by field and then copied at once (as every frame's is, on
    /// its way into a ring) waits for its narrow stores to land.
    #[inline]
    pub fn emit(&self, buf: &mut [u8], len: usize) {
        let gso = self.gso_type.value() | if self.gso_ecn { GSO_ECN } else { 0 };
        let head = u64::from(self.flags)
            | u64::from(gso) << 8
            | u64::from(self.hdr_len) << 16
            | u64::from(self.gso_size) << 32
            | u64::from(self.csum_start) << 48;
        buf[..8].copy_from_slice(&head.to_le_bytes());
        if len == LEN_V1 {
            let tail = u32::from(self.csum_offset) | u32::from(self.num_buffers) << 16;
            buf[8..12].copy_from_slice(&tail.to_le_bytes());
        } else {
            buf[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        }
    }

    /// True when the frame must be checksummed at `csum_start`/`csum_offset`.
    pub fn needs_csum(&self) -> bool {
        self.flags & flags::NEEDS_CSUM != 0
    }

    /// True when the sender vouches for the checksum.
    pub fn data_valid(&self) -> bool {
        self.flags & flags::DATA_VALID != 0
    }
}

/// The 24-byte header of a frame inside a UDP tunnel: the 12-byte header
/// of its inner frame (offsets from the start of the outer frame), the
/// outer network layer's bits, and where the outer UDP header and the
/// inner network header start. No hash is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TunnelRepr {
    /// The inner frame's header.
    pub inner: Repr,
    /// The outer network layer is IPv6 (else IPv4).
    pub outer_ipv6: bool,
    /// The outer UDP checksum is partial ([`tunnel::F_UDP_TUNNEL_CSUM`]).
    pub outer_csum: bool,
    /// Where the outer UDP header starts.
    pub outer_th_offset: u16,
    /// Where the inner network header starts.
    pub inner_nh_offset: u16,
}

impl TunnelRepr {
    /// Writes the header into the first [`LEN_TUNNEL`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[..LEN_TUNNEL].fill(0);
        self.inner.emit(buf, LEN_V1);
        if self.inner.gso_type != GsoType::None {
            buf[1] |= if self.outer_ipv6 {
                tunnel::GSO_UDP_TUNNEL_IPV6
            } else {
                tunnel::GSO_UDP_TUNNEL_IPV4
            };
        }
        if self.outer_csum {
            buf[0] |= tunnel::F_UDP_TUNNEL_CSUM;
        }
        buf[20..22].copy_from_slice(&self.outer_th_offset.to_le_bytes());
        buf[22..24].copy_from_slice(&self.inner_nh_offset.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A header as the kernel writes it for a 64 KiB TCPv4 GSO frame with
    // a partial checksum: flags=1, gso_type=1, hdr_len=66, gso_size=1448,
    // csum_start=34, csum_offset=16, num_buffers=1.
    static HDR_BYTES: [u8; 12] = [1, 1, 66, 0, 0xa8, 0x05, 34, 0, 16, 0, 1, 0];

    // The header `recipes/tap-tunnel-gso.py` (case F) wrote into Linux
    // 6.18's TAP for a VXLAN frame of inner TCPv4 GSO, both checksums
    // partial: flags 0x09, gso_type 0x21, hdr_len 104, gso_size 1448,
    // csum 84/16, outer UDP at 34, inner IP at 64.
    #[test]
    fn tunnel_header_as_the_kernel_takes_it() {
        let t = TunnelRepr {
            inner: Repr {
                flags: flags::NEEDS_CSUM,
                gso_type: GsoType::TcpV4,
                hdr_len: 104,
                gso_size: 1448,
                csum_start: 84,
                csum_offset: 16,
                num_buffers: 0,
                ..Repr::default()
            },
            outer_ipv6: false,
            outer_csum: true,
            outer_th_offset: 34,
            inner_nh_offset: 64,
        };
        let mut b = [0xffu8; LEN_TUNNEL];
        t.emit(&mut b);
        assert_eq!(
            b,
            [
                0x09, 0x21, 104, 0, 0xa8, 0x05, 84, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 34, 0,
                64, 0
            ]
        );
    }

    #[test]
    fn test_deconstruct() {
        let r = Repr::parse(&HDR_BYTES, LEN_V1).unwrap();
        assert!(r.needs_csum());
        assert_eq!(r.gso_type, GsoType::TcpV4);
        assert_eq!(
            (r.hdr_len, r.gso_size, r.csum_start, r.csum_offset),
            (66, 1448, 34, 16)
        );
        assert_eq!(r.num_buffers, 1);
        let legacy = Repr::parse(&HDR_BYTES, LEN_LEGACY).unwrap();
        assert_eq!(legacy.num_buffers, 1);
    }

    #[test]
    fn test_emit_round_trip() {
        let r = Repr::parse(&HDR_BYTES, LEN_V1).unwrap();
        let mut out = [0u8; 12];
        r.emit(&mut out, LEN_V1);
        assert_eq!(out, HDR_BYTES);
        let ecn = Repr {
            gso_type: GsoType::TcpV6,
            gso_ecn: true,
            ..r
        };
        ecn.emit(&mut out, LEN_V1);
        assert_eq!(out[1], 0x84);
        assert_eq!(Repr::parse(&out, LEN_V1).unwrap(), ecn);
    }

    #[test]
    fn rejects_unknown_gso_and_short() {
        let mut b = HDR_BYTES;
        b[1] = 2;
        assert_eq!(Repr::parse(&b, LEN_V1).unwrap_err(), Error::BadVnetHeader);
        assert_eq!(
            Repr::parse(&b[..9], LEN_LEGACY).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(Repr::parse(&b, 11).unwrap_err(), Error::BadVnetHeader);
    }
}
