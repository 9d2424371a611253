//! `hvnet diagnose VM`: the switch's findings on a VM over a window, each
//! with its evidence, the setting behind it and the command that changes
//! it.

use crate::switch_cmd::{seconds, show, Target};
use clap::Args;
use hvnet_control::proto::Request;
use serde_json::Value;

/// `hvnet diagnose`'s arguments.
#[derive(Debug, Args)]
pub struct DiagnoseArgs {
    /// The VM (its port's name, or its number in `hvnet ports`).
    pub vm: String,
    /// Seconds to watch it: its counters' rates, its guest's CPU and its
    /// frames are read over this window.
    #[arg(short = 'w', long, value_name = "SECONDS", default_value_t = 3.0)]
    pub window: f64,
    #[command(flatten)]
    pub target: Target,
}

/// Asks the switch and prints its findings.
pub fn diagnose(a: DiagnoseArgs) -> Result<(), String> {
    let window = seconds("window", a.window, 300)?;
    let req = Request::Diagnose {
        vm: a.vm.clone(),
        window_ms: window.as_millis() as u64,
    };
    if !a.target.json {
        eprintln!("hvnet diagnose: watching {} for {:.1} s…", a.vm, a.window);
    }
    show(&a.target, req, print)
}

fn print(v: &Value) {
    let vm = v["vm"].as_str().unwrap_or("?");
    let f = &v["figures"];
    let findings = v["findings"].as_array().cloned().unwrap_or_default();
    if findings.is_empty() {
        println!("{vm}: no finding in {} s", v["window_secs"]);
    }
    for (i, x) in findings.iter().enumerate() {
        println!(
            "{}. {} — {}",
            i + 1,
            x["cause"].as_str().unwrap_or(""),
            x["finding"].as_str().unwrap_or("")
        );
        for e in x["evidence"].as_array().into_iter().flatten() {
            println!(
                "     {:<40} {:>12} ({:.1}/s)",
                e["counter"].as_str().unwrap_or(""),
                e["value"],
                e["per_sec"].as_f64().unwrap_or(0.0)
            );
        }
        if let Some(s) = x["setting"].as_str() {
            println!("     setting: {s}");
        }
        println!("     change:  {}", x["fix"].as_str().unwrap_or(""));
    }
    println!(
        "figures: sent {} frames/s, received {} frames/s, {} drops/s, guest waiting to run {}",
        f["sent_frames_per_sec"],
        f["received_frames_per_sec"],
        f["drops_per_sec"],
        match f["guest_wait_percent"].as_f64() {
            Some(p) => format!("{p:.1} % (%RDY)"),
            None => "unknown".into(),
        }
    );
}
