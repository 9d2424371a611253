//! Linux's same-flow and flush rules (`dev_gro_receive`,
//! `inet_gro_receive`, `ipv6_gro_receive`, `tcp_gro_receive`,
//! `gro_receive_network_flush`), one function per question the table asks.

use super::flow::{Cb, Flow, NetCb};
use super::FlushReason;
use hvnet_wire::layers::NetKind;
use hvnet_wire::{ipv4, ipv6, tcp};

/// A cheap hash of what identifies a flow, to pick a bucket. Collisions only
/// cost a compare.
pub(super) fn flow_hash(frame: &[u8], cb: &Cb) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |bytes: &[u8]| {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
        }
    };
    let n = &cb.net;
    match n.kind {
        NetKind::Ipv4 => mix(&frame[n.offset + 12..n.offset + 20]),
        NetKind::Ipv6 => mix(&frame[n.offset + 8..n.offset + 40]),
    }
    mix(&frame[cb.tcp_offset..cb.tcp_offset + 4]);
    if let Some(o) = cb.outer {
        mix(&frame[o.udp_offset + 8..o.udp_offset + 16]);
    }
    (h >> 32) as u32 ^ h as u32
}

/// Same-flow test, layer by layer: identical Ethernet headers, same IP
/// protocol and addresses (IPv6: flow label, next header and extension
/// headers too), same ports; for VXLAN also the outer headers and the VNI.
pub(super) fn same_flow<B: AsRef<[u8]>>(flow: &Flow<B>, frame: &[u8], cb: &Cb) -> bool {
    let head = flow.head();
    let hc = &flow.cb;
    if hc.outer.is_some() != cb.outer.is_some() {
        return false;
    }
    if let (Some(a), Some(b)) = (hc.outer, cb.outer) {
        // Outer Ethernet, outer IP identity, UDP ports and checksum
        // presence, VXLAN flags and VNI, inner Ethernet.
        if a.net.offset != b.net.offset
            || head[..a.net.offset] != frame[..b.net.offset]
            || !same_ip_flow(head, &a.net, frame, &b.net)
            || a.udp_offset != b.udp_offset
            || head[a.udp_offset..a.udp_offset + 4] != frame[b.udp_offset..b.udp_offset + 4]
            || a.udp_csum != b.udp_csum
            || head[a.udp_offset + 8..a.inner_l2] != frame[b.udp_offset + 8..b.inner_l2]
        {
            return false;
        }
    }
    let l2_start = cb.outer.map_or(0, |o| o.inner_l2);
    if hc.l2_len != cb.l2_len
        || hc.net.offset != cb.net.offset
        || head[l2_start..hc.net.offset] != frame[l2_start..cb.net.offset]
    {
        return false;
    }
    if !same_ip_flow(head, &hc.net, frame, &cb.net) {
        return false;
    }
    // tcp_gro_lookup: ports.
    hc.tcp_offset == cb.tcp_offset
        && head[hc.tcp_offset..hc.tcp_offset + 4] == frame[cb.tcp_offset..cb.tcp_offset + 4]
}

pub(super) fn same_ip_flow(head: &[u8], hn: &NetCb, frame: &[u8], n: &NetCb) -> bool {
    if hn.kind != n.kind {
        return false;
    }
    let a = &head[hn.offset..];
    let b = &frame[n.offset..];
    match n.kind {
        // inet_gro_receive: protocol, saddr, daddr.
        NetKind::Ipv4 => a[9] == b[9] && a[12..20] == b[12..20],
        // ipv6_gro_receive: version and flow label (not traffic class),
        // next header, addresses, and every extension header byte.
        NetKind::Ipv6 => {
            let w = |x: &[u8]| u32::from_be_bytes([x[0], x[1], x[2], x[3]]);
            (w(a) ^ w(b)) & 0xf00f_ffff == 0
                && a[6] == b[6]
                && a[8..40] == b[8..40]
                && hn.header_len == n.header_len
                && a[40..hn.header_len] == b[40..n.header_len]
        }
    }
}

/// The merge decision of `tcp_gro_receive`: an OR of field differences.
/// On success, returns the fixed-IPv4-ID bits this segment decided.
pub(super) fn mergeable<B: AsRef<[u8]>>(
    flow: &Flow<B>,
    frame: &[u8],
    cb: &Cb,
    max_size: u32,
    max_segments: usize,
) -> Result<u8, FlushReason> {
    use tcp::flags::*;
    if cb.flush {
        return Err(FlushReason::Unmergeable);
    }
    let head = flow.head();
    let th2 = tcp::Packet::new_unchecked(&head[flow.cb.tcp_offset..]);
    let th = tcp::Packet::new_unchecked(&frame[cb.tcp_offset..]);
    // `tcp_flag_word` is the third 32-bit word of the header: data offset,
    // flags and the window. A window change ends the run, as in Linux.
    let word = |p: &tcp::Packet<&[u8]>| ((p.flag_word() as u32) << 16) | p.window() as u32;
    let mut diff = (th.flags() & CWR) as u32;
    diff |= (word(&th) ^ word(&th2)) & !(((CWR | FIN | PSH) as u32) << 16);
    diff |= th.ack() ^ th2.ack();
    if diff == 0 {
        // Same data offset (it is in the flag word), so the option areas
        // have the same length.
        let thlen = cb.tcp_header_len;
        if frame[cb.tcp_offset + 20..cb.tcp_offset + thlen]
            != head[flow.cb.tcp_offset + 20..flow.cb.tcp_offset + thlen]
        {
            diff = 1;
        }
    }
    let (net_flush, fixed_id) = network_flush(flow, frame, cb);
    if diff != 0 || net_flush {
        return Err(FlushReason::HeaderMismatch);
    }
    // A single frame larger than the MSS never merges; zero payload
    // always flushes ((len - 1) >= mss with unsigned wrap).
    if cb.payload_len.wrapping_sub(1) >= flow.mss {
        return Err(FlushReason::SizeMismatch);
    }
    if flow.cb.seq.wrapping_add(flow.gro_len as u32) != cb.seq {
        return Err(FlushReason::SeqGap);
    }
    if flow.ip_len + cb.payload_len >= max_size as usize || flow.count as usize >= max_segments {
        return Err(FlushReason::SizeLimit);
    }
    Ok(fixed_id)
}

/// `gro_receive_network_flush` for each IP level (outer first): whether
/// to flush, and the fixed-ID bits decided by this segment.
pub(super) fn network_flush<B: AsRef<[u8]>>(flow: &Flow<B>, frame: &[u8], cb: &Cb) -> (bool, u8) {
    let head = flow.head();
    let levels = match (flow.cb.outer, cb.outer) {
        (Some(a), Some(b)) => [Some((a.net, b.net)), Some((flow.cb.net, cb.net))],
        _ => [Some((flow.cb.net, cb.net)), None],
    };
    let mut flush = false;
    let mut fixed = 0u8;
    for (level, (hn, n)) in levels
        .iter()
        .enumerate()
        .filter_map(|(l, x)| x.map(|x| (l as u8, x)))
    {
        let (f, fx) = ip_flush(head, &hn, frame, &n, flow, level);
        flush |= f;
        if fx {
            fixed |= 1 << level;
        }
    }
    (flush, fixed)
}

/// `inet_gro_flush` / `ipv6_gro_flush`. IPv4 IDs must either increment by
/// one per segment or stay fixed; the choice is made on the second segment
/// (fixed only with DF set) and kept for the run.
pub(super) fn ip_flush<B: AsRef<[u8]>>(
    head: &[u8],
    hn: &NetCb,
    frame: &[u8],
    n: &NetCb,
    flow: &Flow<B>,
    level: u8,
) -> (bool, bool) {
    let a = &head[hn.offset..];
    let b = &frame[n.offset..];
    match n.kind {
        NetKind::Ipv4 => {
            let p2 = ipv4::Packet::new_unchecked(a);
            let p = ipv4::Packet::new_unchecked(b);
            if p.ttl() != p2.ttl() || p.tos() != p2.tos() || p.dont_frag() != p2.dont_frag() {
                return (true, false);
            }
            let offset = p.ident().wrapping_sub(p2.ident());
            let count = flow.count;
            // Linux 6.18 decides "fixed" on the second segment whether or
            // not DF is set (the selftest's "DF=0, Fixed - should coalesce").
            let decided_now = count == 1 && offset == 0;
            let fixed = flow.fixed_id & (1 << level) != 0 || decided_now;
            (
                if fixed { offset != 0 } else { offset != count },
                decided_now,
            )
        }
        NetKind::Ipv6 => {
            let p2 = ipv6::Packet::new_unchecked(a);
            let p = ipv6::Packet::new_unchecked(b);
            (
                p.traffic_class() != p2.traffic_class() || p.hop_limit() != p2.hop_limit(),
                false,
            )
        }
    }
}
