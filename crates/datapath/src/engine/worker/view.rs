//! What every queue reads of every port — its effective settings, its
//! security groups, the mirrors, what is on at it and its egress arc —
//! built once for a generation of the switch and its port table, and
//! shared by every queue's state.
//!
//! Each queue's state had kept its own copy, rebuilt by each queue at
//! each change: with a port (and a queue) per VM, ports² copies — about
//! 0.7 MB per port at 1,000 VMs, most of it the egress arcs — and every
//! queue taking every port's locks again at every change.

use super::{InRun, OutRun};
use crate::arc::{FeatureArc, Features};
use crate::capture::Point;
use crate::engine::Switch;
use crate::port_table::PortTable;
use crate::settings::{PortSettings, RxOverflow};
use crate::stages::mirror::view::MirrorView;
use std::sync::{Arc, Mutex, Weak};

/// Every port of one port table, as the switch was at one generation.
pub(crate) struct PortsView {
    /// Each port's effective settings (a mirror's output port drops what
    /// it cannot take: copies never keep the frames they copy waiting).
    pub(crate) settings: Arc<[PortSettings]>,
    /// Each port's security groups, if it has any.
    pub(crate) acls: Arc<[Option<Arc<crate::acl::PortAcl>>]>,
    /// The port mirrors, resolved.
    pub(crate) mirrors: Arc<MirrorView>,
    /// What is on at each port, as the arc builder asks it.
    features: Vec<Features>,
    /// Each port's egress arc.
    pub(crate) out_arcs: Arc<[FeatureArc<OutRun>]>,
}

impl PortsView {
    fn build(sw: &Switch, t: &PortTable) -> PortsView {
        let mirrors = MirrorView::new(&sw.mirrors.list(), t);
        let settings: Vec<PortSettings> = (0..t.len())
            .map(|i| {
                let mut s = t
                    .get(i)
                    .map_or_else(PortSettings::default, |p| p.effective_settings());
                if mirrors.dedicated.get(i) == Some(&true) {
                    s.rx_overflow = RxOverflow::Drop;
                }
                s
            })
            .collect();
        let acls = (0..t.len())
            .map(|i| t.get(i).and_then(|p| sw.acl.port(&p.name)))
            .collect::<Vec<_>>();
        let switch_wide = Features {
            lease_snooping: settings.iter().any(|s| s.dhcp_snooping),
            services: sw.services.installed(),
            suppression: !sw.endpoints.read().expect("endpoints lock").is_empty(),
            snooping: sw.mdb.config().enabled,
            ..Features::default()
        };
        let features: Vec<Features> = (0..t.len())
            .map(|p| {
                let Some(port) = t.get(p) else {
                    return switch_wide;
                };
                let s = &settings[p];
                Features {
                    uplink: port.is_uplink(),
                    capture_in: port.taps.on(Point::In),
                    csum_software: !s.csum,
                    lro_software: s.lro,
                    mirror_output: mirrors.dedicated.get(p) == Some(&true),
                    disconnected: !s.connected,
                    policer: port.rates.policing(),
                    forged_check: !s.allow_forged_transmits,
                    guards: crate::guard::any_on(s),
                    acl: acls[p].is_some(),
                    mirror_in: mirrors.selects_from(p),
                    mirror_out: mirrors.selects_to(p),
                    shares: s.capacity.is_some(),
                    ..switch_wide
                }
            })
            .collect();
        let out_arcs = features.iter().map(crate::egress_arc).collect();
        PortsView {
            settings: settings.into(),
            acls: acls.into(),
            mirrors: Arc::new(mirrors),
            features,
            out_arcs,
        }
    }

    /// The ingress arc of port `p` (a port the table does not hold: the
    /// switch-wide stages only).
    pub(crate) fn in_arc(&self, p: usize) -> FeatureArc<InRun> {
        crate::ingress_arc(&self.features.get(p).copied().unwrap_or_default())
    }
}

/// The view built last, for the next queue that reads the same
/// generation and table.
#[derive(Default)]
pub(crate) struct Views {
    latest: Mutex<Option<Latest>>,
}

struct Latest {
    gen: u64,
    /// Weak: a table the workers have let go is not kept for the view
    /// (nor are its removed ports); its allocation stays, so its address
    /// is not another table's.
    table: Weak<PortTable>,
    view: Arc<PortsView>,
}

impl Views {
    /// The view of table `t` at generation `gen`: the one built last if it
    /// is of both, else a new one (built under the lock, so that queues
    /// refreshing together build it once).
    pub(crate) fn at(&self, sw: &Switch, gen: u64, t: &Arc<PortTable>) -> Arc<PortsView> {
        let mut latest = self.latest.lock().expect("views lock");
        if let Some(l) = latest.as_ref() {
            if l.gen == gen && std::ptr::eq(l.table.as_ptr(), Arc::as_ptr(t)) {
                return Arc::clone(&l.view);
            }
        }
        let view = Arc::new(PortsView::build(sw, t));
        *latest = Some(Latest {
            gen,
            table: Arc::downgrade(t),
            view: Arc::clone(&view),
        });
        view
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::harness::Harness;
    use crate::settings::PortSettings;
    use crate::SwitchConfig;
    use hvnet_wire::MacAddr;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    #[test]
    fn queues_of_one_generation_share_one_view_and_a_change_builds_the_next() {
        let s = PortSettings::default();
        let h = Harness::new(
            &[
                (MacAddr([2, 0, 0, 0, 0, 1]), 2, s.clone()),
                (MacAddr([2, 0, 0, 0, 0, 2]), 1, s.clone()),
            ],
            SwitchConfig::default(),
        );
        let sw = &h.sw;
        let (t, gen) = (sw.ports(), sw.settings_gen.load(Ordering::Acquire));
        let a = sw.views.at(sw, gen, &t);
        let b = sw.views.at(sw, gen, &t);
        assert!(
            Arc::ptr_eq(&a, &b),
            "one view for every queue of a generation"
        );
        assert_eq!(a.settings.len(), t.len());
        assert_eq!(a.out_arcs.len(), t.len());

        let name = t.get(1).unwrap().name.clone();
        let changed = PortSettings {
            mtu: 9000,
            ..s.clone()
        };
        sw.set_port(&name, changed).unwrap();
        let gen2 = sw.settings_gen.load(Ordering::Acquire);
        assert_ne!(gen, gen2);
        let c = sw.views.at(sw, gen2, &sw.ports());
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.settings[1].mtu, 9000, "the new view holds the change");
        assert_eq!(
            a.settings[1].mtu, s.mtu,
            "the old one, still held, does not"
        );
    }
}
