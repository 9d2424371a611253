//! The FDB on the path ([`crate::fdb`]): each frame's source address
//! learned on its port and VLAN (`learn`), and its destination looked up
//! (`lookup`), each remembered for the burst's next frame (a stream's
//! frames learn and look up once).

use crate::arc::always;
use crate::arc::{Decl, Kind};
use crate::counters::add;
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};
use crate::fdb::Learn;

pub(crate) const LEARN: Decl<InRun> = Decl {
    name: "learn",
    kind: Kind::Engine,
    after: &["vlan", "mirror"],
    before: &["lookup"],
    wants: always,
    run: learn,
};

pub(crate) const LOOKUP: Decl<InRun> = Decl {
    name: "lookup",
    kind: Kind::Engine,
    after: &["learn"],
    before: &["forward"],
    wants: always,
    run: lookup,
};

fn learn(st: &mut State, cx: &Ctx, b: &mut Burst) {
    let fdb = &cx.sw.fdb;
    for i in b.live() {
        let (vlan, src) = (b[i].meta.vlan, b[i].src());
        if st.learned == Some((vlan, src)) {
            continue;
        }
        let mut learn = fdb.learn(vlan, src, cx.port.id, st.now);
        if learn == Learn::Refused && cx.sw.release_address(vlan, src) {
            learn = fdb.learn(vlan, src, cx.port.id, st.now);
        }
        if learn == Learn::Refused {
            add(&cx.port.ingress[cx.q].fdb_learn_refused, 1);
        }
        b.trace(&cx.port.tracer, i, "learn", || {
            format!("{src} in VLAN {vlan}: {learn:?}")
        });
        st.learned = Some((vlan, src));
    }
}

fn lookup(st: &mut State, cx: &Ctx, b: &mut Burst) {
    for i in b.live() {
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
        b.trace(&cx.port.tracer, i, "lookup", || match port {
            Some(p) => {
                let name = cx.ports.get(p).map_or("?", |x| x.name.as_str());
                format!("{dst} in VLAN {vlan}: port {name}")
            }
            None if dst.is_multicast() => format!("{dst}: a group address"),
            None => format!("{dst} in VLAN {vlan}: unknown"),
        });
    }
}
