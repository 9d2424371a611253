//! The endpoint's own underlay neighbours: ARP for its address answered,
//! its peers' MACs resolved and learned, as Linux's `vxlan` device does.

use super::{Received, TunnelDrop, Vtep, MAX_NEIGHBOURS};
use crate::device::{SendError, Transmitter};
use crate::outgoing::{BatchOptions, OutFrame, Written};
use hvnet_wire::{arp, MacAddr};
use std::io::IoSlice;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering::Relaxed;

impl Vtep {
    pub(super) fn receive_arp(&self, bytes: &[u8]) -> Received {
        let Ok(r) = arp::Packet::new_checked(bytes).and_then(|p| arp::Repr::parse(&p)) else {
            return Received::Drop(TunnelDrop::NotTunnel);
        };
        let local = self.cfg.local.octets();
        if r.target_ip != local {
            return Received::Drop(TunnelDrop::NotTunnel);
        }
        self.learn_neighbour(Ipv4Addr::from(r.sender_ip), r.sender_mac);
        if r.op != arp::Operation::Request {
            return Received::Arp(None);
        }
        self.arp_replies_sent.fetch_add(1, Relaxed);
        Received::Arp(Some(
            arp::Repr {
                op: arp::Operation::Reply,
                sender_mac: self.cfg.mac,
                sender_ip: local,
                target_mac: r.sender_mac,
                target_ip: r.sender_ip,
            }
            .frame(),
        ))
    }

    pub(super) fn learn_neighbour(&self, ip: Ipv4Addr, mac: MacAddr) {
        if mac.is_multicast() {
            return;
        }
        if self.neighbours.read().expect("lock").get(&ip) == Some(&mac) {
            return;
        }
        let mut n = self.neighbours.write().expect("lock");
        if n.len() < MAX_NEIGHBOURS || n.contains_key(&ip) {
            n.insert(ip, mac);
        }
    }

    /// Sends an ARP request for each remote in the flood list still
    /// unresolved; the endpoint's first queue calls it every
    /// [`super::SOLICIT_EVERY`], and at once when the fabric changed the
    /// flood list, so a write that fails is tried at the next turn.
    pub fn solicit(&self, tx: &mut dyn Transmitter) {
        let unresolved: Vec<Ipv4Addr> = {
            let n = self.neighbours.read().expect("lock");
            self.flood
                .read()
                .expect("lock")
                .iter()
                .filter(|r| !n.contains_key(r))
                .copied()
                .collect()
        };
        for ip in unresolved {
            let f = arp::Repr {
                op: arp::Operation::Request,
                sender_mac: self.cfg.mac,
                sender_ip: self.cfg.local.octets(),
                target_mac: MacAddr([0; 6]),
                target_ip: ip.octets(),
            }
            .frame();
            if send_plain(tx, &f).is_ok() {
                self.arp_requests_sent.fetch_add(1, Relaxed);
            }
        }
    }

    /// Sends an ARP reply [`Vtep::receive`] made.
    pub fn send_reply(&self, tx: &mut dyn Transmitter, reply: &[u8; 42]) {
        let _ = send_plain(tx, reply);
    }
}

/// Writes a frame the endpoint makes itself (ARP), without offloads.
fn send_plain(tx: &mut dyn Transmitter, frame: &[u8]) -> Result<Written, SendError> {
    let pieces = [IoSlice::new(frame)];
    let frame = OutFrame::Pieces {
        pieces: &pieces,
        offload: Default::default(),
    };
    tx.send(frame, BatchOptions::default())
}
