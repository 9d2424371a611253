//! An uplink's shares among the VMs sending through it ([`crate::nioc`],
//! `capacity`): on the egress arc of an uplink with a capacity, each VM's
//! frames admitted by its own allowance there.

use crate::arc::{Decl, Kind};
use crate::counters::DropReason;
use crate::engine::worker::{Ctx, State};
use crate::engine::worker::{Out, OutRun};
use crate::nioc::Claim;
use crate::rate::Policed;

pub(crate) const DECL: Decl<OutRun> = Decl {
    name: "shares",
    kind: Kind::Policy,
    after: &["acl"],
    before: &["tag"],
    wants: |f| f.uplink && f.shares,
    run: admit,
};

fn admit(st: &mut State, cx: &Ctx, o: &mut Out<'_>) -> Result<(), DropReason> {
    // What comes from the wire, and a mirror's copies, are no VM's.
    if cx.port.is_uplink() || st.mirroring {
        return Ok(());
    }
    let src = &st.settings[cx.port.id];
    let claim = Claim {
        shares: src.shares,
        reservation: src.reservation.map_or(0, |r| r.0 / 8),
    };
    let port = &cx.ports[o.dst];
    // What goes to the wire is copied out of the sending guest's memory
    // anyway; a TSO frame the allowance cuts is cut whole.
    o.pkt.buf.fill_pending();
    let verdict = port.shares.admit(cx.port.id, claim, o.pkt, st.now);
    st.trace_out(cx, "shares", || format!("to {}: {verdict:?}", port.name));
    let c = &cx.port.ingress[cx.q];
    match verdict {
        Policed::Pass => Ok(()),
        Policed::Cut => {
            cx.count(&c.uplink_share_cut, 1);
            Ok(())
        }
        Policed::Drop => {
            cx.count(&c.uplink_share_drops, 1);
            Err(DropReason::UplinkShare)
        }
    }
}
