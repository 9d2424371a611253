//! What a VM sends, looked at during a diagnosis window through its
//! port's trace filter (which sees every frame the port reads while a
//! trace is armed, and here marks none): the source addresses not its
//! own, the VLAN tags, the neighbours it asks for again and again, and
//! the TCP segments it sends a second time. Bounded whatever it sends.

use hvnet_datapath::trace::TraceFilter;
use hvnet_wire::{layers::NetKind, Layers};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// Entries each table keeps at most.
const MAX_ENTRIES: usize = 1024;

/// What the window saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Frames looked at.
    pub frames: u64,
    /// IP sources not the VM's, with frames each.
    pub foreign_sources: BTreeMap<IpAddr, u64>,
    /// 802.1Q tags, with frames each.
    pub tags: BTreeMap<u16, u64>,
    /// ARP requests by the address asked for.
    pub arp_asked: BTreeMap<Ipv4Addr, u64>,
    /// TCP segments with data, and those sent again (a sequence number
    /// below what the flow had sent already).
    pub tcp_segments: u64,
    /// See `tcp_segments`.
    pub tcp_retransmitted: u64,
    /// Per TCP flow (addresses and ports), the end of what it sent.
    tcp_sent: BTreeMap<(IpAddr, u16, IpAddr, u16), u32>,
}

fn bump<K: Ord>(m: &mut BTreeMap<K, u64>, k: K) {
    if m.len() < MAX_ENTRIES || m.contains_key(&k) {
        *m.entry(k).or_default() += 1;
    }
}

/// An address a VM may send from whatever its own are: unspecified (DHCP,
/// duplicate address detection) and IPv6 link-local.
fn always_own(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_unspecified(),
        IpAddr::V6(a) => a.is_unspecified() || (a.segments()[0] & 0xffc0) == 0xfe80,
    }
}

impl Seen {
    fn look(&mut self, frame: &[u8], own: &dyn Fn(IpAddr) -> bool) {
        self.frames += 1;
        let Ok(l) = Layers::parse(frame) else {
            return;
        };
        if let Some(v) = l.outer_vlan() {
            bump(&mut self.tags, v);
        }
        let Some(net) = l.net() else {
            // ARP: the address asked for.
            let arp = &frame[l.l2_len()..];
            if l.ethertype() == hvnet_wire::EtherType::Arp && arp.len() >= 28 && arp[7] == 1 {
                let target = Ipv4Addr::new(arp[24], arp[25], arp[26], arp[27]);
                bump(&mut self.arp_asked, target);
            }
            return;
        };
        let ip = &frame[net.offset..];
        let (src, dst) = match net.kind {
            NetKind::Ipv4 if ip.len() >= 20 => (
                IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15])),
                IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19])),
            ),
            NetKind::Ipv6 if ip.len() >= 40 => {
                let a =
                    |o: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&ip[o..o + 16]).expect("16"));
                (IpAddr::V6(a(8)), IpAddr::V6(a(24)))
            }
            _ => return,
        };
        if !own(src) && !always_own(src) {
            bump(&mut self.foreign_sources, src);
        }
        let Some(t) = l.transport().filter(|t| t.protocol == 6) else {
            return;
        };
        let tcp = &frame[t.offset..net.end.min(frame.len())];
        let data = tcp.len().saturating_sub(t.header_len);
        if tcp.len() < 20 || data == 0 {
            return;
        }
        self.tcp_segments += 1;
        let port = |o: usize| u16::from_be_bytes([tcp[o], tcp[o + 1]]);
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        let end = seq.wrapping_add(data as u32);
        let key = (src, port(0), dst, port(2));
        let room = self.tcp_sent.len() < MAX_ENTRIES;
        match self.tcp_sent.get_mut(&key) {
            // Sequence numbers wrap: "before" is within half the space.
            Some(sent) if (end.wrapping_sub(*sent) as i32) <= 0 => self.tcp_retransmitted += 1,
            Some(sent) => *sent = end,
            None if room => {
                self.tcp_sent.insert(key, end);
            }
            None => {}
        }
    }
}

/// A trace filter that looks at every frame into `seen` and marks none;
/// `own` says which source addresses are the VM's.
pub fn observer(
    seen: Arc<Mutex<Seen>>,
    own: impl Fn(IpAddr) -> bool + Send + Sync + 'static,
) -> TraceFilter {
    Box::new(move |frame: &[u8]| {
        if let Ok(mut s) = seen.lock() {
            s.look(frame, &own);
        }
        false
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow_spec::{build, parse, Resolved};

    fn frame(words: &str, src: &str, vlan: Option<u16>) -> Vec<u8> {
        let r = Resolved {
            smac: hvnet_wire::MacAddr([2, 0, 0, 0, 0, 1]),
            dmac: hvnet_wire::MacAddr([2, 0, 0, 0, 0, 2]),
            vlan,
            ips: Some((src.parse().unwrap(), "198.18.0.2".parse().unwrap())),
        };
        build(&parse(words).unwrap(), &r).unwrap()
    }

    #[test]
    fn foreign_sources_tags_arp_and_resent_segments_are_seen() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let f = observer(Arc::clone(&seen), |ip| {
            ip == "198.18.0.1".parse::<IpAddr>().unwrap()
        });
        assert!(!f(&frame("icmp", "198.18.0.1", None)));
        f(&frame("icmp", "198.18.0.66", Some(30)));
        f(&frame("arp dst=198.18.0.2", "198.18.0.1", None));
        f(&frame("arp dst=198.18.0.2", "198.18.0.1", None));
        // The same segment twice (same sequence number, 100 bytes): one
        // sent again.
        let seg = frame("tcp dport=5201 flags=P. size=140", "198.18.0.1", None);
        f(&seg);
        f(&seg);
        f(&[0u8; 3]);
        let s = seen.lock().unwrap();
        assert_eq!(s.frames, 7);
        assert_eq!(
            s.foreign_sources.keys().collect::<Vec<_>>(),
            [&"198.18.0.66".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(s.tags.get(&30), Some(&1));
        assert_eq!(s.arp_asked.get(&"198.18.0.2".parse().unwrap()), Some(&2));
        assert_eq!((s.tcp_segments, s.tcp_retransmitted), (2, 1));
    }
}
