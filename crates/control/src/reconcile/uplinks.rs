//! `hvnet up FILE` and the uplinks: which the file adds, removes and
//! changes, found by name and checked before anything changes, and the
//! adding and removing of one, as `ovs-vsctl add-port`/`del-port` of a
//! physical NIC.

use crate::ctl::Ctl;
use crate::proto::CtlError;
use crate::topology::{Topology, Uplink};
use hvnet_datapath::{PortSettings, PortSpec};

/// What applying a file does to the uplinks: those it adds (their indices
/// in the file), those it removes (by name), the kept ones whose port
/// settings change, and the kept tunnels whose segments change (the VLANs
/// they carry besides their own, each with its VNI, as the file has them).
#[derive(Debug, Default, PartialEq)]
pub(super) struct UplinkPlan {
    pub(super) added: Vec<usize>,
    pub(super) removed: Vec<String>,
    pub(super) changed: Vec<(String, PortSettings)>,
    pub(super) segments: Vec<(String, Vec<(u16, u32)>)>,
}

/// Why a file's uplinks are refused for a topology that runs: each names
/// the uplink, and what to do instead.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum UplinkChangeError {
    /// An uplink with BGP EVPN would be added or removed.
    #[error("uplink {uplink}: it has BGP EVPN ([uplink.vxlan] evpn = true), whose shadow devices and FRR come and go with the topology only (`hvnet down {topology}` first)")]
    Evpn {
        /// The uplink.
        uplink: String,
        /// The topology that runs.
        topology: String,
    },
    /// An uplink the file removes has an external host on its wire.
    #[error("uplink {uplink}: host {host} is on its wire, and [[host]] tables do not change while the topology runs (`hvnet down {topology}` first)")]
    HostOnWire {
        /// The uplink.
        uplink: String,
        /// The host.
        host: String,
        /// The topology that runs.
        topology: String,
    },
    /// An uplink the file adds would have an external host on its wire.
    #[error("uplink {uplink}: host {host} would be on its wire, and [[host]] tables do not change while the topology runs (`hvnet down {topology}` first)")]
    HostAdded {
        /// The uplink.
        uplink: String,
        /// The host.
        host: String,
        /// The topology that runs.
        topology: String,
    },
    /// An uplink the file adds is on a device of one it removes.
    #[error("uplink {uplink}: device {device} is uplink {other}'s, which the file removes: remove {other} first (`hvnet up` of a file without either), then add {uplink}")]
    DeviceTaken {
        /// The uplink added.
        uplink: String,
        /// Its device (a team's: its members joined by `+`).
        device: String,
        /// The uplink removed.
        other: String,
    },
    /// A kept uplink changed beyond its port settings.
    #[error("uplink {uplink}: changed beyond its port settings and its tunnel's segments (device, queues, lro, VLAN, netqueue, rss, batch or [uplink.vxlan] other than vlans); remove it (`hvnet up` of the file without it) and add it again, or `hvnet down {topology}` first")]
    Changed {
        /// The uplink.
        uplink: String,
        /// The topology that runs.
        topology: String,
    },
    /// A kept uplink's tso, csum or mtu changed.
    #[error("uplink {uplink}: its tso, csum and mtu are set when it is added (ring1, ring2 and rx_usecs change at run time); remove it (`hvnet up` of the file without it) and add it again, or `hvnet down {topology}` first")]
    FixedSettings {
        /// The uplink.
        uplink: String,
        /// The topology that runs.
        topology: String,
    },
}

/// Compares the file's uplinks with those that run, by name, and refuses,
/// with the reason, what does not change at run time: an uplink with an
/// external host on its wire (`[[host]]` tables stay as they are), one
/// with BGP EVPN (its shadow devices and FRR are made and removed with
/// the topology), a new uplink on the device of one the file removes (one
/// change at a time), and a kept uplink changed beyond the settings
/// `hvnet port NAME set` changes on an uplink (ring1, ring2, rx_usecs)
/// and its tunnel's segments (`[uplink.vxlan] vlans`, with the trunk they
/// make of it).
pub(super) fn plan_uplinks(
    now: &Topology,
    file: &Topology,
) -> Result<UplinkPlan, UplinkChangeError> {
    let topology = || now.name.clone();
    // An uplink with BGP EVPN is neither added nor removed at run time.
    let evpn = |u: &Uplink| match &u.vxlan {
        Some(v) if v.evpn => Err(UplinkChangeError::Evpn {
            uplink: u.name.clone(),
            topology: topology(),
        }),
        _ => Ok(()),
    };
    let mut plan = UplinkPlan::default();
    for r in &now.uplinks {
        if file.uplinks.iter().any(|u| u.name == r.name) {
            continue;
        }
        if let Some(h) = now.hosts.iter().find(|h| h.uplink == r.name) {
            return Err(UplinkChangeError::HostOnWire {
                uplink: r.name.clone(),
                host: h.name.clone(),
                topology: topology(),
            });
        }
        evpn(r)?;
        plan.removed.push(r.name.clone());
    }
    for (i, u) in file.uplinks.iter().enumerate() {
        let Some(r) = now.uplinks.iter().find(|r| r.name == u.name) else {
            if let Some(h) = file.hosts.iter().find(|h| h.uplink == u.name) {
                return Err(UplinkChangeError::HostAdded {
                    uplink: u.name.clone(),
                    host: h.name.clone(),
                    topology: topology(),
                });
            }
            evpn(u)?;
            let shared = |o: &&Uplink| o.devices().iter().any(|d| u.devices().contains(d));
            if let Some(o) = now.uplinks.iter().find(shared) {
                return Err(UplinkChangeError::DeviceTaken {
                    uplink: u.name.clone(),
                    device: u.device.clone(),
                    other: o.name.clone(),
                });
            }
            plan.added.push(i);
            continue;
        };
        let mut as_running = u.clone();
        as_running.settings = r.settings.clone();
        // A tunnel's segments come and go at run time.
        let segments = match (&mut as_running.vxlan, &r.vxlan) {
            (Some(a), Some(b)) if a.vlans != b.vlans => {
                Some(std::mem::replace(&mut a.vlans, b.vlans.clone()))
            }
            _ => None,
        };
        if as_running != *r {
            return Err(UplinkChangeError::Changed {
                uplink: u.name.clone(),
                topology: topology(),
            });
        }
        if let Some(vlans) = segments {
            plan.segments.push((u.name.clone(), vlans));
        }
        if u.settings != r.settings {
            let fixed = |s: &PortSettings| (s.tso, s.csum, s.mtu);
            if fixed(&u.settings) != fixed(&r.settings) {
                return Err(UplinkChangeError::FixedSettings {
                    uplink: u.name.clone(),
                    topology: topology(),
                });
            }
            plan.changed.push((u.name.clone(), u.settings.clone()));
        }
    }
    Ok(plan)
}

/// Adds uplink `i` of `topo`, its device opened (`spec`), as at `hvnet
/// up`: its port joins the switch, and Dynamic NetQueue's balancer starts
/// for it (its thread, not joined, ends when the port leaves or the
/// switch stops).
pub(super) fn add_uplink(
    cx: &Ctl,
    topo: &Topology,
    i: usize,
    spec: PortSpec,
) -> Result<(), CtlError> {
    let u = &topo.uplinks[i];
    let port = cx
        .sw
        .add_port(spec)
        .map_err(|e| CtlError::failed(format!("uplink {}: {e}", u.name)))?;
    match crate::balancer::start(&cx.sw, topo, u) {
        Ok(Some((_thread, b))) => cx
            .balancers
            .lock()
            .expect("balancers lock")
            .push((u.name.clone(), b)),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(uplink = %u.name, error = %e, "netqueue: the balancer did not start")
        }
    }
    tracing::info!(uplink = %u.name, device = %u.device, port = port.id, "uplink added");
    Ok(())
}

/// Removes uplink `name`'s port (its queues, FDB entries and place in the
/// flood lists with it) and its balancer.
pub(super) fn del_uplink(cx: &Ctl, name: &str) -> Result<(), CtlError> {
    let port = cx
        .sw
        .remove_port(name)
        .map_err(|e| CtlError::failed(format!("uplink {name}: {e}")))?;
    cx.balancers
        .lock()
        .expect("balancers lock")
        .retain(|(n, _)| n != name);
    tracing::info!(uplink = %name, port = port.id, "uplink removed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A VM, an uplink with an external host on its wire, and one without.
    const RUNS: &str = r#"
name = "t1"

[[vm]]
name = "vm1"
ipv4 = "198.18.0.1/24"

[[uplink]]
name = "up0"
device = "hvx0"

[[uplink]]
name = "up1"
device = "hvx1"
queues = 2

[[host]]
name = "ext"
uplink = "up0"
ipv4 = "198.18.0.100/24"
"#;

    const UP2: &str = "\n[[uplink]]\nname = \"up2\"\ndevice = \"hvx2\"\n";

    fn plan(file: &str) -> Result<UplinkPlan, UplinkChangeError> {
        let now = crate::topology::parse(RUNS).unwrap();
        let file = crate::topology::parse(file).unwrap_or_else(|e| panic!("{e:?}"));
        plan_uplinks(&now, &file)
    }

    fn without_up1() -> String {
        RUNS.replace(
            "[[uplink]]\nname = \"up1\"\ndevice = \"hvx1\"\nqueues = 2\n",
            "",
        )
    }

    #[test]
    fn uplinks_the_file_adds_and_removes_are_found_by_name() {
        assert_eq!(plan(RUNS), Ok(UplinkPlan::default()));
        let added = plan(&format!("{RUNS}{UP2}")).unwrap();
        assert_eq!((added.added, added.removed), (vec![2], vec![]));
        let removed = plan(&without_up1()).unwrap();
        assert_eq!(
            (removed.added, removed.removed),
            (vec![], vec!["up1".to_string()])
        );
        // The host stays on up0 though up0's place in the file moved: hosts
        // name their uplink.
        let moved = RUNS
            .replace(
                "name = \"up0\"\ndevice = \"hvx0\"",
                "name = \"up9\"\ndevice = \"hvx9\"",
            )
            .replace(
                "name = \"up1\"\ndevice = \"hvx1\"",
                "name = \"up0\"\ndevice = \"hvx0\"",
            )
            .replace(
                "name = \"up9\"\ndevice = \"hvx9\"",
                "name = \"up1\"\ndevice = \"hvx1\"",
            );
        assert_eq!(
            crate::topology::parse(&moved).unwrap().hosts,
            crate::topology::parse(RUNS).unwrap().hosts
        );
        // Rings and wake-up coalescing change at run time, as with `hvnet
        // port up1 set`.
        let rings =
            plan(&RUNS.replace("queues = 2", "queues = 2\nring1 = 1024\nrx_usecs = 50")).unwrap();
        assert_eq!(rings.changed.len(), 1);
        assert_eq!(rings.changed[0].0, "up1");
        assert_eq!(
            (rings.changed[0].1.ring1, rings.changed[0].1.rx_usecs),
            (1024, 50)
        );
    }

    /// A tunnel's segments change at run time (with the trunk they make of
    /// its port); the rest of `[uplink.vxlan]` does not.
    #[test]
    fn a_tunnels_segments_change_at_run_time() {
        let tunnel = |vlans: &str| {
            format!(
                "{}\n[[uplink]]\nname = \"up3\"\ndevice = \"hvx3\"\nvlan = 10\n[uplink.vxlan]\nvni = 5010\nlocal = \"198.18.60.1/24\"\n{vlans}",
                RUNS.replace("name = \"t1\"", "name = \"t2\"")
            )
        };
        let now = crate::topology::parse(&tunnel("vlans = { 20 = 5020 }\n")).unwrap();
        let plan_to =
            |vlans: &str| plan_uplinks(&now, &crate::topology::parse(&tunnel(vlans)).unwrap());
        let p = plan_to("vlans = { 20 = 5020, 30 = 5030 }\n").unwrap();
        assert_eq!(
            p.segments,
            [("up3".to_string(), vec![(20, 5020), (30, 5030)])]
        );
        assert_eq!(p.changed.len(), 1, "the trunk of VLANs 20 and 30");
        assert!(p.changed[0].1.vlans.contains(30));
        let p = plan_to("vlans = { 30 = 5030 }\n").unwrap();
        assert_eq!(p.segments, [("up3".to_string(), vec![(30, 5030)])]);
        assert_eq!(
            plan_to("vlans = { 20 = 5020 }\n"),
            Ok(UplinkPlan::default())
        );
        let e = plan_to("vlans = { 20 = 5020 }\nudp_csum = true\n").unwrap_err();
        assert!(e.to_string().contains("other than vlans"), "{e}");
    }

    #[test]
    fn what_does_not_change_at_run_time_is_refused_with_the_reason() {
        // The host and its uplink both gone: the host is named.
        let no_host = RUNS
            .replace(
                "[[host]]\nname = \"ext\"\nuplink = \"up0\"\nipv4 = \"198.18.0.100/24\"\n",
                "",
            )
            .replace("[[uplink]]\nname = \"up0\"\ndevice = \"hvx0\"\n", "");
        let e = plan(&no_host).unwrap_err().to_string();
        assert!(e.contains("uplink up0: host ext is on its wire"), "{e}");
        assert!(e.ends_with("(`hvnet down t1` first)"), "{e}");
        // A new uplink with a host of its own.
        let hosted = format!("{RUNS}{UP2}\n[[host]]\nname = \"ext2\"\nuplink = \"up2\"\n");
        assert_eq!(
            plan(&hosted),
            Err(UplinkChangeError::HostAdded {
                uplink: "up2".into(),
                host: "ext2".into(),
                topology: "t1".into()
            })
        );
        // EVPN, added.
        let evpn = format!(
            "{RUNS}{UP2}\n[uplink.vxlan]\nvni = 7\nlocal = \"198.18.60.1/24\"\nevpn = true\n"
        );
        let e = plan(&evpn).unwrap_err().to_string();
        assert!(e.contains("uplink up2: it has BGP EVPN"), "{e}");
        // A removed uplink's device taken by a new one in the same file.
        let e = plan(&format!("{}{}", without_up1(), UP2.replace("hvx2", "hvx1"))).unwrap_err();
        assert!(e.to_string().contains("device hvx1 is uplink up1's"), "{e}");
        for (from, to, why) in [
            (
                "queues = 2",
                "queues = 4",
                "changed beyond its port settings",
            ),
            (
                "device = \"hvx1\"",
                "device = \"hvx7\"",
                "changed beyond its port settings",
            ),
            (
                "queues = 2",
                "queues = 2\nlro = \"software\"",
                "changed beyond its port settings",
            ),
            (
                "queues = 2",
                "queues = 2\nmtu = 9000",
                "its tso, csum and mtu are set when it is added",
            ),
            (
                "queues = 2",
                "queues = 2\ntso = \"software\"",
                "its tso, csum and mtu",
            ),
        ] {
            let e = plan(&RUNS.replace(from, to)).unwrap_err().to_string();
            assert!(
                e.starts_with("uplink up1: ") && e.contains(why),
                "{to}: {e}"
            );
        }
    }
}
