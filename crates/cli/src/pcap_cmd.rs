//! `hvnet pcap …`: the offload engines run on capture files, with exactly
//! the code the live switch uses.

use crate::capture::{self, Capture, CaptureError, Frame};
use clap::{Args, Subcommand};
use hvnet_offload::gro::{FlushReason, GroConfig, GroOutput, GroTable, PassReason};
use hvnet_offload::gso::{self, CsumMode};
use hvnet_offload::rss::{HashType, Rss, DEFAULT_KEY};
use hvnet_offload::vxlan::{self, Tunnel, VxlanError};
use hvnet_offload::{GsoInfo, OffloadInfo};
use hvnet_wire::layers::{ip_protocol, Layers, NetKind};
use hvnet_wire::GsoType;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Offline offload engines on pcap files.
#[derive(Debug, Subcommand)]
pub enum PcapCmd {
    /// Coalesce TCP segments as Linux GRO would (software LRO).
    ///
    /// The whole input is one receive batch: runs are flushed by Linux's
    /// rules (PSH, short segment, sequence gap, header mismatch, 64 KiB) and
    /// at the end of the input (or every --batch frames). Coalesced frames
    /// get correct lengths and full checksums. A summary of what was done
    /// goes to standard error (or standard output with --json).
    Gro(GroArgs),
    /// Segment TCP frames larger than an MTU as Linux tcp_gso_segment does
    /// (software TSO).
    ///
    /// Every TCP frame whose IP packet (for VXLAN: the outer IP packet)
    /// exceeds --mtu is split into segments that fit, with sequence numbers,
    /// flags, IPv4 IDs, lengths and every checksum fixed. Other frames pass
    /// unchanged.
    Gso(GsoArgs),
    /// Print the RSS Toeplitz hash and queue of every frame, one JSON object
    /// per line: {"frame": i, "hash": "0x%08x", "queue": q, "type": …}.
    ///
    /// Default key: Microsoft's 40-byte verification key. Default table:
    /// 128 entries, entry i -> queue i mod N, indexed by hash & 127. VXLAN
    /// frames are hashed on their inner headers unless --outer.
    Rss(RssArgs),
    /// Encapsulate or decapsulate VXLAN (RFC 7348).
    #[command(subcommand)]
    Vxlan(VxlanCmd),
}

/// Arguments of `hvnet pcap gro`.
#[derive(Debug, Args)]
pub struct GroArgs {
    /// Input capture (Ethernet, pcap).
    pub input: PathBuf,
    /// Output capture.
    pub output: PathBuf,
    /// Flush every N frames instead of once at the end (a NAPI poll budget
    /// is 64).
    #[arg(long, value_name = "N")]
    pub batch: Option<usize>,
    /// Hash buckets of the flow table (Linux: 8).
    #[arg(long, default_value_t = 8)]
    pub buckets: usize,
    /// Flows per bucket before the oldest is evicted (Linux: 8).
    #[arg(long, default_value_t = 8)]
    pub flows_per_bucket: usize,
    /// Leave coalesced TCP checksums partial (the pseudo-header sum, as a
    /// receiving kernel sees them) instead of computing them.
    #[arg(long)]
    pub partial_csum: bool,
    /// Print the summary as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `hvnet pcap gso`.
#[derive(Debug, Args)]
pub struct GsoArgs {
    /// Input capture.
    pub input: PathBuf,
    /// Output capture.
    pub output: PathBuf,
    /// Largest IP packet allowed on the output, in bytes (68..=65535).
    #[arg(long, value_parser = clap::value_parser!(u16).range(68..))]
    pub mtu: u16,
    /// Print the summary as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `hvnet pcap rss`.
#[derive(Debug, Args)]
pub struct RssArgs {
    /// Input capture.
    pub input: PathBuf,
    /// Toeplitz key as hex (40 or 52 bytes; colons allowed).
    #[arg(long, value_name = "HEX")]
    pub key: Option<String>,
    /// Number of receive queues.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub queues: u16,
    /// Hash VXLAN frames on their outer headers.
    #[arg(long)]
    pub outer: bool,
}

/// `hvnet pcap vxlan …`
#[derive(Debug, Subcommand)]
pub enum VxlanCmd {
    /// Wrap every frame in Ethernet/IPv4/UDP/VXLAN.
    Encap(EncapArgs),
    /// Unwrap VXLAN frames; other frames pass unchanged.
    Decap(DecapArgs),
}

/// Arguments of `hvnet pcap vxlan encap`.
#[derive(Debug, Args)]
pub struct EncapArgs {
    /// Input capture.
    pub input: PathBuf,
    /// Output capture.
    pub output: PathBuf,
    /// VXLAN network identifier (0..16777215).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..(1 << 24)))]
    pub vni: u32,
    /// Local underlay IPv4 address.
    #[arg(long, default_value = "10.255.0.1")]
    pub local: std::net::Ipv4Addr,
    /// Remote underlay IPv4 address.
    #[arg(long, default_value = "10.255.0.2")]
    pub remote: std::net::Ipv4Addr,
    /// Compute the outer UDP checksum (off by default, as in Linux).
    #[arg(long)]
    pub udp_csum: bool,
}

/// Arguments of `hvnet pcap vxlan decap`.
#[derive(Debug, Args)]
pub struct DecapArgs {
    /// Input capture.
    pub input: PathBuf,
    /// Output capture.
    pub output: PathBuf,
}

/// Runs a pcap subcommand; returns the process exit code.
pub fn run(cmd: PcapCmd) -> Result<i32, CaptureError> {
    match cmd {
        PcapCmd::Gro(a) => gro(a),
        PcapCmd::Gso(a) => gso(a),
        PcapCmd::Rss(a) => rss(a),
        PcapCmd::Vxlan(VxlanCmd::Encap(a)) => encap(a),
        PcapCmd::Vxlan(VxlanCmd::Decap(a)) => decap(a),
    }
}

/// Reads the input and reports damage; the good frames are still used.
fn read_input(path: &Path) -> Result<Capture, CaptureError> {
    let cap = capture::read(path)?;
    let snapped = cap.frames.iter().filter(|f| f.snapped).count();
    if snapped > 0 {
        eprintln!(
            "hvnet: note: {snapped} frames in {} were cut short by the capture's snap length; they pass through unchanged",
            path.display()
        );
    }
    if let Some((offset, what)) = &cap.damage {
        eprintln!(
            "hvnet: warning: {} is damaged at byte offset {offset}: {what}; processing the {} complete frames before it",
            path.display(),
            cap.frames.len()
        );
    }
    Ok(cap)
}

/// Exit status: 0, or 2 when the input was damaged (output still written).
fn status(cap: &Capture) -> i32 {
    if cap.damage.is_some() {
        2
    } else {
        0
    }
}

#[derive(Serialize)]
struct GroSummary {
    frames_in: u64,
    frames_out: u64,
    coalesced_frames: u64,
    coalesced_segments: u64,
    lro_rate: f64,
    held_runs_started: u64,
    passed: std::collections::BTreeMap<&'static str, u64>,
    flushes: std::collections::BTreeMap<&'static str, u64>,
    damaged_at: Option<usize>,
}

fn gro(a: GroArgs) -> Result<i32, CaptureError> {
    let mut cap = read_input(&a.input)?;
    let mut out = capture::Writer::create(&a.output, &cap.header)?;
    let cfg = GroConfig {
        buckets: a.buckets,
        flows_per_bucket: a.flows_per_bucket,
        ..GroConfig::default()
    };
    let mut table: GroTable<Frame> = GroTable::new(cfg);
    let mut err = None;
    let partial = a.partial_csum;
    let mut sink = |o: GroOutput<Frame>| {
        let r = match o {
            GroOutput::Single { frame, .. } => out.write(frame.ts, &frame.data),
            GroOutput::Coalesced(mut c) => {
                if !partial {
                    c.fill_checksums();
                }
                let ts = c.segments[0].buf.ts;
                out.write(ts, &c.to_vec())
            }
        };
        if let Err(e) = r {
            err.get_or_insert(e);
        }
    };
    let batch = a.batch.unwrap_or(usize::MAX).max(1);
    let mut it = std::mem::take(&mut cap.frames).into_iter().peekable();
    while it.peek().is_some() {
        let chunk: Vec<_> = it
            .by_ref()
            .take(batch)
            .map(|f| {
                let l = Layers::parse(&f.data);
                (f, OffloadInfo::NONE, l)
            })
            .collect();
        table.coalesce_burst(chunk, 0, &mut sink);
    }
    if let Some(e) = err {
        return Err(e);
    }
    out.finish()?;
    let s = table.stats();
    let summary = GroSummary {
        frames_in: s.frames_in,
        frames_out: s.frames_out,
        coalesced_frames: s.coalesced_out,
        coalesced_segments: s.coalesced_segments,
        lro_rate: if s.frames_out == 0 {
            0.0
        } else {
            s.frames_in as f64 / s.frames_out as f64
        },
        held_runs_started: s.held,
        passed: PassReason::ALL
            .iter()
            .map(|&r| (r.name(), s.passed(r)))
            .filter(|x| x.1 > 0)
            .collect(),
        flushes: FlushReason::ALL
            .iter()
            .map(|&r| (r.name(), s.flushed(r)))
            .filter(|x| x.1 > 0)
            .collect(),
        damaged_at: cap.damage.as_ref().map(|d| d.0),
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).expect("summary serializes")
        );
    } else {
        eprintln!(
            "gro: {} frames in, {} out ({} coalesced from {} segments), LRO rate {:.2}",
            summary.frames_in,
            summary.frames_out,
            summary.coalesced_frames,
            summary.coalesced_segments,
            summary.lro_rate
        );
        if !summary.flushes.is_empty() {
            let f: Vec<_> = summary
                .flushes
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            eprintln!("gro: run flushes: {}", f.join(", "));
        }
        if !summary.passed.is_empty() {
            let f: Vec<_> = summary
                .passed
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            eprintln!("gro: passed unchanged: {}", f.join(", "));
        }
    }
    Ok(status(&cap))
}

#[derive(Serialize, Default)]
struct GsoSummary {
    frames_in: usize,
    frames_out: usize,
    segmented: usize,
    errors: std::collections::BTreeMap<String, usize>,
    oversize_not_tcp: usize,
    damaged_at: Option<usize>,
}

fn gso(a: GsoArgs) -> Result<i32, CaptureError> {
    let cap = read_input(&a.input)?;
    let mut out = capture::Writer::create(&a.output, &cap.header)?;
    let mut s = GsoSummary {
        frames_in: cap.frames.len(),
        damaged_at: cap.damage.as_ref().map(|d| d.0),
        ..Default::default()
    };
    for f in &cap.frames {
        match gso_plan(&f.data, a.mtu) {
            Plan::Pass => {
                out.write(f.ts, &f.data)?;
                s.frames_out += 1;
            }
            Plan::OversizeNotTcp => {
                out.write(f.ts, &f.data)?;
                s.frames_out += 1;
                s.oversize_not_tcp += 1;
            }
            Plan::Segment(g, l) => {
                let mut res = Ok(());
                let r = gso::segment(&f.data, &l, g, CsumMode::Full, &mut |seg| {
                    if res.is_ok() {
                        res = out.write(f.ts, &seg.to_vec());
                    }
                });
                res?;
                match r {
                    Ok(n) => {
                        s.segmented += 1;
                        s.frames_out += n;
                    }
                    Err(e) => {
                        *s.errors.entry(e.to_string()).or_default() += 1;
                        out.write(f.ts, &f.data)?;
                        s.frames_out += 1;
                    }
                }
            }
        }
    }
    out.finish()?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&s).expect("summary serializes")
        );
    } else {
        eprintln!(
            "gso: {} frames in, {} segmented, {} out",
            s.frames_in, s.segmented, s.frames_out
        );
        for (e, n) in &s.errors {
            eprintln!("gso: {n} frames not segmented: {e}");
        }
        if s.oversize_not_tcp > 0 {
            eprintln!(
                "gso: {} frames over the MTU are not TCP and passed unchanged",
                s.oversize_not_tcp
            );
        }
    }
    Ok(status(&cap))
}

enum Plan {
    Pass,
    OversizeNotTcp,
    /// Segmented with this GSO type and size; the frame's header stack
    /// (parsed once, for the plan and the segmenting).
    Segment(GsoInfo, Layers),
}

/// Decides whether a frame needs segmenting for `mtu` and with which MSS.
fn gso_plan(frame: &[u8], mtu: u16) -> Plan {
    let Ok(l) = Layers::parse(frame) else {
        return Plan::Pass;
    };
    let Some(outer) = l.net() else {
        return Plan::Pass;
    };
    if outer.end - outer.offset <= mtu as usize {
        return Plan::Pass;
    }
    // The headers that ride inside the MTU: everything after the outer
    // Ethernet header up to the (inner) TCP payload.
    let (net, t, base) = match l.vxlan() {
        Some(v) => match v.inner() {
            Ok(il) => (il.net(), il.transport(), v.inner_offset as usize),
            Err(_) => return Plan::OversizeNotTcp,
        },
        None => (l.net(), l.transport(), 0),
    };
    let (Some(net), Some(t)) = (net, t) else {
        return Plan::OversizeNotTcp;
    };
    if t.protocol != ip_protocol::TCP {
        return Plan::OversizeNotTcp;
    }
    let headers = base + t.offset + t.header_len - outer.offset;
    let Some(mss) = (mtu as usize).checked_sub(headers).filter(|&m| m > 0) else {
        return Plan::OversizeNotTcp;
    };
    let kind = if net.kind == NetKind::Ipv4 {
        GsoType::TcpV4
    } else {
        GsoType::TcpV6
    };
    Plan::Segment(
        GsoInfo {
            kind,
            size: mss.min(u16::MAX as usize) as u16,
            ecn: false,
        },
        l,
    )
}

#[derive(Serialize)]
struct RssLine {
    frame: usize,
    hash: String,
    queue: u16,
    #[serde(rename = "type")]
    kind: &'static str,
}

fn rss(a: RssArgs) -> Result<i32, CaptureError> {
    let key = match &a.key {
        None => DEFAULT_KEY.to_vec(),
        Some(h) => match parse_hex(h) {
            Some(k) => k,
            None => {
                eprintln!("hvnet: --key: not hexadecimal bytes: {h}");
                return Ok(64);
            }
        },
    };
    let mut rss = match Rss::new(&key, a.queues) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hvnet: --key: {e}");
            return Ok(64);
        }
    };
    rss.inner = !a.outer;
    let cap = read_input(&a.input)?;
    let stdout = std::io::stdout();
    let mut lock = std::io::BufWriter::new(stdout.lock());
    use std::io::Write;
    for (i, f) in cap.frames.iter().enumerate() {
        let hashed = Layers::parse(&f.data)
            .ok()
            .and_then(|l| rss.hash(&f.data, &l));
        let (hash, queue, kind) = match hashed {
            Some((h, k)) => (h, rss.reta.queue(h), type_name(k)),
            None => (0, 0, "none"),
        };
        let line = RssLine {
            frame: i,
            hash: format!("0x{hash:08x}"),
            queue,
            kind,
        };
        if writeln!(
            lock,
            "{}",
            serde_json::to_string(&line).expect("line serializes")
        )
        .is_err()
        {
            return Ok(0); // reader went away (a pipe into head)
        }
    }
    let _ = lock.flush();
    Ok(status(&cap))
}

fn type_name(k: HashType) -> &'static str {
    match k {
        HashType::Ipv4 => "ipv4",
        HashType::TcpIpv4 => "tcp_ipv4",
        HashType::UdpIpv4 => "udp_ipv4",
        HashType::Ipv6 => "ipv6",
        HashType::TcpIpv6 => "tcp_ipv6",
        HashType::UdpIpv6 => "udp_ipv6",
    }
}

fn parse_hex(s: &str) -> Option<Vec<u8>> {
    let clean: String = s
        .chars()
        .filter(|c| !matches!(c, ':' | ' ' | '-'))
        .collect();
    let clean = clean.strip_prefix("0x").unwrap_or(&clean);
    if !clean.len().is_multiple_of(2) {
        return None;
    }
    (0..clean.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&clean[i..i + 2], 16).ok())
        .collect()
}

fn encap(a: EncapArgs) -> Result<i32, CaptureError> {
    let cap = read_input(&a.input)?;
    let mut out = capture::Writer::create(&a.output, &cap.header)?;
    let tunnel = Tunnel {
        udp_csum: a.udp_csum,
        ..Tunnel::new(a.vni, a.local.octets(), a.remote.octets())
    };
    let rss = Rss::new(&DEFAULT_KEY, 1).expect("default key is valid");
    let (mut done, mut failed) = (0, 0);
    for f in &cap.frames {
        let encapsulated = Layers::parse(&f.data)
            .map_err(VxlanError::Malformed)
            .and_then(|l| {
                let hash = rss.hash(&f.data, &l).map(|(h, _)| h);
                vxlan::encap(&tunnel, &f.data, hash, OffloadInfo::NONE)
            });
        match encapsulated {
            Ok((v, _)) => {
                out.write(f.ts, &v)?;
                done += 1;
            }
            Err(e) => {
                eprintln!("hvnet: frame not encapsulated, passed unchanged: {e}");
                out.write(f.ts, &f.data)?;
                failed += 1;
            }
        }
    }
    out.finish()?;
    eprintln!(
        "vxlan encap: {done} frames encapsulated in VNI {}, {failed} passed unchanged",
        a.vni
    );
    Ok(status(&cap))
}

fn decap(a: DecapArgs) -> Result<i32, CaptureError> {
    let cap = read_input(&a.input)?;
    let mut out = capture::Writer::create(&a.output, &cap.header)?;
    let (mut done, mut other) = (0, 0);
    for f in &cap.frames {
        let decapped = Layers::parse(&f.data)
            .map_err(VxlanError::Malformed)
            .and_then(|l| vxlan::decap(&f.data, &l, OffloadInfo::NONE, hvnet_wire::vxlan::PORT));
        match decapped {
            Ok(d) => {
                out.write(f.ts, &f.data[d.inner_offset..d.inner_end])?;
                done += 1;
            }
            Err(_) => {
                out.write(f.ts, &f.data)?;
                other += 1;
            }
        }
    }
    out.finish()?;
    eprintln!(
        "vxlan decap: {done} frames decapsulated, {other} were not VXLAN and passed unchanged"
    );
    Ok(status(&cap))
}
