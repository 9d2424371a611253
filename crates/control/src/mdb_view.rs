//! `hvnet mdb`: multicast snooping's table as `bridge mdb show` shows the
//! Linux bridge's — each group's member ports with their timers, the
//! router ports (uplinks always, "permanent"; ports a query was heard on,
//! "temp"), the queriers heard, and the settings in force.

use hvnet_datapath::Switch;
use serde_json::{json, Value};
use std::time::Instant;

/// The view.
pub fn mdb(sw: &Switch) -> Value {
    let now = Instant::now();
    let ports = sw.ports();
    let name = |p: usize| ports.get(p).map(|x| x.name.clone());
    let (groups, routers, queriers) = sw.mdb.rows(now);
    let cfg = sw.mdb.config();
    let mdb: Vec<Value> = groups
        .iter()
        .map(|r| {
            json!({
                "vlan": r.vlan,
                "group": r.group.to_string(),
                "port": r.port,
                "port_name": name(r.port),
                "state": "temp",
                "expires_secs": r.expires_secs,
            })
        })
        .collect();
    let mut router: Vec<Value> = ports
        .iter()
        .filter(|p| p.is_uplink())
        .map(|p| json!({"vlan": null, "port": p.id, "port_name": p.name, "state": "permanent", "expires_secs": null}))
        .collect();
    router.extend(routers.iter().map(|r| {
        json!({
            "vlan": r.vlan,
            "port": r.port,
            "port_name": name(r.port),
            "state": "temp",
            "expires_secs": r.expires_secs,
        })
    }));
    let heard: Vec<Value> = queriers
        .iter()
        .map(|q| {
            json!({
                "vlan": q.vlan,
                "family": q.family,
                "addr": q.addr.to_string(),
                "port": q.port,
                "port_name": name(q.port),
                "expires_secs": q.expires_secs,
            })
        })
        .collect();
    // Where the own querier has queried, and whether it prunes yet (its
    // first query's response time over): until then group frames flood.
    let own: Vec<Value> = sw
        .mdb
        .own_querier(now)
        .iter()
        .map(|(vlan, family, pruning)| json!({"vlan": vlan, "family": family, "pruning": pruning}))
        .collect();
    json!({
        "own_querier": own,
        "multicast_snooping": cfg.enabled,
        "multicast_querier": cfg.querier,
        "multicast_flood_unknown": cfg.flood_unknown,
        "memberships": groups.len(),
        "refused_groups": sw.mdb.refused_groups(now),
        "mdb": mdb,
        "router": router,
        "queriers": heard,
    })
}
