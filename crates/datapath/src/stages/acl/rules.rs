//! A port's rules, compiled: ordered, first match wins, and no match
//! denies (a port with security groups lets through only what a rule
//! allows, as OpenStack's and OVN's). The control plane checks and
//! compiles them (a remote group becomes its members' addresses); here
//! they are only matched.

use super::flow::{Family, Flow};
use serde::Serialize;

/// Which way a rule looks, from the VM's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Frames to the VM (OpenStack's ingress).
    In,
    /// Frames from the VM (egress).
    Out,
}

impl Direction {
    /// As views and files write it.
    pub fn name(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }
}

/// What a matching rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Let it through (and, for a stateful rule, its connection's
    /// replies).
    Allow,
    /// Drop it.
    Deny,
}

/// An address prefix, IPv4 or IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// Its family.
    pub family: Family,
    /// The address (IPv4 in the low 32 bits).
    pub addr: u128,
    /// Prefix length (0..=32 or 0..=128).
    pub len: u8,
}

impl Prefix {
    /// Whether `a` of family `f` is in the prefix.
    #[inline]
    pub fn contains(&self, f: Family, a: u128) -> bool {
        if f != self.family {
            return false;
        }
        let bits: u32 = match f {
            Family::V4 => 32,
            Family::V6 => 128,
        };
        let host = bits.saturating_sub(u32::from(self.len));
        if host >= bits {
            return true;
        }
        (a ^ self.addr) >> host == 0
    }
}

/// One rule, compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Its name in views: the group and its place (`web#2`).
    pub label: String,
    /// In or out.
    pub direction: Direction,
    /// Allow or deny.
    pub action: Action,
    /// Not tracked (OVN's `allow-stateless`): frames matched one by one,
    /// no connection made, replies need rules of their own.
    pub stateless: bool,
    /// Only this family (`None`: both).
    pub family: Option<Family>,
    /// Only this IP protocol (`None`: any).
    pub protocol: Option<u8>,
    /// The other end's address in one of these (`None`: any address;
    /// empty: a remote group with no member addresses, which matches
    /// nothing).
    pub remote: Option<Vec<Prefix>>,
    /// Destination port range, inclusive (TCP, UDP).
    pub ports: Option<(u16, u16)>,
    /// ICMP type (ICMP, ICMPv6).
    pub icmp_type: Option<u8>,
    /// ICMP code.
    pub icmp_code: Option<u8>,
    /// How the rule was written, for views (`tcp 22 from 198.18.0.0/24`).
    pub text: String,
}

impl Rule {
    /// A stateful rule labelled `label` matching every frame at stage
    /// `direction` (of any family, protocol, address and port), narrowed
    /// by setting its fields.
    pub fn any(label: &str, direction: Direction, action: Action) -> Rule {
        Rule {
            label: label.into(),
            direction,
            action,
            stateless: false,
            family: None,
            protocol: None,
            remote: None,
            ports: None,
            icmp_type: None,
            icmp_code: None,
            text: String::new(),
        }
    }

    /// Whether the rule matches `f` seen at stage `dir` (the remote end
    /// is the source of a frame in, the destination of one out).
    #[inline]
    pub fn matches(&self, dir: Direction, f: &Flow) -> bool {
        if self.direction != dir {
            return false;
        }
        if self.family.is_some_and(|x| x != f.family) {
            return false;
        }
        if self.protocol.is_some_and(|p| p != f.proto) {
            return false;
        }
        if let Some((lo, hi)) = self.ports {
            match f.dport() {
                Some(p) if (lo..=hi).contains(&p) => {}
                _ => return false,
            }
        }
        if self.icmp_type.is_some() || self.icmp_code.is_some() {
            let Some((t, c)) = f.icmp() else {
                return false;
            };
            if self.icmp_type.is_some_and(|x| x != t) || self.icmp_code.is_some_and(|x| x != c) {
                return false;
            }
        }
        if let Some(remote) = &self.remote {
            let a = match dir {
                Direction::In => f.src,
                Direction::Out => f.dst,
            };
            if !remote.iter().any(|p| p.contains(f.family, a)) {
                return false;
            }
        }
        true
    }
}

/// A port's rules in order, as installed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSet {
    /// The rules, first match wins.
    pub rules: Vec<Rule>,
    /// The port's security groups, for views.
    pub groups: Vec<String>,
}

impl RuleSet {
    /// The first rule matching `f` at stage `dir`, by index.
    #[inline]
    pub fn first_match(&self, dir: Direction, f: &Flow) -> Option<usize> {
        self.rules.iter().position(|r| r.matches(dir, f))
    }
}
