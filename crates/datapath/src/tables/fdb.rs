//! The forwarding database: which port a MAC address was last seen on, per
//! VLAN, forgotten after an idle time (802.1D learning with aging).
//!
//! Each port's own address is a static entry: no other port can take it
//! over by sending from it, while the port's guest is there (a guest
//! migrated to another host releases it, to be learned where it went). Learned entries are limited per port and in
//! total, so a guest sending from random source addresses fills its own
//! share, not the switch's memory; what is refused is counted by the
//! caller. Aging runs on the switch's housekeeping thread; workers only
//! take the read lock, and the write lock only to learn something new.

use hvnet_wire::MacAddr;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// Limits on learned entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdbLimits {
    /// Learned entries per port.
    pub per_port: usize,
    /// Learned entries in all.
    pub total: usize,
}

impl Default for FdbLimits {
    /// 1024 per port and 8192 in all, as many L2 switches default to a few
    /// thousand per port.
    fn default() -> Self {
        FdbLimits {
            per_port: 1024,
            total: 8192,
        }
    }
}

/// What an entry is, which decides whether it ages and who may take it
/// over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Seen in a frame: ages, moves with the address.
    Learned,
    /// A port's own address: never ages, never taken over.
    Static,
    /// Behind a tunnel endpoint's uplink, as the fabric advertises it (BGP
    /// EVPN): never ages while advertised; a frame from the address on
    /// another port (a VM that arrived here) takes it over as learned.
    Remote,
}

/// One entry.
#[derive(Clone, Copy, Debug)]
struct Entry {
    port: usize,
    seen: Instant,
    kind: Kind,
}

impl Entry {
    fn is_static(&self) -> bool {
        self.kind == Kind::Static
    }
    fn ages(&self) -> bool {
        self.kind == Kind::Learned
    }
}

/// An entry as shown to operators.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FdbRow {
    /// VLAN (0: untagged).
    pub vlan: u16,
    /// The address.
    pub mac: String,
    /// Port index.
    pub port: usize,
    /// Seconds since it was last seen (0 for a static entry).
    pub age_secs: u64,
    /// "static" (a port's own address), "learned", or "evpn" (advertised
    /// by the fabric, behind a tunnel endpoint's uplink).
    pub kind: &'static str,
}

/// What learning an address did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learn {
    /// Already known there (refreshed, or refreshed recently enough).
    Known,
    /// New, or moved to this port.
    Learned,
    /// Refused: the address is another port's static address, or a limit
    /// is reached.
    Refused,
}

struct Table {
    map: HashMap<(u16, MacAddr), Entry>,
    /// Learned entries per port.
    learned: HashMap<usize, usize>,
    learned_total: usize,
}

/// The table.
pub struct Fdb {
    table: RwLock<Table>,
    aging: Duration,
    limits: FdbLimits,
}

impl Fdb {
    /// An empty table whose learned entries expire after `aging`.
    pub fn new(aging: Duration, limits: FdbLimits) -> Fdb {
        Fdb {
            table: RwLock::new(Table {
                map: HashMap::new(),
                learned: HashMap::new(),
                learned_total: 0,
            }),
            aging,
            limits,
        }
    }

    /// Pins `mac` to `port` (a port's own address).
    pub fn add_static(&self, vlan: u16, mac: MacAddr, port: usize) {
        let mut t = self.table.write().expect("fdb lock");
        if let Some(old) = t.map.insert(
            (vlan, mac),
            Entry {
                port,
                seen: Instant::now(),
                kind: Kind::Static,
            },
        ) {
            if old.kind == Kind::Learned {
                t.forget_learned(old.port);
            }
        }
    }

    /// Puts `mac` behind `port` (an uplink) as the fabric advertises it;
    /// false if it is a port's own address. Bounded by the caller (the
    /// tunnel endpoint's table of advertised addresses).
    pub fn add_remote(&self, vlan: u16, mac: MacAddr, port: usize) -> bool {
        let mut t = self.table.write().expect("fdb lock");
        let old = t.map.get(&(vlan, mac)).copied();
        match old {
            Some(e) if e.is_static() => return false,
            Some(e) if e.kind == Kind::Learned => t.forget_learned(e.port),
            _ => {}
        }
        t.map.insert(
            (vlan, mac),
            Entry {
                port,
                seen: Instant::now(),
                kind: Kind::Remote,
            },
        );
        true
    }

    /// Removes the advertised entry of `mac` behind `port`, if it is one.
    pub fn remove_remote(&self, vlan: u16, mac: MacAddr, port: usize) {
        let mut t = self.table.write().expect("fdb lock");
        if t.map
            .get(&(vlan, mac))
            .is_some_and(|e| e.kind == Kind::Remote && e.port == port)
        {
            t.map.remove(&(vlan, mac));
        }
    }

    /// The port `mac` is pinned to, if it is a port's own address.
    pub fn pinned_to(&self, vlan: u16, mac: MacAddr) -> Option<usize> {
        let t = self.table.read().expect("fdb lock");
        t.map
            .get(&(vlan, mac))
            .filter(|e| e.is_static())
            .map(|e| e.port)
    }

    /// Removes the pin of `mac` to `port` (its guest has left: a live
    /// migration); the address is learned wherever it shows up next.
    pub fn unpin(&self, vlan: u16, mac: MacAddr, port: usize) {
        let mut t = self.table.write().expect("fdb lock");
        if t.map
            .get(&(vlan, mac))
            .is_some_and(|e| e.is_static() && e.port == port)
        {
            t.map.remove(&(vlan, mac));
        }
    }

    /// Records that `mac` was seen on `port`.
    pub fn learn(&self, vlan: u16, mac: MacAddr, port: usize, now: Instant) -> Learn {
        if mac.is_multicast() {
            return Learn::Known;
        }
        if let Some(e) = self.table.read().expect("fdb lock").map.get(&(vlan, mac)) {
            if e.is_static() {
                return if e.port == port {
                    Learn::Known
                } else {
                    Learn::Refused
                };
            }
            if e.port == port && now.saturating_duration_since(e.seen) < Duration::from_secs(1) {
                return Learn::Known;
            }
        }
        let mut t = self.table.write().expect("fdb lock");
        let old = t.map.get(&(vlan, mac)).copied();
        match old {
            Some(e) if e.is_static() => return Learn::Refused,
            Some(e) if e.port == port => {
                t.map.insert((vlan, mac), Entry { seen: now, ..e });
                return Learn::Known;
            }
            _ => {}
        }
        let mine = t.learned.get(&port).copied().unwrap_or(0);
        // A move frees the old port's share first.
        let was_learned = old.is_some_and(|e| e.kind == Kind::Learned);
        let total = t.learned_total - usize::from(was_learned);
        if mine >= self.limits.per_port || total >= self.limits.total {
            return Learn::Refused;
        }
        if let Some(e) = old.filter(|_| was_learned) {
            t.forget_learned(e.port);
        }
        t.map.insert(
            (vlan, mac),
            Entry {
                port,
                seen: now,
                kind: Kind::Learned,
            },
        );
        *t.learned.entry(port).or_insert(0) += 1;
        t.learned_total += 1;
        Learn::Learned
    }

    /// The port `mac` lives on, if known and not expired.
    pub fn lookup(&self, vlan: u16, mac: MacAddr, now: Instant) -> Option<usize> {
        let t = self.table.read().expect("fdb lock");
        let e = t.map.get(&(vlan, mac))?;
        (!e.ages() || now.saturating_duration_since(e.seen) < self.aging).then_some(e.port)
    }

    /// Removes expired learned entries, and every learned entry of `port`
    /// if given; returns how many were removed.
    pub fn sweep(&self, now: Instant, forget_port: Option<usize>) -> usize {
        let mut t = self.table.write().expect("fdb lock");
        let before = t.map.len();
        let aging = self.aging;
        let mut gone: Vec<usize> = Vec::new();
        t.map.retain(|_, e| {
            let keep = !e.ages()
                || (now.saturating_duration_since(e.seen) < aging && Some(e.port) != forget_port);
            if !keep {
                gone.push(e.port);
            }
            keep
        });
        for p in gone {
            t.forget_learned(p);
        }
        before - t.map.len()
    }

    /// Removes every entry of `port` — its own address, what it learned,
    /// what the fabric put behind it — as the port leaves the switch (its
    /// index may be given to another port). Returns how many went.
    pub fn remove_port(&self, port: usize) -> usize {
        let mut t = self.table.write().expect("fdb lock");
        let before = t.map.len();
        t.map.retain(|_, e| e.port != port);
        let learned = t.learned.remove(&port).unwrap_or(0);
        t.learned_total = t.learned_total.saturating_sub(learned);
        before - t.map.len()
    }

    /// Removes what `port` learned in the VLANs for which `keep` says
    /// no (a port whose VLANs changed: what it learned in those it no
    /// longer carries). Returns how many went.
    pub fn flush_vlans(&self, port: usize, keep: impl Fn(u16) -> bool) -> usize {
        let mut t = self.table.write().expect("fdb lock");
        let before = t.map.len();
        let mut gone = 0;
        t.map.retain(|(vlan, _), e| {
            let go = e.port == port && e.ages() && !keep(*vlan);
            gone += usize::from(go);
            !go
        });
        for _ in 0..gone {
            t.forget_learned(port);
        }
        before - t.map.len()
    }

    /// Learned entries now (for the views).
    pub fn learned(&self) -> usize {
        self.table.read().expect("fdb lock").learned_total
    }

    /// The limits in force.
    pub fn limits(&self) -> FdbLimits {
        self.limits
    }

    /// The table, for `hvnet fdb`.
    pub fn rows(&self, now: Instant) -> Vec<FdbRow> {
        let t = self.table.read().expect("fdb lock");
        let mut rows: Vec<FdbRow> = t
            .map
            .iter()
            .filter(|(_, e)| !e.ages() || now.saturating_duration_since(e.seen) < self.aging)
            .map(|((vlan, mac), e)| FdbRow {
                vlan: *vlan,
                mac: mac.to_string(),
                port: e.port,
                age_secs: if e.ages() {
                    now.saturating_duration_since(e.seen).as_secs()
                } else {
                    0
                },
                kind: match e.kind {
                    Kind::Static => "static",
                    Kind::Learned => "learned",
                    Kind::Remote => "evpn",
                },
            })
            .collect();
        rows.sort_by(|a, b| (a.port, &a.mac).cmp(&(b.port, &b.mac)));
        rows
    }
}

impl Table {
    fn forget_learned(&mut self, port: usize) {
        if let Some(n) = self.learned.get_mut(&port) {
            *n = n.saturating_sub(1);
        }
        self.learned_total = self.learned_total.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_port_takes_every_entry_it_had() {
        let f = Fdb::new(Duration::from_secs(300), FdbLimits::default());
        let now = Instant::now();
        f.add_static(0, mac(1), 3);
        assert_eq!(f.learn(0, mac(2), 3, now), Learn::Learned);
        assert_eq!(f.learn(0, mac(3), 4, now), Learn::Learned);
        assert_eq!(f.remove_port(3), 2);
        assert_eq!(f.lookup(0, mac(1), now), None);
        assert_eq!(f.lookup(0, mac(2), now), None);
        assert_eq!(f.lookup(0, mac(3), now), Some(4));
        assert_eq!(f.learned(), 1);
    }

    fn mac(i: u32) -> MacAddr {
        let b = i.to_be_bytes();
        MacAddr([2, 0, b[0], b[1], b[2], b[3]])
    }

    #[test]
    fn learns_moves_and_ages() {
        let f = Fdb::new(Duration::from_secs(10), FdbLimits::default());
        let t0 = Instant::now();
        let m = mac(1);
        assert_eq!(f.learn(0, m, 1, t0), Learn::Learned);
        assert_eq!(f.lookup(0, m, t0), Some(1));
        assert_eq!(f.lookup(5, m, t0), None, "VLANs are separate");
        assert_eq!(
            f.learn(0, m, 2, t0 + Duration::from_secs(2)),
            Learn::Learned
        );
        assert_eq!(
            f.lookup(0, m, t0 + Duration::from_secs(3)),
            Some(2),
            "a move is learned"
        );
        assert_eq!(f.learned(), 1);
        assert_eq!(
            f.lookup(0, m, t0 + Duration::from_secs(13)),
            None,
            "aged out"
        );
        assert_eq!(f.sweep(t0 + Duration::from_secs(13), None), 1);
        assert_eq!(f.learned(), 0);
        f.learn(0, MacAddr::BROADCAST, 1, t0);
        assert!(f.rows(t0).is_empty(), "group addresses are never learned");
    }

    #[test]
    fn an_unpinned_address_moves_and_a_new_pin_takes_it_back() {
        let f = Fdb::new(Duration::from_secs(10), FdbLimits::default());
        let t0 = Instant::now();
        f.add_static(0, mac(7), 3);
        f.unpin(0, mac(7), 2);
        assert_eq!(
            f.pinned_to(0, mac(7)),
            Some(3),
            "only its own port unpins it"
        );
        f.unpin(0, mac(7), 3);
        assert_eq!(f.pinned_to(0, mac(7)), None);
        assert_eq!(f.learn(0, mac(7), 1, t0), Learn::Learned);
        assert_eq!(f.lookup(0, mac(7), t0), Some(1));
        f.add_static(0, mac(7), 3);
        assert_eq!(f.lookup(0, mac(7), t0), Some(3));
        assert_eq!(f.learned(), 0, "the learned entry's share is freed");
    }

    #[test]
    fn static_addresses_cannot_be_taken_over_and_never_age() {
        let f = Fdb::new(Duration::from_secs(10), FdbLimits::default());
        let t0 = Instant::now();
        f.add_static(0, mac(7), 3);
        assert_eq!(f.learn(0, mac(7), 1, t0), Learn::Refused);
        assert_eq!(f.learn(0, mac(7), 3, t0), Learn::Known);
        f.sweep(t0 + Duration::from_secs(100), Some(3));
        assert_eq!(f.lookup(0, mac(7), t0 + Duration::from_secs(100)), Some(3));
        assert_eq!(f.rows(t0)[0].kind, "static");
    }

    #[test]
    fn advertised_entries_never_age_and_yield_to_a_port_that_sends_from_them() {
        let f = Fdb::new(Duration::from_secs(10), FdbLimits::default());
        let t0 = Instant::now();
        f.add_static(0, mac(7), 3);
        assert!(
            !f.add_remote(0, mac(7), 1),
            "a port's own address is refused"
        );
        assert!(f.add_remote(0, mac(8), 1));
        f.sweep(t0 + Duration::from_secs(100), None);
        assert_eq!(f.lookup(0, mac(8), t0 + Duration::from_secs(100)), Some(1));
        assert_eq!(f.learn(0, mac(8), 1, t0), Learn::Known);
        assert_eq!(f.learned(), 0, "advertised entries take no learned share");
        assert_eq!(
            f.rows(t0).iter().find(|r| r.port == 1).unwrap().kind,
            "evpn"
        );
        assert_eq!(
            f.learn(0, mac(8), 2, t0),
            Learn::Learned,
            "the VM is here now"
        );
        f.remove_remote(0, mac(8), 1);
        assert_eq!(
            f.lookup(0, mac(8), t0),
            Some(2),
            "only an advertised entry is withdrawn"
        );
        assert!(f.add_remote(0, mac(8), 1));
        assert_eq!(
            f.learned(),
            0,
            "the learned share is freed when the fabric takes it back"
        );
    }

    #[test]
    fn limits_bound_what_one_port_and_all_ports_learn() {
        let f = Fdb::new(
            Duration::from_secs(10),
            FdbLimits {
                per_port: 3,
                total: 5,
            },
        );
        let t0 = Instant::now();
        let got: Vec<Learn> = (0..5).map(|i| f.learn(0, mac(i), 1, t0)).collect();
        assert_eq!(got.iter().filter(|&&l| l == Learn::Learned).count(), 3);
        assert_eq!(got[4], Learn::Refused, "port 1's share is full");
        assert_eq!(f.learn(0, mac(100), 2, t0), Learn::Learned);
        assert_eq!(f.learn(0, mac(101), 2, t0), Learn::Learned);
        assert_eq!(f.learn(0, mac(102), 2, t0), Learn::Refused, "total reached");
        // Moving an address between ports keeps the totals right.
        assert_eq!(f.learn(0, mac(100), 3, t0), Learn::Learned);
        assert_eq!(f.learned(), 5);
        f.sweep(t0, Some(1));
        assert_eq!(f.learned(), 2);
        assert_eq!(f.learn(0, mac(103), 2, t0), Learn::Learned);
    }
}
