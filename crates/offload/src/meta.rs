//! Offload metadata that travels with a frame through the switch: what
//! segmentation it still needs and what is known about its checksums. One
//! type serves both directions, because GRO output is GSO input.

use hvnet_wire::virtio_net::{self, GsoType, Repr as VirtioNetHdr};

/// What is known about a frame's transport checksum.
///
/// An enum, not flag bits: OVS encodes "partial" as GOOD+BAD, which reads
/// as a contradiction. Rules (after OVS userspace checksum offloading): a
/// known-bad checksum is never fixed, and recomputation is deferred to
/// egress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CsumState {
    /// Nobody has looked; validate before trusting.
    #[default]
    Unknown,
    /// Validated (by us, or vouched for by the sender: `DATA_VALID`).
    Good,
    /// Validated and wrong.
    Bad,
    /// The field holds the pseudo-header sum; the sum over the frame from
    /// `start` must be stored at `start + offset` (`NEEDS_CSUM`).
    Partial {
        /// Checksum start, from the start of the Ethernet frame.
        start: u16,
        /// Where the checksum goes, from `start`.
        offset: u16,
    },
}

/// Segmentation still owed by a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GsoInfo {
    /// TCPv4, TCPv6 or UDP_L4.
    pub kind: GsoType,
    /// Payload bytes per segment (the MSS for TCP).
    pub size: u16,
    /// The frame carries CWR that must appear on the first segment only.
    pub ecn: bool,
}

/// Offload metadata for one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OffloadInfo {
    /// Set when the frame is larger than one segment and must be segmented
    /// before it reaches a receiver that cannot take it whole.
    pub gso: Option<GsoInfo>,
    /// Transport checksum state.
    pub csum: CsumState,
}

impl OffloadInfo {
    /// Metadata for a frame that needs nothing and whose checksum nobody
    /// checked.
    pub const NONE: OffloadInfo = OffloadInfo {
        gso: None,
        csum: CsumState::Unknown,
    };

    /// Reads what a virtio-net header says. Structural validation against
    /// the frame happens at the port boundary, not here.
    pub fn from_vnet(h: &VirtioNetHdr) -> OffloadInfo {
        let csum = if h.needs_csum() {
            CsumState::Partial {
                start: h.csum_start,
                offset: h.csum_offset,
            }
        } else if h.data_valid() {
            CsumState::Good
        } else {
            CsumState::Unknown
        };
        let gso = match h.gso_type {
            GsoType::None => None,
            kind => Some(GsoInfo {
                kind,
                size: h.gso_size,
                ecn: h.gso_ecn,
            }),
        };
        OffloadInfo { gso, csum }
    }

    /// The virtio-net header a receiver expects for this frame; `hdr_len` is
    /// the length of its headers (Ethernet through L4).
    #[inline]
    pub fn to_vnet(&self, hdr_len: u16) -> VirtioNetHdr {
        let (flags, csum_start, csum_offset) = match self.csum {
            CsumState::Partial { start, offset } => (virtio_net::flags::NEEDS_CSUM, start, offset),
            CsumState::Good => (virtio_net::flags::DATA_VALID, 0, 0),
            CsumState::Unknown | CsumState::Bad => (0, 0, 0),
        };
        let (gso_type, gso_size, gso_ecn, hdr_len) = match self.gso {
            Some(g) => (g.kind, g.size, g.ecn, hdr_len),
            None => (GsoType::None, 0, false, 0),
        };
        VirtioNetHdr {
            flags,
            gso_type,
            gso_ecn,
            hdr_len,
            gso_size,
            csum_start,
            csum_offset,
            num_buffers: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnet_round_trip() {
        let h = VirtioNetHdr {
            flags: virtio_net::flags::NEEDS_CSUM,
            gso_type: GsoType::TcpV6,
            gso_ecn: true,
            hdr_len: 74,
            gso_size: 1428,
            csum_start: 54,
            csum_offset: 16,
            num_buffers: 1,
        };
        let info = OffloadInfo::from_vnet(&h);
        assert_eq!(
            info.csum,
            CsumState::Partial {
                start: 54,
                offset: 16
            }
        );
        assert_eq!(info.to_vnet(74), h);
        let plain = OffloadInfo {
            gso: None,
            csum: CsumState::Good,
        }
        .to_vnet(0);
        assert_eq!(plain.flags, virtio_net::flags::DATA_VALID);
        assert_eq!(plain.gso_type, GsoType::None);
    }
}
