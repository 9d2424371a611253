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
        let (frame, layers) = (pkt.buf.held(), &pkt.meta.layers);
        // A traced frame's line says why (read before the check, which
        // may open its connection); a synthetic frame is only judged.
        let why = b.traced(i).map(|_| acl.judge(out, frame, layers, st.now));
        let r = match &why {
            Some((r, _)) if cx.synthetic() => *r,
            _ => acl.check(out, frame, layers, st.now),
        };
        b.trace(&cx.port.tracer, i, "acl", || {
            let why = why.map(|w| w.1).unwrap_or_default();
            match &r {
                Ok(()) => format!("sent: allowed, {why}"),
                Err(d) => format!("sent: {}, {why}", d.reason(out).name()),
            }
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
    let (frame, layers) = (o.pkt.buf.held(), &o.pkt.meta.layers);
    let why = st.tracing.map(|_| acl.judge(to, frame, layers, st.now));
    let r = match &why {
        Some((r, _)) if cx.synthetic() => *r,
        _ => acl.check(to, frame, layers, st.now),
    };
    st.trace_out(cx, "acl", || {
        let (name, why) = (&cx.ports[o.dst].name, why.map(|w| w.1).unwrap_or_default());
        match &r {
            Ok(()) => format!("to {name}: allowed, {why}"),
            Err(d) => format!("to {name}: {}, {why}", d.reason(to).name()),
        }
    });
    r.map_err(|d| d.reason(to))
}
