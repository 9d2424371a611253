//! `hvnet capture PORT [EXPRESSION]`: a live capture at a port, as ESXi's
//! `pktcap-uw` with tcpdump's habits. The daemon streams pcapng; this
//! copies it to a file or standard output (`-w`), or prints a line a
//! frame, and at the end says what was captured and what was lost.

use crate::switch_cmd::{pick, socket_error, Target};
use clap::Args;
use hvnet_control::daemon;
use hvnet_control::proto::{self, Request};
use hvnet_wire::pretty::Pretty;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
use pcap_file::pcapng::blocks::interface_statistics::InterfaceStatisticsOption;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::PcapError;
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `hvnet capture`'s arguments.
#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// The port: a VM's, an uplink's or a tunnel endpoint's (its name, or
    /// its number in `hvnet ports`).
    pub port: String,
    /// Where along the frame's path: `in` (as the port handed it over),
    /// `offload` (after coalescing or segmentation: an uplink's frames
    /// after its software LRO; each frame coalesced into the port,
    /// segmented for it or passed whole), `out` (as written to the port)
    /// and `drop` (dropped at the port, with the reason). Repeat or
    /// separate with commas; default `in,out`.
    #[arg(long = "point", value_name = "POINT", value_delimiter = ',')]
    pub points: Vec<String>,
    /// Exit after this many frames.
    #[arg(short = 'c', value_name = "COUNT")]
    pub count: Option<u64>,
    /// Bytes kept of each frame (0: all of it, the default).
    #[arg(short = 's', value_name = "SNAPLEN", default_value_t = 0)]
    pub snaplen: u32,
    /// Write the frames to FILE as pcapng (`-` for standard output, for
    /// `tcpdump -r -` or `wireshark -k -i -`) instead of printing them.
    /// Each frame's comment says its point, queue and drop reason.
    #[arg(short = 'w', value_name = "FILE")]
    pub write: Option<PathBuf>,
    /// A filter in tcpdump's syntax (`pcap-filter(7)`): `icmp`, `tcp port
    /// 5201`, `vlan and udp`, … Words after the port are joined; options
    /// may come before or after them, as tcpdump takes them (`hvnet
    /// capture a icmp -w a.pcapng`).
    #[arg(value_name = "EXPRESSION")]
    pub filter: Vec<String>,
    #[command(flatten)]
    pub target: Target,
}

/// Runs a capture until `-c` frames, Ctrl-C, or the port's removal.
pub fn capture(a: CaptureArgs) -> Result<(), String> {
    let name = pick(&a.target)?;
    let sock = daemon::state_dir(&name).join("ctl.sock");
    let req = Request::Capture {
        port: a.port.clone(),
        points: a.points.clone(),
        filter: a.filter.join(" "),
        snaplen: a.snaplen,
        count: a.count.unwrap_or(0),
    };
    let (reply, mut r) = proto::open(&sock, &req, Duration::from_secs(10))
        .map_err(|e| socket_error(&name, &sock, &e))?;
    if !reply.ok {
        return Err(reply.error);
    }
    let stopped = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stopped)).map_err(|e| e.to_string())?;
    }
    let mut out: Option<Box<dyn Write>> = match &a.write {
        None => None,
        Some(p) if p.as_os_str() == "-" => Some(Box::new(std::io::stdout().lock())),
        Some(p) => Some(Box::new(
            std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        )),
    };
    let port = reply.data["port"].as_str().unwrap_or(&a.port).to_string();
    if out.is_none() || a.write.as_ref().is_some_and(|p| p.as_os_str() != "-") {
        let points = reply.data["points"].as_array().cloned().unwrap_or_default();
        let points: Vec<_> = points.iter().filter_map(|p| p.as_str()).collect();
        eprintln!(
            "hvnet: capturing on port {port} at {}; Ctrl-C to stop",
            points.join(",")
        );
    }
    r.get_ref()
        .set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| e.to_string())?;
    let mut s = Stream::default();
    let mut chunk = vec![0u8; 256 << 10];
    let mut closing: Option<Instant> = None;
    loop {
        if stopped.load(Ordering::Relaxed) && closing.is_none() {
            // The daemon sees the closed half, ends the capture and sends
            // its statistics.
            let _ = r.get_ref().shutdown(Shutdown::Write);
            closing = Some(Instant::now());
        }
        if closing.is_some_and(|t| t.elapsed() > Duration::from_secs(5)) {
            break;
        }
        let n = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("capture stream: {e}")),
        };
        let whole = s
            .feed(&chunk[..n], out.is_none(), &port)
            .map_err(|e| format!("capture stream: {e}"))?;
        if let Some(w) = out.as_mut() {
            // Whole blocks only, so that the file reads to its end however
            // the capture ends; a reader gone (`| head`) ends it quietly.
            if w.write_all(&whole).and_then(|()| w.flush()).is_err() {
                return Ok(());
            }
        }
    }
    if let Some(w) = out.as_mut() {
        let _ = w.flush();
    }
    eprintln!("{} frames captured", s.frames);
    if s.lost > 0 {
        eprintln!(
            "{} copies lost: the capture's buffer was full (the frames themselves were switched)",
            s.lost
        );
    }
    Ok(())
}

/// The pcapng stream as it arrives: blocks parsed as they complete.
#[derive(Default)]
struct Stream {
    buf: Vec<u8>,
    parser: Option<PcapNgParser>,
    frames: u64,
    lost: u64,
}

impl Stream {
    /// Takes the stream's next bytes; returns the blocks they completed
    /// (raw, to be written as they came).
    fn feed(&mut self, bytes: &[u8], print: bool, port: &str) -> Result<Vec<u8>, PcapError> {
        self.buf.extend_from_slice(bytes);
        let mut at = 0;
        if self.parser.is_none() {
            match PcapNgParser::new(&self.buf) {
                Ok((rest, p)) => {
                    at = self.buf.len() - rest.len();
                    self.parser = Some(p);
                }
                Err(PcapError::IncompleteBuffer) => return Ok(Vec::new()),
                Err(e) => return Err(e),
            }
        }
        let parser = self.parser.as_mut().expect("parser made");
        let stdout = std::io::stdout();
        let mut stdout = stdout.lock();
        loop {
            let block = match parser.next_block(&self.buf[at..]) {
                Ok((rest, b)) => {
                    let used = self.buf.len() - at - rest.len();
                    (b, used)
                }
                Err(PcapError::IncompleteBuffer) => break,
                Err(e) => return Err(e),
            };
            let (b, used) = block;
            match b {
                Block::EnhancedPacket(p) => {
                    self.frames += 1;
                    if print {
                        let comment = p.options.iter().find_map(|o| match o {
                            EnhancedPacketOption::Comment(c) => Some(c.to_string()),
                            _ => None,
                        });
                        let _ = writeln!(
                            stdout,
                            "{} {port} {} len {}: {}",
                            clock(p.timestamp),
                            comment.unwrap_or_default(),
                            p.original_len,
                            Pretty(&p.data)
                        );
                    }
                }
                Block::InterfaceStatistics(st) => {
                    for o in &st.options {
                        if let InterfaceStatisticsOption::IsbIfDrop(n) = o {
                            self.lost = *n;
                        }
                    }
                }
                _ => {}
            }
            at += used;
        }
        Ok(self.buf.drain(..at).collect())
    }
}

/// `HH:MM:SS.uuuuuu` of a time since the epoch (UTC).
fn clock(t: Duration) -> String {
    let s = t.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        t.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_reads_as_tcpdump_prints_it() {
        let t =
            Duration::from_secs(86_400 * 3 + 3600 * 13 + 60 * 5 + 7) + Duration::from_micros(42);
        assert_eq!(clock(t), "13:05:07.000042");
    }
}
