//! DHCP snooping: an address a DHCP server gives a VM (its ACK, seen as
//! it crosses the switch from an uplink or from a VM whose `dhcp_guard`
//! is off) is that VM's, for its guards, until the lease ends
//! (docs/guide/guards.md). A rogue server's ACK never gets here: the
//! DHCP server guard drops it first.

use hvnet_wire::{dhcp, ip_protocol, EtherType, Layers, MacAddr};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Leases a port keeps (a client rarely holds more than one; a full table
/// forgets the lease that ends first).
pub const MAX_LEASES: usize = 8;

/// Longest a lease is kept without a renewal (a client renews at half its
/// lease; "forever" leases are renewed by nobody, so they are capped).
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);

/// One address a DHCP server gave, and until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The address.
    pub ip: Ipv4Addr,
    /// When the lease ends.
    pub until: Instant,
}

/// A port's leases.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leases(Vec<Lease>);

impl Leases {
    /// Records (or renews) a lease of `ip` until `until`.
    pub fn learn(&mut self, ip: Ipv4Addr, until: Instant) {
        if let Some(l) = self.0.iter_mut().find(|l| l.ip == ip) {
            l.until = until;
        } else if self.0.len() < MAX_LEASES {
            self.0.push(Lease { ip, until });
        } else if let Some(l) = self.0.iter_mut().min_by_key(|l| l.until) {
            *l = Lease { ip, until };
        }
    }
    /// True if `ip` is leased at `now`.
    pub fn holds(&self, ip: Ipv4Addr, now: Instant) -> bool {
        self.0.iter().any(|l| l.ip == ip && now < l.until)
    }
    /// True once any lease was given (the port's IPv4 is guarded from
    /// then on, to its leases: one that ended leaves it only DHCP).
    pub fn any(&self) -> bool {
        !self.0.is_empty()
    }
    /// The leases.
    pub fn entries(&self) -> &[Lease] {
        &self.0
    }
}

const SERVER: u16 = 67;
const CLIENT: u16 = 68;

/// True if a frame is a DHCP server's message to a client (UDP 67 to
/// 68 over IPv4), from its headers alone: the frames [`acked`] reads.
pub fn is_server_reply(frame: &[u8], layers: &Layers) -> bool {
    let Some(t) = layers
        .transport()
        .filter(|t| t.protocol == ip_protocol::UDP && layers.ethertype() == EtherType::Ipv4)
    else {
        return false;
    };
    let Some(h) = frame.get(t.offset..t.offset + 4) else {
        return false;
    };
    (
        u16::from_be_bytes([h[0], h[1]]),
        u16::from_be_bytes([h[2], h[3]]),
    ) == (SERVER, CLIENT)
}

/// The client's MAC, the address and how long, if the frame (whole,
/// its payload in place) is a DHCP ACK giving an address.
pub fn acked(frame: &[u8], layers: &Layers) -> Option<(MacAddr, Ipv4Addr, Duration)> {
    if !is_server_reply(frame, layers) {
        return None;
    }
    let (n, t) = (layers.net()?, layers.transport()?);
    let m = dhcp::Message::new_checked(frame.get(t.offset + t.header_len..n.end)?).ok()?;
    let ip = Ipv4Addr::from(m.your_address());
    if !m.is_reply() || m.message_type()? != dhcp::MessageType::Ack || ip.is_unspecified() {
        return None;
    }
    let secs = m
        .lease_secs()
        .map_or(MAX_LEASE, |s| Duration::from_secs(s.into()));
    Some((m.client_mac(), ip, secs.min(MAX_LEASE)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack_frame(kind: u8, lease: Option<u32>) -> Vec<u8> {
        let mut m = vec![0u8; dhcp::OPTIONS_AT];
        m[0] = 2;
        m[1] = 1;
        m[2] = 6;
        m[16..20].copy_from_slice(&[198, 18, 91, 20]);
        m[28..34].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        m[236..240].copy_from_slice(&[99, 130, 83, 99]);
        m.extend([53, 1, kind]);
        if let Some(s) = lease {
            m.push(51);
            m.push(4);
            m.extend(s.to_be_bytes());
        }
        m.push(255);
        let mut udp = vec![0, 67, 0, 68];
        udp.extend(u16::try_from(8 + m.len()).unwrap().to_be_bytes());
        udp.extend([0, 0]);
        udp.extend(m);
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 91, 1];
        ip.extend([255; 4]);
        ip[2..4].copy_from_slice(&u16::try_from(20 + udp.len()).unwrap().to_be_bytes());
        ip.extend(udp);
        let mut f = vec![0xff; 6];
        f.extend([2, 0, 0, 0, 0, 1, 8, 0]);
        f.extend(ip);
        f
    }

    #[test]
    fn an_ack_gives_its_client_the_address_and_an_offer_does_not() {
        let f = ack_frame(5, Some(600));
        let l = Layers::parse(&f).unwrap();
        assert!(is_server_reply(&f, &l));
        let (mac, ip, secs) = acked(&f, &l).unwrap();
        assert_eq!(mac, MacAddr([2, 0, 0, 0, 0, 2]));
        assert_eq!(ip, Ipv4Addr::new(198, 18, 91, 20));
        assert_eq!(secs, Duration::from_secs(600));
        let offer = ack_frame(2, Some(600));
        assert_eq!(acked(&offer, &Layers::parse(&offer).unwrap()), None);
        let forever = ack_frame(5, Some(u32::MAX));
        let (_, _, secs) = acked(&forever, &Layers::parse(&forever).unwrap()).unwrap();
        assert_eq!(secs, MAX_LEASE);
        for n in 0..f.len() {
            if let Ok(l) = Layers::parse(&f[..n]) {
                let _ = acked(&f[..n], &l);
            }
        }
    }

    #[test]
    fn leases_renew_end_and_stay_bounded() {
        let t0 = Instant::now();
        let ip = |i| Ipv4Addr::new(198, 18, 91, i);
        let mut l = Leases::default();
        assert!(!l.any());
        l.learn(ip(1), t0 + Duration::from_secs(10));
        assert!(l.holds(ip(1), t0) && !l.holds(ip(2), t0));
        assert!(!l.holds(ip(1), t0 + Duration::from_secs(10)), "ended");
        l.learn(ip(1), t0 + Duration::from_secs(20));
        assert!(l.holds(ip(1), t0 + Duration::from_secs(15)), "renewed");
        for i in 2..20 {
            l.learn(ip(i), t0 + Duration::from_secs(100 + u64::from(i)));
        }
        assert_eq!(l.entries().len(), MAX_LEASES);
        assert!(!l.holds(ip(1), t0), "the one ending first went");
        assert!(l.holds(ip(19), t0));
    }
}
