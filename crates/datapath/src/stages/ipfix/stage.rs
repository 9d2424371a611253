//! Flow export ([`crate::ipfix`]) as a stage: frames metered, 1 in
//! `sampling`, into the exporter's flow cache, with the port their
//! destination was learned on. On every port's arc while `[ipfix]` is on.

use crate::arc::{Decl, Kind};
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};
use crate::ipfix::TunnelKey;

pub(crate) const DECL: Decl<InRun> = Decl {
    name: "ipfix",
    kind: Kind::Observation,
    after: &["fdb"],
    before: &["forward"],
    wants: |f| f.ipfix,
    run: meter,
};

fn meter(st: &mut State, cx: &Ctx, b: &mut Burst) {
    let Some(ix) = st.ipfix.clone() else {
        return;
    };
    for i in b.live() {
        // Systematic 1-in-N sampling, counted per queue.
        st.ipfix_skip -= 1;
        if st.ipfix_skip == 0 {
            st.ipfix_skip = ix.config.sampling.max(1);
            let pkt = &b[i];
            let tunnel = st.endpoint.and_then(|e| TunnelKey::of(pkt, e));
            ix.meter(cx.port.id, b.learned[i], pkt, tunnel);
            b.trace(&cx.port.tracer, i, "ipfix", || "metered".into());
        } else {
            b.trace(&cx.port.tracer, i, "ipfix", || "not sampled".into());
        }
    }
}
