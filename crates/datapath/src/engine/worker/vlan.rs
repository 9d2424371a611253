//! VLANs ([`crate::vlan`]) on the path: a frame's VLAN given at its
//! ingress port from its tag and the port's mode (`vlan`), and the tag it
//! wears out of each port (`tag`: none to an access port, its VLAN's to a
//! trunk, none for a trunk's native VLAN).

use crate::arc::always;
use crate::arc::{Decl, Kind};
use crate::counters::DropReason;
use crate::engine::worker::Burst;
use crate::engine::worker::{Ctx, State};
use crate::engine::worker::{InRun, Out, OutRun};
use crate::forward;

pub(crate) const CLASSIFY: Decl<InRun> = Decl {
    name: "vlan",
    kind: Kind::Engine,
    after: &["acl"],
    before: &["fdb"],
    wants: always,
    run: classify,
};

pub(crate) const TAG: Decl<OutRun> = Decl {
    name: "tag",
    kind: Kind::Engine,
    after: &["queue", "shares"],
    before: &[],
    wants: always,
    run: tag,
};

fn classify(st: &mut State, cx: &Ctx, b: &mut Burst) {
    let vlans = st.settings[cx.port.id].vlans_of(cx.port.vlan());
    for i in b.live() {
        let pkt = &mut b[i];
        match forward::ingress_vlan(&vlans, pkt) {
            Some(vlan) => {
                pkt.meta.vlan = vlan;
                b.trace(&cx.port.tracer, i, "vlan", || {
                    format!("in VLAN {vlan} (tag {:?})", b[i].outer_tag())
                });
            }
            None => {
                b.trace(&cx.port.tracer, i, "vlan", || {
                    format!("tag {:?} not carried by the port", b[i].outer_tag())
                });
                cx.drop_from(b, i, crate::counters::DropReason::VlanNotAllowed);
            }
        }
    }
}

fn tag(st: &mut State, cx: &Ctx, o: &mut Out<'_>) -> Result<(), DropReason> {
    let port = &cx.ports[o.dst];
    let tag = forward::egress_tag(&st.settings[o.dst].vlans_of(port.vlan()), o.pkt);
    st.trace_out(cx, "tag", || format!("to {}: tag {tag:?}", port.name));
    if tag == o.pkt.meta.layers.outer_vlan() {
        return Ok(());
    }
    // Every buffer has headroom for a tag, and a frame is pushed one only
    // when it has none: never refused, but counted if it were.
    if o.pkt.set_vlan_tag(tag) {
        Ok(())
    } else {
        Err(DropReason::WriteError)
    }
}
