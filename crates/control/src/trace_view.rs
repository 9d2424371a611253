//! `hvnet trace PORT --live FILTER`: the next real frames a port sends
//! into the switch that match a tcpdump filter, each with every stage's
//! line on its path (what it decided and why), the ports it left by or
//! its named drop. The port's tracer marks them as they are read; this
//! waits until `count` were marked and their lines written, the time is
//! up, or the port goes.

use crate::capture_stream::compile;
use crate::proto::CtlError;
use hvnet_datapath::trace::TraceLine;
use hvnet_datapath::Switch;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most frames one trace takes.
pub const MAX_FRAMES: u32 = 64;

/// How long after the last marked frame its lines are waited for (the
/// worker writes them within the burst that read it).
const SETTLE: Duration = Duration::from_millis(100);

/// The longest a trace waits.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// Holds a port's tracer for one trace, and lets it go however the trace
/// ends.
struct Held<'a>(&'a hvnet_datapath::trace::Tracer);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Traces the next `count` frames from `port` that `filter` keeps,
/// waiting at most `timeout`; `gone()` says the client left (the trace
/// ends then, its port free for the next).
pub fn trace(
    sw: &Switch,
    port: &str,
    filter: &str,
    count: u32,
    timeout: Duration,
    gone: impl Fn() -> bool,
) -> Result<Value, CtlError> {
    let p = sw
        .port(port)
        .ok_or_else(|| CtlError::not_found("port", port, crate::views::port_names(sw, false)))?;
    if !(1..=MAX_FRAMES).contains(&count) {
        return Err(CtlError::refused(format!(
            "count {count}: 1 to {MAX_FRAMES} frames"
        )));
    }
    if timeout.is_zero() || timeout > MAX_WAIT {
        return Err(CtlError::refused(format!(
            "timeout {} ms: more than 0, at most {} s",
            timeout.as_millis(),
            MAX_WAIT.as_secs()
        )));
    }
    let compiled = compile(filter, "trace")?;
    if !p.tracer.hold() {
        return Err(CtlError::refused(format!(
            "port {port} is being traced already; one trace at a time"
        )));
    }
    let held = Held(&p.tracer);
    // Lines left from frames no reader took are not this trace's.
    let _ = p.tracer.take();
    let first = p.tracer.marked() + 1;
    p.tracer.arm_matching(count, compiled);
    let start = Instant::now();
    let ended = loop {
        std::thread::sleep(Duration::from_millis(20));
        let here = sw.port(port).is_some_and(|now| Arc::ptr_eq(&now, &p));
        if !here {
            break "the port was removed";
        }
        if p.tracer.marked() + 1 - first >= u64::from(count) {
            std::thread::sleep(SETTLE);
            break "count";
        }
        if sw.stopping() {
            break "the switch is stopping";
        }
        if gone() {
            break "the client left";
        }
        if start.elapsed() >= timeout {
            break "timeout";
        }
    };
    drop(held);
    let lines = p.tracer.take();
    Ok(json!({
        "port": port,
        "filter": filter,
        "asked": count,
        "frames": frames(&lines, first),
        "ended": ended,
        "seconds": start.elapsed().as_secs_f64(),
    }))
}

/// The lines grouped by frame, in the order the frames were read, with
/// each frame's verdict: dropped on its way in (the counters' reason),
/// or the ports it was written to and those whose copy was dropped.
fn frames(lines: &[TraceLine], first: u64) -> Vec<Value> {
    let mut ids: Vec<u64> = lines
        .iter()
        .map(|l| l.frame)
        .filter(|f| *f >= first)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|id| {
            let of: Vec<&TraceLine> = lines.iter().filter(|l| l.frame == id).collect();
            let texts = |stage: &str, to_port: bool| -> Vec<String> {
                of.iter()
                    .filter(|l| l.stage == stage && l.text.starts_with("to ") == to_port)
                    .map(|l| l.text.clone())
                    .collect()
            };
            // A write line that is a delivery names the queue; one over
            // the MTU does not (its drop line says so).
            let delivered: Vec<String> = texts("write", true)
                .into_iter()
                .filter(|t| t.contains(" queue "))
                .collect();
            json!({
                "frame": id - first + 1,
                "stages": of.iter().map(|l| json!({"stage": l.stage, "text": l.text})).collect::<Vec<_>>(),
                "dropped": texts("drop", false).first(),
                "delivered": delivered,
                "dropped_at": texts("drop", true),
            })
        })
        .collect()
}
