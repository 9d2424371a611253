//! The far ends' parts of a trace that went into a VXLAN tunnel: each
//! hvnet host the marked frame reached reports its lines back over the
//! tunnel to the endpoint that sent it; the trace's reader takes them
//! there and joins them to the frame's path.

use hvnet_datapath::Switch;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// How long the far ends' reports are waited for.
const FAR_WAIT: Duration = Duration::from_secs(2);

/// The trace tokens a frame was sent into tunnels with: (endpoint port,
/// token).
fn tunnel_tokens(frame: &Value) -> Vec<(String, u16)> {
    frame["stages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["stage"] == "vxlan")
        .filter_map(|s| {
            let t = s["text"].as_str()?;
            let port = t.strip_prefix("to ")?.split(':').next()?.to_string();
            let token = t.split("trace #").nth(1)?.split(' ').next()?.parse().ok()?;
            Some((port, token))
        })
        .collect()
}

/// Each frame that went into a tunnel marked for the far end's trace gets
/// the far ends' parts (`far`: host, endpoint, lines and verdict), waited
/// for up to [`FAR_WAIT`]; a far end that sends none (not hvnet, or the
/// frame never reached its switch) is said, the trace ending at the
/// tunnel with what was sent.
pub fn follow_tunnels(sw: &Switch, frames: &mut [Value]) {
    let deadline = Instant::now() + FAR_WAIT;
    for f in frames.iter_mut() {
        let tokens = tunnel_tokens(f);
        if tokens.is_empty() {
            continue;
        }
        let mut far = Vec::new();
        for (port, token) in tokens {
            let Some(vtep) = sw.port(&port).and_then(|p| sw.endpoint(p.id)) else {
                continue;
            };
            loop {
                let got = vtep.take_reports(token);
                far.extend(got.iter().filter_map(|r| far_part(r)));
                if !far.is_empty() || Instant::now() >= deadline || sw.stopping() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if far.is_empty() {
            f["far_silent"] = json!("no word from the far end (not hvnet, or the frame did not reach its switch): the trace ends at the tunnel with what was sent");
        }
        f["far"] = json!(far);
    }
}

/// A far end's report read: its host, endpoint, lines and verdict.
fn far_part(report: &[u8]) -> Option<Value> {
    let r: Value = serde_json::from_slice(report).ok()?;
    let of: Vec<(String, String)> = r["lines"]
        .as_array()?
        .iter()
        .filter_map(|l| Some((l[0].as_str()?.to_string(), l[1].as_str()?.to_string())))
        .collect();
    let mut v = crate::trace_lines::verdict(&of);
    v["host"] = r["host"].clone();
    v["endpoint"] = r["endpoint"].clone();
    v["lines_not_sent"] = r["more"].clone();
    Some(v)
}
