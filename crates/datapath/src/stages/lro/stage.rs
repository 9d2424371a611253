//! Software LRO as a stage: on the ingress arc of an uplink with `lro =
//! "software"`, the whole burst through the queue's table.

use super::IngressLro;
use crate::arc::{Decl, Kind};
use crate::capture::{Point, Way};
use crate::engine::worker::{Burst, Ctx, InRun, State};

pub(crate) const DECL: Decl<InRun> = Decl {
    name: "lro",
    kind: Kind::Offload,
    after: &["checksum"],
    before: &[],
    wants: |f| f.uplink && f.lro_software,
    run: coalesce,
};

/// The burst's frames through the queue's table, flushed at its end: the
/// burst is what came out (as many frames or fewer).
fn coalesce(st: &mut State, cx: &Ctx, b: &mut Burst) {
    let mut lro = st.ingress_lro.take().unwrap_or_else(IngressLro::new);
    let mut ready = std::mem::take(&mut st.lro_ready);
    let (c, pool) = (&cx.port.ingress[cx.q], &mut st.pool);
    let mut out = |p| ready.push(p);
    // The live frames are the burst's `Ok` entries (a refused or dropped
    // one is an `Err` there).
    for p in b.frames.drain(..).flatten() {
        lro.receive(p, pool, c, &mut out);
    }
    lro.flush(pool, c, &mut out);
    st.ingress_lro = Some(lro);
    b.frames.extend(ready.drain(..).map(Ok));
    st.lro_ready = ready;
    b.replaced();
    for i in b.live() {
        let p = &b[i];
        cx.port.taps.packet(Point::Offload, Way::Inbound, cx.q, p);
        b.trace(&cx.port.tracer, i, "lro", || match p.meta.offload.gso {
            Some(g) => format!("coalesced: {} bytes, segments of {}", p.len(), g.size),
            None => "passed as it came".into(),
        });
    }
}
