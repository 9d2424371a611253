//! A trace's lines read: grouped by frame, each frame's verdict — dropped
//! on its way in, the ports it was written to (or sent into a tunnel by),
//! those whose copy was dropped — for this host's part and a far end's.

use hvnet_datapath::trace::TraceLine;
use serde_json::{json, Value};

/// A frame's lines (stage, text) and its verdict: dropped on its way in
/// (the counters' reason), or the ports it was written to (or sent into a
/// tunnel by) and those whose copy was dropped.
pub(crate) fn verdict(of: &[(String, String)]) -> Value {
    let texts = |stage: &str, to_port: bool| -> Vec<String> {
        of.iter()
            .filter(|(st, t)| st == stage && t.starts_with("to ") == to_port)
            .map(|(_, t)| t.clone())
            .collect()
    };
    // A write line that is a delivery names the queue; one over the MTU
    // does not (its drop line says so). A frame sent into a tunnel marked
    // for the far end's trace left too.
    let mut delivered: Vec<String> = texts("write", true)
        .into_iter()
        .filter(|t| t.contains(" queue "))
        .collect();
    delivered.extend(
        texts("vxlan", true)
            .into_iter()
            .filter(|t| t.contains(" goes on at the far end")),
    );
    json!({
        "stages": of.iter().map(|(st, t)| json!({"stage": st, "text": t})).collect::<Vec<_>>(),
        "dropped": texts("drop", false).first(),
        "delivered": delivered,
        "dropped_at": texts("drop", true),
    })
}

/// The lines grouped by frame, in the order the frames were read, each
/// with its verdict.
pub(crate) fn frames(lines: &[TraceLine], first: u64) -> Vec<Value> {
    let mut ids: Vec<u64> = lines
        .iter()
        .map(|l| l.frame)
        .filter(|f| *f >= first)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|id| {
            let of: Vec<(String, String)> = lines
                .iter()
                .filter(|l| l.frame == id)
                .map(|l| (l.stage.to_string(), l.text.clone()))
                .collect();
            let mut v = verdict(&of);
            v["frame"] = json!(id - first + 1);
            v
        })
        .collect()
}
