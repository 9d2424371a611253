//! ARP suppression (RFC 7432 §10): a VM's ARP request for a remote IP the
//! fabric advertised with its MAC (BGP EVPN) is answered here, to the VM's
//! port, instead of being flooded to every VTEP of the segment.

use super::{Ctx, State};
use crate::counters::add;
use hvnet_offload::OffloadInfo;
use hvnet_port::Packet;
use hvnet_wire::{arp, EtherType, MacAddr};
use std::net::Ipv4Addr;

impl State {
    /// Answers `pkt` if it is an ARP request from a VM for an advertised
    /// remote IP on its segment; true if answered (the request is consumed).
    pub(super) fn suppress_arp(&mut self, cx: &Ctx, pkt: &Packet) -> bool {
        let l2 = &pkt.meta.layers.l2;
        if cx.port.is_uplink() || l2.ethertype != EtherType::Arp || pkt.dst() != MacAddr::BROADCAST
        {
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
        let Ok(req) = arp::Packet::new_checked(&pkt.frame()[l2.header_len..])
            .and_then(|p| arp::Repr::parse(&p))
        else {
            return false;
        };
        if req.op != arp::Operation::Request {
            return false;
        }
        let Some(mac) = vtep.evpn_resolve(Ipv4Addr::from(req.target_ip)) else {
            return false;
        };
        let Some(mut buf) = self.pool.take(pkt.buf.class()) else {
            return false;
        };
        buf.fill(&reply(&req, mac));
        let Ok(answer) = Packet::parse(buf, OffloadInfo::default()) else {
            return false;
        };
        add(&cx.port.ingress[cx.q].arp_suppressed, 1);
        vtep.count_arp_suppressed();
        self.egress(cx, cx.port.id, answer);
        true
    }
}

/// The reply `mac` (owner of the requested address) would send.
fn reply(req: &arp::Repr, mac: MacAddr) -> [u8; 42] {
    let mut f = [0u8; 42];
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
    f
}
