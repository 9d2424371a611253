//! The multicast database of IGMP/MLD snooping (RFC 4541): per VLAN, which
//! ports have members of which group, which ports lead to a multicast
//! router, and whether a querier is there — the Linux bridge's `mdb`
//! with its timers and defaults (membership interval 260 s, last member
//! count 2 of 1 s, other querier present 255 s, query interval 125 s).
//!
//! Snooping is per group (*,G), by IP group address (not by MAC: 32 IPv4
//! groups share each MAC). A group's frames go to its members and the
//! router ports only while a querier is there (the switch's own, or one
//! heard), as on the Linux bridge: without one, reports are not asked for
//! again and memberships would lapse, so everything is flooded.
//! Memberships are limited per port and in all, as the FDB's learned
//! entries are: a guest reporting thousands of groups fills its own share;
//! what is refused is counted by the caller, and the refused group is
//! flooded in its VLAN for the membership interval (as the Linux bridge
//! stops snooping at `hash_max`): as unknown multicast it would reach the
//! router ports only, and the refused listener would hear nothing.
//!
//! Workers read the table under a read lock per group frame and write it
//! per membership message; expired entries are swept by the switch's
//! housekeeping thread.

use serde::Serialize;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

/// Snooping's settings (`[switch] multicast_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnoopConfig {
    /// Snooping on (the Linux bridge's `mcast_snooping`, on by default).
    pub enabled: bool,
    /// The switch queries where no other querier is heard
    /// (`mcast_querier`, off by default).
    pub querier: bool,
    /// Group frames nobody reported are flooded (on), or sent to the
    /// router ports only (off, the Linux bridge's way with a querier).
    pub flood_unknown: bool,
    /// How long a report keeps a member (`mcast_membership_interval`).
    pub membership_interval: Duration,
    /// How long a member that left is kept for another to answer
    /// (`mcast_last_member_count` × `mcast_last_member_interval`).
    pub last_member: Duration,
    /// Between the own querier's general queries (`mcast_query_interval`).
    pub query_interval: Duration,
    /// Between its first queries (`mcast_startup_query_interval`).
    pub startup_query_interval: Duration,
    /// Its queries' maximum response delay (`mcast_query_response_interval`).
    pub query_response: Duration,
    /// How long a heard querier, and a port it was heard on as a router
    /// port, is kept (`mcast_querier_interval`).
    pub other_querier: Duration,
    /// Limits on memberships.
    pub limits: MdbLimits,
}

impl Default for SnoopConfig {
    fn default() -> SnoopConfig {
        SnoopConfig {
            enabled: true,
            querier: false,
            flood_unknown: false,
            membership_interval: Duration::from_secs(260),
            last_member: Duration::from_secs(2),
            query_interval: Duration::from_secs(125),
            startup_query_interval: Duration::from_millis(31_250),
            query_response: Duration::from_secs(10),
            other_querier: Duration::from_secs(255),
            limits: MdbLimits::default(),
        }
    }
}

/// Limits on memberships (a port in a group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MdbLimits {
    /// Memberships per port.
    pub per_port: usize,
    /// Memberships in all (the Linux bridge's `hash_max` is 4096 groups).
    pub total: usize,
}

impl Default for MdbLimits {
    fn default() -> MdbLimits {
        MdbLimits {
            per_port: 1024,
            total: 8192,
        }
    }
}

/// Refused groups remembered, each flooded for the membership interval.
/// Past this many, every group nobody reported is flooded instead, for the
/// membership interval since the last refusal: the set stays small, and a
/// refused listener is never cut off.
pub const MAX_REFUSED_GROUPS: usize = 1024;

/// IPv4 (IGMP) or IPv6 (MLD): each has its own querier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// IGMP.
    Ipv4,
    /// MLD.
    Ipv6,
}

impl Family {
    /// The family of `a`.
    pub fn of(a: IpAddr) -> Family {
        match a {
            IpAddr::V4(_) => Family::Ipv4,
            IpAddr::V6(_) => Family::Ipv6,
        }
    }
}

/// What a report did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// A new member, or one refreshed.
    Member,
    /// Refused: a limit is reached.
    Refused,
}

/// A querier heard.
#[derive(Clone, Copy, Debug)]
struct Heard {
    addr: IpAddr,
    port: usize,
    /// Group frames are pruned from here on: the hosts had the query's
    /// response time to report (the Linux bridge's delay timer).
    from: Instant,
    until: Instant,
}

#[derive(Default)]
struct Table {
    groups: HashMap<(u16, IpAddr), Vec<(usize, Instant)>>,
    per_port: HashMap<usize, usize>,
    total: usize,
    /// Ports a query was heard on, per VLAN, until when.
    routers: HashMap<(u16, usize), Instant>,
    queriers: HashMap<(u16, Family), Heard>,
    /// From when the own querier prunes, per VLAN and family: its first
    /// query's response time after it was sent (the Linux bridge's delay
    /// timer), for the hosts to report first. Never queried: no pruning.
    own_from: HashMap<(u16, Family), Instant>,
    /// Groups a join was refused for, flooded until when: their listener
    /// is not in the table, so members-only would leave it out.
    refused: HashMap<(u16, IpAddr), Instant>,
    /// More groups were refused than [`MAX_REFUSED_GROUPS`]: every group
    /// nobody reported is flooded until then.
    refused_overflow: Option<Instant>,
}

impl Table {
    fn drop_member(&mut self, port: usize) {
        self.total -= 1;
        if let Some(n) = self.per_port.get_mut(&port) {
            *n -= 1;
            if *n == 0 {
                self.per_port.remove(&port);
            }
        }
    }
}

/// The own querier's next query per VLAN and family, and how many it sent.
#[derive(Default)]
struct Own {
    next: HashMap<(u16, Family), (Instant, u32)>,
}

/// The table.
pub struct Mdb {
    cfg: SnoopConfig,
    table: RwLock<Table>,
    own: Mutex<Own>,
}

/// A membership as shown to operators (`hvnet mdb`, as `bridge mdb`).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct MdbRow {
    /// VLAN (0: untagged).
    pub vlan: u16,
    /// The group.
    pub group: IpAddr,
    /// Port index.
    pub port: usize,
    /// Seconds until it expires without another report.
    pub expires_secs: u64,
}

/// A router port as shown to operators (one a query was heard on; the
/// uplinks always are, and are not listed).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RouterRow {
    /// VLAN.
    pub vlan: u16,
    /// Port index.
    pub port: usize,
    /// Seconds until it is no longer one without another query.
    pub expires_secs: u64,
}

/// A querier heard, as shown to operators.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct QuerierRow {
    /// VLAN.
    pub vlan: u16,
    /// IGMP or MLD.
    pub family: Family,
    /// Its source address.
    pub addr: IpAddr,
    /// The port it was heard on.
    pub port: usize,
    /// Seconds until it is thought gone without another query.
    pub expires_secs: u64,
}

/// Where a group frame goes, as far as the table knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Everywhere: snooping is off, or no querier is there.
    Flood,
    /// To the group's members and the router ports.
    Members,
    /// Nobody reported the group: to the router ports, or everywhere with
    /// `flood_unknown`.
    Unknown,
    /// Everywhere: a join to the group was refused (the table full), so
    /// a listener the table does not know may be anywhere.
    Refused,
}

fn secs_left(until: Instant, now: Instant) -> u64 {
    until.saturating_duration_since(now).as_secs()
}

impl Mdb {
    /// An empty table.
    pub fn new(cfg: SnoopConfig) -> Mdb {
        Mdb {
            cfg,
            table: RwLock::new(Table::default()),
            own: Mutex::new(Own::default()),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &SnoopConfig {
        &self.cfg
    }

    /// Records that `port` has a member of `group` in `vlan` (a report).
    pub fn join(&self, vlan: u16, group: IpAddr, port: usize, now: Instant) -> Join {
        let until = now + self.cfg.membership_interval;
        let mut t = self.table.write().expect("mdb lock");
        if let Some(m) = t.groups.get_mut(&(vlan, group)) {
            if let Some(e) = m.iter_mut().find(|(p, _)| *p == port) {
                e.1 = until;
                return Join::Member;
            }
        }
        let mine = t.per_port.get(&port).copied().unwrap_or(0);
        if mine >= self.cfg.limits.per_port || t.total >= self.cfg.limits.total {
            if t.refused.len() < MAX_REFUSED_GROUPS || t.refused.contains_key(&(vlan, group)) {
                t.refused.insert((vlan, group), until);
            } else {
                t.refused_overflow = Some(until);
            }
            return Join::Refused;
        }
        t.groups
            .entry((vlan, group))
            .or_default()
            .push((port, until));
        *t.per_port.entry(port).or_insert(0) += 1;
        t.total += 1;
        Join::Member
    }

    /// `port`'s member of `group` left (a leave, or a record of no
    /// sources). With a querier heard, its group-specific query will ask
    /// and the answers (or none) decide; otherwise the member is kept
    /// for the last member time, for another behind the port to report.
    /// The caller reads leaves of guests' ports only: behind an uplink
    /// many hosts may be members, and nobody asks them again.
    pub fn leave(&self, vlan: u16, group: IpAddr, port: usize, now: Instant) {
        let mut t = self.table.write().expect("mdb lock");
        if t.queriers
            .get(&(vlan, Family::of(group)))
            .is_some_and(|q| q.until > now)
        {
            return;
        }
        let soon = now + self.cfg.last_member;
        if let Some(m) = t.groups.get_mut(&(vlan, group)) {
            for e in m.iter_mut().filter(|(p, _)| *p == port) {
                e.1 = e.1.min(soon);
            }
        }
    }

    /// A query from `addr` was heard on `port`: the port leads to a
    /// router, a querier is there; a group-specific query shortens the
    /// group's memberships to what its answers may take.
    pub fn query(
        &self,
        vlan: u16,
        port: usize,
        addr: IpAddr,
        group: Option<IpAddr>,
        max_resp: Duration,
        now: Instant,
    ) {
        let fam = Family::of(addr);
        let mut t = self.table.write().expect("mdb lock");
        let until = now + self.cfg.other_querier;
        t.routers.insert((vlan, port), until);
        let from = match t.queriers.get(&(vlan, fam)) {
            Some(q) if q.until > now => q.from,
            _ => now + max_resp,
        };
        t.queriers.insert(
            (vlan, fam),
            Heard {
                addr,
                port,
                from,
                until,
            },
        );
        if let Some(g) = group {
            let soon = now + max_resp * 2;
            if let Some(m) = t.groups.get_mut(&(vlan, g)) {
                for e in m.iter_mut() {
                    e.1 = e.1.min(soon);
                }
            }
        }
    }

    /// Where a frame to `group` in `vlan` goes; with [`Lookup::Members`],
    /// `out` has the ports of its members.
    pub fn lookup(
        &self,
        vlan: u16,
        group: IpAddr,
        now: Instant,
        out: &mut impl Extend<usize>,
    ) -> Lookup {
        if !self.cfg.enabled {
            return Lookup::Flood;
        }
        let t = self.table.read().expect("mdb lock");
        if !self.querier_here(&t, vlan, Family::of(group), now) {
            return Lookup::Flood;
        }
        if t.refused.get(&(vlan, group)).is_some_and(|u| *u > now) {
            return Lookup::Refused;
        }
        match t.groups.get(&(vlan, group)) {
            Some(m) if m.iter().any(|(_, u)| *u > now) => {
                out.extend(m.iter().filter(|(_, u)| *u > now).map(|(p, _)| *p));
                Lookup::Members
            }
            _ if t.refused_overflow.is_some_and(|u| u > now) => Lookup::Refused,
            _ => Lookup::Unknown,
        }
    }

    /// True when a querier keeps memberships true in `vlan`: the
    /// switch's own, or one heard (past its first response time).
    pub fn querier_exists(&self, vlan: u16, fam: Family, now: Instant) -> bool {
        let t = self.table.read().expect("mdb lock");
        self.querier_here(&t, vlan, fam, now)
    }

    /// True when reports go to the router ports only (RFC 4541 §2.1.1):
    /// while a querier will ask again, the switch's own (from its start,
    /// before it prunes) or one heard. A host that heard another's IGMPv2
    /// or MLDv1 report for its group keeps its own quiet, so a report
    /// flooded while the own querier's first response time runs would
    /// leave that host's port out of the group.
    pub fn reports_to_routers(&self, vlan: u16, fam: Family, now: Instant) -> bool {
        self.cfg.querier || self.querier_heard(vlan, fam, now)
    }

    /// True when another querier is heard in `vlan` (its group-specific
    /// queries decide leaves).
    pub fn querier_heard(&self, vlan: u16, fam: Family, now: Instant) -> bool {
        let t = self.table.read().expect("mdb lock");
        t.queriers.get(&(vlan, fam)).is_some_and(|q| q.until > now)
    }

    fn querier_here(&self, t: &Table, vlan: u16, fam: Family, now: Instant) -> bool {
        (self.cfg.querier && t.own_from.get(&(vlan, fam)).is_some_and(|f| *f <= now))
            || t.queriers
                .get(&(vlan, fam))
                .is_some_and(|q| q.until > now && q.from <= now)
    }

    /// The ports queries were heard on in `vlan`, into `out`.
    pub fn routers(&self, vlan: u16, now: Instant, out: &mut impl Extend<usize>) {
        let t = self.table.read().expect("mdb lock");
        out.extend(
            t.routers
                .iter()
                .filter(|((v, _), u)| *v == vlan && **u > now)
                .map(|((_, p), _)| *p),
        );
    }

    /// Forgets everything of `port` (removed, or its link down: the Linux
    /// bridge deletes a disabled port's groups too).
    pub fn forget_port(&self, port: usize) {
        let mut t = self.table.write().expect("mdb lock");
        let mut gone = 0;
        t.groups.retain(|_, m| {
            let before = m.len();
            m.retain(|(p, _)| *p != port);
            gone += before - m.len();
            !m.is_empty()
        });
        t.total -= gone;
        t.per_port.remove(&port);
        t.routers.retain(|(_, p), _| *p != port);
        t.queriers.retain(|_, q| q.port != port);
    }

    /// Removes what expired.
    pub fn sweep(&self, now: Instant) {
        let mut t = self.table.write().expect("mdb lock");
        let mut expired = Vec::new();
        t.groups.retain(|_, m| {
            m.retain(|&(p, u)| {
                if u <= now {
                    expired.push(p);
                }
                u > now
            });
            !m.is_empty()
        });
        for p in expired {
            t.drop_member(p);
        }
        t.routers.retain(|_, u| *u > now);
        t.queriers.retain(|_, q| q.until > now);
        t.refused.retain(|_, u| *u > now);
        if t.refused_overflow.is_some_and(|u| u <= now) {
            t.refused_overflow = None;
        }
    }

    /// Groups flooded now because a join was refused (`hvnet mdb`).
    pub fn refused_groups(&self, now: Instant) -> usize {
        let t = self.table.read().expect("mdb lock");
        t.refused.values().filter(|u| **u > now).count()
    }

    /// The (VLAN, family) pairs of `vlans` the own querier must query
    /// now (none heard there), each claimed: the next is scheduled, so
    /// that one worker sends it.
    pub fn queries_due(
        &self,
        vlans: impl IntoIterator<Item = u16>,
        now: Instant,
    ) -> Vec<(u16, Family)> {
        if !(self.cfg.enabled && self.cfg.querier) {
            return Vec::new();
        }
        let heard: Vec<(u16, Family)> = {
            let t = self.table.read().expect("mdb lock");
            t.queriers
                .iter()
                .filter(|(_, q)| q.until > now)
                .map(|(k, _)| *k)
                .collect()
        };
        let mut own = self.own.lock().expect("querier lock");
        let mut due = Vec::new();
        let mut first = Vec::new();
        for vlan in vlans {
            for fam in [Family::Ipv4, Family::Ipv6] {
                if heard.contains(&(vlan, fam)) {
                    continue;
                }
                let e = own.next.entry((vlan, fam)).or_insert((now, 0));
                if e.0 > now {
                    continue;
                }
                // Robustness (2) startup queries, then the query interval.
                e.1 += 1;
                if e.1 == 1 {
                    first.push((vlan, fam));
                }
                let gap = if e.1 < 2 {
                    self.cfg.startup_query_interval
                } else {
                    self.cfg.query_interval
                };
                e.0 = now + gap;
                due.push((vlan, fam));
            }
        }
        drop(own);
        if !first.is_empty() {
            let mut t = self.table.write().expect("mdb lock");
            for k in first {
                t.own_from.entry(k).or_insert(now + self.cfg.query_response);
            }
        }
        due
    }

    /// Where the own querier has queried: per VLAN and family, whether it
    /// prunes yet (its first query's response time is over), for the
    /// views.
    pub fn own_querier(&self, now: Instant) -> Vec<(u16, Family, bool)> {
        let t = self.table.read().expect("mdb lock");
        let mut v: Vec<_> = t
            .own_from
            .iter()
            .map(|(&(vlan, fam), f)| (vlan, fam, *f <= now))
            .collect();
        v.sort_unstable();
        v
    }

    /// The VLANs with members.
    pub fn vlans(&self) -> Vec<u16> {
        let t = self.table.read().expect("mdb lock");
        let mut v: Vec<u16> = t.groups.keys().map(|(v, _)| *v).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Memberships in all.
    pub fn len(&self) -> usize {
        self.table.read().expect("mdb lock").total
    }

    /// True when no port is a member of anything.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every membership, router port and querier heard, for the views.
    pub fn rows(&self, now: Instant) -> (Vec<MdbRow>, Vec<RouterRow>, Vec<QuerierRow>) {
        let t = self.table.read().expect("mdb lock");
        let mut groups: Vec<MdbRow> = t
            .groups
            .iter()
            .flat_map(|(&(vlan, group), m)| {
                m.iter()
                    .filter(|(_, u)| *u > now)
                    .map(move |&(port, u)| MdbRow {
                        vlan,
                        group,
                        port,
                        expires_secs: secs_left(u, now),
                    })
            })
            .collect();
        groups.sort_by_key(|r| (r.vlan, r.group, r.port));
        let mut routers: Vec<RouterRow> = t
            .routers
            .iter()
            .filter(|(_, u)| **u > now)
            .map(|(&(vlan, port), &u)| RouterRow {
                vlan,
                port,
                expires_secs: secs_left(u, now),
            })
            .collect();
        routers.sort_by_key(|r| (r.vlan, r.port));
        let mut queriers: Vec<QuerierRow> = t
            .queriers
            .iter()
            .filter(|(_, q)| q.until > now)
            .map(|(&(vlan, family), q)| QuerierRow {
                vlan,
                family,
                addr: q.addr,
                port: q.port,
                expires_secs: secs_left(q.until, now),
            })
            .collect();
        queriers.sort_by_key(|q| (q.vlan, q.family));
        (groups, routers, queriers)
    }
}

#[cfg(test)]
#[path = "mdb_tests.rs"]
mod tests;
