//! Head-end replication pruned by multicast snooping: a frame to an IP
//! group goes only to the remote endpoints behind which a member of the
//! group (or a querier, a router) was heard, not to the whole flood list.
//! The switch's snooping tells the endpoint what it read in the
//! membership messages that came out of the tunnel (the inner source MAC
//! says which remote they came from) and whether a querier keeps
//! memberships true; without one, or for a group nobody behind the tunnel
//! reported, or a link-local one, the flood list is used as before.

use super::Vtep;
use hvnet_wire::membership::is_link_local;
use hvnet_wire::{Layers, MacAddr, NetKind};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::RwLock;
use std::time::Instant;

/// Groups the endpoint keeps remotes for (a group beyond is flooded, and
/// counted).
pub const MAX_GROUPS: usize = 4096;

/// Per (VNI, group), the remotes with members and until when; the remotes
/// behind which a querier was heard.
#[derive(Default)]
pub(super) struct GroupRemotes {
    table: RwLock<Table>,
    refused: AtomicU64,
}

#[derive(Default)]
struct Table {
    groups: HashMap<(u32, IpAddr), Vec<(IpAddr, Instant)>>,
    routers: HashMap<IpAddr, Instant>,
    /// Per VNI, pruning on for IPv4 and IPv6 groups: a querier is there
    /// in the VLAN the VNI carries (each VNI is a segment of its own).
    pruning: HashMap<u32, [bool; 2]>,
}

impl Vtep {
    /// A membership message from `inner_src` behind the tunnel, in `vni`:
    /// its remote has a member of `group` until `until` (a report; a
    /// leave gives a sooner time). False when the remote is not known or
    /// the table is full.
    pub fn group_member(
        &self,
        vni: u32,
        group: IpAddr,
        inner_src: MacAddr,
        until: Instant,
    ) -> bool {
        let Some(remote) = self.remote_of(vni, &inner_src) else {
            return false;
        };
        let mut t = self.groups.table.write().expect("lock");
        if t.groups.len() >= MAX_GROUPS && !t.groups.contains_key(&(vni, group)) {
            self.groups.refused.fetch_add(1, Relaxed);
            return false;
        }
        let m = t.groups.entry((vni, group)).or_default();
        match m.iter_mut().find(|(r, _)| *r == remote) {
            Some(e) => e.1 = until,
            None => m.push((remote, until)),
        }
        true
    }

    /// A query from `inner_src` behind the tunnel, in `vni`: its remote
    /// leads to a router until `until`, and gets every group's frames.
    pub fn group_router(&self, vni: u32, inner_src: MacAddr, until: Instant) {
        if let Some(remote) = self.remote_of(vni, &inner_src) {
            self.groups
                .table
                .write()
                .expect("lock")
                .routers
                .insert(remote, until);
        }
    }

    /// Whether a querier keeps the memberships of `family`'s groups in
    /// `vni` true (set by the switch's snooping, from the VLAN `vni`
    /// carries): pruning only then.
    pub fn set_group_pruning(&self, vni: u32, family: NetKind, on: bool) {
        let i = usize::from(family == NetKind::Ipv6);
        let mut t = self.groups.table.write().expect("lock");
        if t.pruning.get(&vni).is_some_and(|p| p[i]) != on {
            t.pruning.entry(vni).or_default()[i] = on;
        }
    }

    /// Whether `family`'s group frames in `vni` are pruned now.
    pub fn group_pruning(&self, vni: u32, family: NetKind) -> bool {
        let t = self.groups.table.read().expect("lock");
        t.pruning
            .get(&vni)
            .is_some_and(|p| p[usize::from(family == NetKind::Ipv6)])
    }

    /// Forgets segment `vni`'s groups and pruning (the segment is gone).
    pub(super) fn forget_groups(&self, vni: u32) {
        let mut t = self.groups.table.write().expect("lock");
        t.groups.retain(|&(n, _), _| n != vni);
        t.pruning.remove(&vni);
    }

    /// Forgets what expired.
    pub fn sweep_groups(&self, now: Instant) {
        let mut t = self.groups.table.write().expect("lock");
        t.groups.retain(|_, m| {
            m.retain(|(_, u)| *u > now);
            !m.is_empty()
        });
        t.routers.retain(|_, u| *u > now);
    }

    /// Group memberships (VNI, group, remotes) now, and the groups
    /// refused, for the views.
    pub fn group_remotes(&self, now: Instant) -> (Vec<(u32, IpAddr, Vec<IpAddr>)>, u64) {
        let t = self.groups.table.read().expect("lock");
        let mut v: Vec<_> = t
            .groups
            .iter()
            .map(|(&(vni, g), m)| {
                (
                    vni,
                    g,
                    m.iter()
                        .filter(|(_, u)| *u > now)
                        .map(|(r, _)| *r)
                        .collect(),
                )
            })
            .collect();
        v.sort();
        (v, self.groups.refused.load(Relaxed))
    }

    /// Narrows `out` (the flood list, for an inner frame `frame` in `vni`)
    /// to the remotes with members of its group and those leading to a
    /// router, when it is a frame to a group snooping prunes.
    pub(super) fn prune_to_members<T>(
        &self,
        vni: u32,
        frame: &[u8],
        layers: Option<&Layers>,
        out: &mut smallvec::SmallVec<[(IpAddr, T); 8]>,
    ) {
        let Some(n) = layers.and_then(|l| l.net()) else {
            return;
        };
        if frame.first().is_none_or(|b| b & 1 == 0) {
            return;
        }
        let group = match n.kind {
            NetKind::Ipv4 => frame
                .get(n.offset + 16..n.offset + 20)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(IpAddr::from),
            NetKind::Ipv6 => frame
                .get(n.offset + 24..n.offset + 40)
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .map(IpAddr::from),
        };
        let Some(group) = group.filter(|g| g.is_multicast() && !is_link_local(*g)) else {
            return;
        };
        let now = Instant::now();
        let t = self.groups.table.read().expect("lock");
        if !t
            .pruning
            .get(&vni)
            .is_some_and(|p| p[usize::from(n.kind == NetKind::Ipv6)])
        {
            return;
        }
        let Some(m) = t.groups.get(&(vni, group)) else {
            return;
        };
        let keep = |r: &IpAddr| {
            m.iter().any(|(x, u)| x == r && *u > now) || t.routers.get(r).is_some_and(|u| *u > now)
        };
        out.retain(|(r, _)| keep(r));
    }
}
