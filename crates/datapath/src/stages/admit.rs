//! Whether a port's frames are taken at all: not from a mirror's output
//! (it only receives the mirror's copies), not from a disconnected port
//! (`connected = false`, the cable pulled), and not from another source
//! address than the port's own unless it may forge
//! (`allow_forged_transmits`).

use crate::arc::{Decl, Kind};
use crate::counters::DropReason;
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};

pub(crate) const MIRROR_OUTPUT: Decl<InRun> = Decl {
    name: "mirror-output",
    kind: Kind::Policy,
    after: &["lro"],
    before: &["disconnected"],
    wants: |f| f.mirror_output,
    run: |st, cx, b| drop_all(st, cx, b, DropReason::MirrorPort),
};

pub(crate) const DISCONNECTED: Decl<InRun> = Decl {
    name: "disconnected",
    kind: Kind::Policy,
    after: &["lro"],
    before: &[],
    wants: |f| f.disconnected,
    run: |st, cx, b| drop_all(st, cx, b, DropReason::Disconnected),
};

pub(crate) const FORGED: Decl<InRun> = Decl {
    name: "forged",
    kind: Kind::Policy,
    after: &["police"],
    before: &["guard"],
    wants: |f| f.forged_check,
    run: forged,
};

fn drop_all(_: &mut State, cx: &Ctx, b: &mut Burst, why: DropReason) {
    for i in b.live() {
        cx.drop_from(b, i, why);
    }
}

fn forged(_: &mut State, cx: &Ctx, b: &mut Burst) {
    let own = cx.port.mac;
    for i in b.live() {
        let src = b[i].src();
        b.trace(&cx.port.tracer, i, "forged", || match src == own {
            true => "from the port's own address".into(),
            false => format!("source {src} is not the port's {own}"),
        });
        if src != own {
            cx.drop_from(b, i, DropReason::Policy);
        }
    }
}
