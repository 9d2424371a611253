//! `hvnet top`: a live view of a running topology in the manner of
//! esxtop's network and CPU panels — per port, Mbit/s and frames/s each
//! way, drops by reason, receive ring fill, LRO/TSO activity — and each
//! VM's CPU figures from its threads' kernel accounting: %USED (CPU time
//! charged, `/proc/TID/stat`), %RUN (time on a CPU) and %RDY (time ready
//! but waiting for one, `/proc/TID/schedstat`), the figure CPU Scheduling and VMXNET3 Ring Exhaustion reads
//! to explain throughput. A namespace VM's threads are the processes in its
//! namespace; a real guest's are its processes (its vCPUs).
//!
//! Interactive on a terminal (keys re-sort: n name, t/r Mbit/s sent or
//! received, d drops, u %USED, y %RDY; q quits); `-b` prints CSV or JSON
//! lines for scripts, as `esxtop -b` does.

use crate::switch_cmd::{call, pick, Target};
use clap::{Args, ValueEnum};
use hvnet_control::diagnose::findings::from_counters;
use hvnet_control::diagnose::guest_cpu::processes_in;
use hvnet_control::proto::Request;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// `hvnet top` options.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Seconds between samples.
    #[arg(
        short = 'd',
        long = "delay",
        default_value_t = 2.0,
        value_name = "SECONDS"
    )]
    delay: f64,
    /// Stop after this many samples (default: run until q or Ctrl-C).
    #[arg(short = 'n', long = "iterations", value_name = "COUNT")]
    iterations: Option<u64>,
    /// Batch mode: no screen handling, one block of rows per sample.
    #[arg(short = 'b', long = "batch")]
    batch: bool,
    /// Output format (batch mode defaults to csv; `--json` means json).
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Sort rows by this column.
    #[arg(short = 's', long = "sort", value_enum, default_value_t = SortKey::Name)]
    sort: SortKey,
    #[command(flatten)]
    target: Target,
}

/// How samples are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Aligned columns.
    Table,
    /// Comma-separated, a header line first.
    Csv,
    /// One JSON object per sample.
    Json,
}

/// What rows are sorted by (largest first, except name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SortKey {
    /// Port name.
    Name,
    /// Mbit/s sent by the port's VM (or received from an uplink's wire).
    Tx,
    /// Mbit/s delivered to the port.
    Rx,
    /// Drops per second, both ways.
    Drops,
    /// %USED of the VM's threads.
    Used,
    /// %RDY of the VM's threads.
    Rdy,
}

/// One port over one interval.
#[derive(Debug, Serialize)]
struct Row {
    port: String,
    kind: String,
    link: String,
    tx_mbps: f64,
    rx_mbps: f64,
    tx_pps: f64,
    rx_pps: f64,
    drop_tx_ps: f64,
    drop_rx_ps: f64,
    /// Drops in the interval, by reason (only reasons that moved).
    drops: BTreeMap<String, u64>,
    /// Fullest receive ring, percent of its size, at the sample.
    ring_fill_pct: f64,
    /// Coalesced frames delivered per second (LRO).
    lro_fps: f64,
    /// Large frames the VM sent per second (TSO).
    tso_fps: f64,
    /// Large frames segmented per second for a receiver that takes none.
    segmented_fps: f64,
    threads: usize,
    used_pct: Option<f64>,
    run_pct: Option<f64>,
    rdy_pct: Option<f64>,
    /// What `hvnet diagnose` would name first from these counters
    /// (a VM's only; run it for the whole look).
    finding: Option<String>,
}

/// CPU accounting of one thread: ns on a CPU, ns waiting for one, ticks
/// charged.
type ThreadTimes = HashMap<u32, (u64, u64, u64)>;

struct Sample {
    at: Instant,
    ports: Vec<Value>,
    cpu: HashMap<String, ThreadTimes>,
}

fn num(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// The processes whose network namespace is `ns`.
fn netns_pids(ns: &str) -> Vec<u32> {
    processes_in(&hvnet_sys::netns::path(ns))
}

/// Every thread of `pids`, with its CPU accounting.
fn thread_times(pids: &[u32]) -> ThreadTimes {
    let mut out = HashMap::new();
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let base = format!("/proc/{pid}/task/{tid}");
            let sched = hvnet_sys::schedstat(format!("{base}/schedstat").as_ref());
            let stat = std::fs::read_to_string(format!("{base}/stat")).unwrap_or_default();
            // utime and stime: the 12th and 13th fields after the command.
            let ticks = stat
                .rfind(')')
                .map(|i| {
                    let rest: Vec<u64> = stat[i + 2..]
                        .split_whitespace()
                        .skip(11)
                        .take(2)
                        .filter_map(|x| x.parse().ok())
                        .collect();
                    rest.iter().sum()
                })
                .unwrap_or(0);
            if let Some((run, wait)) = sched {
                out.insert(tid, (run, wait, ticks));
            }
        }
    }
    out
}

fn sample(t: &Target, topology: &str) -> Result<Sample, String> {
    let v = call(t, Request::Counters)?;
    let ports = v.as_array().cloned().unwrap_or_default();
    let mut cpu = HashMap::new();
    for p in &ports {
        let name = p["name"].as_str().unwrap_or_default();
        let pids: Vec<u32> = match p.get("guest_pids").and_then(Value::as_array) {
            Some(g) => g
                .iter()
                .filter_map(|x| x.as_u64().map(|x| x as u32))
                .collect(),
            None if p["kind"] == "vm"
                && p["type"].as_str().is_some_and(|t| t.starts_with("tap")) =>
            {
                netns_pids(&hvnet_control::topology::netns_name(topology, name))
            }
            None => continue,
        };
        cpu.insert(name.to_string(), thread_times(&pids));
    }
    Ok(Sample {
        at: Instant::now(),
        ports,
        cpu,
    })
}

fn drops(v: &Value) -> BTreeMap<String, u64> {
    v.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, n)| Some((k.strip_prefix("drop_")?.to_string(), n.as_u64()?)))
        .collect()
}

fn rows(a: &Sample, b: &Sample) -> Vec<Row> {
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
    let per_s = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs;
    let ticks = hvnet_sys::clock_ticks() as f64;
    b.ports
        .iter()
        .map(|p| {
            let name = p["name"].as_str().unwrap_or_default().to_string();
            let old = a.ports.iter().find(|o| o["name"] == p["name"]).unwrap_or(p);
            let (fi, fo) = (&old["from_port"], &p["from_port"]);
            let (ti, to) = (&old["to_port"], &p["to_port"]);
            let mut dropped = BTreeMap::new();
            let (mut dtx, mut drx) = (0, 0);
            for (way, x, y) in [(0, fi, fo), (1, ti, to)] {
                let before = drops(x);
                for (r, n) in drops(y) {
                    let d = n.saturating_sub(*before.get(&r).unwrap_or(&0));
                    if d > 0 {
                        *dropped.entry(r).or_insert(0) += d;
                        if way == 0 {
                            dtx += d
                        } else {
                            drx += d
                        }
                    }
                }
            }
            let fill = p["rings"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| num(r, "ring1_used") as f64 * 100.0 / num(r, "ring1_size").max(1) as f64)
                .fold(0.0, f64::max);
            let cpu = match (a.cpu.get(&name), b.cpu.get(&name)) {
                (Some(x), Some(y)) => {
                    let (mut run, mut wait, mut used) = (0u64, 0u64, 0u64);
                    for (tid, (r, w, u)) in y {
                        if let Some((r0, w0, u0)) = x.get(tid) {
                            run += r.saturating_sub(*r0);
                            wait += w.saturating_sub(*w0);
                            used += u.saturating_sub(*u0);
                        }
                    }
                    let pct_ns = |ns: u64| ns as f64 / 1e9 / secs * 100.0;
                    Some((
                        y.len(),
                        used as f64 / ticks / secs * 100.0,
                        pct_ns(run),
                        pct_ns(wait),
                    ))
                }
                _ => None,
            };
            let finding = (p["kind"] == "vm")
                .then(|| from_counters(old, p, secs).into_iter().next())
                .flatten()
                .map(|f| f.cause.to_string());
            Row {
                finding,
                port: name,
                kind: p["kind"].as_str().unwrap_or_default().into(),
                link: p["link"].as_str().unwrap_or_default().into(),
                tx_mbps: per_s(num(fi, "bytes"), num(fo, "bytes")) * 8.0 / 1e6,
                rx_mbps: per_s(num(ti, "delivered_bytes"), num(to, "delivered_bytes")) * 8.0 / 1e6,
                tx_pps: per_s(num(fi, "frames"), num(fo, "frames")),
                rx_pps: per_s(num(ti, "delivered_frames"), num(to, "delivered_frames")),
                drop_tx_ps: dtx as f64 / secs,
                drop_rx_ps: drx as f64 / secs,
                drops: dropped,
                ring_fill_pct: fill,
                lro_fps: per_s(num(ti, "lro_frames"), num(to, "lro_frames")),
                tso_fps: per_s(num(fi, "gso_frames"), num(fo, "gso_frames")),
                segmented_fps: per_s(num(ti, "segmented_frames"), num(to, "segmented_frames")),
                threads: cpu.map_or(0, |c| c.0),
                used_pct: cpu.map(|c| c.1),
                run_pct: cpu.map(|c| c.2),
                rdy_pct: cpu.map(|c| c.3),
            }
        })
        .collect()
}

fn sort(rows: &mut [Row], key: SortKey) {
    let desc = |x: f64, y: f64| y.partial_cmp(&x).unwrap_or(std::cmp::Ordering::Equal);
    match key {
        SortKey::Name => rows.sort_by(|a, b| a.port.cmp(&b.port)),
        SortKey::Tx => rows.sort_by(|a, b| desc(a.tx_mbps, b.tx_mbps)),
        SortKey::Rx => rows.sort_by(|a, b| desc(a.rx_mbps, b.rx_mbps)),
        SortKey::Drops => {
            rows.sort_by(|a, b| desc(a.drop_tx_ps + a.drop_rx_ps, b.drop_tx_ps + b.drop_rx_ps))
        }
        SortKey::Used => {
            rows.sort_by(|a, b| desc(a.used_pct.unwrap_or(-1.0), b.used_pct.unwrap_or(-1.0)))
        }
        SortKey::Rdy => {
            rows.sort_by(|a, b| desc(a.rdy_pct.unwrap_or(-1.0), b.rdy_pct.unwrap_or(-1.0)))
        }
    }
}

const CSV_HEADER: &str = "time,port,kind,link,tx_mbps,rx_mbps,tx_pps,rx_pps,drop_tx_ps,drop_rx_ps,drops,ring_fill_pct,lro_fps,tso_fps,segmented_fps,threads,used_pct,run_pct,rdy_pct,finding";

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), |x| format!("{x:.1}"))
}

fn reasons(d: &BTreeMap<String, u64>) -> String {
    d.iter()
        .map(|(r, n)| format!("{r}:{n}"))
        .collect::<Vec<_>>()
        .join(";")
}

fn csv(time: f64, rows: &[Row]) -> String {
    rows.iter()
        .map(|r| {
            format!(
                "{time:.3},{},{},{},{:.3},{:.3},{:.1},{:.1},{:.1},{:.1},{},{:.1},{:.1},{:.1},{:.1},{},{},{},{},{}\n",
                r.port, r.kind, r.link, r.tx_mbps, r.rx_mbps, r.tx_pps, r.rx_pps, r.drop_tx_ps,
                r.drop_rx_ps, reasons(&r.drops), r.ring_fill_pct, r.lro_fps, r.tso_fps,
                r.segmented_fps, r.threads, opt(r.used_pct), opt(r.run_pct), opt(r.rdy_pct),
                r.finding.as_deref().unwrap_or("")
            )
        })
        .collect()
}

fn table(topology: &str, secs: f64, rows: &[Row], key: SortKey) -> String {
    let mut out = format!(
        "hvnet top — topology {topology}, {secs:.1} s interval, sorted by {key:?} (keys: n t r d u y, q quits)\n\n"
    )
    .to_lowercase();
    out.push_str(&format!(
        "{:<10} {:<6} {:<5} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>6} {:>8} {:>8} {:>4} {:>6} {:>6} {:>6}  {}\n",
        "PORT", "KIND", "LINK", "MbTX/s", "MbRX/s", "PKTTX/s", "PKTRX/s", "DRPTX/s", "DRPRX/s",
        "RING%", "LRO/s", "TSO/s", "THR", "%USED", "%RUN", "%RDY", "DROPS BY REASON (! FINDING)"
    ));
    for r in rows {
        out.push_str(&format!(
            "{:<10} {:<6} {:<5} {:>9.2} {:>9.2} {:>9.0} {:>9.0} {:>8.0} {:>8.0} {:>6.1} {:>8.0} {:>8.0} {:>4} {:>6} {:>6} {:>6}  {}\n",
            r.port, r.kind, r.link, r.tx_mbps, r.rx_mbps, r.tx_pps, r.rx_pps, r.drop_tx_ps,
            r.drop_rx_ps, r.ring_fill_pct, r.lro_fps, r.tso_fps, r.threads,
            opt(r.used_pct), opt(r.run_pct), opt(r.rdy_pct),
            match &r.finding {
                Some(f) => format!("!{f} {}", reasons(&r.drops)),
                None => reasons(&r.drops),
            }
        ));
    }
    out
}

/// The terminal in single-key mode while the view runs, restored after
/// (`stty`, on the controlling terminal).
struct RawTty(Option<String>);

impl RawTty {
    fn enter() -> RawTty {
        let tty = || std::fs::File::open("/dev/tty").ok();
        let saved = tty().and_then(|t| {
            let out = std::process::Command::new("stty")
                .arg("-g")
                .stdin(t)
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        });
        if let Some(t) = tty() {
            let _ = std::process::Command::new("stty")
                .args(["-icanon", "-echo", "min", "1"])
                .stdin(t)
                .status();
        }
        RawTty(saved)
    }
}

impl Drop for RawTty {
    fn drop(&mut self) {
        if let (Some(s), Ok(t)) = (&self.0, std::fs::File::open("/dev/tty")) {
            let _ = std::process::Command::new("stty").arg(s).stdin(t).status();
        }
    }
}

/// `hvnet top`
pub fn top(a: TopArgs) -> Result<(), String> {
    if !(a.delay.is_finite() && a.delay >= 0.1) {
        return Err(format!("-d {}: the delay is at least 0.1 seconds", a.delay));
    }
    let topology = pick(&a.target)?;
    let interactive =
        !a.batch && std::io::stdout().is_terminal() && a.format.is_none() && !a.target.json;
    let format = match (a.format, a.target.json) {
        (Some(f), _) => f,
        (None, true) => Format::Json,
        (None, false) if a.batch => Format::Csv,
        (None, false) => Format::Table,
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| format!("signals: {e}"))?;
    }
    let (keys_tx, keys) = std::sync::mpsc::channel::<u8>();
    let _tty = interactive.then(|| {
        let t = RawTty::enter();
        std::thread::spawn(move || {
            let mut b = [0u8; 1];
            while std::io::stdin().read(&mut b).is_ok_and(|n| n == 1) {
                if keys_tx.send(b[0]).is_err() {
                    break;
                }
            }
        });
        t
    });
    let mut key = a.sort;
    let mut prev = sample(&a.target, &topology)?;
    let mut printed = 0u64;
    let mut stdout = std::io::stdout().lock();
    if format == Format::Csv {
        writeln!(stdout, "{CSV_HEADER}").map_err(|e| e.to_string())?;
    }
    let delay = Duration::from_secs_f64(a.delay);
    while a.iterations.is_none_or(|n| printed < n) {
        let wake = Instant::now() + delay;
        // Wait out the interval in small steps: a key or a signal is
        // answered at once.
        while Instant::now() < wake && !stop.load(Ordering::Relaxed) {
            match keys.recv_timeout(
                Duration::from_millis(50).min(wake.saturating_duration_since(Instant::now())),
            ) {
                Ok(b'q') => stop.store(true, Ordering::Relaxed),
                Ok(k) => {
                    key = match k {
                        b'n' => SortKey::Name,
                        b't' => SortKey::Tx,
                        b'r' => SortKey::Rx,
                        b'd' => SortKey::Drops,
                        b'u' => SortKey::Used,
                        b'y' => SortKey::Rdy,
                        _ => key,
                    }
                }
                Err(_) => {}
            }
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = sample(&a.target, &topology)?;
        let mut r = rows(&prev, &now);
        sort(&mut r, key);
        let secs = now.at.duration_since(prev.at).as_secs_f64();
        let time = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let text = match format {
            Format::Csv => csv(time, &r),
            Format::Json => format!(
                "{}\n",
                json!({"time": time, "interval_s": secs, "topology": topology, "ports": r})
            ),
            Format::Table if interactive => {
                format!("\x1b[H\x1b[2J{}", table(&topology, secs, &r, key))
            }
            Format::Table => format!("{}\n", table(&topology, secs, &r, key)),
        };
        // A reader that went away (`| head`) ends the view quietly.
        if stdout
            .write_all(text.as_bytes())
            .and_then(|_| stdout.flush())
            .is_err()
        {
            break;
        }
        prev = now;
        printed += 1;
    }
    Ok(())
}
