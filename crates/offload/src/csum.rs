//! Checksum offload in software: complete a partial checksum, validate the
//! transport checksum of a frame, and fill in every checksum of a frame we
//! built.

use crate::meta::CsumState;
use hvnet_wire::checksum::{self, Sum};
use hvnet_wire::layers::{ip_protocol, Layers, Net, NetKind, Transport};
use hvnet_wire::{ipv4, ipv6, tcp, udp};

/// Why a checksum could not be completed or checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CsumError {
    /// `csum_start + csum_offset + 2` lies past the frame.
    #[error("checksum offset lies outside the frame")]
    OutOfBounds,
    /// The frame carries no TCP or UDP header to check.
    #[error("frame has no transport checksum")]
    NoTransport,
}

/// Completes a `NEEDS_CSUM` checksum: sums the frame from `start` (the field
/// already holds the pseudo-header sum) and stores the result at
/// `start + offset`, as a NIC with `NETIF_F_HW_CSUM` would.
pub fn complete_partial(frame: &mut [u8], start: u16, offset: u16) -> Result<(), CsumError> {
    let start = start as usize;
    let at = start + offset as usize;
    if at + 2 > frame.len() || start > frame.len() {
        return Err(CsumError::OutOfBounds);
    }
    let c = Sum::ZERO.add_bytes(&frame[start..]).finish();
    frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// The pseudo-header sum for a transport segment of `l4_len` bytes.
pub fn pseudo_header(frame: &[u8], net: &Net, protocol: u8, l4_len: u32) -> Sum {
    pseudo_header_at(frame, net.kind, net.offset, protocol, l4_len as usize)
}

/// The pseudo-header sum from the IP header at `ip_offset` of `buf` (which
/// may hold only the headers of a frame being built).
pub fn pseudo_header_at(
    buf: &[u8],
    kind: NetKind,
    ip_offset: usize,
    protocol: u8,
    l4_len: usize,
) -> Sum {
    let ip = &buf[ip_offset..];
    match kind {
        NetKind::Ipv4 => ipv4::Packet::new_unchecked(ip).pseudo_header(l4_len as u32),
        NetKind::Ipv6 => ipv6::Packet::new_unchecked(ip).pseudo_header(protocol, l4_len as u32),
    }
}

/// Rewrites an IP header's length for a packet of `len` bytes from the
/// start of the IP header (IPv4: total length, optionally the ID, and the
/// header checksum; IPv6: payload length). Used wherever a frame is resized:
/// GRO completion, GSO segments.
pub fn set_ip_len(buf: &mut [u8], kind: NetKind, ip_offset: usize, len: usize, ident: Option<u16>) {
    let ip = &mut buf[ip_offset..];
    match kind {
        NetKind::Ipv4 => {
            let mut p = ipv4::Packet::new_unchecked(ip);
            p.set_total_len(len as u16);
            if let Some(id) = ident {
                p.set_ident(id);
            }
            p.fill_checksum();
        }
        NetKind::Ipv6 => {
            ipv6::Packet::new_unchecked(ip).set_payload_len((len - ipv6::HEADER_LEN) as u16);
        }
    }
}

/// Validates the TCP or UDP checksum of a parsed frame (the bytes up to the
/// IP length; link padding is excluded).
pub fn validate_l4(frame: &[u8], layers: &Layers) -> Result<CsumState, CsumError> {
    let (Some(net), Some(t)) = (layers.net(), layers.transport()) else {
        return Err(CsumError::NoTransport);
    };
    Ok(if l4_sum_ok(frame, &net, &t) {
        CsumState::Good
    } else {
        CsumState::Bad
    })
}

pub(crate) fn l4_sum_ok(frame: &[u8], net: &Net, t: &Transport) -> bool {
    let seg = &frame[t.offset..net.end];
    if t.protocol == ip_protocol::UDP {
        let u = udp::Packet::new_unchecked(seg);
        if u.checksum() == 0 && net.kind == NetKind::Ipv4 {
            return true;
        }
    }
    let ph = pseudo_header(frame, net, t.protocol, seg.len() as u32);
    checksum::verifies(ph.add_bytes(seg))
}

/// Fills in the transport checksum (TCP or UDP) of a parsed frame from
/// scratch.
pub fn fill_l4(frame: &mut [u8], net: &Net, t: &Transport) {
    let ph = pseudo_header(frame, net, t.protocol, (net.end - t.offset) as u32);
    let seg = &mut frame[t.offset..net.end];
    if t.protocol == ip_protocol::TCP {
        tcp::Packet::new_unchecked(seg).fill_checksum(ph);
    } else {
        udp::Packet::new_unchecked(seg).fill_checksum(ph);
    }
}

/// Fills the IPv4 header checksum (no-op for IPv6).
pub fn fill_ip(frame: &mut [u8], net: &Net) {
    if net.kind == NetKind::Ipv4 {
        ipv4::Packet::new_unchecked(&mut frame[net.offset..]).fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::tcp4_frame;

    #[test]
    fn partial_completion_equals_full_checksum() {
        let mut f = tcp4_frame(1000, 7, 300, crate::testutil::ACK);
        let l = Layers::parse(&f).unwrap();
        assert_eq!(validate_l4(&f, &l).unwrap(), CsumState::Good);
        let (net, t) = (l.net().unwrap(), l.transport().unwrap());
        let good = tcp::Packet::new_unchecked(&f[t.offset..]).checksum();
        // Turn it into what a guest with TX checksum offload sends.
        let ph = pseudo_header(&f, &net, 6, (net.end - t.offset) as u32).fold();
        f[t.offset + 16..t.offset + 18].copy_from_slice(&ph.to_be_bytes());
        assert_eq!(validate_l4(&f, &l).unwrap(), CsumState::Bad);
        complete_partial(&mut f, t.offset as u16, 16).unwrap();
        assert_eq!(tcp::Packet::new_unchecked(&f[t.offset..]).checksum(), good);
        assert_eq!(
            complete_partial(&mut f, 60, 2000),
            Err(CsumError::OutOfBounds)
        );
    }
}
