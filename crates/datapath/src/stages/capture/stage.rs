//! The `in` capture point as a stage: on the arc of a port while a
//! capture takes its frames as they come in (`hvnet capture PORT
//! --point in`). The other points are where their frames are (the
//! offload stages, the write, every drop): each is one relaxed load there.

use crate::arc::{Decl, Kind};
use crate::capture::{Point, Way};
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};

pub(crate) const IN: Decl<InRun> = Decl {
    name: "capture-in",
    kind: Kind::Observation,
    after: &[],
    before: &["checksum", "lro"],
    wants: |f| f.capture_in,
    run: copy_in,
};

fn copy_in(_: &mut State, cx: &Ctx, b: &mut Burst) {
    for i in b.live() {
        if cx.synthetic() {
            b.trace(&cx.port.tracer, i, "capture-in", || {
                "not copied: a synthetic frame".into()
            });
            continue;
        }
        cx.port.taps.packet(Point::In, Way::Inbound, cx.q, &b[i]);
        b.trace(&cx.port.tracer, i, "capture-in", || {
            "copied for the port's captures".into()
        });
    }
}
