//! `hvnet trace PORT --live FILTER`: the next real frames a port sends
//! into the switch that match a tcpdump filter, each with every stage's
//! line on its path (what it decided and why), the ports it left by or
//! its named drop. The port's tracer marks them as they are read; this
//! waits until `count` were marked and their lines written, the time is
//! up, or the port goes. `hvnet trace PORT FLOW`: a frame described in
//! words ([`crate::flow_spec`]), built as the port's guest would send it
//! and switched by the port's worker with every decision and no delivery
//! (unless injected).

use crate::capture_stream::compile;
use crate::flow_spec;
use crate::proto::CtlError;
use crate::topology::Topology;
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
    let Some(held) = p.tracer.hold_for_reader() else {
        return Err(CtlError::refused(format!(
            "port {port} is being traced already; one trace at a time"
        )));
    };
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
    let mut found = crate::trace_lines::frames(&lines, first);
    crate::trace_far::follow_tunnels(sw, &mut found);
    Ok(json!({
        "port": port,
        "filter": filter,
        "asked": count,
        "frames": found,
        "ended": ended,
        "seconds": start.elapsed().as_secs_f64(),
    }))
}

/// How long a synthetic frame waits for its port's worker (which looks
/// every tick, a tenth of a second).
const INJECT_WAIT: Duration = Duration::from_secs(5);

/// Traces a synthetic frame from `port`, described by `words`: its path
/// through every stage, delivered nowhere unless `inject`.
pub fn trace_flow(
    sw: &Switch,
    topo: &Topology,
    port: &str,
    words: &str,
    inject: bool,
) -> Result<Value, CtlError> {
    let p = sw
        .port(port)
        .ok_or_else(|| CtlError::not_found("port", port, crate::views::port_names(sw, false)))?;
    let spec = flow_spec::parse(words).map_err(|e| CtlError::refused(format!("FLOW {e}")))?;
    let r = crate::trace_resolve::resolve(sw, topo, port, &spec)
        .map_err(|e| CtlError::refused(format!("FLOW {e}")))?;
    let frame = flow_spec::build(&spec, &r).map_err(|e| CtlError::refused(format!("FLOW {e}")))?;
    let mut v = json!({
        "port": port,
        "flow": words,
        "synthetic": !inject,
        "injected": inject,
        "bytes": frame.len(),
        "asked": 1,
    });
    if !p.is_up() {
        // Its queues are not read: nothing it sends enters the switch.
        v["frames"] = json!([{
            "frame": 1,
            "stages": [{"stage": "port", "text": format!("{port} is {}: its frames are not read", p.state().name())}],
            "dropped": "port_down",
            "delivered": [],
            "dropped_at": [],
        }]);
        v["ended"] = json!("port down");
        return Ok(v);
    }
    let Some(held) = p.tracer.hold_for_reader() else {
        return Err(CtlError::refused(format!(
            "port {port} is being traced already; one trace at a time"
        )));
    };
    let _ = p.tracer.take();
    let start = Instant::now();
    let id = p.tracer.inject(frame, inject);
    let ended = loop {
        if p.tracer.was_injected(id) {
            break "switched";
        }
        if sw.stopping() {
            break "the switch is stopping";
        }
        if start.elapsed() >= INJECT_WAIT {
            break "timeout";
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(held);
    let lines = p.tracer.take();
    let mut found = crate::trace_lines::frames(&lines, id);
    crate::trace_far::follow_tunnels(sw, &mut found);
    v["frames"] = json!(found);
    v["ended"] = json!(ended);
    v["seconds"] = json!(start.elapsed().as_secs_f64());
    Ok(v)
}
