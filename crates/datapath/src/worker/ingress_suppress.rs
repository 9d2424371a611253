//! ARP and ND suppression (RFC 7432 §10): a VM's ARP request or IPv6
//! neighbor solicitation for a remote address the fabric advertised with
//! its MAC (BGP EVPN) is answered here, to the VM's port, instead of being
//! flooded to every VTEP of the segment.

use super::{Ctx, State};
use crate::counters::add;
use crate::tunnel::Vtep;
use hvnet_offload::OffloadInfo;
use hvnet_port::Packet;
use hvnet_wire::{arp, nd, EtherType, MacAddr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

impl State {
    /// Answers `pkt` if it is an ARP request or a neighbor solicitation
    /// from a VM for an advertised remote address on its segment; true if
    /// answered (the request is consumed).
    pub(super) fn suppress(&mut self, cx: &Ctx, pkt: &Packet) -> bool {
        let l = &pkt.meta.layers;
        if cx.port.is_uplink() || !matches!(l.l2.ethertype, EtherType::Arp | EtherType::Ipv6) {
            return false;
        }
        let Some(vtep) = cx
            .sw
            .ports
            .iter()
            .find(|p| p.vlan == cx.port.vlan && p.tunnel.is_some())
            .and_then(|p| p.tunnel.as_ref())
        else {
            return false;
        };
        let frame = pkt.frame();
        let answer = match l.l2.ethertype {
            EtherType::Arp => arp_answer(vtep, pkt.dst(), &frame[l.l2.header_len..]),
            _ => l
                .net
                .and_then(|n| nd_answer(vtep, pkt.src(), &frame[n.offset..])),
        };
        let Some((bytes, kind)) = answer else {
            return false;
        };
        let Some(mut buf) = self.pool.take(pkt.buf.class()) else {
            return false;
        };
        buf.fill(&bytes);
        let Ok(answer) = Packet::parse(buf, OffloadInfo::default()) else {
            return false;
        };
        let c = &cx.port.ingress[cx.q];
        match kind {
            Kind::Arp => add(&c.arp_suppressed, 1),
            Kind::Nd => add(&c.nd_suppressed, 1),
        }
        vtep.count_suppressed(kind == Kind::Nd);
        self.egress(cx, cx.port.id, answer);
        true
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Arp,
    Nd,
}

/// The reply the owner of the requested address would send, if `bytes`
/// (after the Ethernet header) is a broadcast ARP request for an
/// advertised address.
fn arp_answer(vtep: &Vtep, dst: MacAddr, bytes: &[u8]) -> Option<(Vec<u8>, Kind)> {
    if dst != MacAddr::BROADCAST {
        return None;
    }
    let req = arp::Packet::new_checked(bytes)
        .and_then(|p| arp::Repr::parse(&p))
        .ok()?;
    if req.op != arp::Operation::Request {
        return None;
    }
    let mac = vtep.evpn_resolve(IpAddr::V4(Ipv4Addr::from(req.target_ip)))?;
    let mut f = vec![0u8; 42];
    f[0..6].copy_from_slice(&req.sender_mac.0);
    f[6..12].copy_from_slice(&mac.0);
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    arp::Repr {
        op: arp::Operation::Reply,
        sender_mac: mac,
        sender_ip: req.target_ip,
        target_mac: req.sender_mac,
        target_ip: req.sender_ip,
    }
    .emit(&mut arp::Packet::new_unchecked(&mut f[14..]));
    Some((f, Kind::Arp))
}

/// The advertisement the owner of the solicited address would send, if
/// `ip` (the IPv6 packet) is a neighbor solicitation for an advertised
/// address.
fn nd_answer(vtep: &Vtep, src: MacAddr, ip: &[u8]) -> Option<(Vec<u8>, Kind)> {
    let target = nd::solicited_target(ip)?;
    let mac = vtep.evpn_resolve(IpAddr::V6(Ipv6Addr::from(target)))?;
    let from: [u8; 16] = ip[8..24].try_into().ok()?;
    Some((nd::advertisement(mac, target, src, from).to_vec(), Kind::Nd))
}
