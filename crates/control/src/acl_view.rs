//! `hvnet acl`: each port's security groups — its rules in the order
//! they are matched, with hit counts, what its stages did and its
//! connection table's fill — and, with `--conntrack`, the connections
//! it tracks as `conntrack -L` lists them; `hvnet acl reapply` checks
//! tracked connections against the rules now.

use crate::proto::CtlError;
use hvnet_datapath::Switch;
use serde_json::{json, Value};
use std::time::Instant;

/// The ports with groups (`port`: only that one).
fn chosen(
    sw: &Switch,
    port: Option<&str>,
) -> Result<Vec<(String, std::sync::Arc<hvnet_datapath::acl::PortAcl>)>, CtlError> {
    let all = sw.acl.ports();
    match port {
        None => Ok(all),
        Some(p) => {
            if sw.port(p).is_none() {
                let names = sw.ports().iter().map(|x| x.name.clone()).collect();
                return Err(CtlError::not_found("port", p, names));
            }
            Ok(all.into_iter().filter(|(n, _)| n == p).collect())
        }
    }
}

/// The view: `{"limits", "connections", "ports": [{"port", "groups",
/// "rules": [...], "counters", "connections", ...}]}`; with `conntrack`
/// each port's `"conntrack": [...]` too.
pub fn acl(sw: &Switch, port: Option<&str>, conntrack: bool) -> Result<Value, CtlError> {
    let now = Instant::now();
    let ports: Vec<Value> = chosen(sw, port)?
        .into_iter()
        .map(|(name, a)| {
            let mut v = json!(a.view(now));
            v["port"] = json!(name);
            if conntrack {
                v["conntrack"] = json!(a.connections(now));
            }
            v
        })
        .collect();
    Ok(json!({
        "limits": sw.acl.limits(),
        "connections": sw.acl.total(),
        "ports": ports,
    }))
}

/// `hvnet acl reapply [PORT]`: every tracked connection checked against
/// the rules now, those they no longer allow removed (`flush`: every
/// one removed).
pub fn reapply(sw: &Switch, port: Option<&str>, flush: bool) -> Result<Value, CtlError> {
    let mut removed = serde_json::Map::new();
    for (name, a) in chosen(sw, port)? {
        let n = if flush { a.flush() } else { a.reapply() };
        tracing::info!(port = %name, removed = n, flush, "tracked connections checked again");
        removed.insert(name, json!(n));
    }
    Ok(json!({ "removed": removed }))
}
