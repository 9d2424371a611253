//! What the daemon logs about its ports that the datapath does not say
//! itself (it logs link changes and thread restarts as they happen), found
//! by watching counters between frames: the first drop under each reason
//! at each port, each switch thread that ended while the switch runs. Said
//! once each, never per frame.

use hvnet_datapath::Switch;
use std::collections::HashSet;
use std::thread::JoinHandle;

/// The last state seen.
pub struct Watch {
    dropped: HashSet<(String, String)>,
    ended: HashSet<String>,
}

impl Watch {
    /// Starts from the switch's current counters (drops so far logged).
    pub fn new(sw: &Switch) -> Watch {
        let mut w = Watch {
            dropped: HashSet::new(),
            ended: HashSet::new(),
        };
        w.check(sw, &[]);
        w
    }

    /// Logs what changed since the last call.
    pub fn check(&mut self, sw: &Switch, threads: &[JoinHandle<()>]) {
        for p in &sw.ports {
            let counters = [
                ("from the port", serde_json::to_value(p.ingress_stats())),
                ("to the port", serde_json::to_value(p.egress_stats())),
            ];
            for (way, c) in counters {
                let Ok(serde_json::Value::Object(c)) = c else {
                    continue;
                };
                for (reason, n) in c.iter().filter(|(k, _)| k.starts_with("drop_")) {
                    if n.as_u64().unwrap_or(0) > 0
                        && self.dropped.insert((p.name.clone(), reason.clone()))
                    {
                        tracing::warn!(port = %p.name, reason = %reason, way, "first drop");
                    }
                }
            }
        }
        if sw.stopping() {
            return;
        }
        for t in threads.iter().filter(|t| t.is_finished()) {
            let name = t.thread().name().unwrap_or("unnamed").to_string();
            if self.ended.insert(name.clone()) {
                tracing::error!(thread = %name, "a switch thread ended while the switch runs");
            }
        }
    }
}
