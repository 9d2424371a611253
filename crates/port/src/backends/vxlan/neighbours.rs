//! The endpoint's own underlay neighbours, as Linux's `vxlan` device has
//! the kernel do it: over IPv4 ARP for its address answered and its
//! peers' MACs resolved with ARP; over IPv6 the same with neighbour
//! solicitations and advertisements (RFC 4861); and learned from both.

use super::{Received, TunnelDrop, Vtep, MAX_NEIGHBOURS};
use crate::device::Transmitter;
use crate::outgoing::SendError;
use crate::outgoing::{BatchOptions, OutFrame, Written};
use hvnet_wire::{arp, nd, MacAddr};
use std::io::IoSlice;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;

/// A frame the endpoint answers with: an ARP reply or a neighbour
/// advertisement.
pub enum Reply {
    /// To an ARP request for the endpoint's IPv4 address.
    Arp([u8; 14 + arp::LEN]),
    /// To a neighbour solicitation for its IPv6 address.
    Nd([u8; nd::ADVERTISEMENT_FRAME]),
}

impl Reply {
    /// The frame as it is sent.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Reply::Arp(f) => f,
            Reply::Nd(f) => f,
        }
    }
}

impl Vtep {
    pub(super) fn receive_arp(&self, bytes: &[u8]) -> Received {
        let IpAddr::V4(local) = self.cfg.local else {
            return Received::Drop(TunnelDrop::NotTunnel);
        };
        let Ok(r) = arp::Packet::new_checked(bytes).and_then(|p| arp::Repr::parse(&p)) else {
            return Received::Drop(TunnelDrop::NotTunnel);
        };
        let local = local.octets();
        if r.target_ip != local {
            return Received::Drop(TunnelDrop::NotTunnel);
        }
        self.learn_if_wanted(IpAddr::from(r.sender_ip), r.sender_mac);
        if r.op != arp::Operation::Request {
            return Received::Neighbour(None);
        }
        self.arp_replies_sent.fetch_add(1, Relaxed);
        Received::Neighbour(Some(Reply::Arp(
            arp::Repr {
                op: arp::Operation::Reply,
                sender_mac: self.cfg.mac,
                sender_ip: local,
                target_mac: r.sender_mac,
                target_ip: r.sender_ip,
            }
            .frame(),
        )))
    }

    /// ICMPv6 from the underlay (`ip` the IPv6 header's offset): a
    /// solicitation for the endpoint's address answered (its sender
    /// learned), an advertisement learned from; anything else is not the
    /// endpoint's.
    pub(super) fn receive_nd(&self, frame: &[u8], ip: usize) -> Received {
        let IpAddr::V6(local) = self.cfg.local else {
            return Received::Drop(TunnelDrop::NotTunnel);
        };
        let local = local.octets();
        let packet = &frame[ip..];
        if let Some(target) = nd::solicited_target(packet) {
            if target != local {
                return Received::Drop(TunnelDrop::NotTunnel);
            }
            let src = hvnet_wire::Ipv6Packet::new_unchecked(packet).src();
            let src_mac = MacAddr(frame[6..12].try_into().expect("6 bytes"));
            self.learn_if_wanted(IpAddr::from(src), src_mac);
            self.arp_replies_sent.fetch_add(1, Relaxed);
            return Received::Neighbour(Some(Reply::Nd(nd::advertisement(
                self.cfg.mac,
                local,
                src_mac,
                src,
            ))));
        }
        match nd::advertised(packet) {
            Some((target, mac)) => {
                let mac = mac.unwrap_or(MacAddr(frame[6..12].try_into().expect("6 bytes")));
                self.learn_if_wanted(IpAddr::from(target), mac);
                Received::Neighbour(None)
            }
            None => Received::Drop(TunnelDrop::NotTunnel),
        }
    }

    /// Learns from ARP and neighbour discovery only what the endpoint asks
    /// for or knows already (RFC 4861 §7.2.5: an advertisement for an
    /// address without an entry is not taken): a host on the underlay
    /// cannot fill the table with addresses it makes up.
    fn learn_if_wanted(&self, ip: IpAddr, mac: MacAddr) {
        let known = self.neighbours.read().expect("lock").contains_key(&ip);
        if known || self.in_flood(&ip) {
            self.learn_neighbour(ip, mac);
        }
    }

    /// Remembers `ip`'s MAC. When the table is full, a remote of the flood
    /// list takes the place of one that is not (learned only from the
    /// frames it sent): the remotes frames are flooded to always resolve.
    pub(super) fn learn_neighbour(&self, ip: IpAddr, mac: MacAddr) {
        if mac.is_multicast() {
            return;
        }
        if self.neighbours.read().expect("lock").get(&ip) == Some(&mac) {
            return;
        }
        // The flood lists read before the neighbours are locked.
        let flood = self.flood_union();
        let mut n = self.neighbours.write().expect("lock");
        if n.len() >= MAX_NEIGHBOURS && !n.contains_key(&ip) {
            if !flood.contains(&ip) {
                return;
            }
            let Some(other) = n.keys().find(|k| !flood.contains(k)).copied() else {
                return;
            };
            n.remove(&other);
        }
        n.insert(ip, mac);
    }

    /// Asks for each remote in the flood list still unresolved (ARP, or a
    /// neighbour solicitation over IPv6); the endpoint's first queue calls
    /// it every [`super::SOLICIT_EVERY`], and at once when the fabric
    /// changed the flood list, so a write that fails is tried at the next
    /// turn.
    pub fn solicit(&self, tx: &mut dyn Transmitter) {
        let unresolved: Vec<IpAddr> = {
            let flood = self.flood_union();
            let n = self.neighbours.read().expect("lock");
            flood.into_iter().filter(|r| !n.contains_key(r)).collect()
        };
        for ip in unresolved {
            let sent = match (self.cfg.local, ip) {
                (IpAddr::V4(local), IpAddr::V4(ip)) => {
                    let f = arp::Repr {
                        op: arp::Operation::Request,
                        sender_mac: self.cfg.mac,
                        sender_ip: local.octets(),
                        target_mac: MacAddr([0; 6]),
                        target_ip: ip.octets(),
                    }
                    .frame();
                    send_plain(tx, &f)
                }
                (IpAddr::V6(local), IpAddr::V6(ip)) => send_plain(
                    tx,
                    &nd::solicitation(self.cfg.mac, local.octets(), ip.octets()),
                ),
                // A remote of the other family is never reached.
                _ => continue,
            };
            if sent.is_ok() {
                self.arp_requests_sent.fetch_add(1, Relaxed);
            }
        }
    }

    /// Sends a reply [`Vtep::receive`] made.
    pub fn send_reply(&self, tx: &mut dyn Transmitter, reply: &Reply) {
        let _ = send_plain(tx, reply.bytes());
    }
}

/// Writes a frame the endpoint makes itself (ARP, ND), without offloads.
fn send_plain(tx: &mut dyn Transmitter, frame: &[u8]) -> Result<Written, SendError> {
    let pieces = [IoSlice::new(frame)];
    let frame = OutFrame::Pieces {
        pieces: &pieces,
        offload: Default::default(),
    };
    tx.send(frame, BatchOptions::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    fn vtep() -> Vtep {
        Vtep::for_test(
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into(),
            64,
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2).into(),
        )
    }

    fn ip(i: u16) -> IpAddr {
        Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, i).into()
    }

    #[test]
    fn advertisements_for_made_up_addresses_are_not_learned() {
        let v = vtep();
        let local = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let peer = MacAddr([2, 0, 0, 0, 0, 9]);
        for i in 0..300 {
            let IpAddr::V6(t) = ip(i) else { unreachable!() };
            let na = nd::advertisement(peer, t.octets(), v.cfg.mac, local);
            assert!(matches!(v.receive_nd(&na, 14), Received::Neighbour(None)));
        }
        assert!(v.neighbours.read().unwrap().is_empty());
        // The flood list's remote is learned from its advertisement.
        let IpAddr::V6(r) = v.cfg.remotes[0] else {
            unreachable!()
        };
        let na = nd::advertisement(peer, r.octets(), v.cfg.mac, local);
        v.receive_nd(&na, 14);
        assert_eq!(
            v.neighbours.read().unwrap().get(&v.cfg.remotes[0]),
            Some(&peer)
        );
    }

    #[test]
    fn a_full_table_still_resolves_the_flood_list() {
        let v = vtep();
        for i in 0..MAX_NEIGHBOURS as u16 + 10 {
            v.learn_neighbour(ip(i), MacAddr([2, 0, 0, 0, 1, i as u8]));
        }
        assert_eq!(v.neighbours.read().unwrap().len(), MAX_NEIGHBOURS);
        let mac = MacAddr([2, 0, 0, 0, 0, 2]);
        v.learn_neighbour(v.cfg.remotes[0], mac);
        let n = v.neighbours.read().unwrap();
        assert_eq!(
            (n.len(), n.get(&v.cfg.remotes[0])),
            (MAX_NEIGHBOURS, Some(&mac))
        );
    }
}
