//! Which member a frame leaves by: vSphere's and Open vSwitch's teaming
//! policies. The switch-independent ones place each VM (its address: a
//! port's frames carry its MAC unless forged transmits are allowed) on one
//! member, so the physical switch learns it in one place; `ip-hash` and
//! `lacp` spread flows over the members of one port channel, which the
//! switch treats as one port.

use crate::outgoing::OutFrame;
use crate::packet::Meta;
use hvnet_wire::{MacAddr, NetKind};
use std::collections::HashMap;
use std::time::Instant;

/// A team's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Teaming {
    /// Each VM port on one member, the ports spread evenly as they appear
    /// (vSphere's "route based on originating virtual port").
    PortId,
    /// A VM's member by a hash of its MAC ("route based on source MAC hash").
    SourceMac,
    /// Per flow, by a hash of its IP addresses: the switch needs a static
    /// port channel ("route based on IP hash").
    IpHash,
    /// As `port-id`, and a VM moved off a member busier than 75 % over
    /// 30 s ("route based on physical NIC load").
    LoadBased,
    /// One member at a time, the first usable in the team's order.
    ActiveBackup,
    /// Per flow over the members LACP has in the aggregate.
    Lacp,
}

impl Teaming {
    /// The word a topology file and the views use.
    pub fn word(self) -> &'static str {
        match self {
            Teaming::PortId => "port-id",
            Teaming::SourceMac => "source-mac",
            Teaming::IpHash => "ip-hash",
            Teaming::LoadBased => "load-based",
            Teaming::ActiveBackup => "active-backup",
            Teaming::Lacp => "lacp",
        }
    }

    /// The policy a word names.
    pub fn from_word(w: &str) -> Option<Teaming> {
        [
            Teaming::PortId,
            Teaming::SourceMac,
            Teaming::IpHash,
            Teaming::LoadBased,
            Teaming::ActiveBackup,
            Teaming::Lacp,
        ]
        .into_iter()
        .find(|t| t.word() == w)
    }

    /// True where the switch sees each member as a port of its own: a VM
    /// is placed on one member, moves are announced, and frames coming back
    /// on another member are dropped.
    pub fn switch_independent(self) -> bool {
        !matches!(self, Teaming::IpHash | Teaming::Lacp)
    }
}

/// A VM's address as the team knows it from what it sent.
#[derive(Clone, Debug)]
pub struct Placement {
    /// The member it was given (`port-id`, `load-based`) or hashes to.
    pub home: usize,
    /// The member it leaves by now (`home` unless that is not usable).
    pub now: usize,
    /// Frames and bytes sent, and bytes at the last load look.
    pub frames: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// `bytes` at the last load look (`load-based`).
    pub bytes_at_look: u64,
    /// Its outer 802.1Q tag (a trunk uplink's VLAN), for announcements.
    pub tag: Option<u16>,
    /// Its last IPv4 and IPv6 source addresses, for announcements.
    pub ipv4: Option<[u8; 4]>,
    /// Its last IPv6 source address (not link-local if it has another).
    pub ipv6: Option<[u8; 16]>,
    /// When it last sent.
    pub seen: Instant,
}

/// The MAC a frame leaves from, and for a parsed packet its outer tag and
/// source addresses.
pub struct Source {
    /// The source MAC.
    pub mac: MacAddr,
    /// The outer tag's VID.
    pub tag: Option<u16>,
    /// The IPv4 source.
    pub ipv4: Option<[u8; 4]>,
    /// The IPv6 source.
    pub ipv6: Option<[u8; 16]>,
}

/// True for an IGMP or MLD message to a group address (a VM's membership
/// report or leave): a switch-independent team sends these by its active
/// member, as Linux's bonding sends IGMP by its current active slave. A
/// snooping physical switch then delivers the group to the member the
/// team takes multicast from, not to the VM's own member, where the team
/// would drop it. Read from the headers parsed where the frame entered.
pub fn is_membership(f: &OutFrame<'_>) -> bool {
    let OutFrame::Packet(p) = f else {
        return false;
    };
    let frame = p.frame();
    let Some(n) = p.meta.layers.net().filter(|n| !n.fragment) else {
        return false;
    };
    if frame.first().is_none_or(|b| b & 1 == 0) {
        return false;
    }
    // Queries (IGMP 0x11, MLD 130) are the querier's; reports and leaves
    // (IGMP 0x12, 0x16, 0x17, 0x22; MLD 131, 132, 143) a listener's.
    let kind = frame.get(n.offset + n.header_len);
    match n.kind {
        NetKind::Ipv4 => {
            n.protocol == hvnet_wire::igmp::PROTOCOL
                && matches!(kind, Some(0x12 | 0x16 | 0x17 | 0x22))
        }
        NetKind::Ipv6 => {
            n.protocol == hvnet_wire::nd::ICMPV6 && matches!(kind, Some(131 | 132 | 143))
        }
    }
}

/// Reads a frame's source from its first bytes and, for a packet, the
/// metadata parsed where it entered (nothing is parsed again).
pub fn source(f: &OutFrame<'_>) -> Option<Source> {
    let (head, meta): (&[u8], Option<&Meta>) = match f {
        OutFrame::Packet(p) => (p.frame(), Some(&p.meta)),
        OutFrame::Coalesced(c) => (c.header(), None),
        OutFrame::Pieces { pieces, .. } => (pieces.first()?, None),
    };
    let mac = MacAddr(head.get(6..12)?.try_into().ok()?);
    let mut s = Source {
        mac,
        tag: None,
        ipv4: None,
        ipv6: None,
    };
    if let Some(m) = meta {
        s.tag = m.layers.outer_vlan();
        if let Some(n) = m.layers.net() {
            match n.kind {
                NetKind::Ipv4 => {
                    s.ipv4 = head.get(n.offset + 12..n.offset + 16)?.try_into().ok();
                }
                NetKind::Ipv6 => {
                    s.ipv6 = head.get(n.offset + 8..n.offset + 24)?.try_into().ok();
                }
            }
        }
    }
    Some(s)
}

/// A flow's hash for `ip-hash` (its IP addresses) or `lacp` (its IP
/// addresses and ports, as Open vSwitch's `balance-tcp`). A frame without
/// parsed metadata (a segment made on the way out, a coalesced frame) is
/// read from its headers, so a flow's segments hash as its whole packets
/// do; frames that are not IP hash by their MAC addresses.
pub fn flow_hash(f: &OutFrame<'_>, ports: bool) -> u32 {
    let head: &[u8] = match f {
        OutFrame::Packet(p) => p.frame(),
        OutFrame::Coalesced(c) => c.header(),
        OutFrame::Pieces { pieces, .. } => pieces.first().map_or(&[][..], |s| &s[..]),
    };
    let meta = match f {
        OutFrame::Packet(p) => Some(&p.meta),
        _ => None,
    };
    let mut h = Fnv::default();
    match meta.and_then(|m| m.layers.net().map(|n| (m, n))) {
        Some((m, n)) => {
            let (a, len) = match n.kind {
                NetKind::Ipv4 => (n.offset + 12, 8),
                NetKind::Ipv6 => (n.offset + 8, 32),
            };
            h.add(head.get(a..a + len).unwrap_or(&[]));
            if let Some(t) = m.layers.transport().filter(|_| ports && !n.fragment) {
                h.add(&[n.protocol]);
                h.add(head.get(t.offset..t.offset + 4).unwrap_or(&[]));
            }
        }
        None => match read_flow(head) {
            Some((addrs, l4)) => {
                h.add(addrs);
                if let Some((protocol, p)) = l4.filter(|_| ports) {
                    h.add(&[protocol]);
                    h.add(p);
                }
            }
            None => h.add(head.get(0..12).unwrap_or(&[])),
        },
    }
    h.finish()
}

/// A flow as hashed: the IP addresses and, where hashed, the transport
/// protocol and its ports (as bytes of the frame).
type FlowBytes<'a> = (&'a [u8], Option<(u8, &'a [u8])>);

/// A frame's IP addresses and, for an unfragmented TCP or UDP packet
/// (what segmentation makes), its protocol and ports, read from its
/// headers (behind up to two VLAN tags); None if it is not IP. Only the
/// first piece of a segment is at hand here (its headers, without the
/// payload the IP length counts), which the wire crate's parser would
/// refuse as truncated.
fn read_flow(head: &[u8]) -> Option<FlowBytes<'_>> {
    let mut at = 12;
    let mut ethertype = u16::from_be_bytes(head.get(at..at + 2)?.try_into().ok()?);
    for _ in 0..2 {
        if ethertype != 0x8100 && ethertype != 0x88a8 {
            break;
        }
        at += 4;
        ethertype = u16::from_be_bytes(head.get(at..at + 2)?.try_into().ok()?);
    }
    let net = at + 2;
    let (addrs, protocol, transport, fragment) = match ethertype {
        0x0800 => {
            let ihl = usize::from(head.get(net)? & 0x0f) * 4;
            let frag = u16::from_be_bytes(head.get(net + 6..net + 8)?.try_into().ok()?) & 0x3fff;
            (
                head.get(net + 12..net + 20)?,
                *head.get(net + 9)?,
                net + ihl,
                frag != 0,
            )
        }
        0x86dd => (
            head.get(net + 8..net + 40)?,
            *head.get(net + 6)?,
            net + 40,
            false,
        ),
        _ => return None,
    };
    let l4 = match protocol {
        6 | 17 if !fragment => head.get(transport..transport + 4).map(|p| (protocol, p)),
        _ => None,
    };
    Some((addrs, l4))
}

/// A MAC's hash (`source-mac`).
pub fn mac_hash(mac: MacAddr) -> u32 {
    let mut h = Fnv::default();
    h.add(&mac.0);
    h.finish()
}

/// FNV-1a, then mixed: small, and spreads a few address bits well.
struct Fnv(u32);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0x811c_9dc5)
    }
}

impl Fnv {
    fn add(&mut self, b: &[u8]) {
        for &x in b {
            self.0 = (self.0 ^ u32::from(x)).wrapping_mul(0x0100_0193);
        }
    }
    fn finish(&self) -> u32 {
        let mut x = self.0;
        x ^= x >> 16;
        x = x.wrapping_mul(0x7feb_352d);
        x ^= x >> 15;
        x
    }
}

/// At most this many addresses are placed (remembered) per team: as many
/// VMs as a topology may hold (`MAX_VMS`), and well under the switch's
/// learned FDB entries in all (8192). A team carries its own VMs' frames,
/// but forwarded frames too (flooded from the wire, or forged by a VM
/// allowed forged transmits), so random source addresses would otherwise
/// grow the placements at their rate for [`PLACEMENT_AGE`](super::state)
/// and slow every transmitter that waits on the team's lock.
pub const MAX_PLACEMENTS: usize = 4096;

/// The placements of a switch-independent team: each VM address it has
/// sent from, on which member, at most [`MAX_PLACEMENTS`].
#[derive(Default, Debug)]
pub struct Placements {
    /// By source MAC.
    by_mac: HashMap<MacAddr, Placement>,
    /// How many placements each member is home to, kept as they come, go
    /// and move (`port-id` and `load-based` place a new address on the
    /// usable member with the fewest without counting them all again).
    homes: Vec<usize>,
    /// New addresses not remembered because [`MAX_PLACEMENTS`] were (each
    /// frame from one counts): their frames leave by their hash.
    pub refused: u64,
}

/// Where a frame leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pick {
    /// Its member.
    pub member: usize,
    /// Its source address was placed now (it is the team's own from now on).
    pub new: bool,
}

impl Placements {
    /// The member a frame of `bytes` from `src` leaves by under
    /// `teaming`, placing its address if it is new (`port-id`,
    /// `load-based`: on the usable member with the fewest; else by its
    /// hash), with `usable` the members that may send now (in the team's
    /// order, never empty) and `n` the team's size. Past
    /// [`MAX_PLACEMENTS`] a new address is not placed, only given a
    /// member by its hash, and counted in `refused`.
    pub fn member_of(
        &mut self,
        teaming: Teaming,
        src: &Source,
        bytes: u64,
        usable: &[usize],
        n: usize,
        now: Instant,
    ) -> Pick {
        if let Some(p) = self.by_mac.get_mut(&src.mac) {
            p.seen = now;
            p.frames += 1;
            p.bytes += bytes;
            if src.tag.is_some() {
                p.tag = src.tag;
            }
            if src.ipv4.is_some() {
                p.ipv4 = src.ipv4;
            }
            if let Some(a) = src.ipv6.filter(|a| !(a[0] == 0xfe && a[1] & 0xc0 == 0x80)) {
                p.ipv6 = Some(a);
            } else if p.ipv6.is_none() {
                p.ipv6 = src.ipv6;
            }
            return Pick {
                member: p.now,
                new: false,
            };
        }
        if self.by_mac.len() >= MAX_PLACEMENTS {
            self.refused += 1;
            return Pick {
                member: usable[mac_hash(src.mac) as usize % usable.len()],
                new: false,
            };
        }
        if self.homes.len() < n {
            self.homes.resize(n, 0);
        }
        let home = self.home_for(teaming, src.mac, usable, n);
        let now_member = pick_usable(home, src.mac, usable);
        self.homes[home] += 1;
        self.by_mac.insert(
            src.mac,
            Placement {
                home,
                now: now_member,
                frames: 1,
                bytes,
                bytes_at_look: 0,
                tag: src.tag,
                ipv4: src.ipv4,
                ipv6: src.ipv6,
                seen: now,
            },
        );
        Pick {
            member: now_member,
            new: true,
        }
    }

    /// The home member of a new address `mac`: under `port-id` and
    /// `load-based` the usable member with the fewest, else by its hash.
    fn home_for(&self, teaming: Teaming, mac: MacAddr, usable: &[usize], n: usize) -> usize {
        let homes = |m: usize| self.homes.get(m).copied().unwrap_or(0);
        match teaming {
            Teaming::PortId | Teaming::LoadBased => *usable
                .iter()
                .min_by_key(|&&m| (homes(m), m))
                .expect("usable is not empty"),
            _ => mac_hash(mac) as usize % n,
        }
    }

    /// The member a new address `mac` would leave by now (as
    /// [`Placements::member_of`] would place it; nothing changes).
    pub fn would_place(&self, teaming: Teaming, mac: MacAddr, usable: &[usize], n: usize) -> usize {
        if self.by_mac.len() >= MAX_PLACEMENTS {
            return usable[mac_hash(mac) as usize % usable.len()];
        }
        pick_usable(self.home_for(teaming, mac, usable, n), mac, usable)
    }

    /// Places every address again after the usable members changed (a
    /// failover, or `failback`): each on its home member if usable (with
    /// `failback`, or if its present member is not), else on a usable one
    /// by its hash. Returns the addresses that moved, with their new member.
    pub fn replace(&mut self, usable: &[usize], failback: bool) -> Vec<(MacAddr, usize)> {
        let mut moved = Vec::new();
        for (mac, p) in self.by_mac.iter_mut() {
            let stays = usable.contains(&p.now) && (!failback || p.now == p.home);
            let want = if stays {
                p.now
            } else {
                pick_usable(p.home, *mac, usable)
            };
            if want != p.now && !usable.is_empty() {
                p.now = want;
                moved.push((*mac, want));
            }
        }
        moved
    }

    /// Gives an address a new home, where it leaves from now on
    /// (`load-based`). False if it is not placed.
    pub fn rehome(&mut self, mac: &MacAddr, to: usize) -> bool {
        let Some(p) = self.by_mac.get_mut(mac) else {
            return false;
        };
        if let Some(c) = self.homes.get_mut(p.home) {
            *c -= 1;
        }
        if self.homes.len() <= to {
            self.homes.resize(to + 1, 0);
        }
        self.homes[to] += 1;
        p.home = to;
        p.now = to;
        true
    }

    /// Forgets the addresses not heard from since `before`; returns them.
    pub fn age_out(&mut self, before: Instant) -> Vec<MacAddr> {
        let mut gone = Vec::new();
        let homes = &mut self.homes;
        self.by_mac.retain(|mac, p| {
            if p.seen >= before {
                return true;
            }
            if let Some(c) = homes.get_mut(p.home) {
                *c -= 1;
            }
            gone.push(*mac);
            false
        });
        gone
    }

    /// Forgets an address (it moved behind the wire: its announcement came
    /// back from there).
    pub fn forget(&mut self, mac: &MacAddr) -> bool {
        let Some(p) = self.by_mac.remove(mac) else {
            return false;
        };
        if let Some(c) = self.homes.get_mut(p.home) {
            *c -= 1;
        }
        true
    }

    /// An address's placement.
    pub fn get(&self, mac: &MacAddr) -> Option<&Placement> {
        self.by_mac.get(mac)
    }

    /// Every placement.
    pub fn iter(&self) -> impl Iterator<Item = (&MacAddr, &Placement)> {
        self.by_mac.iter()
    }

    /// How many addresses are placed.
    pub fn len(&self) -> usize {
        self.by_mac.len()
    }

    /// No address is placed.
    pub fn is_empty(&self) -> bool {
        self.by_mac.is_empty()
    }

    /// An address's placement to change, for tests that set its traffic
    /// (a home changed here would leave `homes` wrong).
    #[cfg(test)]
    pub(crate) fn get_mut(&mut self, mac: &MacAddr) -> Option<&mut Placement> {
        self.by_mac.get_mut(mac)
    }

    /// Each placement's bytes so far taken as the start of a load look.
    pub fn mark_look(&mut self) {
        for p in self.by_mac.values_mut() {
            p.bytes_at_look = p.bytes;
        }
    }
}

/// `home` if usable, else a usable member by the address's hash.
fn pick_usable(home: usize, mac: MacAddr, usable: &[usize]) -> usize {
    if usable.contains(&home) || usable.is_empty() {
        return home;
    }
    usable[mac_hash(mac) as usize % usable.len()]
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
