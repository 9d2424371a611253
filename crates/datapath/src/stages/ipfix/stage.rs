//! Flow export ([`crate::ipfix`]) as a stage: frames metered, 1 in
//! `sampling`, into the exporter's flow cache, with the port their
//! destination was learned on. On every port's arc while `[ipfix]` is on.

use crate::arc::{Decl, Kind};
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};
use crate::ipfix::{Ipfix, TunnelKey};
use std::sync::Arc;

pub(crate) const DECL: Decl<InRun> = Decl {
    name: "ipfix",
    kind: Kind::Observation,
    after: &["fdb"],
    before: &["suppress", "forward"],
    wants: |f| f.services.has::<Ipfix>(),
    run: meter,
};

/// A queue's meter, made again whenever the settings are read (a
/// worker's locals are): the exporter, and the frames until the next one
/// metered.
#[derive(Default)]
struct Meter {
    exporter: Option<Arc<Ipfix>>,
    skip: u32,
}

fn meter(st: &mut State, cx: &Ctx, b: &mut Burst) {
    let endpoint = st.endpoint;
    let m = st.locals.get::<Meter>();
    if m.exporter.is_none() {
        m.exporter = crate::ipfix::current(&cx.sw);
        m.skip = 1;
    }
    let Some(ix) = &m.exporter else {
        return;
    };
    if cx.synthetic() {
        // A synthetic frame is no flow's.
        for i in b.live() {
            b.trace(&cx.port.tracer, i, "ipfix", || {
                "not metered: a synthetic frame".into()
            });
        }
        return;
    }
    for i in b.live() {
        // Systematic 1-in-N sampling, counted per queue.
        m.skip -= 1;
        if m.skip == 0 {
            m.skip = ix.config.sampling.max(1);
            let pkt = &b[i];
            let tunnel = endpoint.and_then(|e| TunnelKey::of(pkt, e));
            ix.meter(cx.port.id, b.learned[i], pkt, tunnel);
            b.trace(&cx.port.tracer, i, "ipfix", || "metered".into());
        } else {
            b.trace(&cx.port.tracer, i, "ipfix", || "not sampled".into());
        }
    }
}
