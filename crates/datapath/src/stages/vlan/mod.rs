//! A port's VLANs: access (one VLAN, frames untagged) or trunk (802.1Q
//! tags, a set of allowed VLANs and an optional native VLAN whose frames
//! go untagged), with Open vSwitch's semantics (`ovs-vswitchd.conf.db(5)`,
//! Port table, `vlan_mode` `trunk` and `native-untagged`). Pure: which
//! VLAN a frame from a port belongs to, whether a port carries a VLAN, and
//! which tag a frame to a port wears.
//!
//! The set of VLANs is a bitmap behind an `Arc` (cloned with the settings
//! each time a worker re-reads them, never per frame; a look-up is one
//! load), or nothing for "every VLAN".
//!
//! In settings JSON (`hvnet port PORT --json`) a set is the string an
//! operator writes, `"10,20,100-199"`, or `"1-4094"` for every VLAN; a
//! topology file writes `vlans = [10, 20, "100-199"]`.

#[cfg(test)]
mod trunk_tests;

use hvnet_port::OuterTag as Tag;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Lowest VLAN a tag carries (0 is "no VLAN", a priority tag).
pub const MIN_VID: u16 = 1;
/// Highest (4095 is reserved).
pub const MAX_VID: u16 = 4094;

/// How a port carries VLANs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VlanMode {
    /// One VLAN (the port's `vlan`), every frame untagged; a tagged frame
    /// from the port is dropped.
    #[default]
    Access,
    /// 802.1Q tags: a tagged frame's VLAN is its tag's; untagged frames
    /// are the native VLAN's, if the port has one.
    Trunk,
}

impl VlanMode {
    /// As settings and views spell it.
    pub fn name(self) -> &'static str {
        match self {
            VlanMode::Access => "access",
            VlanMode::Trunk => "trunk",
        }
    }
}

/// A set of VLANs, 1..4094: every one, or those of a bitmap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VlanSet(Option<Arc<[u64; 64]>>);

impl VlanSet {
    /// Every VLAN, 1..4094.
    pub const ALL: VlanSet = VlanSet(None);

    /// True if `vid` is in the set (never 0 or 4095).
    #[inline]
    pub fn contains(&self, vid: u16) -> bool {
        if !(MIN_VID..=MAX_VID).contains(&vid) {
            return false;
        }
        match &self.0 {
            None => true,
            Some(b) => b[usize::from(vid >> 6)] >> (vid & 63) & 1 == 1,
        }
    }

    /// True for the set of every VLAN.
    pub fn is_all(&self) -> bool {
        self.0.is_none()
    }

    /// The set of the VLANs of `ranges` (each `(low, high)`, inclusive,
    /// checked already); none at all is every VLAN.
    pub fn from_ranges(ranges: &[(u16, u16)]) -> VlanSet {
        let mut b = [0u64; 64];
        for &(lo, hi) in ranges {
            for v in lo..=hi {
                b[usize::from(v >> 6)] |= 1 << (v & 63);
            }
        }
        let all = (MIN_VID..=MAX_VID).all(|v| b[usize::from(v >> 6)] >> (v & 63) & 1 == 1);
        if ranges.is_empty() || all {
            VlanSet::ALL
        } else {
            VlanSet(Some(Arc::new(b)))
        }
    }

    /// Parses the items of a list (`10`, `"20"`, `"100-199"`, or several
    /// in one, `"10,20"`), each checked: an error names the item and what
    /// is wrong with it.
    pub fn parse_items<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<VlanSet, String> {
        let mut ranges = Vec::new();
        for item in items.into_iter().flat_map(|i| i.split(',')) {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let one = |s: &str| -> Result<u16, String> {
                let v: u32 = s
                    .trim()
                    .parse()
                    .map_err(|_| format!("vlans {item:?} is not a VLAN id or a range low-high"))?;
                if !(u32::from(MIN_VID)..=u32::from(MAX_VID)).contains(&v) {
                    return Err(format!("vlan {v} is outside {MIN_VID}..{MAX_VID}"));
                }
                Ok(v as u16)
            };
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (one(a)?, one(b)?),
                None => {
                    let v = one(item)?;
                    (v, v)
                }
            };
            if lo > hi {
                return Err(format!("vlans {item:?}: {lo} is above {hi}"));
            }
            ranges.push((lo, hi));
        }
        Ok(VlanSet::from_ranges(&ranges))
    }

    /// Parses what an operator writes: `"10,20,100-199"`.
    pub fn parse(s: &str) -> Result<VlanSet, String> {
        VlanSet::parse_items([s])
    }

    /// The set as ranges, lowest first.
    pub fn ranges(&self) -> Vec<(u16, u16)> {
        let mut out: Vec<(u16, u16)> = Vec::new();
        for v in MIN_VID..=MAX_VID {
            if self.contains(v) {
                match out.last_mut() {
                    Some((_, hi)) if *hi + 1 == v => *hi = v,
                    _ => out.push((v, v)),
                }
            }
        }
        out
    }
}

impl std::fmt::Display for VlanSet {
    /// `10,20,100-199`, or `1-4094` for every VLAN.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (lo, hi) in self.ranges() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl Serialize for VlanSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for VlanSet {
    /// A string (`"10,20,100-199"`), one number, or a list of numbers and
    /// strings (`[10, 20, "100-199"]`, as a topology file writes it).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<VlanSet, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Item {
            Num(i64),
            Word(String),
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            One(Item),
            List(Vec<Item>),
        }
        let items = match Repr::deserialize(d) {
            Ok(Repr::One(i)) => vec![i],
            Ok(Repr::List(l)) => l,
            Err(_) => {
                return Err(serde::de::Error::custom(
                    "vlans takes a list of VLAN ids and \"low-high\" ranges",
                ))
            }
        };
        let words: Vec<String> = items
            .into_iter()
            .map(|i| match i {
                Item::Num(n) => n.to_string(),
                Item::Word(w) => w,
            })
            .collect();
        VlanSet::parse_items(words.iter().map(String::as_str)).map_err(serde::de::Error::custom)
    }
}

/// A port's VLAN configuration as the datapath applies it: its mode, its
/// access VLAN (the port's `vlan`), its trunk's VLANs and native VLAN.
#[derive(Clone, Copy, Debug)]
pub struct PortVlans<'a> {
    /// Access or trunk.
    pub mode: VlanMode,
    /// The access VLAN (0: the untagged domain).
    pub access: u16,
    /// A trunk's allowed VLANs.
    pub vlans: &'a VlanSet,
    /// A trunk's native VLAN.
    pub native: Option<u16>,
}

impl PortVlans<'_> {
    /// True if the port carries VLAN `vlan` (an access port its own; a
    /// trunk its allowed VLANs and its native VLAN).
    #[inline]
    pub fn carries(&self, vlan: u16) -> bool {
        match self.mode {
            VlanMode::Access => vlan == self.access,
            VlanMode::Trunk => self.native == Some(vlan) || self.vlans.contains(vlan),
        }
    }

    /// True if the two ports carry a VLAN in common (share a broadcast
    /// domain).
    pub fn meets(&self, other: &PortVlans<'_>) -> bool {
        (0..=MAX_VID).any(|id| self.carries(id) && other.carries(id))
    }

    /// The VLAN a frame from the port belongs to, or `None` when the port
    /// does not take it (a tagged frame at an access port; at a trunk, a
    /// VLAN it does not allow, or an untagged frame without a native
    /// VLAN). A priority tag (VID 0) counts as untagged.
    #[inline]
    pub fn ingress(&self, tag: Tag) -> Option<u16> {
        match (self.mode, tag) {
            (VlanMode::Access, Tag::Untagged) => Some(self.access),
            (VlanMode::Access, _) | (VlanMode::Trunk, Tag::Other) => None,
            (VlanMode::Trunk, Tag::Untagged | Tag::Dot1q(0)) => self.native,
            (VlanMode::Trunk, Tag::Dot1q(v)) => self.carries(v).then_some(v),
        }
    }

    /// The tag a frame of VLAN `vlan` wears out of the port (which
    /// carries it): none at an access port or for a trunk's native VLAN,
    /// else the VLAN's.
    #[inline]
    pub fn egress_tag(&self, vlan: u16) -> Option<u16> {
        match self.mode {
            VlanMode::Access => None,
            VlanMode::Trunk if self.native == Some(vlan) => None,
            VlanMode::Trunk => Some(vlan),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_parse_print_and_refuse_with_the_reason() {
        let s = VlanSet::parse("10,20,100-199").unwrap();
        assert!(s.contains(10) && s.contains(150) && s.contains(199));
        assert!(!s.contains(11) && !s.contains(200) && !s.contains(0));
        assert_eq!(s.to_string(), "10,20,100-199");
        assert_eq!(VlanSet::parse("").unwrap(), VlanSet::ALL);
        assert_eq!(VlanSet::parse("1-4094").unwrap(), VlanSet::ALL);
        assert_eq!(VlanSet::ALL.to_string(), "1-4094");
        assert!(!VlanSet::ALL.contains(0) && !VlanSet::ALL.contains(4095));
        assert_eq!(
            VlanSet::parse("10,5000").unwrap_err(),
            "vlan 5000 is outside 1..4094"
        );
        assert_eq!(
            VlanSet::parse("0").unwrap_err(),
            "vlan 0 is outside 1..4094"
        );
        assert!(VlanSet::parse("20-10")
            .unwrap_err()
            .contains("20 is above 10"));
        assert!(VlanSet::parse("x").unwrap_err().contains("not a VLAN id"));
        let j: VlanSet = serde_json::from_str(r#"[10, 20, "100-199"]"#).unwrap();
        assert_eq!(j, s);
        assert_eq!(serde_json::to_value(&s).unwrap(), "10,20,100-199");
        let one: VlanSet = serde_json::from_str("7").unwrap();
        assert_eq!(one.ranges(), [(7, 7)]);
    }

    #[test]
    fn ingress_classification_per_mode() {
        let set = VlanSet::parse("10,20").unwrap();
        let access = PortVlans {
            mode: VlanMode::Access,
            access: 10,
            vlans: &VlanSet::ALL,
            native: None,
        };
        assert_eq!(access.ingress(Tag::Untagged), Some(10));
        assert_eq!(access.ingress(Tag::Dot1q(10)), None);
        assert_eq!(access.ingress(Tag::Dot1q(0)), None);
        let trunk = PortVlans {
            mode: VlanMode::Trunk,
            access: 0,
            vlans: &set,
            native: None,
        };
        assert_eq!(trunk.ingress(Tag::Dot1q(10)), Some(10));
        assert_eq!(trunk.ingress(Tag::Dot1q(30)), None);
        assert_eq!(trunk.ingress(Tag::Untagged), None);
        assert_eq!(trunk.ingress(Tag::Other), None);
        let native = PortVlans {
            native: Some(5),
            ..trunk
        };
        assert_eq!(native.ingress(Tag::Untagged), Some(5));
        assert_eq!(native.ingress(Tag::Dot1q(0)), Some(5));
        // The native VLAN is carried tagged too.
        assert_eq!(native.ingress(Tag::Dot1q(5)), Some(5));
        assert!(native.carries(5) && native.carries(20) && !native.carries(0));
        assert!(!trunk.carries(5));
    }

    #[test]
    fn egress_tags_per_mode() {
        let all = VlanSet::ALL;
        let access = PortVlans {
            mode: VlanMode::Access,
            access: 10,
            vlans: &all,
            native: None,
        };
        assert_eq!(access.egress_tag(10), None);
        let trunk = PortVlans {
            mode: VlanMode::Trunk,
            access: 0,
            vlans: &all,
            native: Some(5),
        };
        assert_eq!(trunk.egress_tag(10), Some(10));
        assert_eq!(trunk.egress_tag(5), None);
    }
}
