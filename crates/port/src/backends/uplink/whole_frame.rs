//! Whole frames from an uplink socket without a virtio-net header: how a
//! tunnel endpoint receives.
//!
//! A Linux peer's `vxlan` device on a veth (its `tx-udp_tnl-segmentation`
//! on, as by default) hands over tunnelled GSO frames: outer Ethernet, IP,
//! UDP and VXLAN around a 64 KiB inner TCP frame. A packet socket's
//! virtio-net header has no UDP-tunnel GSO type to express them with: the
//! kernel drops them, or (this machine's, on a plain uplink) hands them
//! over as plain TCP GSO whose offsets are not the outer headers'. Without
//! the header the socket
//! takes every frame whole; `PACKET_AUXDATA` says whether its checksum is
//! partial, verified, and whether it is a TCP GSO frame. What the header
//! would have carried is then read off the frame itself ([`offload_of`]):
//! the partial checksum is the innermost transport header's, and the
//! segment size is what makes every segment fit the uplink's MTU — the
//! size the sender's TCP chose for that path.

use crate::vnet::{RecvError, MAX_GSO_SEGMENTS};
use hvnet_offload::{csum, CsumState, GsoInfo, OffloadInfo};
use hvnet_sys::AuxStatus;
use hvnet_wire::virtio_net::GsoType;
use hvnet_wire::{ip_protocol, tcp, Layers, NetKind};

/// What a tunnel endpoint's frame carries, from the frame and the kernel's
/// word on it: the checksum partial at the innermost transport header
/// (`CSUMNOTREADY`), verified (`CSUM_VALID`, the receiver's business as a
/// virtio-net header's `DATA_VALID` is), or unknown; and for a frame
/// longer than the uplink's MTU allows, or one the kernel calls a TCP GSO
/// frame, the segmentation owed. `tunnel`: the endpoint's UDP port (whose
/// frames' inner headers are the innermost); `mtu`: the uplink's.
pub fn offload_of(
    frame: &[u8],
    layers: &Layers,
    status: AuxStatus,
    tunnel: u16,
    mtu: u16,
) -> Result<OffloadInfo, RecvError> {
    // The inner stack was parsed with the outer one. An inner frame whose
    // headers lie is the tunnel endpoint's to count (as bad VXLAN); here it
    // is taken as a frame with no inner headers.
    let inner = match layers.vxlan() {
        Some(v) if v.port == tunnel => layers.inner(),
        _ => None,
    };
    let (base, inner) = inner.unwrap_or((0, *layers));
    let transport = inner.transport();
    let l4 = transport.map(|t| (t.protocol, base + t.offset));
    let csum = if status.has(AuxStatus::CSUM_NOT_READY) && outer_partial(frame, layers, base) {
        // The sender's tunnel left the outer UDP checksum to the device
        // (Linux's `udpcsum` over an inner frame whose own checksum was
        // done): nothing of the inner frame is owed or known.
        CsumState::Unknown
    } else if status.has(AuxStatus::CSUM_NOT_READY) {
        match l4 {
            Some((ip_protocol::TCP, start)) => partial(start, 16),
            Some((ip_protocol::UDP, start)) => partial(start, 6),
            // Partial over a header hvnet does not know: nobody can
            // complete it.
            _ => return Err(RecvError::BadFrame(hvnet_wire::Error::BadHeaderLen)),
        }
    } else if status.has(AuxStatus::CSUM_VALID) {
        CsumState::Good
    } else {
        CsumState::Unknown
    };
    let wire_max = usize::from(mtu) + layers.l2_len();
    let gso_tcp = status.has(AuxStatus::GSO_TCP);
    if frame.len() <= wire_max && !gso_tcp {
        return Ok(OffloadInfo { gso: None, csum });
    }
    let (Some(t), Some(net)) = (transport, inner.net()) else {
        // An oversized frame that is not TCP is passed on as it is: the
        // receiver's MTU check drops and counts it.
        return Ok(OffloadInfo { gso: None, csum });
    };
    if t.protocol != ip_protocol::TCP {
        return Ok(OffloadInfo { gso: None, csum });
    }
    let headers = base + inner.payload_offset();
    let size = wire_max.saturating_sub(headers);
    let payload = frame.len().saturating_sub(headers);
    if size == 0 {
        return Err(RecvError::BadFrame(hvnet_wire::Error::BadLength));
    }
    if payload <= size {
        // Fits one segment after all (a GSO frame of one segment).
        return Ok(OffloadInfo { gso: None, csum });
    }
    if payload.div_ceil(size) > MAX_GSO_SEGMENTS {
        return Err(RecvError::TooManySegments);
    }
    let kind = match net.kind {
        NetKind::Ipv4 => GsoType::TcpV4,
        NetKind::Ipv6 => GsoType::TcpV6,
    };
    let flags = tcp::Packet::new_unchecked(&frame[base + t.offset..]).flags();
    Ok(OffloadInfo {
        gso: Some(GsoInfo {
            kind,
            size: size as u16,
            ecn: flags & tcp::flags::CWR != 0,
        }),
        // Segments get their checksums made whatever the sender left.
        csum: match csum {
            CsumState::Partial { .. } => csum,
            _ => partial(base + t.offset, 16),
        },
    })
}

/// True when a tunnelled frame's partial checksum is its outer UDP one:
/// the field then holds the folded pseudo-header sum, as Linux's
/// `udp_set_csum` leaves it for the device. (An inner partial checksum
/// leaves the outer field zero, or complete by local checksum offload.)
fn outer_partial(frame: &[u8], layers: &Layers, base: usize) -> bool {
    let (true, Some(net), Some(t)) = (base > 0, layers.net(), layers.transport()) else {
        return false;
    };
    let field = u16::from_be_bytes([frame[t.offset + 6], frame[t.offset + 7]]);
    let len = (frame.len() - t.offset) as u32;
    field != 0 && field == csum::pseudo_header(frame, &net, ip_protocol::UDP, len).fold()
}

fn partial(start: usize, offset: u16) -> CsumState {
    CsumState::Partial {
        start: start as u16,
        offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvnet_offload::rss::{Rss, DEFAULT_KEY};
    use hvnet_offload::testutil::{rss_hash, TcpSpec};
    use hvnet_offload::vxlan::{encap, Tunnel, OUTER_LEN};

    const INNER_HEADERS: usize = 14 + 20 + 20;

    fn tunnelled(payload: usize, udp_csum: bool) -> Vec<u8> {
        let inner = TcpSpec {
            payload: vec![7; payload],
            ..TcpSpec::default()
        }
        .build();
        let t = Tunnel {
            udp_csum,
            ..Tunnel::new(42, [198, 18, 9, 2], [198, 18, 9, 1])
        };
        let rss = Rss::new(&DEFAULT_KEY, 1).unwrap();
        let hash = rss_hash(&rss, &inner).map(|(h, _)| h);
        encap(&t, &inner, hash, OffloadInfo::NONE).unwrap().0
    }

    fn offload(frame: &[u8], status: u32, mtu: u16) -> Result<OffloadInfo, RecvError> {
        let l = Layers::parse(frame).unwrap();
        offload_of(frame, &l, AuxStatus::of(status), 4789, mtu)
    }

    #[test]
    fn a_tunnelled_gso_frame_gets_segments_that_fit_the_wire() {
        let f = tunnelled(20_000, false);
        let status = AuxStatus::CSUM_NOT_READY | AuxStatus::GSO_TCP;
        let info = offload(&f, status, 1500).unwrap();
        let g = info.gso.expect("a GSO frame");
        assert_eq!(g.kind, GsoType::TcpV4);
        // Outer IP, UDP, VXLAN, then the inner headers: every segment's
        // IP packet is exactly the MTU.
        assert_eq!(usize::from(g.size), 1500 - (OUTER_LEN - 14) - INNER_HEADERS);
        let start = (OUTER_LEN + 14 + 20) as u16;
        assert_eq!(info.csum, CsumState::Partial { start, offset: 16 });
    }

    #[test]
    fn an_oversized_frame_is_gso_even_without_the_kernels_word() {
        let f = tunnelled(3000, false);
        let info = offload(&f, AuxStatus::CSUM_NOT_READY, 1500).unwrap();
        assert!(info.gso.is_some());
        // A frame that fits is not.
        let f = tunnelled(1000, false);
        assert_eq!(offload(&f, 0, 1500).unwrap(), OffloadInfo::NONE);
    }

    #[test]
    fn an_outer_partial_checksum_leaves_the_inner_unknown() {
        let mut f = tunnelled(100, false);
        let l = Layers::parse(&f).unwrap();
        let (net, t) = (l.net().unwrap(), l.transport().unwrap());
        let len = (f.len() - t.offset) as u32;
        let pseudo = csum::pseudo_header(&f, &net, ip_protocol::UDP, len).fold();
        f[t.offset + 6..t.offset + 8].copy_from_slice(&pseudo.to_be_bytes());
        let info = offload(&f, AuxStatus::CSUM_NOT_READY, 1500).unwrap();
        assert_eq!(info.csum, CsumState::Unknown);
        // With a complete outer checksum (LCO), the partial one is inner.
        let f = tunnelled(100, true);
        let info = offload(&f, AuxStatus::CSUM_NOT_READY, 1500).unwrap();
        assert!(matches!(info.csum, CsumState::Partial { offset: 16, .. }));
    }

    #[test]
    fn a_verified_plain_frame_is_good() {
        let f = TcpSpec::default().build();
        let info = offload(&f, AuxStatus::CSUM_VALID, 1500).unwrap();
        assert_eq!(info.csum, CsumState::Good);
        assert_eq!(info.gso, None);
    }

    #[test]
    fn segments_too_small_to_make_are_refused() {
        let f = tunnelled(60_000, false);
        assert!(matches!(
            offload(&f, AuxStatus::GSO_TCP, 200),
            Err(RecvError::TooManySegments)
        ));
        assert!(offload(&f, AuxStatus::GSO_TCP, 60).is_err());
    }
}
