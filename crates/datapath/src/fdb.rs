//! The forwarding database: which port a MAC address was last seen on, per
//! VLAN, forgotten after an idle time (802.1D learning with aging).

use hvnet_wire::MacAddr;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// One learned address.
#[derive(Clone, Copy, Debug)]
struct Entry {
    port: usize,
    seen: Instant,
}

/// A learned address as shown to operators.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FdbRow {
    /// VLAN (0: untagged).
    pub vlan: u16,
    /// The address.
    pub mac: String,
    /// Port index.
    pub port: usize,
    /// Seconds since it was last seen.
    pub age_secs: u64,
}

/// The table. Lookups take a read lock; a write lock is taken only to learn
/// a new address, a move, or to refresh an entry at most once a second.
pub struct Fdb {
    map: RwLock<HashMap<(u16, MacAddr), Entry>>,
    aging: Duration,
}

impl Fdb {
    /// An empty table whose entries expire after `aging`.
    pub fn new(aging: Duration) -> Fdb {
        Fdb {
            map: RwLock::new(HashMap::new()),
            aging,
        }
    }

    /// Records that `mac` was seen on `port`.
    pub fn learn(&self, vlan: u16, mac: MacAddr, port: usize, now: Instant) {
        if mac.is_multicast() {
            return;
        }
        if let Some(e) = self.map.read().expect("fdb lock").get(&(vlan, mac)) {
            if e.port == port && now.saturating_duration_since(e.seen) < Duration::from_secs(1) {
                return;
            }
        }
        self.map
            .write()
            .expect("fdb lock")
            .insert((vlan, mac), Entry { port, seen: now });
    }

    /// The port `mac` lives on, if learned and not expired.
    pub fn lookup(&self, vlan: u16, mac: MacAddr, now: Instant) -> Option<usize> {
        let map = self.map.read().expect("fdb lock");
        let e = map.get(&(vlan, mac))?;
        (now.saturating_duration_since(e.seen) < self.aging).then_some(e.port)
    }

    /// Removes expired entries and every entry of `port` if given; returns
    /// how many were removed.
    pub fn sweep(&self, now: Instant, forget_port: Option<usize>) -> usize {
        let mut map = self.map.write().expect("fdb lock");
        let before = map.len();
        map.retain(|_, e| {
            now.saturating_duration_since(e.seen) < self.aging && Some(e.port) != forget_port
        });
        before - map.len()
    }

    /// The table, for `hvnet fdb`.
    pub fn rows(&self, now: Instant) -> Vec<FdbRow> {
        let map = self.map.read().expect("fdb lock");
        let mut rows: Vec<FdbRow> = map
            .iter()
            .filter(|(_, e)| now.saturating_duration_since(e.seen) < self.aging)
            .map(|((vlan, mac), e)| FdbRow {
                vlan: *vlan,
                mac: mac.to_string(),
                port: e.port,
                age_secs: now.saturating_duration_since(e.seen).as_secs(),
            })
            .collect();
        rows.sort_by(|a, b| (a.port, &a.mac).cmp(&(b.port, &b.mac)));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_moves_and_ages() {
        let f = Fdb::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let m = MacAddr([2, 0, 0, 0, 0, 1]);
        f.learn(0, m, 1, t0);
        assert_eq!(f.lookup(0, m, t0), Some(1));
        assert_eq!(f.lookup(5, m, t0), None, "VLANs are separate");
        f.learn(0, m, 2, t0 + Duration::from_secs(2));
        assert_eq!(
            f.lookup(0, m, t0 + Duration::from_secs(3)),
            Some(2),
            "a move is learned"
        );
        assert_eq!(
            f.lookup(0, m, t0 + Duration::from_secs(13)),
            None,
            "aged out"
        );
        assert_eq!(f.sweep(t0 + Duration::from_secs(13), None), 1);
        f.learn(0, MacAddr::BROADCAST, 1, t0);
        assert!(f.rows(t0).is_empty(), "group addresses are never learned");
    }
}
