//! The FDB on the path ([`crate::fdb`]), one stage (`fdb`): frame by
//! frame, its source address learned on its port and VLAN, then its
//! destination looked up — in this order for each frame before the next,
//! as a learning switch does (a frame's lookup never sees what a later
//! frame of the burst taught). Each is remembered for the burst's next
//! frame (a stream's frames learn and look up once).

use crate::arc::always;
use crate::arc::{Decl, Kind};
use crate::counters::add;
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};
use crate::fdb::Learn;

pub(crate) const DECL: Decl<InRun> = Decl {
    name: "fdb",
    kind: Kind::Engine,
    after: &["vlan", "mirror"],
    before: &["forward"],
    wants: always,
    run: learn_and_look_up,
};

fn learn_and_look_up(st: &mut State, cx: &Ctx, b: &mut Burst) {
    for i in b.live() {
        learn(st, cx, b, i);
        look_up(st, cx, b, i);
    }
}

fn learn(st: &mut State, cx: &Ctx, b: &Burst, i: usize) {
    let fdb = &cx.sw.fdb;
    let (vlan, src) = (b[i].meta.vlan, b[i].src());
    if st.learned == Some((vlan, src)) {
        return;
    }
    if cx.synthetic() {
        b.trace(&cx.port.tracer, i, "fdb", || {
            format!("{src} in VLAN {vlan} not learned: a synthetic frame")
        });
        return;
    }
    let mut learn = fdb.learn(vlan, src, cx.port.id, st.now);
    if learn == Learn::Refused && cx.sw.release_address(vlan, src) {
        learn = fdb.learn(vlan, src, cx.port.id, st.now);
    }
    if learn == Learn::Refused {
        add(&cx.port.ingress[cx.q].fdb_learn_refused, 1);
    }
    b.trace(&cx.port.tracer, i, "fdb", || {
        format!("learned {src} in VLAN {vlan}: {learn:?}")
    });
    st.learned = Some((vlan, src));
}

fn look_up(st: &mut State, cx: &Ctx, b: &mut Burst, i: usize) {
    let (vlan, dst) = (b[i].meta.vlan, b[i].dst());
    let port = match st.route {
        Some((v, mac, port)) if (v, mac) == (vlan, dst) => port,
        _ => {
            let port = (!dst.is_multicast())
                .then(|| cx.sw.fdb.lookup(vlan, dst, st.now))
                .flatten();
            st.route = Some((vlan, dst, port));
            port
        }
    };
    b.learned[i] = port;
    b.trace(&cx.port.tracer, i, "fdb", || match port {
        Some(p) => {
            let name = cx.ports.get(p).map_or("?", |x| x.name.as_str());
            format!("looked up {dst} in VLAN {vlan}: port {name}")
        }
        None if dst.is_multicast() => format!("looked up {dst}: a group address"),
        None => format!("looked up {dst} in VLAN {vlan}: unknown"),
    });
}
