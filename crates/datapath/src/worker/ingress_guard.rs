//! The guards at a worker's ingress (docs/guide/guards.md): each frame
//! from a VM's port through [`crate::guard`], and DHCP ACKs crossing the
//! switch through [`crate::lease`] into their client's port.

use super::{Ctx, State};
use crate::counters::DropReason;
use crate::{guard, lease};
use hvnet_port::Packet;
use std::sync::atomic::Ordering;

impl State {
    /// The guards of a VM's port on a frame from it (its payload read in
    /// first where a guard looks into it), then DHCP snooping on what
    /// passed.
    pub(super) fn guard(&self, cx: &Ctx, pkt: &mut Packet) -> Result<(), DropReason> {
        self.inspect(cx, pkt)?;
        self.snoop_lease(cx, pkt);
        Ok(())
    }

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
        if cx.port.is_uplink() || !port.any() {
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
    fn snoop_lease(&self, cx: &Ctx, pkt: &mut Packet) {
        if !lease::is_server_reply(pkt.frame(), &pkt.meta.layers) {
            return;
        }
        pkt.buf.fill_pending();
        let Some((mac, ip, secs)) = lease::acked(pkt.frame(), &pkt.meta.layers) else {
            return;
        };
        let client = cx.ports.iter().find(|p| p.mac == mac && !p.is_uplink());
        if let Some(p) = client.filter(|p| self.settings[p.id].dhcp_snooping) {
            p.learn_lease(ip, self.now + secs);
            cx.sw.settings_gen.fetch_add(1, Ordering::Release);
        }
    }
}
