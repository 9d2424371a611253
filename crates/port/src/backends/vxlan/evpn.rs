//! What the fabric advertises to a tunnel endpoint through BGP EVPN
//! (RFC 7432, RFC 8365), as the control plane hands it over: remote
//! endpoints for the flood list (route type 3), MACs behind them and their
//! IP addresses (type 2), each in the segment (VNI) it was advertised in. The datapath uses them as it uses learned
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
/// Remote endpoints in one segment's flood list, at most (over all
/// segments, at most [`MAX_EVPN_MACS`]).
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
    /// The endpoint carries no such VNI (no segment of it).
    #[error("a VNI the endpoint does not carry")]
    Vni,
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
    /// Installs (`present`) or withdraws remote endpoint `ip` in segment
    /// `vni`'s flood list.
    pub fn evpn_vtep(
        &self,
        vni: u32,
        ip: impl Into<IpAddr>,
        present: bool,
    ) -> Result<(), EvpnRefusal> {
        let ip = ip.into();
        if !self.carries(vni) {
            self.evpn.counters.vteps_refused.fetch_add(1, Relaxed);
            return Err(EvpnRefusal::Vni);
        }
        let mut v = self.evpn.vteps.write().expect("lock");
        if !present {
            v.remove(&(vni, ip));
        } else if !self.is_remote_address(ip) {
            self.evpn.counters.vteps_refused.fetch_add(1, Relaxed);
            return Err(EvpnRefusal::BadVtep);
        } else if !v.contains(&(vni, ip))
            && (v
                .range((vni, MIN_IP)..)
                .take_while(|(n, _)| *n == vni)
                .count()
                >= MAX_FLOOD
                || v.len() >= MAX_EVPN_MACS)
        {
            self.evpn.counters.vteps_refused.fetch_add(1, Relaxed);
            return Err(EvpnRefusal::Full);
        } else {
            v.insert((vni, ip));
        }
        let mut flood = self.cfg.remotes.clone();
        flood.extend(
            v.range((vni, MIN_IP)..)
                .take_while(|(n, _)| *n == vni)
                .map(|&(_, ip)| ip)
                .filter(|ip| !self.cfg.remotes.contains(ip)),
        );
        self.flood.write().expect("lock").insert(vni, flood);
        self.flood_changed.store(true, Relaxed);
        Ok(())
    }

    /// Installs `mac` behind remote endpoint `vtep` in segment `vni`, or
    /// withdraws it (`None`). The caller has checked that it is no local
    /// VM's address.
    pub fn evpn_mac(
        &self,
        vni: u32,
        mac: MacAddr,
        vtep: Option<IpAddr>,
    ) -> Result<(), EvpnRefusal> {
        let mut t = self.evpn.macs.write().expect("lock");
        let Some(vtep) = vtep else {
            t.remove(&(vni, mac));
            return Ok(());
        };
        let refused = if !self.carries(vni) {
            Some(EvpnRefusal::Vni)
        } else if mac.is_multicast() || mac.0 == [0; 6] {
            Some(EvpnRefusal::BadMac)
        } else if !self.is_remote_address(vtep) {
            Some(EvpnRefusal::BadVtep)
        } else if t.len() >= MAX_EVPN_MACS && !t.contains_key(&(vni, mac)) {
            Some(EvpnRefusal::Full)
        } else {
            None
        };
        if let Some(r) = refused {
            self.evpn.counters.macs_refused.fetch_add(1, Relaxed);
            return Err(r);
        }
        t.insert((vni, mac), vtep);
        Ok(())
    }

    /// Counts an advertised MAC refused because it is a local VM's.
    pub fn evpn_local_claim(&self) {
        self.evpn
            .counters
            .local_claims_refused
            .fetch_add(1, Relaxed);
    }

    /// Installs what remote IP `ip` in segment `vni` resolves to (`mac`),
    /// or withdraws it: ARP requests (IPv4) and neighbor solicitations
    /// (IPv6) for it in that segment are answered here.
    pub fn evpn_neighbour(
        &self,
        vni: u32,
        ip: IpAddr,
        mac: Option<MacAddr>,
    ) -> Result<(), EvpnRefusal> {
        let mut t = self.evpn.neighbours.write().expect("lock");
        let Some(mac) = mac else {
            t.remove(&(vni, ip));
            return Ok(());
        };
        let refused = if !self.carries(vni) {
            Some(EvpnRefusal::Vni)
        } else if mac.is_multicast() {
            Some(EvpnRefusal::BadMac)
        } else if t.len() >= MAX_EVPN_MACS && !t.contains_key(&(vni, ip)) {
            Some(EvpnRefusal::Full)
        } else {
            None
        };
        if let Some(r) = refused {
            self.evpn.counters.neighbours_refused.fetch_add(1, Relaxed);
            return Err(r);
        }
        t.insert((vni, ip), mac);
        Ok(())
    }

    /// The MAC an address advertised in segment `vni` resolves to.
    pub fn evpn_resolve(&self, vni: u32, ip: IpAddr) -> Option<MacAddr> {
        self.evpn
            .neighbours
            .read()
            .expect("lock")
            .get(&(vni, ip))
            .copied()
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

    /// The remote endpoint `mac` is advertised behind in segment `vni`.
    pub(super) fn evpn_remote_of(&self, vni: u32, mac: &MacAddr) -> Option<IpAddr> {
        self.evpn
            .macs
            .read()
            .expect("lock")
            .get(&(vni, *mac))
            .copied()
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

    /// Forgets everything the fabric advertised in segment `vni` (the
    /// control plane lost track, and installs it again from a fresh dump);
    /// the MACs forgotten.
    pub fn evpn_clear(&self, vni: u32) -> Vec<MacAddr> {
        self.evpn
            .vteps
            .write()
            .expect("lock")
            .retain(|(n, _)| *n != vni);
        if self.carries(vni) {
            self.flood
                .write()
                .expect("lock")
                .insert(vni, self.cfg.remotes.clone());
        }
        self.evpn
            .neighbours
            .write()
            .expect("lock")
            .retain(|(n, _), _| *n != vni);
        let mut macs = self.evpn.macs.write().expect("lock");
        let gone = macs
            .keys()
            .filter(|(n, _)| *n == vni)
            .map(|&(_, m)| m)
            .collect();
        macs.retain(|(n, _), _| *n != vni);
        gone
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

/// The lowest address, where a segment's entries start in the ordered
/// set of (VNI, endpoint).
const MIN_IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

/// The advertised tables and their counters, each entry in its segment
/// (VNI).
#[derive(Default)]
pub(super) struct EvpnTables {
    pub(super) vteps: std::sync::RwLock<std::collections::BTreeSet<(u32, IpAddr)>>,
    pub(super) macs: std::sync::RwLock<std::collections::HashMap<(u32, MacAddr), IpAddr>>,
    pub(super) neighbours: std::sync::RwLock<std::collections::HashMap<(u32, IpAddr), MacAddr>>,
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
        v.evpn_vtep(42, b, true).unwrap();
        v.evpn_vtep(42, Ipv4Addr::new(198, 18, 60, 9), true)
            .unwrap();
        assert_eq!(
            v.flood_list(42).len(),
            2,
            "a configured remote is listed once"
        );
        v.evpn_vtep(42, b, false).unwrap();
        assert_eq!(
            v.flood_list(42),
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
                v.evpn_vtep(42, bad.parse::<Ipv4Addr>().unwrap(), true),
                Err(EvpnRefusal::BadVtep),
                "{bad}"
            );
        }
        let m = MacAddr([2, 0, 0, 0, 0, 7]);
        assert_eq!(
            v.evpn_mac(42, m, Some(Ipv4Addr::UNSPECIFIED.into())),
            Err(EvpnRefusal::BadVtep)
        );
        assert_eq!(
            v.evpn_mac(
                42,
                MacAddr::BROADCAST,
                Some(Ipv4Addr::new(198, 18, 60, 2).into())
            ),
            Err(EvpnRefusal::BadMac)
        );
        let c = v.evpn_counters();
        assert_eq!((c.vteps_refused, c.macs_refused), (6, 2));
        assert_eq!(
            v.evpn_vtep(43, Ipv4Addr::new(198, 18, 60, 2), true),
            Err(EvpnRefusal::Vni),
            "a VNI the endpoint does not carry"
        );
        assert_eq!(v.flood_list(42).len(), 1);
    }

    #[test]
    fn the_tables_are_bounded_whatever_the_fabric_advertises() {
        let v = vtep();
        let remote = Ipv4Addr::new(198, 18, 60, 2);
        let mut refused = 0;
        for i in 0..(MAX_EVPN_MACS as u32 + 10) {
            let b = i.to_be_bytes();
            let m = MacAddr([2, 1, b[0], b[1], b[2], b[3]]);
            refused += u32::from(v.evpn_mac(42, m, Some(remote.into())) == Err(EvpnRefusal::Full));
        }
        assert_eq!(refused, 10);
        for i in 0..(MAX_FLOOD as u32 + 5) {
            let _ = v.evpn_vtep(42, Ipv4Addr::from(0x0a00_0001 + i), true);
        }
        assert_eq!(
            v.flood_list(42).len(),
            MAX_FLOOD + 1,
            "the configured remote, and the bound"
        );
        assert_eq!(v.evpn_clear(42).len(), MAX_EVPN_MACS);
        assert_eq!(v.flood_list(42).len(), 1);
    }

    #[test]
    fn an_advertised_mac_is_not_overridden_by_what_arrives() {
        let v = vtep();
        let m = MacAddr([2, 0, 0, 0, 0, 7]);
        let (b, c) = (Ipv4Addr::new(198, 18, 60, 2), Ipv4Addr::new(198, 18, 60, 3));
        v.evpn_mac(42, m, Some(b.into())).unwrap();
        v.learn_remote_mac(42, m, c.into(), std::time::Instant::now());
        assert_eq!(v.remote_of(42, &m), Some(b.into()));
        v.evpn_mac(42, m, None).unwrap();
        assert_eq!(
            v.remote_of(42, &m),
            Some(c.into()),
            "learned again once withdrawn"
        );
    }

    fn two_segments() -> Vtep {
        let mut v = vtep();
        v.cfg.vlans = vec![(10, 5010)];
        Vtep::new(v.cfg.clone(), None)
    }

    #[test]
    fn the_same_mac_in_two_segments_is_two_entries() {
        let v = two_segments();
        let m = MacAddr([2, 0, 0, 0, 0, 7]);
        let (b, c) = (Ipv4Addr::new(198, 18, 60, 2), Ipv4Addr::new(198, 18, 60, 3));
        v.evpn_mac(42, m, Some(b.into())).unwrap();
        v.evpn_mac(5010, m, Some(c.into())).unwrap();
        assert_eq!(v.remote_of(42, &m), Some(b.into()));
        assert_eq!(v.remote_of(5010, &m), Some(c.into()));
        // Learned ones the same way, and apart from the advertised.
        let l = MacAddr([2, 0, 0, 0, 0, 8]);
        let now = std::time::Instant::now();
        v.learn_remote_mac(42, l, b.into(), now);
        v.learn_remote_mac(5010, l, c.into(), now);
        assert_eq!(
            (v.remote_of(42, &l), v.remote_of(5010, &l)),
            (Some(b.into()), Some(c.into()))
        );
        v.evpn_mac(42, m, None).unwrap();
        assert_eq!(
            (v.remote_of(42, &m), v.remote_of(5010, &m)),
            (None, Some(c.into()))
        );
        let ip: IpAddr = Ipv4Addr::new(198, 19, 0, 5).into();
        v.evpn_neighbour(5010, ip, Some(m)).unwrap();
        assert_eq!(
            (v.evpn_resolve(42, ip), v.evpn_resolve(5010, ip)),
            (None, Some(m))
        );
    }

    #[test]
    fn each_segment_floods_to_its_own_advertised_endpoints() {
        let v = two_segments();
        let (b, c) = (Ipv4Addr::new(198, 18, 60, 2), Ipv4Addr::new(198, 18, 60, 3));
        let fixed: IpAddr = Ipv4Addr::new(198, 18, 60, 9).into();
        v.evpn_vtep(42, b, true).unwrap();
        v.evpn_vtep(5010, c, true).unwrap();
        assert_eq!(v.flood_list(42), [fixed, b.into()]);
        assert_eq!(v.flood_list(5010), [fixed, c.into()]);
        let m = MacAddr([2, 0, 0, 0, 0, 7]);
        v.evpn_mac(5010, m, Some(c.into())).unwrap();
        assert_eq!(v.evpn_clear(5010), [m]);
        assert_eq!(v.flood_list(5010), [fixed]);
        assert_eq!(
            v.flood_list(42),
            [fixed, b.into()],
            "the other segment kept"
        );
        let view = v.view(std::time::Instant::now());
        assert_eq!(view.segments.len(), 2);
        assert_eq!(
            (view.segments[1].vlan, view.segments[1].vni),
            (Some(10), 5010)
        );
    }
}
