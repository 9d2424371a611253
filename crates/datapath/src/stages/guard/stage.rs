//! The guards at a worker's ingress (docs/guide/guards.md): each frame
//! from a VM's port through [`crate::guard`] (`guard`, on the arc of a
//! VM's port with a guard on), and DHCP ACKs crossing the switch through
//! [`crate::lease`] into their client's port (`leases`, on every port's
//! arc while some port snoops DHCP).

use crate::arc::{Decl, Kind};
use crate::counters::DropReason;
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};
use crate::{guard, lease};
use hvnet_port::Packet;
use std::sync::atomic::Ordering;

pub(crate) const GUARDS: Decl<InRun> = Decl {
    name: "guard",
    kind: Kind::Policy,
    after: &["forged"],
    before: &["leases"],
    wants: |f| f.guards && !f.uplink,
    run: |st, cx, b| {
        for i in b.live() {
            let r = st.inspect(cx, &mut b[i]);
            b.trace(&cx.port.tracer, i, "guard", || match r {
                Ok(()) => "passed".into(),
                Err(why) => format!("refused: {}", why.name()),
            });
            if let Err(why) = r {
                cx.drop_from(b, i, why);
            }
        }
    },
};

pub(crate) const LEASES: Decl<InRun> = Decl {
    name: "leases",
    kind: Kind::Observation,
    after: &["guard"],
    before: &["acl"],
    wants: |f| f.lease_snooping,
    run: |st, cx, b: &mut Burst| {
        for i in b.live() {
            let leased = st.snoop_lease(cx, &mut b[i]);
            b.trace(&cx.port.tracer, i, "leases", || match leased {
                Some(ip) => format!("a DHCP ACK: {ip} leased to its client's port"),
                None => "no DHCP ACK for a snooping port".into(),
            });
        }
    },
};

impl State {
    fn inspect(&self, cx: &Ctx, pkt: &mut Packet) -> Result<(), DropReason> {
        let settings = &self.settings;
        let port = guard::PortView {
            mac: cx.port.mac,
            settings: &settings[cx.port.id],
            owned_elsewhere: |ip| {
                settings
                    .iter()
                    .enumerate()
                    .any(|(i, s)| i != cx.port.id && s.addresses.owns(ip))
            },
            now: self.now,
        };
        if !port.any() {
            return Ok(());
        }
        if guard::reads_payload(&pkt.meta.layers) {
            pkt.buf.fill_pending();
        }
        guard::inspect(pkt.frame(), &pkt.meta.layers, &port)
    }

    /// DHCP snooping: an ACK crossing the switch gives its client's port
    /// the address (`dhcp_snooping`), seen by every worker from its next
    /// batch on.
    fn snoop_lease(&self, cx: &Ctx, pkt: &mut Packet) -> Option<std::net::Ipv4Addr> {
        if !lease::is_server_reply(pkt.frame(), &pkt.meta.layers) {
            return None;
        }
        pkt.buf.fill_pending();
        let (mac, ip, secs) = lease::acked(pkt.frame(), &pkt.meta.layers)?;
        // The same MAC may be two tenants' guests, each in its VLAN.
        let client = cx
            .ports
            .iter()
            .filter(|p| p.mac == mac && !p.is_uplink())
            .min_by_key(|p| p.vlan() != pkt.meta.vlan);
        let p = client.filter(|p| self.settings[p.id].dhcp_snooping)?;
        p.learn_lease(ip, self.now + secs);
        cx.sw.settings_gen.fetch_add(1, Ordering::Release);
        Some(ip)
    }
}
