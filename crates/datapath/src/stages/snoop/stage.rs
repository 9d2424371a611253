//! IGMP/MLD snooping at a worker's ingress: a membership message read
//! into the multicast database ([`crate::mdb`]), and where a group frame
//! goes — to its members and the router ports, or flooded as before; and
//! the switch's own querier, whose general queries a worker sends at its
//! idle look.

use crate::arc::{Decl, Kind};
use crate::counters::add;
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};
use crate::mdb::{Family, Join, Lookup};
use crate::snoop::{self, GroupFrame, Snooped, Targets};
use crate::vlan::VlanMode;
use hvnet_offload::OffloadInfo;
use hvnet_port::{Packet, SizeClass};
use hvnet_wire::membership::{is_link_local, Effect, Message};
use hvnet_wire::{igmp, mld};
use std::net::IpAddr;
use std::time::Instant;

pub(crate) const DECL: Decl<InRun> = Decl {
    name: "snoop",
    kind: Kind::Observation,
    after: &["suppress", "fdb"],
    before: &["forward"],
    wants: |f| f.snooping,
    run: snoop_burst,
};

/// Snooping's word on each group frame of the burst, kept for `forward`.
fn snoop_burst(st: &mut State, cx: &Ctx, b: &mut Burst) {
    for i in b.live() {
        if !b[i].dst().is_multicast() {
            b.trace(&cx.port.tracer, i, "snoop", || "not a group frame".into());
            continue;
        }
        // Copies for every port: the payload is read here (one copy is
        // for one receiver).
        b[i].buf.fill_pending();
        let s = st.snoop(cx, &b[i], st.now);
        b.trace(&cx.port.tracer, i, "snoop", || format!("{s:?}"));
        b.snooped.push((i, s));
    }
}

/// The source address of the switch's own queries (locally administered:
/// "hv" and 1).
pub const QUERIER_MAC: [u8; 6] = [0x02, 0x68, 0x76, 0x00, 0x00, 0x01];

impl State {
    /// Snooping's word on a frame to a group MAC address: membership
    /// messages are read (queries flooded, reports to the router ports),
    /// a frame to an IP group goes to its members and the router ports
    /// while a querier is there.
    fn snoop(&mut self, cx: &Ctx, pkt: &Packet, now: Instant) -> Snooped {
        let mdb = &cx.sw.mdb;
        if !mdb.config().enabled {
            return Snooped::Flood;
        }
        let c = &cx.port.ingress[cx.q];
        let (vlan, port) = (pkt.meta.vlan, cx.port.id);
        let group = match snoop::classify(pkt) {
            GroupFrame::Flood => return Snooped::Flood,
            GroupFrame::Bad(why) => {
                c.count_drop(why, 1);
                return Snooped::Dropped;
            }
            GroupFrame::Membership { msg, src } => {
                // From behind a tunnel: the remote endpoint it came from
                // is told too (its head-end replication is pruned).
                let tunnel = pkt
                    .meta
                    .tunnel
                    .and_then(|t| Some((t.vni, cx.sw.endpoint(port)?)));
                let cfg = mdb.config();
                let remote = |g: IpAddr, until: Instant| {
                    if let Some((vni, vtep)) = &tunnel {
                        vtep.group_member(*vni, g, pkt.src(), until);
                    }
                };
                let join = |g: IpAddr| {
                    if is_link_local(g) {
                        return;
                    }
                    if mdb.join(vlan, g, port, now) == Join::Refused {
                        add(&c.mdb_refused, 1);
                    }
                    remote(g, now + cfg.membership_interval);
                };
                let leave = |g: IpAddr| {
                    // An uplink (a tunnel's remote, too) has many hosts
                    // behind it and the switch asks none of them again
                    // (its querier sends no group-specific query): a leave
                    // there is one host's, and the others keep the group
                    // until their membership lapses. Uplinks are router
                    // ports and get every group anyway; a remote costs at
                    // most a membership interval of frames nobody wants.
                    if cx.port.is_uplink() {
                        return;
                    }
                    mdb.leave(vlan, g, port, now);
                    if !mdb.querier_heard(vlan, Family::of(g), now) {
                        remote(g, now + cfg.last_member);
                    }
                };
                match msg {
                    Message::Query {
                        group, max_resp_ms, ..
                    } => {
                        add(&c.mcast_queries, 1);
                        let wait = std::time::Duration::from_millis(max_resp_ms.into());
                        mdb.query(vlan, port, src, group, wait, now);
                        if let Some((vni, vtep)) = &tunnel {
                            vtep.group_router(*vni, pkt.src(), now + cfg.other_querier);
                        }
                        return Snooped::Flood;
                    }
                    Message::Join(g) => join(g),
                    Message::Leave(g) => leave(g),
                    Message::Report(records) => {
                        for r in records {
                            match r.effect() {
                                Effect::Join => join(r.group),
                                Effect::Leave => leave(r.group),
                                Effect::None => {}
                            }
                        }
                    }
                    Message::Other => return Snooped::Flood,
                }
                add(&c.mcast_reports, 1);
                // Reports go to the routers only (RFC 4541 §2.1.1: no
                // other member hears them and stays silent), while a
                // querier asks for them again.
                if !mdb.reports_to_routers(vlan, Family::of(src), now) {
                    return Snooped::Flood;
                }
                let mut ports = Targets::new();
                self.routers(cx, vlan, now, &mut ports);
                return Snooped::To {
                    ports,
                    report: true,
                };
            }
            GroupFrame::Data(g) => g,
        };
        let mut ports = Targets::new();
        match mdb.lookup(vlan, group, now, &mut ports) {
            Lookup::Flood => return Snooped::Flood,
            Lookup::Unknown if mdb.config().flood_unknown => return Snooped::Flood,
            Lookup::Refused => {
                cx.count(&c.mcast_refused_flooded, 1);
                return Snooped::Flood;
            }
            Lookup::Members => cx.count(&c.mcast_to_members, 1),
            Lookup::Unknown => {}
        }
        self.routers(cx, vlan, now, &mut ports);
        Snooped::To {
            ports,
            report: false,
        }
    }

    /// The router ports of `vlan`: every uplink (the wire is where
    /// routers are) and the ports queries were heard on.
    fn routers(&self, cx: &Ctx, vlan: u16, now: Instant, out: &mut Targets) {
        out.extend(cx.ports.iter().filter(|p| p.is_uplink()).map(|p| p.id));
        cx.sw.mdb.routers(vlan, now, out);
    }

    /// The switch's own querier (`multicast_querier`): the general
    /// queries due (none where another querier is heard), to every port
    /// of their VLAN. A worker looks once a second; the database hands
    /// each query to one worker.
    pub(crate) fn send_queries(&mut self, cx: &Ctx, now: Instant) {
        let mdb = &cx.sw.mdb;
        if !(mdb.config().enabled && mdb.config().querier) {
            return;
        }
        let due = mdb.queries_due(self.query_vlans(cx), now);
        if due.is_empty() {
            return;
        }
        self.now = now;
        // The switch's own frames: no mirror copied them yet.
        (self.mirrored, self.tracing) = (0, None);
        let tenths = u8::try_from(mdb.config().query_response.as_millis() / 100).unwrap_or(255);
        let ms = u16::try_from(mdb.config().query_response.as_millis()).unwrap_or(u16::MAX);
        for (vlan, fam) in due {
            let frame = match fam {
                Family::Ipv4 => igmp::general_query(QUERIER_MAC, tenths).to_vec(),
                Family::Ipv6 => mld::general_query(QUERIER_MAC, ms),
            };
            let targets: Targets = cx
                .ports
                .iter()
                .filter(|p| {
                    p.is_up()
                        && self.settings[p.id].connected
                        && self.settings[p.id].vlans_of(p.vlan()).carries(vlan)
                })
                .map(|p| p.id)
                .collect();
            for p in targets {
                let Some(mut buf) = self.pool.take(SizeClass::Small) else {
                    break;
                };
                buf.fill(&frame);
                let Ok(mut q) = Packet::parse(buf, OffloadInfo::default()) else {
                    break;
                };
                q.meta.vlan = vlan;
                self.egress(cx, p, q);
            }
        }
        self.end_batch(cx);
    }

    /// The VLANs the own querier queries: each access port's, each trunk's
    /// native VLAN and listed VLANs (a trunk of every VLAN adds none of
    /// its own: its VLANs' access ports and members name them).
    fn query_vlans(&self, cx: &Ctx) -> Vec<u16> {
        let mut v: Vec<u16> = Vec::new();
        for p in cx.ports.iter() {
            let s = &self.settings[p.id];
            match s.vlan_mode {
                VlanMode::Access => v.push(p.vlan()),
                VlanMode::Trunk => {
                    v.extend(s.native_vlan);
                    if !s.vlans.is_all() {
                        for (a, b) in s.vlans.ranges() {
                            v.extend(a..=b);
                        }
                    }
                }
            }
        }
        v.extend(cx.sw.mdb.vlans());
        v.sort_unstable();
        v.dedup();
        v
    }
}
