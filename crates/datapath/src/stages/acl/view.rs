//! What `hvnet acl` shows of a port's security: its rules with their
//! counts, and its tracked connections as `conntrack -L` lists them.

use super::conntrack::{self, ConnState, Secs};
use super::flow::{self, Family};
use super::rules::{Action, Direction, RuleSet};
use super::AclCounters;
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A rule as `hvnet acl` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct RuleView {
    /// Group and place (`web#2`).
    pub label: String,
    /// In or out.
    pub direction: Direction,
    /// Allow or deny.
    pub action: Action,
    /// Not tracked.
    pub stateless: bool,
    /// The rule in words.
    pub text: String,
    /// Connections it opened (stateful allow) or frames it matched
    /// (deny, stateless allow).
    pub hits: u64,
}

/// A port's security as `hvnet acl` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct PortAclView {
    /// Its groups, in order.
    pub groups: Vec<String>,
    /// Its rules, in the order they are matched.
    pub rules: Vec<RuleView>,
    /// What its stages did.
    pub counters: AclCounters,
    /// Connections tracked now.
    pub connections: usize,
    /// The most it tracks.
    pub max_connections: usize,
    /// Bytes its table takes, about.
    pub memory: usize,
}

/// A tracked connection as `hvnet acl --conntrack` lists it.
#[derive(Clone, Debug, Serialize)]
pub struct ConnView {
    /// `tcp`, `udp`, `icmp`, `icmpv6` or the number.
    pub protocol: &'static str,
    /// IP protocol number.
    pub proto: u8,
    /// `ipv4` or `ipv6`.
    pub family: &'static str,
    /// Seconds before it expires.
    pub timeout: u32,
    /// TCP's state; `UNREPLIED` or `REPLIED` otherwise.
    pub state: &'static str,
    /// Original direction: source address.
    pub src: String,
    /// Destination address.
    pub dst: String,
    /// Source port (ICMP: the identifier).
    pub sport: u16,
    /// Destination port (ICMP: the identifier).
    pub dport: u16,
    /// Replied (conntrack's `[ASSURED]` rather than `[UNREPLIED]`).
    pub replied: bool,
    /// The stage that let it in: `out` (the VM opened it) or `in`.
    pub opened: Direction,
    /// The rule that allowed it.
    pub rule: String,
    /// Frames the way it was opened.
    pub frames_orig: u64,
    /// Frames back.
    pub frames_reply: u64,
}

fn ip(f: Family, a: u128) -> IpAddr {
    match f {
        Family::V4 => IpAddr::V4(Ipv4Addr::from((a & 0xffff_ffff) as u32)),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(a)),
    }
}

impl ConnView {
    pub(super) fn of(c: &conntrack::Conn, now: Secs, rules: &RuleSet) -> ConnView {
        let t = &c.orig;
        let protocol = match t.proto {
            flow::proto::TCP => "tcp",
            flow::proto::UDP => "udp",
            flow::proto::ICMP => "icmp",
            flow::proto::ICMPV6 => "icmpv6",
            _ => "other",
        };
        let state = match c.state {
            ConnState::Tcp(s) => s.name(),
            ConnState::Datagram { replied: true } => "REPLIED",
            ConnState::Datagram { replied: false } => "UNREPLIED",
        };
        ConnView {
            protocol,
            proto: t.proto,
            family: match t.family {
                Family::V4 => "ipv4",
                Family::V6 => "ipv6",
            },
            timeout: c.expires.saturating_sub(now),
            state,
            src: ip(t.family, t.src).to_string(),
            dst: ip(t.family, t.dst).to_string(),
            sport: t.sport,
            dport: t.dport,
            replied: c.replied(),
            opened: c.stage,
            rule: rules
                .rules
                .get(usize::from(c.rule))
                .map_or_else(|| "(changed)".into(), |r| r.label.clone()),
            frames_orig: c.frames[0],
            frames_reply: c.frames[1],
        }
    }
}
