//! `hvnet trace`: a frame described in words, or a port's next real
//! frames that match a filter, each with every stage's line on its path.

use crate::switch_cmd::{seconds, show, Target};
use clap::Args;
use hvnet_control::proto::Request;
use serde_json::Value;

/// `hvnet trace`'s arguments.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The port the frames come from: a VM's, an uplink's or a tunnel
    /// endpoint's (its name, or its number in `hvnet ports`).
    pub port: String,
    /// The frame, in words: `dst=db0 proto=tcp dport=5432 flags=S`,
    /// `src=198.18.0.9 dst=198.18.0.2 size=1500`, `arp dst=198.18.0.2`.
    #[arg(
        value_name = "FLOW",
        conflicts_with = "live",
        required_unless_present = "live"
    )]
    pub flow: Vec<String>,
    /// Trace the next real frames from the port that this tcpdump filter
    /// (`pcap-filter(7)`) keeps: `icmp`, `tcp port 5201`, `arp`, … (`""`:
    /// any frame).
    #[arg(long, value_name = "FILTER")]
    pub live: Option<String>,
    /// Deliver the described frame as the port's guest's own (learned,
    /// counted, written to its destinations), not only trace it.
    #[arg(long, conflicts_with = "live")]
    pub inject: bool,
    /// Frames to trace, 1 to 64.
    #[arg(short = 'c', long, value_name = "COUNT", default_value_t = 1)]
    pub count: u32,
    /// Seconds to wait for them.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub timeout: f64,
    #[command(flatten)]
    pub target: Target,
}

/// Asks the switch for the trace and prints each frame's path.
pub fn trace(a: TraceArgs) -> Result<(), String> {
    let timeout = seconds("timeout", a.timeout, 3600)?;
    let req = match &a.live {
        Some(filter) => Request::Trace {
            port: a.port.clone(),
            filter: filter.clone(),
            count: a.count,
            timeout_ms: timeout.as_millis() as u64,
        },
        None => Request::TraceFlow {
            port: a.port.clone(),
            flow: a.flow.join(" "),
            inject: a.inject,
        },
    };
    show(&a.target, req, print)
}

fn print(v: &Value) {
    let frames = v["frames"].as_array().cloned().unwrap_or_default();
    let synthetic = v["synthetic"].as_bool() == Some(true);
    for f in &frames {
        match v["flow"].as_str() {
            Some(flow) => println!(
                "{} frame from {} ({flow}, {} bytes):",
                if synthetic { "synthetic" } else { "injected" },
                v["port"].as_str().unwrap_or("?"),
                v["bytes"]
            ),
            None => println!(
                "frame {} from {}:",
                f["frame"],
                v["port"].as_str().unwrap_or("?")
            ),
        }
        part(f, "  ", synthetic);
        for far in f["far"].as_array().into_iter().flatten() {
            println!(
                "  -> at the far end {} ({}):",
                far["host"].as_str().unwrap_or("?"),
                far["endpoint"].as_str().unwrap_or("?")
            );
            part(far, "    ", synthetic);
        }
        if let Some(why) = f["far_silent"].as_str() {
            println!("  -> {why}");
        }
    }
    let asked = v["asked"].as_u64().unwrap_or(0);
    match v["ended"].as_str() {
        Some("timeout") => eprintln!(
            "hvnet trace: {} of {asked} frames matched in {:.1} s",
            frames.len(),
            v["seconds"].as_f64().unwrap_or(0.0)
        ),
        Some("count" | "switched") | None => {}
        Some(other) => eprintln!("hvnet trace: ended: {other}"),
    }
}

/// One host's part of a frame's path: its lines, then its verdict.
fn part(f: &Value, indent: &str, synthetic: bool) {
    for s in f["stages"].as_array().into_iter().flatten() {
        println!(
            "{indent}{:<14} {}",
            s["stage"].as_str().unwrap_or(""),
            s["text"].as_str().unwrap_or("")
        );
    }
    let list = |k: &str| -> Vec<String> {
        f[k].as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    if let Some(why) = f["dropped"].as_str() {
        println!("{indent}=> dropped: {why}");
        return;
    }
    let (out, lost) = (list("delivered"), list("dropped_at"));
    if !out.is_empty() && synthetic {
        let to: Vec<&str> = out
            .iter()
            .map(|o| o.split(':').next().unwrap_or(o))
            .collect();
        println!(
            "{indent}=> would be delivered {} (a synthetic frame is not)",
            to.join(", ")
        );
    } else if !out.is_empty() {
        println!("{indent}=> delivered {}", out.join(", "));
    }
    for l in &lost {
        println!("{indent}=> dropped {l}");
    }
    if out.is_empty() && lost.is_empty() {
        println!("{indent}=> not delivered");
    }
}
