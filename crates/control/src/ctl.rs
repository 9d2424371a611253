//! What the control socket's requests are served from: the switch, the
//! topology as it runs, and what changes with it (kept apart from the
//! server, so that the requests' handlers — reconciling, libvirt's hook —
//! and the server name it without naming each other).

use crate::guest::Guest;
use crate::topology::Topology;
use hvnet_datapath::Switch;
use std::sync::{Arc, Mutex};

/// What requests are served from.
pub(crate) struct Ctl {
    pub sw: Arc<Switch>,
    /// The topology as it runs (VMs come and go: [`crate::reconcile`]).
    pub topo: Mutex<Arc<Topology>>,
    /// VMs and uplinks are added and removed one change at a time.
    pub changes: Mutex<()>,
    /// The namespace VMs whose namespace is watched (added and removed
    /// ones join and leave it).
    pub netns_watch: Arc<Mutex<crate::watch::NetnsWatch>>,
    /// The EVPN uplinks' segments: what each advertises (VMs added and
    /// removed at run time join and leave it), and their syncs.
    pub evpn: Mutex<crate::evpn::Segments>,
    pub guests: Arc<Mutex<Vec<Guest>>>,
    /// The daemon gave up root after bring-up (`--drop-privileges`).
    pub unprivileged: bool,
    /// Dynamic NetQueue's balancers, by uplink (uplinks added and removed
    /// at run time bring and take theirs).
    pub balancers: Mutex<Vec<(String, crate::balancer::Shared)>>,
}
