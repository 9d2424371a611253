//! A tunnel endpoint as the views show it (`hvnet stats
//! /uplinks/NAME/vxlan`, `hvnet evpn`): its remotes, the MACs and IPs
//! behind them, its segments and counters.

use super::evpn::EvpnCounters;
use super::{KernelGsoView, Origin, TunnelTap, Vtep};
use serde::Serialize;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// A remote endpoint as the views show it.
#[derive(Clone, Debug, Serialize)]
pub struct RemoteView {
    /// Underlay address.
    pub ip: IpAddr,
    /// Its MAC, once resolved.
    pub mac: Option<String>,
    /// In the flood list (configured) or only learned.
    pub configured: bool,
    /// Where it came from: "static" (configured), "evpn" (advertised:
    /// in the flood list too), "learned" (seen in a frame only).
    pub origin: Origin,
}

/// An inner MAC learned behind a remote endpoint.
#[derive(Clone, Debug, Serialize)]
pub struct RemoteMacView {
    /// The segment it is in.
    pub vni: u32,
    /// The inner MAC.
    pub mac: String,
    /// The remote endpoint it is behind.
    pub remote: IpAddr,
    /// Seconds since it was last seen (0 for an advertised one).
    pub age_secs: u64,
    /// "evpn" (advertised; never ages while it is) or "learned".
    pub origin: Origin,
}

/// A remote IP address the fabric advertised with its MAC.
#[derive(Clone, Debug, Serialize)]
pub struct RemoteIpView {
    /// The segment it is in.
    pub vni: u32,
    /// The address.
    pub ip: std::net::IpAddr,
    /// Its MAC.
    pub mac: String,
}

/// One segment of a tunnel endpoint, as the views show it.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentView {
    /// Its VNI.
    pub vni: u32,
    /// The switch's VLAN it carries (none: the uplink's own, untagged).
    pub vlan: Option<u16>,
    /// Its flood list, in order.
    pub flood_list: Vec<IpAddr>,
    /// Remote MACs known in it (advertised and learned).
    pub remote_macs: usize,
    /// Remote IPs advertised in it.
    pub remote_ips: usize,
}

/// A tunnel endpoint's state, for `hvnet stats /uplinks/NAME/vxlan`.
#[derive(Clone, Debug, Serialize)]
pub struct VtepView {
    /// VNI.
    pub vni: u32,
    /// Underlay address and prefix.
    pub local: String,
    /// Underlay MAC.
    pub mac: String,
    /// UDP port.
    pub port: u16,
    /// Outer UDP checksum on.
    pub udp_csum: bool,
    /// Remote endpoints: configured, and learned from what arrived.
    pub remotes: Vec<RemoteView>,
    /// Inner MACs learned behind remotes.
    pub remote_macs: Vec<RemoteMacView>,
    /// ARP requests (neighbour solicitations over IPv6) sent for
    /// unresolved remotes.
    pub arp_requests_sent: u64,
    /// ARP replies (neighbour advertisements over IPv6) sent for the
    /// endpoint's address.
    pub arp_replies_sent: u64,
    /// Inner MACs not learned: the table was full.
    pub remote_macs_refused: u64,
    /// The uplink's own VNI's flood list (head-end replication), in
    /// order.
    pub flood_list: Vec<IpAddr>,
    /// Each segment (VNI) the endpoint carries: its VLAN, its flood list
    /// and how many remote MACs and IPs it knows.
    pub segments: Vec<SegmentView>,
    /// Remote IPs advertised with their MACs (ARP answered from them).
    pub remote_ips: Vec<RemoteIpView>,
    /// What the fabric's advertisements did, and what was flooded.
    pub evpn: EvpnCounters,
    /// Frames handed to the kernel whole (a TAP with the tunnel header),
    /// where it takes them; absent: the endpoint segments GSO frames
    /// itself.
    pub kernel_gso: Option<KernelGsoView>,
}

impl Vtep {
    /// The endpoint as the views show it.
    pub fn view(&self, now: Instant) -> VtepView {
        let n = self.neighbours.read().expect("lock");
        let flood = self.flood_union();
        let mut remotes: Vec<RemoteView> = flood
            .iter()
            .map(|ip| RemoteView {
                ip: *ip,
                mac: n.get(ip).map(|m| m.to_string()),
                configured: self.cfg.remotes.contains(ip),
                origin: if self.cfg.remotes.contains(ip) {
                    Origin::Static
                } else {
                    Origin::Evpn
                },
            })
            .collect();
        remotes.extend(
            n.iter()
                .filter(|(ip, _)| !flood.contains(ip))
                .map(|(ip, m)| RemoteView {
                    ip: *ip,
                    mac: Some(m.to_string()),
                    configured: false,
                    origin: Origin::Learned,
                }),
        );
        let advertised = self.evpn.macs.read().expect("lock");
        let mut macs: Vec<RemoteMacView> = advertised
            .iter()
            .map(|(&(vni, m), r)| RemoteMacView {
                vni,
                mac: m.to_string(),
                remote: *r,
                age_secs: 0,
                origin: Origin::Evpn,
            })
            .collect();
        macs.extend(
            self.remote_macs
                .read()
                .expect("lock")
                .iter()
                .filter(|(k, _)| !advertised.contains_key(k))
                .map(|(&(vni, m), (r, seen))| RemoteMacView {
                    vni,
                    mac: m.to_string(),
                    remote: *r,
                    age_secs: now.duration_since(*seen).as_secs(),
                    origin: Origin::Learned,
                }),
        );
        macs.sort_by(|a, b| (a.vni, &a.mac).cmp(&(b.vni, &b.mac)));
        let mut remote_ips: Vec<RemoteIpView> = self
            .evpn
            .neighbours
            .read()
            .expect("lock")
            .iter()
            .map(|(&(vni, ip), m)| RemoteIpView {
                vni,
                ip,
                mac: m.to_string(),
            })
            .collect();
        remote_ips.sort_by_key(|r| (r.vni, r.ip));
        let segments = self
            .segments()
            .into_iter()
            .map(|(vlan, vni)| SegmentView {
                vni,
                vlan,
                flood_list: self.flood_list(vni),
                remote_macs: macs.iter().filter(|m| m.vni == vni).count(),
                remote_ips: remote_ips.iter().filter(|m| m.vni == vni).count(),
            })
            .collect();
        VtepView {
            vni: self.cfg.vni,
            local: format!("{}/{}", self.cfg.local, self.cfg.prefix),
            mac: self.cfg.mac.to_string(),
            port: self.cfg.port,
            udp_csum: self.cfg.udp_csum,
            remotes,
            remote_macs: macs,
            arp_requests_sent: self.arp_requests_sent.load(Relaxed),
            arp_replies_sent: self.arp_replies_sent.load(Relaxed),
            remote_macs_refused: self.remote_macs_refused.load(Relaxed),
            flood_list: self.flood_list(self.cfg.vni),
            segments,
            remote_ips,
            evpn: self.evpn_counters(),
            kernel_gso: self.tap.as_ref().map(TunnelTap::view),
        }
    }
}
