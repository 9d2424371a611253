//! `hvnet acl`: security groups' rules with their hit counts, each
//! port's counters and connection table, the tracked connections as
//! `conntrack -L` prints them, and `--reapply` / `--flush`.

use crate::switch_cmd::{call, Target};
use clap::Args;
use hvnet_control::proto::Request;
use serde_json::Value;

/// `hvnet acl [PORT] [--conntrack] [--reapply|--flush]`
#[derive(Debug, Args)]
pub struct AclArgs {
    /// Only this port (its VM's name).
    pub port: Option<String>,
    /// List the tracked connections, as `conntrack -L`.
    #[arg(long, short = 'L')]
    pub conntrack: bool,
    /// Check every tracked connection against the rules now and remove
    /// those they no longer allow (rules changed at run time apply to new
    /// connections at once, to established ones only so).
    #[arg(long, conflicts_with_all = ["flush", "conntrack"])]
    pub reapply: bool,
    /// Remove every tracked connection (their next frames are matched
    /// against the rules as new ones).
    #[arg(long, conflicts_with = "conntrack")]
    pub flush: bool,
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        o => o.to_string(),
    }
}

/// One connection as `conntrack -L` prints it.
fn conntrack_line(c: &Value) -> String {
    let (src, dst) = (text(&c["src"]), text(&c["dst"]));
    let icmp = matches!(c["protocol"].as_str(), Some("icmp" | "icmpv6"));
    let ends = |a: &str, b: &str, pa: &Value, pb: &Value| {
        if icmp {
            format!("src={a} dst={b} id={}", text(pa))
        } else if c["protocol"] == "tcp" || c["protocol"] == "udp" {
            format!("src={a} dst={b} sport={} dport={}", text(pa), text(pb))
        } else {
            format!("src={a} dst={b}")
        }
    };
    let state = match c["state"].as_str() {
        Some("REPLIED" | "UNREPLIED") | None => String::new(),
        Some(s) => format!("{s} "),
    };
    let flag = if c["replied"] == true {
        ""
    } else {
        " [UNREPLIED]"
    };
    format!(
        "{:<8} {:<3} {} {state}{}{flag} {} opened={} rule={} packets={}/{}",
        text(&c["protocol"]),
        text(&c["proto"]),
        text(&c["timeout"]),
        ends(&src, &dst, &c["sport"], &c["dport"]),
        ends(&dst, &src, &c["dport"], &c["sport"]),
        text(&c["opened"]),
        text(&c["rule"]),
        text(&c["frames_orig"]),
        text(&c["frames_reply"]),
    )
}

/// Runs `hvnet acl`.
pub fn acl(t: &Target, a: AclArgs) -> Result<(), String> {
    if a.reapply || a.flush {
        let v = call(
            t,
            Request::AclReapply {
                port: a.port,
                flush: a.flush,
            },
        )?;
        if t.json {
            println!("{v}");
            return Ok(());
        }
        for (port, n) in v["removed"].as_object().into_iter().flatten() {
            println!("{port}: {n} tracked connections removed");
        }
        return Ok(());
    }
    let v = call(
        t,
        Request::Acl {
            port: a.port,
            conntrack: a.conntrack,
        },
    )?;
    if t.json {
        println!("{v}");
        return Ok(());
    }
    let ports = v["ports"].as_array().cloned().unwrap_or_default();
    if a.conntrack {
        let mut n = 0;
        for p in &ports {
            for c in p["conntrack"].as_array().into_iter().flatten() {
                println!("{} port={}", conntrack_line(c), text(&p["port"]));
                n += 1;
            }
        }
        eprintln!("hvnet acl: {n} flow entries have been shown.");
        return Ok(());
    }
    if ports.is_empty() {
        println!("no port has security groups (every frame passes, as without them)");
        return Ok(());
    }
    for p in &ports {
        let groups: Vec<String> = p["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        println!(
            "port {}: groups {}; connections {}/{}",
            text(&p["port"]),
            groups.join(", "),
            text(&p["connections"]),
            text(&p["max_connections"]),
        );
        println!("  {:<14} {:>10}  RULE", "LABEL", "HITS");
        for r in p["rules"].as_array().into_iter().flatten() {
            println!(
                "  {:<14} {:>10}  {}",
                text(&r["label"]),
                text(&r["hits"]),
                text(&r["text"])
            );
        }
        println!(
            "  {:<14} {:>10}  (no rule matched: denied)",
            "default",
            text(&p["counters"]["denied_default"])
        );
        let c = &p["counters"];
        println!(
            "  established {}, related {}, new {}, stateless {}, untracked {}, denied {}, invalid {} ({} out of window), table full {}",
            text(&c["established"]),
            text(&c["related"]),
            text(&c["new"]),
            text(&c["stateless"]),
            text(&c["untracked"]),
            c["denied_rule"].as_u64().unwrap_or(0) + c["denied_default"].as_u64().unwrap_or(0),
            text(&c["invalid"]),
            text(&c["out_of_window"]),
            text(&c["full"]),
        );
    }
    Ok(())
}
