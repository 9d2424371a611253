//! Segmentation offload in software (TSO/GSO for TCP, USO for UDP), for
//! frames whose receiver cannot take them whole.
//!
//! Follows Linux `tcp_gso_segment`, `inet_gso_segment`, `ipv6_gso_segment`,
//! `__udp_gso_segment` and `skb_udp_tunnel_segment`:
//! - TCP: each segment carries `gso_size` bytes of payload (the last one the
//!   rest); sequence numbers advance; FIN and PSH only on the last segment,
//!   CWR only on the first; the IPv4 ID increments per segment.
//! - UDP_L4: each segment is a datagram with its own UDP length and
//!   checksum.
//! - VXLAN: the inner frame is segmented as above; the outer IPv4 ID
//!   increments, and the outer IP and UDP lengths and the outer UDP checksum
//!   are fixed per segment.
//!
//! Segments are produced without copying payload: each one is a rewritten
//! header plus a slice of the original frame, handed to a callback (the
//! switch `writev`s the two; the pcap tool concatenates them).

use crate::meta::{CsumState, GsoInfo, OffloadInfo};
use hvnet_wire::checksum::Sum;
use hvnet_wire::layers::{ip_protocol, Layers, Net, NetKind, Transport};
use hvnet_wire::virtio_net::Repr as VirtioNetHdr;
use hvnet_wire::{ipv4, tcp, udp, GsoType};

/// Longest header a segment may have (all layers, VXLAN included).
pub const MAX_HEADER: usize = 256;
/// Linux's `UDP_MAX_SEGMENTS`.
pub const MAX_UDP_SEGMENTS: usize = 128;

/// Why a frame could not be segmented. Each variant is a drop reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GsoError {
    /// `gso_size` is zero on a GSO frame.
    #[error("gso_size is zero")]
    ZeroGsoSize,
    /// A header of the frame is malformed.
    #[error("malformed frame: {0}")]
    Malformed(hvnet_wire::Error),
    /// The GSO type does not match the frame (TCPV4 on IPv6, USO on TCP…).
    #[error("gso_type does not match the frame")]
    TypeMismatch,
    /// Headers longer than [`MAX_HEADER`].
    #[error("headers too long to segment")]
    HeaderTooLong,
    /// `hdr_len` lies past the end of the frame.
    #[error("hdr_len lies past the end of the frame")]
    HdrLenOutOfBounds,
    /// `csum_start`/`csum_offset` lie outside the frame, or do not point at
    /// the transport checksum of a GSO frame.
    #[error("csum_start/csum_offset do not fit the frame")]
    BadCsumOffsets,
    /// More UDP segments than [`MAX_UDP_SEGMENTS`].
    #[error("too many UDP segments")]
    TooManySegments,
}

/// How each segment's transport checksum is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsumMode {
    /// Computed in full (for a receiver with no checksum offload, or a
    /// capture file).
    Full,
    /// The pseudo-header sum, with `NEEDS_CSUM` metadata: the receiver (a
    /// guest that accepts partial checksums) finishes it. Cheaper: the
    /// payload is not read.
    Partial,
}

/// One segment: `header` then `payload`.
#[derive(Debug)]
pub struct SegmentOut<'a> {
    /// Rewritten headers, Ethernet through L4.
    pub header: &'a [u8],
    /// The segment's payload, a slice of the input frame.
    pub payload: &'a [u8],
    /// Offload metadata of the segment (no GSO; checksum per [`CsumMode`]).
    pub info: OffloadInfo,
}

impl SegmentOut<'_> {
    /// The segment as one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        [self.header, self.payload].concat()
    }
}

/// Checks a virtio-net header against its frame, as Linux
/// `virtio_net_hdr_to_skb` does for a TAP write, and returns the frame's
/// offload metadata. This is the port-boundary check: past it, the engines
/// may trust the offsets. `l` is the frame's header stack, parsed where it
/// entered (`hvnet_wire::Layers::parse`).
pub fn validate_vnet(frame: &[u8], h: &VirtioNetHdr, l: &Layers) -> Result<OffloadInfo, GsoError> {
    let info = OffloadInfo::from_vnet(h);
    if let CsumState::Partial { start, offset } = info.csum {
        if start as usize + offset as usize + 2 > frame.len() {
            return Err(GsoError::BadCsumOffsets);
        }
    }
    let Some(g) = info.gso else {
        return Ok(info);
    };
    if g.size == 0 || g.size == 0xffff {
        return Err(GsoError::ZeroGsoSize);
    }
    if h.hdr_len as usize > frame.len() {
        return Err(GsoError::HdrLenOutOfBounds);
    }
    let (_, t) = segmented_layers(l, g.kind)?;
    match info.csum {
        CsumState::Partial { start, offset } => {
            let want = if t.protocol == ip_protocol::TCP {
                tcp::CHECKSUM_OFFSET
            } else {
                udp::CHECKSUM_OFFSET
            };
            if start as usize != t.offset || offset as usize != want {
                return Err(GsoError::BadCsumOffsets);
            }
        }
        _ if g.kind == GsoType::UdpL4 => return Err(GsoError::BadCsumOffsets),
        _ => {}
    }
    Ok(info)
}

/// The network and transport layers the GSO type refers to, in the
/// frame's offsets, checked against it: for a VXLAN frame the inner ones,
/// parsed with the outer stack (VXLAN as the parse found it: on IANA's
/// port, or on a tunnel endpoint's own for a stack parsed there, as
/// Linux's `SKB_GSO_UDP_TUNNEL` says "tunnelled" without a port).
fn segmented_layers(l: &Layers, kind: GsoType) -> Result<(Net, Transport), GsoError> {
    match l.vxlan() {
        Some(v) => {
            let il = v.inner().map_err(GsoError::Malformed)?;
            let (n, t) = gso_layers(&il, kind)?;
            let inner = v.inner_offset as usize;
            Ok((
                Net {
                    offset: n.offset + inner,
                    end: n.end + inner,
                    ..n
                },
                Transport {
                    offset: t.offset + inner,
                    ..t
                },
            ))
        }
        None => gso_layers(l, kind),
    }
}

/// The network and transport layers of `l`, checked against the GSO type.
fn gso_layers(l: &Layers, kind: GsoType) -> Result<(Net, Transport), GsoError> {
    let (Some(net), Some(t)) = (l.net(), l.transport()) else {
        return Err(GsoError::TypeMismatch);
    };
    let ok = match kind {
        GsoType::TcpV4 => net.kind == NetKind::Ipv4 && t.protocol == ip_protocol::TCP,
        GsoType::TcpV6 => net.kind == NetKind::Ipv6 && t.protocol == ip_protocol::TCP,
        GsoType::UdpL4 => t.protocol == ip_protocol::UDP,
        GsoType::None | GsoType::Udp => false,
    };
    if ok {
        Ok((net, t))
    } else {
        Err(GsoError::TypeMismatch)
    }
}

/// Segments `frame` per `gso`, calling `out` once per segment in order.
/// Returns the number of segments. A frame whose payload fits in one
/// segment comes out as one segment with its checksum done per `mode`.
/// `l` is the frame's header stack, parsed where it entered; a VXLAN frame
/// (on the port the parse was given: a tunnel endpoint's own segments its
/// encapsulation on that port) is segmented on its inner headers, read
/// from the inner stack parsed with the outer one.
pub fn segment(
    frame: &[u8],
    l: &Layers,
    gso: GsoInfo,
    mode: CsumMode,
    out: &mut impl FnMut(SegmentOut<'_>),
) -> Result<usize, GsoError> {
    if gso.size == 0 {
        return Err(GsoError::ZeroGsoSize);
    }
    let (net, t) = segmented_layers(l, gso.kind)?;
    let outer = match l.vxlan() {
        Some(_) => {
            let (Some(on), Some(ot)) = (l.net(), l.transport()) else {
                // The parser finds VXLAN only behind IP and UDP.
                return Err(GsoError::TypeMismatch);
            };
            Some((on, ot))
        }
        None => None,
    };
    let hlen = t.offset + t.header_len;
    if hlen > MAX_HEADER {
        return Err(GsoError::HeaderTooLong);
    }
    let end = outer.map_or(net.end, |(o, _)| o.end).min(frame.len());
    if end < hlen || net.end > end {
        return Err(GsoError::Malformed(hvnet_wire::Error::BadLength));
    }
    let stack = Stack { net, t, outer };
    segment_core(
        &frame[..hlen],
        &frame[hlen..net.end],
        &stack,
        gso,
        mode,
        out,
    )
}

/// Segments an inner frame a tunnel endpoint is about to encapsulate
/// behind `outer` (Ethernet, IPv4, UDP and VXLAN headers for the whole
/// frame, as [`crate::vxlan::encap_header`] made them), as [`segment`]
/// would segment `outer` followed by `inner`: but without putting the two
/// together first. `l` is the inner frame's header stack, parsed where it
/// entered; the payload is not copied (each segment's payload is a slice
/// of `inner`).
pub fn segment_encapsulated(
    outer: &[u8],
    inner: &[u8],
    l: &Layers,
    gso: GsoInfo,
    mode: CsumMode,
    out: &mut impl FnMut(SegmentOut<'_>),
) -> Result<usize, GsoError> {
    if gso.size == 0 {
        return Err(GsoError::ZeroGsoSize);
    }
    let (net, t) = gso_layers(l, gso.kind)?;
    let (ol, il) = (outer.len(), t.offset + t.header_len);
    // The outer stack as encap_header writes it: Ethernet, IPv4 without
    // options or IPv6 without extension headers, UDP, VXLAN.
    const OUTER_IP: usize = 14;
    let (outer_kind, outer_ip_len) = match outer.get(12..14) {
        Some([0x86, 0xdd]) => (NetKind::Ipv6, 40),
        _ => (NetKind::Ipv4, 20),
    };
    let outer_udp = OUTER_IP + outer_ip_len;
    if ol < outer_udp + udp::HEADER_LEN || ol + il > MAX_HEADER {
        return Err(GsoError::HeaderTooLong);
    }
    if net.end > inner.len() || il > net.end {
        return Err(GsoError::Malformed(hvnet_wire::Error::BadLength));
    }
    let mut template = [0u8; MAX_HEADER];
    template[..ol].copy_from_slice(outer);
    template[ol..ol + il].copy_from_slice(&inner[..il]);
    let shift = |n: Net| Net {
        offset: n.offset + ol,
        end: n.end + ol,
        ..n
    };
    let stack = Stack {
        net: shift(net),
        t: Transport {
            offset: t.offset + ol,
            ..t
        },
        outer: Some((
            Net {
                kind: outer_kind,
                offset: OUTER_IP,
                header_len: outer_ip_len,
                end: ol + net.end,
                protocol: ip_protocol::UDP,
                fragment: false,
            },
            Transport {
                protocol: ip_protocol::UDP,
                offset: outer_udp,
                header_len: udp::HEADER_LEN,
            },
        )),
    };
    segment_core(
        &template[..ol + il],
        &inner[il..net.end],
        &stack,
        gso,
        mode,
        out,
    )
}

/// Where the layers a segmenter rewrites are, in its header template:
/// the (inner) network and transport headers, and a tunnel's outer IP and
/// UDP headers.
struct Stack {
    net: Net,
    t: Transport,
    outer: Option<(Net, Transport)>,
}

/// Cuts `payload` into segments, each behind a copy of `template` (every
/// header of the frame) rewritten for it.
fn segment_core(
    template: &[u8],
    payload: &[u8],
    stack: &Stack,
    gso: GsoInfo,
    mode: CsumMode,
    out: &mut impl FnMut(SegmentOut<'_>),
) -> Result<usize, GsoError> {
    let Stack { net, t, outer } = *stack;
    let hlen = template.len();
    let size = gso.size as usize;
    let nseg = payload.len().div_ceil(size).max(1);
    if t.protocol == ip_protocol::UDP && nseg > MAX_UDP_SEGMENTS {
        return Err(GsoError::TooManySegments);
    }
    let mut hdr = [0u8; MAX_HEADER];
    let base_ids = (
        ipv4_id(template, &net),
        outer.map(|(o, _)| ipv4_id(template, &o)),
    );
    for i in 0..nseg {
        let lo = i * size;
        let hi = ((i + 1) * size).min(payload.len());
        let chunk = &payload[lo..hi];
        hdr[..hlen].copy_from_slice(template);
        let h = &mut hdr[..hlen];
        let l4_len = t.header_len + chunk.len();
        if t.protocol == ip_protocol::TCP {
            let mut th = tcp::Packet::new_unchecked(&mut h[t.offset..]);
            th.set_seq(th.seq().wrapping_add(lo as u32));
            let mut flags = th.flags();
            if i + 1 < nseg {
                flags &= !(tcp::flags::FIN | tcp::flags::PSH);
            }
            if i > 0 {
                flags &= !tcp::flags::CWR;
            }
            th.set_flags(flags);
        } else {
            udp::Packet::new_unchecked(&mut h[t.offset..]).set_len(l4_len as u16);
        }
        set_ip_len(
            h,
            &net,
            t.offset - net.offset + l4_len,
            base_ids.0.map(|id| id.wrapping_add(i as u16)),
        );
        // Transport checksum of the (inner) segment.
        let ph = crate::csum::pseudo_header(h, &net, t.protocol, l4_len as u32);
        let csum_at = t.offset
            + if t.protocol == ip_protocol::TCP {
                tcp::CHECKSUM_OFFSET
            } else {
                udp::CHECKSUM_OFFSET
            };
        h[csum_at..csum_at + 2].copy_from_slice(&[0, 0]);
        let mut info = match mode {
            CsumMode::Full => {
                let odd = t.header_len % 2 == 1;
                let c = ph.add_bytes(&h[t.offset..]).add_at(chunk, odd).finish();
                let c = if c == 0 && t.protocol == ip_protocol::UDP {
                    0xffff
                } else {
                    c
                };
                h[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
                OffloadInfo {
                    gso: None,
                    csum: CsumState::Good,
                }
            }
            CsumMode::Partial => {
                h[csum_at..csum_at + 2].copy_from_slice(&ph.fold().to_be_bytes());
                OffloadInfo {
                    gso: None,
                    csum: CsumState::Partial {
                        start: t.offset as u16,
                        offset: (csum_at - t.offset) as u16,
                    },
                }
            }
        };
        if let Some((on, ot)) = outer {
            let after = |off: usize| hlen - off + chunk.len();
            set_ip_len(
                h,
                &on,
                after(on.offset),
                base_ids.1.flatten().map(|id| id.wrapping_add(i as u16)),
            );
            let mut u = udp::Packet::new_unchecked(&mut h[ot.offset..]);
            u.set_len(after(ot.offset) as u16);
            if u.checksum() != 0 {
                // The inner checksum must be final before the outer one can
                // cover it.
                if mode == CsumMode::Partial {
                    let c = Sum::ZERO
                        .add_bytes(&h[t.offset..])
                        .add_at(chunk, t.header_len % 2 == 1)
                        .finish();
                    h[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
                    info.csum = CsumState::Good;
                }
                let ph =
                    crate::csum::pseudo_header(h, &on, ip_protocol::UDP, after(ot.offset) as u32);
                h[ot.offset + 6..ot.offset + 8].copy_from_slice(&[0, 0]);
                let c = ph
                    .add_bytes(&h[ot.offset..])
                    .add_at(chunk, (hlen - ot.offset) % 2 == 1)
                    .finish();
                let c = if c == 0 { 0xffff } else { c };
                h[ot.offset + 6..ot.offset + 8].copy_from_slice(&c.to_be_bytes());
            }
        }
        out(SegmentOut {
            header: &hdr[..hlen],
            payload: chunk,
            info,
        });
    }
    Ok(nseg)
}

fn ipv4_id(frame: &[u8], net: &Net) -> Option<u16> {
    (net.kind == NetKind::Ipv4).then(|| ipv4::Packet::new_unchecked(&frame[net.offset..]).ident())
}

fn set_ip_len(h: &mut [u8], net: &Net, len_after_ip: usize, id: Option<u16>) {
    crate::csum::set_ip_len(h, net.kind, net.offset, len_after_ip, id);
}

#[cfg(test)]
mod tests;
