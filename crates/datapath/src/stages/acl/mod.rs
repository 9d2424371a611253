//! Security groups: per port, ordered rules for frames in and out, and a
//! connection table that lets the replies of allowed connections back
//! (stateful, as OpenStack's security groups on OVN, NSX's distributed
//! firewall and a Linux host's `nftables` with `ct state
//! established,related accept`).
//!
//! A port with groups has two stages: `out` where its guest's frames
//! enter the switch (after the source-MAC check), `in` at each
//! destination that has groups. Each stage first looks the frame up in
//! the port's own connection table (its zone, as OVN gives each logical
//! port one): a frame of a tracked connection, either way, passes (its
//! TCP state moved as Linux's conntrack moves it, [`tcp`]), and so does
//! an ICMP error that quotes a packet of one (`related`). Any other frame
//! is matched against the port's rules, first match wins, no match
//! denies; a stateful allow adds its connection to the table, a
//! stateless one (OVN's `allow-stateless`) lets the frame alone through.
//! Frames that are not IP pass (ARP; the guard against lies about
//! addresses is another stage's), and so do ICMPv6 neighbour discovery
//! and MLD, without which IPv6 does not work (OpenStack allows them
//! implicitly too). Ports without groups have no stage at all: today's
//! behaviour, and no cost.
//!
//! Rules changed at run time ([`Acl::install`]) apply at once to what is
//! not tracked (new connections); tracked connections go on until
//! [`PortAcl::reapply`] checks each against the new rules (`hvnet acl
//! reapply`). Related flows of application protocols (FTP's data
//! connections, SIP) are not tracked: they need rules of their own.
//!
//! Written here rather than taken from a crate: no crate tracks
//! connections over frames a switch has already parsed, and the hot path
//! wants one lock and one lookup per frame and stage.

pub(crate) mod stage;

pub mod conntrack;
pub mod flow;
pub mod rules;
pub mod tcp;
#[cfg(test)]
mod tests;
mod view;
pub mod window;

use crate::counters::DropReason;
use conntrack::{Refused, Secs, Seen, Table, Total};
use flow::{Family, Flow, Tuple, L4};
pub use rules::{Action, Direction, Prefix, Rule, RuleSet};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;
pub use view::{ConnView, PortAclView, RuleView};

/// Connections a port's table holds by default.
pub const DEFAULT_MAX_PER_PORT: usize = 65_536;
/// Connections every port's tables hold together by default (Linux's
/// `nf_conntrack_max` on a host of a few GiB).
pub const DEFAULT_MAX: usize = 262_144;

/// The connection tables' bounds, and how closely TCP is followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Per port.
    pub max_per_port: usize,
    /// Over every port.
    pub max: usize,
    /// TCP segments are not judged against their connection's windows
    /// (Linux's `nf_conntrack_tcp_be_liberal = 1`); default off: they are
    /// ([`window`]).
    pub tcp_be_liberal: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_per_port: DEFAULT_MAX_PER_PORT,
            max: DEFAULT_MAX,
            tcp_be_liberal: false,
        }
    }
}

/// What the control plane installs: each port's rules (by port name;
/// ports not named have no groups) and the bounds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AclConfig {
    /// Rules by port.
    pub ports: BTreeMap<String, RuleSet>,
    /// The tables' bounds.
    pub limits: Limits,
}

/// Why a stage dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    /// A deny rule matched, or no rule did.
    Rule,
    /// A TCP segment its connection's state does not take (or one that
    /// cannot open a connection), an ICMP answer to no query.
    Invalid,
    /// The connection table is full.
    Full,
}

impl Denied {
    /// The drop reason at stage `stage`: `acl_out*` where the guest's
    /// frames enter the switch, `acl_in*` at the destination.
    pub fn reason(self, stage: Direction) -> DropReason {
        match (stage, self) {
            (Direction::Out, Denied::Rule) => DropReason::AclOut,
            (Direction::Out, Denied::Invalid) => DropReason::AclOutInvalid,
            (Direction::Out, Denied::Full) => DropReason::ConntrackFullOut,
            (Direction::In, Denied::Rule) => DropReason::AclIn,
            (Direction::In, Denied::Invalid) => DropReason::AclInInvalid,
            (Direction::In, Denied::Full) => DropReason::ConntrackFullIn,
        }
    }
}

/// What a port's stages did, both ways.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AclCounters {
    /// Frames of tracked connections.
    pub established: u64,
    /// ICMP errors about tracked connections.
    pub related: u64,
    /// Connections opened by a stateful allow.
    pub new: u64,
    /// Frames let through by a stateless allow.
    pub stateless: u64,
    /// Frames not IP, or ICMPv6 neighbour discovery and MLD: passed
    /// without rules.
    pub untracked: u64,
    /// Frames a deny rule dropped.
    pub denied_rule: u64,
    /// Frames no rule matched (dropped).
    pub denied_default: u64,
    /// Frames dropped as invalid.
    pub invalid: u64,
    /// Of those, TCP segments outside their connection's windows.
    pub out_of_window: u64,
    /// Connections refused because the table was full.
    pub full: u64,
}

struct Inner {
    rules: Arc<RuleSet>,
    hits: Vec<u64>,
    table: Table,
    counters: AclCounters,
    /// TCP segments judged against their windows (not `tcp_be_liberal`).
    windows: bool,
}

/// One port's security: its rules, their hit counts, its connection
/// table, under one lock (taken once per frame and stage).
pub struct PortAcl {
    inner: Mutex<Inner>,
    epoch: Instant,
}

/// ICMPv6 messages IPv6 needs to work at all: MLD (130-132, 143), router
/// solicitation and advertisement, neighbour solicitation and
/// advertisement (133-136).
fn implicit(f: &Flow) -> bool {
    f.family == Family::V6
        && matches!(
            f.l4,
            L4::IcmpOther {
                ty: 130..=136 | 143,
                ..
            }
        )
}

/// Whether an ICMP query type is a request (one that opens a connection).
fn icmp_request(family: Family, ty: u8) -> bool {
    match family {
        Family::V4 => matches!(ty, 8 | 13 | 15 | 17),
        Family::V6 => ty == 128,
    }
}

impl PortAcl {
    fn new(rules: RuleSet, limits: Limits, total: Arc<Total>, epoch: Instant) -> PortAcl {
        PortAcl {
            inner: Mutex::new(Inner {
                hits: vec![0; rules.rules.len()],
                rules: Arc::new(rules),
                table: Table::new(limits.max_per_port, total),
                counters: AclCounters::default(),
                windows: !limits.tcp_be_liberal,
            }),
            epoch,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it leaves consistent data (counters and
        // a table whose every step is complete): go on with it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Seconds since the ACL's epoch at `now`.
    pub fn secs(&self, now: Instant) -> Secs {
        now.saturating_duration_since(self.epoch).as_secs() as Secs
    }

    /// The stage `stage` for a frame (its parsed layers `layers`) at
    /// `now`.
    #[inline]
    pub fn check(
        &self,
        stage: Direction,
        frame: &[u8],
        layers: &hvnet_wire::Layers,
        now: Instant,
    ) -> Result<(), Denied> {
        match Flow::of(frame, layers) {
            Some(f) => self.check_flow(stage, &f, self.secs(now)),
            None => {
                self.lock().counters.untracked += 1;
                Ok(())
            }
        }
    }

    /// The stage for an IP packet's flow at `now` (seconds).
    pub fn check_flow(&self, stage: Direction, f: &Flow, now: Secs) -> Result<(), Denied> {
        let mut g = self.lock();
        let inner = &mut *g;
        if implicit(f) {
            inner.counters.untracked += 1;
            return Ok(());
        }
        let (flags, seg) = match f.l4 {
            L4::Tcp { flags, seg, .. } => (flags, seg),
            _ => (0, window::Segment::default()),
        };
        let tuple = f.tuple();
        match (&tuple, f.l4) {
            (Some(t), _) => match inner.table.see(t, flags, &seg, inner.windows, now) {
                Seen::Known => {
                    inner.counters.established += 1;
                    return Ok(());
                }
                Seen::Invalid => {
                    inner.counters.invalid += 1;
                    return Err(Denied::Invalid);
                }
                Seen::OutOfWindow => {
                    inner.counters.invalid += 1;
                    inner.counters.out_of_window += 1;
                    return Err(Denied::Invalid);
                }
                Seen::Unknown => {}
            },
            (
                None,
                L4::IcmpError {
                    inner: Some(quoted),
                    ..
                },
            ) if inner.table.holds(&quoted, now) => {
                inner.counters.related += 1;
                return Ok(());
            }
            _ => {}
        }
        let Some(i) = inner.rules.first_match(stage, f) else {
            inner.counters.denied_default += 1;
            return Err(Denied::Rule);
        };
        inner.hits[i] += 1;
        let rule = &inner.rules.rules[i];
        if rule.action == Action::Deny {
            inner.counters.denied_rule += 1;
            return Err(Denied::Rule);
        }
        let Some(t) = tuple.filter(|_| !rule.stateless) else {
            inner.counters.stateless += 1;
            return Ok(());
        };
        if let L4::IcmpQuery { ty, .. } = f.l4 {
            if !icmp_request(f.family, ty) {
                inner.counters.invalid += 1;
                return Err(Denied::Invalid);
            }
        }
        let rule_index = u16::try_from(i).unwrap_or(u16::MAX);
        match inner.table.open(&t, flags, &seg, stage, rule_index, now) {
            Ok(()) => {
                inner.counters.new += 1;
                Ok(())
            }
            Err(Refused::Full) => {
                inner.counters.full += 1;
                Err(Denied::Full)
            }
            Err(Refused::Invalid) => {
                inner.counters.invalid += 1;
                Err(Denied::Invalid)
            }
        }
    }

    /// What [`PortAcl::check`] would decide for a frame, and why (the
    /// connection it belongs to, the rule that matched or none), without
    /// counting it or opening a connection: a synthetic frame's trace.
    pub fn judge(
        &self,
        stage: Direction,
        frame: &[u8],
        layers: &hvnet_wire::Layers,
        now: Instant,
    ) -> (Result<(), Denied>, String) {
        let Some(f) = Flow::of(frame, layers) else {
            return (Ok(()), "not IP: not tracked".into());
        };
        if implicit(&f) {
            return (Ok(()), "neighbour discovery: always allowed".into());
        }
        let now = self.secs(now);
        let g = self.lock();
        if let Some(t) = f.tuple() {
            if g.table.holds(&t, now) {
                return (Ok(()), "a tracked connection's frame: allowed".into());
            }
        }
        match g.rules.first_match(stage, &f) {
            None => (
                Err(Denied::Rule),
                "no rule matches: denied by default".into(),
            ),
            Some(i) => {
                let r = &g.rules.rules[i];
                let verdict = match r.action {
                    Action::Deny => Err(Denied::Rule),
                    Action::Allow => Ok(()),
                };
                let word = if verdict.is_ok() { "allows" } else { "denies" };
                (verdict, format!("rule {} {word} it", r.label))
            }
        }
    }

    fn set_rules(&self, rules: RuleSet, limits: Limits) {
        let mut g = self.lock();
        if *g.rules != rules {
            g.hits = vec![0; rules.rules.len()];
            g.rules = Arc::new(rules);
        }
        g.table.set_max(limits.max_per_port);
        g.windows = !limits.tcp_be_liberal;
    }

    /// Checks every tracked connection against the rules now (as if its
    /// first frame came again) and removes those they no longer allow:
    /// how many went.
    pub fn reapply(&self) -> usize {
        let mut g = self.lock();
        let rules = Arc::clone(&g.rules);
        g.table.retain(|c| {
            let f = first_frame(&c.orig);
            rules.first_match(c.stage, &f).is_some_and(|i| {
                let r = &rules.rules[i];
                r.action == Action::Allow && !r.stateless
            })
        })
    }

    /// Removes every tracked connection: how many went.
    pub fn flush(&self) -> usize {
        self.lock().table.retain(|_| false)
    }

    /// The port's rules with their hit counts, its counters and its
    /// table's size.
    pub fn view(&self, now: Instant) -> PortAclView {
        let now = self.secs(now);
        let mut g = self.lock();
        g.table.expire_all(now);
        PortAclView {
            groups: g.rules.groups.clone(),
            rules: g
                .rules
                .rules
                .iter()
                .zip(&g.hits)
                .map(|(r, &hits)| RuleView {
                    label: r.label.clone(),
                    direction: r.direction,
                    action: r.action,
                    stateless: r.stateless,
                    text: r.text.clone(),
                    hits,
                })
                .collect(),
            counters: g.counters,
            connections: g.table.len(),
            max_connections: g.table.max(),
            memory: g.table.memory(),
        }
    }

    /// The tracked connections, as `conntrack -L` lists them.
    pub fn connections(&self, now: Instant) -> Vec<ConnView> {
        let now = self.secs(now);
        let mut g = self.lock();
        g.table.expire_all(now);
        let rules = Arc::clone(&g.rules);
        let mut v: Vec<ConnView> = g
            .table
            .conns()
            .map(|c| ConnView::of(c, now, &rules))
            .collect();
        v.sort_by(|a, b| (a.protocol, &a.src, a.sport).cmp(&(b.protocol, &b.src, b.sport)));
        v
    }
}

/// A connection's first frame again, from its tuple (for
/// [`PortAcl::reapply`]).
fn first_frame(t: &Tuple) -> Flow {
    let l4 = match t.proto {
        flow::proto::TCP => L4::Tcp {
            sport: t.sport,
            dport: t.dport,
            flags: 0x02,
            seg: window::Segment::default(),
        },
        flow::proto::UDP => L4::Udp {
            sport: t.sport,
            dport: t.dport,
        },
        p if (p == flow::proto::ICMP && t.family == Family::V4)
            || (p == flow::proto::ICMPV6 && t.family == Family::V6) =>
        {
            L4::IcmpQuery {
                ty: if t.family == Family::V4 { 8 } else { 128 },
                code: 0,
                id: t.sport,
            }
        }
        _ => L4::Other,
    };
    Flow {
        family: t.family,
        proto: t.proto,
        src: t.src,
        dst: t.dst,
        l4,
    }
}

/// Every port's security: what the control plane installed, by port
/// name, and the switch-wide bound on connections.
pub struct Acl {
    ports: RwLock<BTreeMap<String, Arc<PortAcl>>>,
    total: Arc<Total>,
    limits: Mutex<Limits>,
    epoch: Instant,
}

impl Default for Acl {
    fn default() -> Self {
        Acl::new()
    }
}

impl Acl {
    /// No port has groups.
    pub fn new() -> Acl {
        let limits = Limits::default();
        Acl {
            ports: RwLock::new(BTreeMap::new()),
            total: Total::new(limits.max),
            limits: Mutex::new(limits),
            epoch: Instant::now(),
        }
    }

    /// Installs `cfg` whole: ports it names get their rules (a port that
    /// had groups keeps its connection table), the others lose theirs.
    /// Nothing is checked here: the control plane refused what cannot
    /// apply before calling.
    pub fn install(&self, cfg: AclConfig) {
        let mut ports = self.ports.write().unwrap_or_else(|e| e.into_inner());
        *self.limits.lock().unwrap_or_else(|e| e.into_inner()) = cfg.limits;
        self.total
            .max
            .store(cfg.limits.max, std::sync::atomic::Ordering::Relaxed);
        ports.retain(|name, _| cfg.ports.contains_key(name));
        for (name, rules) in cfg.ports {
            match ports.get(&name) {
                Some(p) => p.set_rules(rules, cfg.limits),
                None => {
                    let p = PortAcl::new(rules, cfg.limits, Arc::clone(&self.total), self.epoch);
                    ports.insert(name, Arc::new(p));
                }
            }
        }
    }

    /// Port `name`'s security, if it has groups.
    pub fn port(&self, name: &str) -> Option<Arc<PortAcl>> {
        self.ports
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Every port with groups, by name.
    pub fn ports(&self) -> Vec<(String, Arc<PortAcl>)> {
        self.ports
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(n, p)| (n.clone(), Arc::clone(p)))
            .collect()
    }

    /// The bounds.
    pub fn limits(&self) -> Limits {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections tracked over every port.
    pub fn total(&self) -> usize {
        self.total.n.load(std::sync::atomic::Ordering::Relaxed)
    }
}
