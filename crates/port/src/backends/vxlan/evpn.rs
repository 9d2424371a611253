//! What the fabric advertises to a tunnel endpoint through BGP EVPN
//! (RFC 7432, RFC 8365), as the control plane hands it over: remote
//! endpoints for the flood list (route type 3), MACs behind them and their
//! IP addresses (type 2). The datapath uses them as it uses learned
//! entries, except that they do not age while advertised and data-plane
//! learning never overrides them (the fabric is the authority, as Linux's
//! `vxlan` device with `nolearning`).
//!
//! Everything here comes from the network, so everything is bounded and
//! checked: at most [`MAX_EVPN_MACS`] MACs and IPs and [`MAX_FLOOD`]
//! endpoints; an endpoint that is no unicast address of another host is
//! refused; each refusal is counted.

use super::Vtep;
use hvnet_wire::MacAddr;
use serde::Serialize;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;

/// Advertised MACs (and, separately, advertised IPs) a tunnel endpoint
/// keeps, at most: a fabric advertising more is refused the rest, counted.
pub const MAX_EVPN_MACS: usize = 16384;
/// Remote endpoints in the flood list, at most.
pub const MAX_FLOOD: usize = 1024;

/// Why an advertisement was not installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvpnRefusal {
    /// The endpoint is not another host's unicast address (0.0.0.0,
    /// multicast, broadcast, loopback, or this endpoint's own).
    #[error("not a remote endpoint's address")]
    BadVtep,
    /// The MAC is a group address or all zeros.
    #[error("not a unicast MAC")]
    BadMac,
    /// The MAC is a local VM's own address, its guest here.
    #[error("a local VM's address")]
    LocalMac,
    /// The table is full.
    #[error("table full")]
    Full,
}

/// Where a remote endpoint or MAC came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// The topology (`remotes`).
    Static,
    /// Seen in a frame from the tunnel.
    Learned,
    /// Advertised by the fabric (BGP EVPN).
    Evpn,
}

/// What the endpoint refused and suppressed, for the views.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct EvpnCounters {
    /// Advertised endpoints refused (not a remote unicast address, or the
    /// flood list full).
    pub vteps_refused: u64,
    /// Advertised MACs refused (group address, or the table full).
    pub macs_refused: u64,
    /// Advertised MACs that claimed a local VM's address, refused.
    pub local_claims_refused: u64,
    /// Advertised IPs refused (the table full, or a group MAC).
    pub neighbours_refused: u64,
    /// ARP requests answered here from the advertised IPs instead of
    /// being flooded.
    pub arp_suppressed: u64,
    /// IPv6 neighbor solicitations answered the same way.
    pub nd_suppressed: u64,
    /// Frames replicated to the flood list (every copy counts once per
    /// frame): broadcast, multicast and unknown unicast.
    pub flooded: u64,
    /// Of those, unicast to a MAC no remote endpoint is known for.
    pub flooded_unknown_unicast: u64,
    /// Of those, ARP requests.
    pub flooded_arp: u64,
}

impl Vtep {
    /// Installs (`present`) or withdraws remote endpoint `ip` in the flood
    /// list.
    pub fn evpn_vtep(&self, ip: impl Into<IpAddr>, present: bool) -> Result<(), EvpnRefusal> {
        let ip = ip.into();
        let mut v = self.evpn.vteps.write().expect("lock");
        if !present {
            v.remove(&ip);
        } else if !self.is_remote_address(ip) {
            self.evpn.counters.vteps_refused.fetch_add(1, Relaxed);
            return Err(EvpnRefusal::BadVtep);
        } else if v.len() >= MAX_FLOOD && !v.contains(&ip) {
            self.evpn.counters.vteps_refused.fetch_add(1, Relaxed);
            return Err(EvpnRefusal::Full);
        } else {
            v.insert(ip);
        }
        let mut flood = self.cfg.remotes.clone();
        flood.extend(v.iter().filter(|ip| !self.cfg.remotes.contains(ip)));
        *self.flood.write().expect("lock") = flood;
        self.flood_changed.store(true, Relaxed);
        Ok(())
    }

    /// Installs `mac` behind remote endpoint `vtep`, or withdraws it
    /// (`None`). The caller has checked that it is no local VM's address.
    pub fn evpn_mac(&self, mac: MacAddr, vtep: Option<IpAddr>) -> Result<(), EvpnRefusal> {
        let mut t = self.evpn.macs.write().expect("lock");
        let Some(vtep) = vtep else {
            t.remove(&mac);
            return Ok(());
        };
        let refused = if mac.is_multicast() || mac.0 == [0; 6] {
            Some(EvpnRefusal::BadMac)
        } else if !self.is_remote_address(vtep) {
            Some(EvpnRefusal::BadVtep)
        } else if t.len() >= MAX_EVPN_MACS && !t.contains_key(&mac) {
            Some(EvpnRefusal::Full)
        } else {
            None
        };
        if let Some(r) = refused {
            self.evpn.counters.macs_refused.fetch_add(1, Relaxed);
            return Err(r);
        }
        t.insert(mac, vtep);
        Ok(())
    }

    /// Counts an advertised MAC refused because it is a local VM's.
    pub fn evpn_local_claim(&self) {
        self.evpn
            .counters
            .local_claims_refused
            .fetch_add(1, Relaxed);
    }

    /// Installs what remote IP `ip` resolves to (`mac`), or withdraws it:
    /// ARP requests (IPv4) and neighbor solicitations (IPv6) for it are
    /// answered here.
    pub fn evpn_neighbour(&self, ip: IpAddr, mac: Option<MacAddr>) -> Result<(), EvpnRefusal> {
        let mut t = self.evpn.neighbours.write().expect("lock");
        let Some(mac) = mac else {
            t.remove(&ip);
            return Ok(());
        };
        if mac.is_multicast() || (t.len() >= MAX_EVPN_MACS && !t.contains_key(&ip)) {
            self.evpn.counters.neighbours_refused.fetch_add(1, Relaxed);
            return Err(if mac.is_multicast() {
                EvpnRefusal::BadMac
            } else {
                EvpnRefusal::Full
            });
        }
        t.insert(ip, mac);
        Ok(())
    }

    /// The MAC an advertised address resolves to.
    pub fn evpn_resolve(&self, ip: IpAddr) -> Option<MacAddr> {
        self.evpn.neighbours.read().expect("lock").get(&ip).copied()
    }

    /// Counts an ARP request (or, `nd`, a neighbor solicitation) answered
    /// from the advertised IPs.
    pub fn count_suppressed(&self, nd: bool) {
        let c = &self.evpn.counters;
        if nd {
            &c.nd_suppressed
        } else {
            &c.arp_suppressed
        }
        .fetch_add(1, Relaxed);
    }

    /// The remote endpoint `mac` is advertised behind.
    pub(super) fn evpn_remote_of(&self, mac: &MacAddr) -> Option<IpAddr> {
        self.evpn.macs.read().expect("lock").get(mac).copied()
    }

    /// True for an address a remote endpoint may have: of the endpoint's
    /// own family, unicast, not its own.
    fn is_remote_address(&self, ip: IpAddr) -> bool {
        let unicast = match ip {
            IpAddr::V4(a) => {
                !(a.is_unspecified()
                    || a.is_multicast()
                    || a.is_broadcast()
                    || a.is_loopback()
                    || a.octets()[0] >= 240)
            }
            IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast() || a.is_loopback()),
        };
        unicast && ip.is_ipv6() == self.cfg.local.is_ipv6() && ip != self.cfg.local
    }

    /// Forgets everything the fabric advertised (the control plane lost
    /// track, and installs it again from a fresh dump); the MACs forgotten.
    pub fn evpn_clear(&self) -> Vec<MacAddr> {
        self.evpn.vteps.write().expect("lock").clear();
        *self.flood.write().expect("lock") = self.cfg.remotes.clone();
        self.evpn.neighbours.write().expect("lock").clear();
        self.evpn
            .macs
            .write()
            .expect("lock")
            .drain()
            .map(|(m, _)| m)
            .collect()
    }

    /// The counters now.
    pub fn evpn_counters(&self) -> EvpnCounters {
        let c = &self.evpn.counters;
        EvpnCounters {
            vteps_refused: c.vteps_refused.load(Relaxed),
            macs_refused: c.macs_refused.load(Relaxed),
            local_claims_refused: c.local_claims_refused.load(Relaxed),
            neighbours_refused: c.neighbours_refused.load(Relaxed),
            arp_suppressed: c.arp_suppressed.load(Relaxed),
            nd_suppressed: c.nd_suppressed.load(Relaxed),
            flooded: c.flooded.load(Relaxed),
            flooded_unknown_unicast: c.flooded_unknown_unicast.load(Relaxed),
            flooded_arp: c.flooded_arp.load(Relaxed),
        }
    }
}

/// The advertised tables and their counters.
#[derive(Default)]
pub(super) struct EvpnTables {
    pub(super) vteps: std::sync::RwLock<std::collections::BTreeSet<IpAddr>>,
    pub(super) macs: std::sync::RwLock<std::collections::HashMap<MacAddr, IpAddr>>,
    pub(super) neighbours: std::sync::RwLock<std::collections::HashMap<IpAddr, MacAddr>>,
    pub(super) counters: AtomicCounters,
}

#[derive(Default)]
pub(super) struct AtomicCounters {
    vteps_refused: std::sync::atomic::AtomicU64,
    macs_refused: std::sync::atomic::AtomicU64,
    local_claims_refused: std::sync::atomic::AtomicU64,
    neighbours_refused: std::sync::atomic::AtomicU64,
    arp_suppressed: std::sync::atomic::AtomicU64,
    nd_suppressed: std::sync::atomic::AtomicU64,
    pub(super) flooded: std::sync::atomic::AtomicU64,
    pub(super) flooded_unknown_unicast: std::sync::atomic::AtomicU64,
    pub(super) flooded_arp: std::sync::atomic::AtomicU64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn vtep() -> Vtep {
        Vtep::for_test(
            Ipv4Addr::new(198, 18, 60, 1).into(),
            24,
            Ipv4Addr::new(198, 18, 60, 9).into(),
        )
    }

    #[test]
    fn the_flood_list_is_the_configured_remotes_and_the_advertised_ones() {
        let v = vtep();
        let b = Ipv4Addr::new(198, 18, 60, 2);
        v.evpn_vtep(b, true).unwrap();
        v.evpn_vtep(Ipv4Addr::new(198, 18, 60, 9), true).unwrap();
        assert_eq!(
            v.flood_list().len(),
            2,
            "a configured remote is listed once"
        );
        v.evpn_vtep(b, false).unwrap();
        assert_eq!(
            v.flood_list(),
            [IpAddr::from(Ipv4Addr::new(198, 18, 60, 9))]
        );
    }

    #[test]
    fn endpoints_that_are_no_remote_host_are_refused_and_counted() {
        let v = vtep();
        for bad in [
            "0.0.0.0",
            "224.0.0.5",
            "255.255.255.255",
            "127.0.0.1",
            "198.18.60.1",
            "250.0.0.1",
        ] {
            assert_eq!(
                v.evpn_vtep(bad.parse::<Ipv4Addr>().unwrap(), true),
                Err(EvpnRefusal::BadVtep),
                "{bad}"
            );
        }
        let m = MacAddr([2, 0, 0, 0, 0, 7]);
        assert_eq!(
            v.evpn_mac(m, Some(Ipv4Addr::UNSPECIFIED.into())),
            Err(EvpnRefusal::BadVtep)
        );
        assert_eq!(
            v.evpn_mac(
                MacAddr::BROADCAST,
                Some(Ipv4Addr::new(198, 18, 60, 2).into())
            ),
            Err(EvpnRefusal::BadMac)
        );
        let c = v.evpn_counters();
        assert_eq!((c.vteps_refused, c.macs_refused), (6, 2));
        assert_eq!(v.flood_list().len(), 1);
    }

    #[test]
    fn the_tables_are_bounded_whatever_the_fabric_advertises() {
        let v = vtep();
        let remote = Ipv4Addr::new(198, 18, 60, 2);
        let mut refused = 0;
        for i in 0..(MAX_EVPN_MACS as u32 + 10) {
            let b = i.to_be_bytes();
            let m = MacAddr([2, 1, b[0], b[1], b[2], b[3]]);
            refused += u32::from(v.evpn_mac(m, Some(remote.into())) == Err(EvpnRefusal::Full));
        }
        assert_eq!(refused, 10);
        for i in 0..(MAX_FLOOD as u32 + 5) {
            let _ = v.evpn_vtep(Ipv4Addr::from(0x0a00_0001 + i), true);
        }
        assert_eq!(
            v.flood_list().len(),
            MAX_FLOOD + 1,
            "the configured remote, and the bound"
        );
        assert_eq!(v.evpn_clear().len(), MAX_EVPN_MACS);
        assert_eq!(v.flood_list().len(), 1);
    }

    #[test]
    fn an_advertised_mac_is_not_overridden_by_what_arrives() {
        let v = vtep();
        let m = MacAddr([2, 0, 0, 0, 0, 7]);
        let (b, c) = (Ipv4Addr::new(198, 18, 60, 2), Ipv4Addr::new(198, 18, 60, 3));
        v.evpn_mac(m, Some(b.into())).unwrap();
        v.learn_remote_mac(m, c.into(), std::time::Instant::now());
        assert_eq!(v.remote_of(&m), Some(b.into()));
        v.evpn_mac(m, None).unwrap();
        assert_eq!(
            v.remote_of(&m),
            Some(c.into()),
            "learned again once withdrawn"
        );
    }
}
