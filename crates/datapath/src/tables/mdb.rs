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
mod tests {
    use super::*;

    fn g(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn members(m: &Mdb, vlan: u16, group: &str, now: Instant) -> (Lookup, Vec<usize>) {
        let mut v = Vec::new();
        let l = m.lookup(vlan, g(group), now, &mut v);
        v.sort();
        (l, v)
    }

    /// With the own querier, which has queried VLANs 0, 10 and 20 a
    /// response time ago.
    fn with_querier() -> Mdb {
        queried(SnoopConfig::default())
    }

    /// `cfg` with the own querier, as [`with_querier`].
    fn queried(cfg: SnoopConfig) -> Mdb {
        let m = Mdb::new(SnoopConfig {
            querier: true,
            ..cfg
        });
        let then = Instant::now() - Duration::from_secs(10);
        m.queries_due([0, 10, 20], then);
        m
    }

    #[test]
    fn the_own_querier_prunes_from_its_first_querys_response_time_on() {
        let m = Mdb::new(SnoopConfig {
            querier: true,
            ..SnoopConfig::default()
        });
        let now = Instant::now();
        m.join(0, g("239.1.1.1"), 3, now);
        assert_eq!(members(&m, 0, "239.1.1.1", now).0, Lookup::Flood);
        assert_eq!(m.queries_due([0], now).len(), 2);
        let soon = now + Duration::from_secs(9);
        assert_eq!(members(&m, 0, "239.1.1.1", soon).0, Lookup::Flood);
        assert!(!m.querier_exists(0, Family::Ipv6, soon));
        let ready = now + Duration::from_secs(10);
        assert_eq!(
            members(&m, 0, "239.1.1.1", ready),
            (Lookup::Members, vec![3])
        );
        assert!(m.querier_exists(0, Family::Ipv6, ready));
        // A VLAN not queried yet is flooded.
        m.join(30, g("239.1.1.1"), 3, now);
        assert_eq!(members(&m, 30, "239.1.1.1", ready).0, Lookup::Flood);
        // Later queries do not move the start.
        m.queries_due([0], now + Duration::from_secs(40));
        assert_eq!(
            m.own_querier(ready),
            [(0, Family::Ipv4, true), (0, Family::Ipv6, true)]
        );
    }

    #[test]
    fn without_a_querier_everything_floods() {
        let m = Mdb::new(SnoopConfig::default());
        let now = Instant::now();
        m.join(0, g("239.1.1.1"), 3, now);
        assert_eq!(members(&m, 0, "239.1.1.1", now).0, Lookup::Flood);
        // A querier heard: after its response time, pruned.
        m.query(0, 7, g("198.18.0.1"), None, Duration::from_secs(10), now);
        assert_eq!(members(&m, 0, "239.1.1.1", now).0, Lookup::Flood);
        let later = now + Duration::from_secs(11);
        assert_eq!(
            members(&m, 0, "239.1.1.1", later),
            (Lookup::Members, vec![3])
        );
        // The IPv6 family has no querier.
        m.join(0, g("ff0e::1"), 3, now);
        assert_eq!(members(&m, 0, "ff0e::1", later).0, Lookup::Flood);
        let mut r = Vec::new();
        m.routers(0, later, &mut r);
        assert_eq!(r, [7]);
        let off = Mdb::new(SnoopConfig {
            enabled: false,
            querier: true,
            ..SnoopConfig::default()
        });
        assert_eq!(members(&off, 0, "239.1.1.1", now).0, Lookup::Flood);
    }

    #[test]
    fn members_per_vlan_expire_and_leave() {
        let m = with_querier();
        let now = Instant::now();
        m.join(10, g("239.1.1.1"), 1, now);
        m.join(10, g("239.1.1.1"), 2, now);
        m.join(20, g("239.1.1.1"), 3, now);
        assert_eq!(
            members(&m, 10, "239.1.1.1", now),
            (Lookup::Members, vec![1, 2])
        );
        assert_eq!(
            members(&m, 20, "239.1.1.1", now),
            (Lookup::Members, vec![3])
        );
        assert_eq!(members(&m, 10, "239.1.1.2", now).0, Lookup::Unknown);
        // A leave keeps the member for the last member time.
        m.leave(10, g("239.1.1.1"), 1, now);
        assert_eq!(members(&m, 10, "239.1.1.1", now).1, vec![1, 2]);
        let t = now + Duration::from_secs(3);
        assert_eq!(members(&m, 10, "239.1.1.1", t).1, vec![2]);
        // A report in time keeps it.
        m.leave(10, g("239.1.1.1"), 2, now);
        m.join(10, g("239.1.1.1"), 2, now + Duration::from_secs(1));
        assert_eq!(members(&m, 10, "239.1.1.1", t).1, vec![2]);
        // The membership interval.
        let late = now + Duration::from_secs(262);
        assert_eq!(members(&m, 10, "239.1.1.1", late).0, Lookup::Unknown);
        m.sweep(late);
        assert!(m.is_empty());
    }

    #[test]
    fn memberships_are_bounded_per_port_and_in_all() {
        let m = Mdb::new(SnoopConfig {
            limits: MdbLimits {
                per_port: 3,
                total: 5,
            },
            ..SnoopConfig::default()
        });
        let now = Instant::now();
        let grp = |i: u8| IpAddr::V4([239, 0, 1, i].into());
        let got: Vec<_> = (0..5).map(|i| m.join(0, grp(i), 1, now)).collect();
        assert_eq!(got.iter().filter(|j| **j == Join::Refused).count(), 2);
        // A refresh is never refused.
        assert_eq!(m.join(0, grp(0), 1, now), Join::Member);
        assert_eq!(m.join(0, grp(0), 2, now), Join::Member);
        assert_eq!(m.join(0, grp(1), 2, now), Join::Member);
        assert_eq!(m.join(0, grp(2), 2, now), Join::Refused);
        assert_eq!(m.len(), 5);
        m.forget_port(1);
        assert_eq!(m.len(), 2);
        assert_eq!(m.join(0, grp(2), 2, now), Join::Member);
    }

    #[test]
    fn a_refused_group_floods_until_its_membership_would_have_lapsed() {
        let m = queried(SnoopConfig {
            limits: MdbLimits {
                per_port: 1,
                total: 8,
            },
            ..SnoopConfig::default()
        });
        let now = Instant::now();
        assert_eq!(m.join(0, g("239.1.1.1"), 1, now), Join::Member);
        assert_eq!(m.join(0, g("239.1.1.2"), 1, now), Join::Refused);
        // Port 2's member of the refused group is in the table; port 1's
        // is not, so the group floods rather than go to port 2 only.
        assert_eq!(m.join(0, g("239.1.1.2"), 2, now), Join::Member);
        assert_eq!(members(&m, 0, "239.1.1.2", now).0, Lookup::Refused);
        assert_eq!(members(&m, 0, "239.1.1.1", now).0, Lookup::Members);
        assert_eq!(members(&m, 0, "239.1.1.3", now).0, Lookup::Unknown);
        assert_eq!(members(&m, 10, "239.1.1.2", now).0, Lookup::Unknown);
        assert_eq!(m.refused_groups(now), 1);
        let late = now + Duration::from_secs(261);
        m.sweep(late);
        assert_eq!(m.refused_groups(late), 0);
    }

    #[test]
    fn past_the_refused_groups_kept_every_unknown_group_floods() {
        let m = queried(SnoopConfig {
            limits: MdbLimits {
                per_port: 0,
                total: 8,
            },
            ..SnoopConfig::default()
        });
        let now = Instant::now();
        for i in 0..=MAX_REFUSED_GROUPS {
            let grp = IpAddr::V4([239, 3, (i >> 8) as u8, i as u8].into());
            assert_eq!(m.join(0, grp, 1, now), Join::Refused);
        }
        assert_eq!(m.refused_groups(now), MAX_REFUSED_GROUPS);
        assert_eq!(members(&m, 0, "239.9.9.9", now).0, Lookup::Refused);
        let late = now + Duration::from_secs(261);
        m.sweep(late);
        assert_eq!(members(&m, 0, "239.9.9.9", late).0, Lookup::Unknown);
    }

    #[test]
    fn a_heard_querier_decides_leaves_and_silences_the_own() {
        let m = Mdb::new(SnoopConfig {
            querier: true,
            ..SnoopConfig::default()
        });
        let now = Instant::now();
        assert_eq!(m.queries_due([0, 10], now).len(), 4);
        assert!(m.queries_due([0, 10], now).is_empty(), "claimed");
        let startup = now + Duration::from_millis(31_250);
        assert_eq!(m.queries_due([0], startup).len(), 2);
        assert!(m
            .queries_due([0], startup + Duration::from_secs(124))
            .is_empty());
        m.join(0, g("239.1.1.1"), 1, now);
        m.query(0, 5, g("198.18.0.254"), None, Duration::from_secs(10), now);
        // A leave waits for the querier's group-specific query.
        m.leave(0, g("239.1.1.1"), 1, now);
        assert_eq!(
            members(&m, 0, "239.1.1.1", now + Duration::from_secs(20)).1,
            vec![1]
        );
        m.query(
            0,
            5,
            g("198.18.0.254"),
            Some(g("239.1.1.1")),
            Duration::from_secs(1),
            now,
        );
        assert_eq!(
            members(&m, 0, "239.1.1.1", now + Duration::from_secs(11)).0,
            Lookup::Unknown
        );
        let t = startup + Duration::from_secs(126);
        assert_eq!(m.queries_due([0], t), vec![(0, Family::Ipv6)]);
        let (_, routers, queriers) = m.rows(now);
        assert_eq!(routers.len(), 1);
        assert_eq!(queriers[0].addr, g("198.18.0.254"));
    }
}
