//! The policer on what a port sends (`tx_rate`, [`crate::rate`]): a
//! frame over the rate is dropped, a TSO frame partly over it cut to
//! what the bucket holds.

use crate::arc::{Decl, Kind};
use crate::counters::{add, DropReason};
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};
use crate::rate::Policed;

pub(crate) const DECL: Decl<InRun> = Decl {
    name: "police",
    kind: Kind::Policy,
    after: &["disconnected", "mirror-output"],
    before: &["forged"],
    wants: |f| f.policer,
    run: police,
};

fn police(st: &mut State, cx: &Ctx, b: &mut Burst) {
    let c = &cx.port.ingress[cx.q];
    for i in b.live() {
        let verdict = cx.port.rates.police(&mut b[i], st.now);
        b.trace(&cx.port.tracer, i, "police", || {
            match cx.port.rates.police_bucket() {
                Some((left, size)) => format!(
                    "{verdict:?}: {} of the bucket's {size} bytes left",
                    left.max(0)
                ),
                None => format!("{verdict:?}"),
            }
        });
        match verdict {
            Policed::Pass => {}
            Policed::Cut => add(&c.policed_cut, 1),
            Policed::Drop => cx.drop_from(b, i, DropReason::Policed),
        }
    }
}
