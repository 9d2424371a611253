//! Flow export with IPFIX (RFC 7011), as Open vSwitch's bridge IPFIX and
//! the distributed switch's NetFlow export it: frames metered as they
//! enter the switch (every frame, or 1 in `sampling`, counted — RFC
//! 5475's systematic sampling), per flow — ingress port, VLAN, MACs,
//! EtherType, addresses, protocol and ports, and for a frame that came
//! through a VXLAN tunnel its VNI and outer addresses — into a bounded
//! cache, from which an exporter thread sends each flow's record to the
//! collectors when it has been idle or active long enough, or when the
//! exporter stops.
//!
//! Counts are of what was metered: with sampling, a collector multiplies
//! by `sampling`, which the export says in an options record sent with
//! the templates (`message::sampling_options`; `hvnet ipfix` says it
//! too). Ports are interface indices:
//! a port's number in `hvnet ports` plus one (0: none — a flooded frame's
//! egress). A frame counts as the port counters count it: a TSO frame is
//! one frame of its whole length.

pub(crate) mod stage;

pub mod message;

use crate::acl::flow::{Family, Flow, L4};
use hvnet_port::Packet;
use message::EndReason;
use serde::Serialize;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The cache's shards (each its own lock).
const SHARDS: usize = 16;

/// How long a stopped exporter waits before its last records go: a
/// worker's batch and more.
const SWITCH_OVER: Duration = Duration::from_millis(50);

/// How often templates are sent again (collectors that start after the
/// exporter learn them within this).
const TEMPLATE_EVERY: Duration = Duration::from_secs(10);

/// An IPFIX exporter's settings (`[ipfix]`, in Open vSwitch's words).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IpfixConfig {
    /// The collectors (UDP).
    pub targets: Vec<SocketAddr>,
    /// 1 in this many frames metered (1: every frame).
    pub sampling: u32,
    /// The observation domain the messages say.
    pub obs_domain_id: u32,
    /// A flow active this long has its record sent (and starts again).
    pub cache_active_timeout: Duration,
    /// A flow idle this long has its record sent.
    pub cache_idle_timeout: Duration,
    /// Flows the cache holds at most; a new flow beyond is not metered
    /// (counted).
    pub cache_max_flows: usize,
}

/// A tunnelled flow's outer headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TunnelKey {
    /// The remote endpoint (the outer source).
    pub remote: IpAddr,
    /// This endpoint (the outer destination).
    pub local: IpAddr,
    /// Outer UDP ports.
    pub sport: u16,
    /// Outer UDP destination port.
    pub dport: u16,
    /// The VNI.
    pub vni: u32,
}

impl TunnelKey {
    /// The outer headers a decapsulated frame came with, at an endpoint
    /// of address `local` and UDP port `dport`.
    pub fn of(pkt: &Packet, (local, dport): (IpAddr, u16)) -> Option<TunnelKey> {
        let vni = pkt.meta.tunnel?.vni;
        let (remote, sport) = pkt.tunnel_source()?;
        Some(TunnelKey {
            remote,
            local,
            sport,
            dport,
            vni,
        })
    }
}

/// What a flow is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// The port it entered by.
    pub in_port: u32,
    /// Its VLAN.
    pub vlan: u16,
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// EtherType.
    pub ethertype: u16,
    /// IPv4, IPv6, or neither.
    pub family: Option<Family>,
    /// Source address (IPv4 in the low 32 bits).
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// IP protocol.
    pub proto: u8,
    /// Source port.
    pub sport: u16,
    /// Destination port (ICMP: type × 256 + code).
    pub dport: u16,
    /// The outer headers it came in, through a tunnel endpoint.
    pub tunnel: Option<TunnelKey>,
}

/// What was metered of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// First and last frame, ms since the epoch.
    pub first_ms: u64,
    /// Last frame.
    pub last_ms: u64,
    /// Frames.
    pub packets: u64,
    /// Bytes of their IP packets (the frames', for a non-IP flow).
    pub octets: u64,
    /// Bytes of the frames.
    pub l2_octets: u64,
    /// The port its last frame went to (None: flooded).
    pub out_port: Option<u32>,
}

/// The exporter's counters.
#[derive(Debug, Default, Serialize)]
pub struct IpfixCounters {
    /// Frames metered (after sampling).
    pub metered: AtomicU64,
    /// Frames of new flows not metered: the cache was full.
    pub cache_full: AtomicU64,
    /// Records sent.
    pub records: AtomicU64,
    /// Messages sent.
    pub messages: AtomicU64,
    /// Messages a collector's socket refused.
    pub send_errors: AtomicU64,
}

/// An IPFIX exporter: its cache, its thread and its counters.
pub struct Ipfix {
    /// Its settings.
    pub config: IpfixConfig,
    shards: Vec<Mutex<HashMap<FlowKey, FlowRecord>>>,
    hasher: std::collections::hash_map::RandomState,
    flows: AtomicUsize,
    stop: AtomicBool,
    /// Its counters.
    pub counters: IpfixCounters,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl crate::engine::services::Service for Ipfix {
    fn shutdown(&self) {
        Ipfix::shutdown(self);
    }
}

/// Starts, changes or stops flow export on switch `sw`: an exporter
/// whose settings change is replaced by a new one, then stopped (its
/// flows' records sent; its shutdown waits a little for a worker still
/// metering into it).
pub fn set(sw: &crate::Switch, cfg: Option<IpfixConfig>) -> std::io::Result<()> {
    if current(sw).as_ref().map(|x| &x.config) == cfg.as_ref() {
        return Ok(());
    }
    let next = cfg.map(Ipfix::start).transpose()?;
    if let Some(old) = sw.replace_service(next) {
        old.shutdown();
    }
    Ok(())
}

/// Switch `sw`'s flow exporter, when on.
pub fn current(sw: &crate::Switch) -> Option<Arc<Ipfix>> {
    sw.services.get::<Ipfix>()
}

impl std::fmt::Debug for Ipfix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ipfix")
            .field("config", &self.config)
            .finish()
    }
}

impl Ipfix {
    /// Starts an exporter (its socket bound, its thread running).
    pub fn start(config: IpfixConfig) -> std::io::Result<Arc<Ipfix>> {
        let sock = UdpSocket::bind(match config.targets.first() {
            Some(SocketAddr::V6(_)) => "[::]:0",
            _ => "0.0.0.0:0",
        })?;
        let me = Arc::new(Ipfix {
            config,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
            flows: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            counters: IpfixCounters::default(),
            thread: Mutex::new(None),
        });
        let run = Arc::clone(&me);
        let t = std::thread::Builder::new()
            .name("ipfix".into())
            .spawn(move || run.export_loop(&sock))?;
        *me.thread.lock().expect("ipfix lock") = Some(t);
        Ok(me)
    }

    /// Stops the exporter: every flow's record sent, the thread ended.
    pub fn shutdown(&self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.lock().expect("ipfix lock").take() {
            let _ = t.join();
        }
    }

    /// Flows in the cache now.
    pub fn flows(&self) -> usize {
        self.flows.load(Relaxed)
    }

    /// Meters one frame that entered by `in_port` (its VLAN known, its
    /// destination port if one), and, through a tunnel endpoint, the
    /// outer headers it came in.
    pub fn meter(
        &self,
        in_port: usize,
        out_port: Option<usize>,
        pkt: &Packet,
        tunnel: Option<TunnelKey>,
    ) {
        let frame = pkt.buf.held();
        let layers = &pkt.meta.layers;
        let mut k = FlowKey {
            in_port: in_port as u32,
            vlan: pkt.meta.vlan,
            src_mac: pkt.src().0,
            dst_mac: pkt.dst().0,
            ethertype: u16::from(layers.ethertype()),
            family: None,
            src: 0,
            dst: 0,
            proto: 0,
            sport: 0,
            dport: 0,
            tunnel,
        };
        let len = pkt.len() as u64;
        let mut octets = len;
        if let Some(f) = Flow::of(frame, layers) {
            k.family = Some(f.family);
            (k.src, k.dst, k.proto) = (f.src, f.dst, f.proto);
            (k.sport, k.dport) = match f.l4 {
                L4::Tcp { sport, dport, .. } | L4::Udp { sport, dport } => (sport, dport),
                L4::IcmpQuery { ty, code, .. }
                | L4::IcmpError { ty, code, .. }
                | L4::IcmpOther { ty, code } => (0, u16::from(ty) << 8 | u16::from(code)),
                L4::Other => (0, 0),
            };
            if let Some(net) = layers.net() {
                octets = (net.end - net.offset) as u64;
                if pkt.meta.offload.gso.is_some() {
                    // A GSO frame's IP length field may be a placeholder.
                    octets = len - net.offset as u64;
                }
            }
        }
        let now = now_ms();
        let shard = self.hasher.hash_one(k) as usize % SHARDS;
        let mut s = self.shards[shard].lock().expect("ipfix shard");
        let out_port = out_port.map(|p| p as u32);
        match s.get_mut(&k) {
            Some(r) => {
                r.last_ms = now;
                r.packets += 1;
                r.octets += octets;
                r.l2_octets += len;
                r.out_port = out_port;
            }
            None => {
                if self.flows.load(Relaxed) >= self.config.cache_max_flows {
                    self.counters.cache_full.fetch_add(1, Relaxed);
                    return;
                }
                self.flows.fetch_add(1, Relaxed);
                s.insert(
                    k,
                    FlowRecord {
                        first_ms: now,
                        last_ms: now,
                        packets: 1,
                        octets,
                        l2_octets: len,
                        out_port,
                    },
                );
            }
        }
        self.counters.metered.fetch_add(1, Relaxed);
    }

    fn export_loop(&self, sock: &UdpSocket) {
        let mut ex = Exporter {
            sequence: 0,
            templates_at: None,
            sock,
        };
        loop {
            let stopping = self.stop.load(Relaxed);
            if stopping {
                // Workers metering into this cache move to the next one
                // (or stop) at their next batch.
                std::thread::sleep(SWITCH_OVER);
            }
            let expired = self.expire(stopping);
            ex.send(self, expired);
            if stopping {
                return;
            }
            // A second between looks, in steps (a stop is seen soon).
            for _ in 0..10 {
                if self.stop.load(Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Takes the flows whose records are due (all, when `all`).
    fn expire(&self, all: bool) -> Vec<(FlowKey, FlowRecord, EndReason)> {
        let now = now_ms();
        let idle = self.config.cache_idle_timeout.as_millis() as u64;
        let active = self.config.cache_active_timeout.as_millis() as u64;
        let mut out = Vec::new();
        for s in &self.shards {
            let mut s = s.lock().expect("ipfix shard");
            s.retain(|k, r| {
                let why = if all {
                    Some(EndReason::Forced)
                } else if now.saturating_sub(r.last_ms) >= idle {
                    Some(EndReason::Idle)
                } else if now.saturating_sub(r.first_ms) >= active {
                    Some(EndReason::Active)
                } else {
                    None
                };
                match why {
                    Some(w) => {
                        out.push((*k, *r, w));
                        false
                    }
                    None => true,
                }
            });
        }
        self.flows.fetch_sub(out.len(), Relaxed);
        out
    }
}

/// The sending side: messages of at most [`message::MAX_MESSAGE`] bytes,
/// templates first and again every [`TEMPLATE_EVERY`].
struct Exporter<'a> {
    sequence: u32,
    templates_at: Option<Instant>,
    sock: &'a UdpSocket,
}

impl Exporter<'_> {
    fn send(&mut self, ix: &Ipfix, mut records: Vec<(FlowKey, FlowRecord, EndReason)>) {
        let due = self
            .templates_at
            .is_none_or(|t| t.elapsed() >= TEMPLATE_EVERY);
        if records.is_empty() && !due {
            return;
        }
        records.sort_by_key(|(k, _, _)| message::Template::of(k) as u16);
        let mut msg = vec![0u8; 16];
        if due {
            message::templates(&mut msg);
            message::sampling_options(&mut msg, ix.config.obs_domain_id, ix.config.sampling);
            self.templates_at = Some(Instant::now());
        }
        // (The sampling options record is a data record too: counted in
        // the sequence, RFC 7011 §3.1.)
        let (mut in_msg, mut set_at, mut set_t) = (u32::from(due), None::<usize>, None);
        for (k, r, why) in &records {
            let t = message::Template::of(k);
            if msg.len() + 4 + t.record_len() > message::MAX_MESSAGE {
                close_set(&mut msg, set_at.take());
                self.flush(ix, &mut msg, in_msg);
                in_msg = 0;
                set_t = None;
            }
            if set_t != Some(t) {
                close_set(&mut msg, set_at.take());
                set_at = Some(msg.len());
                msg.extend_from_slice(&(t as u16).to_be_bytes());
                msg.extend_from_slice(&[0, 0]);
                set_t = Some(t);
            }
            message::record(&mut msg, k, r, *why);
            in_msg += 1;
        }
        close_set(&mut msg, set_at.take());
        if msg.len() > 16 {
            self.flush(ix, &mut msg, in_msg);
        }
    }

    fn flush(&mut self, ix: &Ipfix, msg: &mut Vec<u8>, records: u32) {
        let secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as u32);
        message::header(msg, secs, self.sequence, ix.config.obs_domain_id);
        for t in &ix.config.targets {
            match self.sock.send_to(msg, t) {
                Ok(_) => ix.counters.messages.fetch_add(1, Relaxed),
                Err(_) => ix.counters.send_errors.fetch_add(1, Relaxed),
            };
        }
        // The sequence counts data records sent (RFC 7011 §3.1).
        self.sequence = self.sequence.wrapping_add(records);
        ix.counters.records.fetch_add(u64::from(records), Relaxed);
        msg.truncate(16);
    }
}

/// Writes a set's length once its records are in.
fn close_set(msg: &mut [u8], at: Option<usize>) {
    if let Some(at) = at {
        let len = (msg.len() - at) as u16;
        msg[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
