//! Security groups ([`crate::acl`]) as stages: a port's rules for what
//! it sends, at its ingress (`from-port`), and for what it receives, on
//! the way to it (`to-port`), each with its connection tracking.

use crate::acl::Direction;
use crate::arc::{Decl, Kind};
use crate::counters::DropReason;
use crate::engine::worker::Burst;
use crate::engine::worker::{Ctx, State};
use crate::engine::worker::{InRun, Out, OutRun};

pub(crate) const FROM_PORT: Decl<InRun> = Decl {
    name: "acl",
    kind: Kind::Policy,
    after: &["guard", "leases"],
    before: &["vlan"],
    wants: |f| f.acl,
    run: from_port,
};

pub(crate) const TO_PORT: Decl<OutRun> = Decl {
    name: "acl",
    kind: Kind::Policy,
    after: &["mirror"],
    before: &["tag"],
    wants: |f| f.acl,
    run: to_port,
};

fn from_port(st: &mut State, cx: &Ctx, b: &mut Burst) {
    let Some(acl) = st.acls.get(cx.port.id).and_then(Option::clone) else {
        return;
    };
    let out = Direction::Out;
    for i in b.live() {
        let pkt = &b[i];
        let r = acl.check(out, pkt.buf.held(), &pkt.meta.layers, st.now);
        b.trace(&cx.port.tracer, i, "acl", || match &r {
            Ok(()) => "sent: allowed".into(),
            Err(d) => format!("sent: {}", d.reason(out).name()),
        });
        if let Err(d) = r {
            cx.drop_from(b, i, d.reason(out));
        }
    }
}

fn to_port(st: &mut State, cx: &Ctx, o: &mut Out<'_>) -> Result<(), DropReason> {
    let Some(acl) = st.acls.get(o.dst).and_then(Option::as_ref) else {
        return Ok(());
    };
    let to = Direction::In;
    let r = acl.check(to, o.pkt.buf.held(), &o.pkt.meta.layers, st.now);
    st.trace_out(cx, "acl", || match &r {
        Ok(()) => format!("to {}: allowed", cx.ports[o.dst].name),
        Err(d) => format!("to {}: {}", cx.ports[o.dst].name, d.reason(to).name()),
    });
    r.map_err(|d| d.reason(to))
}
