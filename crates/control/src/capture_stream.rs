//! `hvnet capture`'s side of the control socket: the request's filter
//! compiled with libpcap (tcpdump's syntax, through the `pcap` crate), a
//! capture session on the port, and its copies streamed to the client as
//! pcapng — one interface (the port), each frame's point, queue and drop
//! reason in its comment, its direction in `epb_flags`, and copies lost to
//! a full capture buffer in `epb_dropcount` — until the client goes, the
//! count is reached or the port is removed; then an interface statistics
//! block with what was taken and lost.
//!
//! After the reply line, the connection carries pcapng only: the CLI
//! copies it to a file or standard output (`-w`) or prints a line a frame.

use crate::proto::CtlError;
use crate::views;
use hvnet_datapath::capture::{Captured, Filter, Point, Session, Way};
use hvnet_datapath::{Port, PortState, Switch};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::interface_statistics::{
    InterfaceStatisticsBlock, InterfaceStatisticsOption,
};
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, PcapError};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::io::{BufWriter, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Largest snap length (a GSO frame and its headers).
pub const MAX_SNAPLEN: u32 = 65_535 + 256;

/// How long the stream waits for copies before it looks whether its
/// client or its port went.
const IDLE_LOOK: Duration = Duration::from_millis(200);

/// What a capture asks for, checked.
pub struct Plan {
    port: Arc<Port>,
    points: Vec<Point>,
    filter: String,
    snaplen: u32,
    count: u64,
}

/// Checks a capture request: the port, the points, the snap length and
/// the filter (compiled here, so that one that does not compile is refused
/// before anything starts).
pub fn plan(
    sw: &Switch,
    port: &str,
    points: &[String],
    filter: &str,
    snaplen: u32,
    count: u64,
) -> Result<(Plan, Option<Filter>), CtlError> {
    let p = sw
        .port(port)
        .ok_or_else(|| CtlError::not_found("port", port, views::port_names(sw, false)))?;
    let mut at = Vec::new();
    for name in points {
        let point = Point::parse(name).ok_or_else(|| CtlError::BadValue {
            setting: "point".into(),
            value: name.clone(),
            allowed: "in, offload, out or drop".into(),
        })?;
        if !at.contains(&point) {
            at.push(point);
        }
    }
    if at.is_empty() {
        at = vec![Point::In, Point::Out];
    }
    if snaplen > MAX_SNAPLEN {
        return Err(CtlError::BadValue {
            setting: "snaplen".into(),
            value: snaplen.to_string(),
            allowed: format!("a number of bytes (0..{MAX_SNAPLEN}; 0: whole frames)"),
        });
    }
    let compiled = compile(filter, "capture")?;
    let plan = Plan {
        port: p,
        points: at,
        filter: filter.to_string(),
        snaplen,
        count,
    };
    Ok((plan, compiled))
}

/// A tcpdump filter expression compiled for Ethernet frames (none for an
/// empty one).
pub(crate) fn compile(expr: &str, what: &str) -> Result<Option<Filter>, CtlError> {
    if expr.trim().is_empty() {
        return Ok(None);
    }
    let dead = pcap::Capture::dead(pcap::Linktype::ETHERNET).map_err(CtlError::failed)?;
    let program = dead.compile(expr, true).map_err(|e| {
        let why = e.to_string();
        let why = why.trim_start_matches("libpcap error: ");
        CtlError::refused(format!("{what} filter {expr:?} does not compile: {why}"))
    })?;
    // libpcap's filter program is run by one caller at a time.
    let program = Mutex::new(program);
    Ok(Some(Box::new(move |frame: &[u8]| {
        program.lock().expect("filter lock").filter(frame)
    })))
}

/// What the reply says before the stream starts.
fn started(plan: &Plan) -> Value {
    json!({
        "port": plan.port.name,
        "points": plan.points.iter().map(|p| p.name()).collect::<Vec<_>>(),
        "filter": plan.filter,
        "snaplen": plan.snaplen,
        "count": plan.count,
    })
}

/// Starts the capture, has `reply` answer the request (so that a client
/// told it started misses nothing after), and streams it to `conn` until
/// the client goes, `count` copies were written or the port is removed.
pub fn stream(conn: &UnixStream, plan: Plan, filter: Option<Filter>, reply: impl FnOnce(Value)) {
    let session = Arc::new(Session::new(&plan.points, filter, plan.snaplen as usize));
    let port = &plan.port;
    port.taps.attach(Arc::clone(&session));
    reply(started(&plan));
    let r = write_stream(conn, &plan, &session);
    port.taps.detach(&session);
    if let Err(e) = r {
        tracing::debug!(port = %port.name, "capture ended: {e}");
    }
}

fn write_stream(conn: &UnixStream, plan: &Plan, session: &Session) -> Result<(), PcapError> {
    // pcap-file writes a block a field at a time: buffered, a system
    // call per batch of copies.
    let out = BufWriter::with_capacity(256 << 10, conn);
    let mut w = PcapNgWriter::with_section_header(out, section())?;
    w.write_pcapng_block(interface(plan))?;
    conn.set_read_timeout(Some(Duration::from_millis(1)))
        .map_err(PcapError::IoError)?;
    let (mut written, mut lost) = (0u64, 0u64);
    let mut batch = Vec::new();
    let mut looked = Instant::now();
    while plan.count == 0 || written < plan.count {
        // What was taken before the client closed its end is still sent.
        let gone = if looked.elapsed() >= IDLE_LOOK {
            looked = Instant::now();
            client_gone(conn) || plan.port.state() == PortState::Removed
        } else {
            false
        };
        session.take(if gone { Duration::ZERO } else { IDLE_LOOK }, &mut batch);
        for c in batch.drain(..) {
            let now_lost = session.lost.load(Relaxed);
            w.write_pcapng_block(packet(&c, now_lost - lost))?;
            lost = now_lost;
            written += 1;
            if written == plan.count {
                break;
            }
        }
        w.get_mut().flush().map_err(PcapError::IoError)?;
        if gone {
            break;
        }
    }
    w.write_pcapng_block(statistics(session))?;
    w.get_mut().flush().map_err(PcapError::IoError)
}

/// True once the client closed its end (it sends nothing after its
/// request).
fn client_gone(mut conn: &UnixStream) -> bool {
    let mut b = [0u8; 64];
    match conn.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

fn section() -> SectionHeaderBlock<'static> {
    SectionHeaderBlock {
        options: vec![SectionHeaderOption::UserApplication(Cow::Owned(format!(
            "hvnet {}",
            env!("CARGO_PKG_VERSION")
        )))],
        ..Default::default()
    }
}

fn interface(plan: &Plan) -> InterfaceDescriptionBlock<'static> {
    let p = &plan.port;
    let kind = if p.is_uplink() { "uplink" } else { "VM port" };
    let points: Vec<_> = plan.points.iter().map(|x| x.name()).collect();
    let mut options = vec![
        InterfaceDescriptionOption::IfName(Cow::Owned(if_name(&p.name, &p.external_ids))),
        InterfaceDescriptionOption::IfDescription(Cow::Owned(format!(
            "hvnet {kind} {}{} at {}",
            p.name,
            p.external_ids
                .iter()
                .map(|(k, v)| format!(" {k}={v}"))
                .collect::<String>(),
            points.join(",")
        ))),
        InterfaceDescriptionOption::IfTsResol(9),
    ];
    if !plan.filter.is_empty() {
        // if_filter: its first byte 0 says "a libpcap filter string".
        let mut f = vec![0u8];
        f.extend_from_slice(plan.filter.as_bytes());
        options.push(InterfaceDescriptionOption::IfFilter(Cow::Owned(f)));
    }
    InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: if plan.snaplen == 0 {
            MAX_SNAPLEN
        } else {
            plan.snaplen
        },
        options,
    }
}

/// The capture's interface name: the port's, and for a libvirt guest's
/// port its domain and the interface's alias beside it (`vnet3
/// (web1/ua-net0)`), so that a capture is told apart by the VM it is of,
/// as an analyser lists it.
fn if_name(port: &str, ids: &[(String, String)]) -> String {
    let id = |k: &str| {
        ids.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    match (id("domain"), id("interface")) {
        (Some(d), Some(a)) => format!("{port} ({d}/{a})"),
        (Some(d), None) => format!("{port} ({d})"),
        _ => port.to_string(),
    }
}

/// The words each frame's comment holds: `point=drop reason=policed
/// queue=0` (what `tshark -T fields -e frame.comment` prints).
pub fn comment(c: &Captured) -> String {
    let mut s = format!("point={}", c.point.name());
    if let Some(r) = c.reason {
        s.push_str(" reason=");
        s.push_str(r.name());
    }
    s.push_str(&format!(" queue={}", c.queue));
    s
}

fn packet(c: &Captured, lost_since: u64) -> EnhancedPacketBlock<'_> {
    // epb_flags bits 0-1: 01 inbound, 10 outbound.
    let flags = match c.way {
        Way::Inbound => 1,
        Way::Outbound => 2,
        Way::Unknown => 0,
    };
    let mut options = vec![
        EnhancedPacketOption::Comment(Cow::Owned(comment(c))),
        EnhancedPacketOption::Flags(flags),
    ];
    if lost_since > 0 {
        options.push(EnhancedPacketOption::DropCount(lost_since));
    }
    EnhancedPacketBlock {
        interface_id: 0,
        timestamp: c.ts,
        original_len: c.len,
        data: Cow::Borrowed(&c.data),
        options,
    }
}

fn statistics(s: &Session) -> InterfaceStatisticsBlock<'static> {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    InterfaceStatisticsBlock {
        interface_id: 0,
        timestamp: now,
        options: vec![
            InterfaceStatisticsOption::IsbIfRecv(s.taken.load(Relaxed) + s.lost.load(Relaxed)),
            InterfaceStatisticsOption::IsbIfDrop(s.lost.load(Relaxed)),
            InterfaceStatisticsOption::Comment(Cow::Borrowed(
                "isb_ifdrop: copies lost to a full capture buffer (frames were not)",
            )),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::if_name;

    #[test]
    fn a_guests_capture_is_named_by_its_port_and_its_domain() {
        let ids = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(if_name("a", &[]), "a");
        assert_eq!(
            if_name(
                "vnet3",
                &ids(&[
                    ("domain", "web1"),
                    ("domain_uuid", "u"),
                    ("interface", "ua-net0")
                ])
            ),
            "vnet3 (web1/ua-net0)"
        );
        assert_eq!(
            if_name("vnet3", &ids(&[("domain", "web1")])),
            "vnet3 (web1)"
        );
    }
}
