//! Which of the shadow's remote MAC entries BGP still backs.
//!
//! zebra installs a remote MAC with one request to the kernel, `NTF_MASTER
//! | NTF_SELF | NTF_EXT_LEARNED`: the bridge's entry for the MAC goes onto
//! the `vxlan` device (`extern_learn master`) and the `vxlan` device gets
//! its own `MAC dst VTEP self extern_learn`. hvnet reads the second (it
//! carries the VTEP). When the MAC becomes local again — hvnet writes a VM's
//! static entry on the shadow port — the bridge's entry moves to that port
//! (one entry per MAC), and zebra counts the MAC local (`show evpn mac`:
//! type local, BGP advertises it with the higher sequence number). zebra
//! then deletes its remote entry with `NTF_MASTER | NTF_SELF` again; the
//! kernel does the bridge's part first, finds the bridge's entry on another
//! port (`ENOENT`), and stops before the `vxlan` device's part: the `dst OLD
//! VTEP self extern_learn` entry stays, with nothing in BGP behind it
//! (observed with FRR 8.4 on Linux 6.x: a VM that moved to a Linux VTEP and
//! back stayed listed behind the Linux VTEP, and was installed there again
//! when it left once more).
//!
//! So a `vxlan` entry is taken as BGP's until the bridge moves its MAC to
//! another port while it is there: then it is *stale* (left behind by a MAC
//! that became local), withdrawn from the tunnel endpoint and ignored until
//! zebra writes the MAC anew (the bridge's entry back on the `vxlan`
//! device, or a `vxlan` entry to another VTEP). This follows zebra's own
//! view without asking zebra (no vtysh, so any FRR the host runs will do),
//! and a local VM's MAC always wins over an entry BGP no longer backs. After
//! a fresh dump, with no history to go by, a `vxlan` entry counts only
//! where the bridge's entry for its MAC is on the `vxlan` device, as zebra
//! leaves every remote MAC it installs.
//!
//! Pure bookkeeping: the sync feeds it the kernel's changes and installs
//! what it answers.

use hvnet_wire::MacAddr;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

/// The `vxlan` entries kept, at most (twice what a tunnel endpoint
/// installs): past it an entry is passed on (the endpoint refuses it,
/// counted) but not remembered for later.
const MAX_ENTRIES: usize = 2 * hvnet_port::vxlan::MAX_EVPN_MACS;

/// The shadow's remote MAC entries and which of them are stale.
#[derive(Default, Debug)]
pub(super) struct RemoteMacs {
    /// The `vxlan` device's `MAC dst VTEP` entries.
    dst: HashMap<MacAddr, IpAddr>,
    /// MACs whose `vxlan` entry was left behind when they became local.
    stale: HashSet<MacAddr>,
}

impl RemoteMacs {
    /// The `vxlan` device's entry for `mac` written (`Some(vtep)`) or
    /// removed; the VTEP to install `mac` behind now, if any.
    pub(super) fn vxlan_entry(&mut self, mac: MacAddr, vtep: Option<IpAddr>) -> Option<IpAddr> {
        match vtep {
            None => {
                self.dst.remove(&mac);
                self.stale.remove(&mac);
            }
            Some(v) => {
                // Written anew to another VTEP: not the entry left behind.
                if self.dst.get(&mac) != Some(&v) {
                    self.stale.remove(&mac);
                }
                if self.dst.len() < MAX_ENTRIES || self.dst.contains_key(&mac) {
                    self.dst.insert(mac, v);
                } else {
                    return Some(v);
                }
            }
        }
        self.remote(mac)
    }

    /// The bridge's entry for `mac` is now on the `vxlan` device
    /// (`on_vxlan`: zebra wrote it remote) or on another port (it became
    /// local). True when that changed whether `mac` is stale.
    pub(super) fn bridge_entry(&mut self, mac: MacAddr, on_vxlan: bool) -> bool {
        if on_vxlan {
            self.stale.remove(&mac)
        } else {
            self.dst.contains_key(&mac) && self.stale.insert(mac)
        }
    }

    /// The VTEP `mac` is behind, as BGP says: its `vxlan` entry unless
    /// stale.
    pub(super) fn remote(&self, mac: MacAddr) -> Option<IpAddr> {
        (!self.stale.contains(&mac))
            .then(|| self.dst.get(&mac).copied())
            .flatten()
    }

    /// After a fresh dump of the `vxlan` entries: those whose MAC the
    /// bridge does not have on the `vxlan` device (`on_vxlan`) are stale.
    pub(super) fn settle(&mut self, on_vxlan: &HashSet<MacAddr>) {
        self.stale = self
            .dst
            .keys()
            .filter(|m| !on_vxlan.contains(m))
            .copied()
            .collect();
    }

    /// The MACs and VTEPs BGP backs.
    pub(super) fn backed(&self) -> impl Iterator<Item = (MacAddr, IpAddr)> + '_ {
        self.dst
            .iter()
            .filter(|(m, _)| !self.stale.contains(m))
            .map(|(m, v)| (*m, *v))
    }

    /// Forgets everything (before a fresh dump).
    pub(super) fn clear(&mut self) {
        self.dst.clear();
        self.stale.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const M: MacAddr = MacAddr([2, 0xee, 0, 0, 0, 8]);

    fn ip(last: u8) -> IpAddr {
        Ipv4Addr::new(198, 18, 60, last).into()
    }

    #[test]
    fn a_remote_mac_is_its_vxlan_entry() {
        let mut r = RemoteMacs::default();
        assert!(
            !r.bridge_entry(M, true),
            "zebra writes the bridge's entry first"
        );
        assert_eq!(r.vxlan_entry(M, Some(ip(21))), Some(ip(21)));
        assert_eq!(r.vxlan_entry(M, None), None);
        assert_eq!(r.remote(M), None);
    }

    #[test]
    fn the_entry_left_behind_by_a_mac_that_became_local_is_stale() {
        let mut r = RemoteMacs::default();
        r.bridge_entry(M, true);
        r.vxlan_entry(M, Some(ip(21)));
        // The VM is back here: its static entry moves the bridge's entry
        // to the shadow port; zebra's delete leaves the vxlan entry.
        assert!(r.bridge_entry(M, false));
        assert_eq!(r.remote(M), None);
        assert_eq!(r.backed().count(), 0);
        // It leaves again (its static entry deleted): still nothing behind
        // it in BGP.
        assert!(!r.bridge_entry(M, false));
        assert_eq!(r.remote(M), None);
        // The fabric advertises it again from the same VTEP: zebra's
        // bridge entry on the vxlan device makes it count again.
        assert!(r.bridge_entry(M, true));
        assert_eq!(r.remote(M), Some(ip(21)));
    }

    #[test]
    fn a_stale_entry_written_to_another_vtep_counts_again() {
        let mut r = RemoteMacs::default();
        r.vxlan_entry(M, Some(ip(21)));
        r.bridge_entry(M, false);
        assert_eq!(r.vxlan_entry(M, Some(ip(21))), None, "the same entry");
        assert_eq!(r.vxlan_entry(M, Some(ip(2))), Some(ip(2)));
    }

    #[test]
    fn an_entry_written_while_the_mac_is_local_is_passed_on() {
        // (The switch refuses it, counted, while its VM is here.)
        let mut r = RemoteMacs::default();
        assert!(!r.bridge_entry(M, false));
        assert_eq!(r.vxlan_entry(M, Some(ip(99))), Some(ip(99)));
    }

    #[test]
    fn after_a_dump_only_entries_the_bridge_has_on_the_vxlan_device_count() {
        let mut r = RemoteMacs::default();
        let other = MacAddr([2, 0x42, 0, 0, 1, 0x0a]);
        r.vxlan_entry(M, Some(ip(21)));
        r.vxlan_entry(other, Some(ip(21)));
        r.settle(&HashSet::from([other]));
        assert_eq!(r.backed().collect::<Vec<_>>(), [(other, ip(21))]);
        r.clear();
        assert_eq!(r.remote(other), None);
    }

    #[test]
    fn the_entries_kept_are_bounded() {
        let mut r = RemoteMacs::default();
        for i in 0..(MAX_ENTRIES as u32 + 3) {
            let b = i.to_be_bytes();
            let m = MacAddr([2, 1, b[0], b[1], b[2], b[3]]);
            assert_eq!(r.vxlan_entry(m, Some(ip(21))), Some(ip(21)));
        }
        assert_eq!(r.dst.len(), MAX_ENTRIES);
    }
}
