//! Port mirroring, as Open vSwitch's `Mirror` table and the distributed
//! switch's sessions configure it: copies of the frames a port sends
//! (`select_src_port`), of those sent to a port (`select_dst_port`), of
//! those on a VLAN (`select_vlan`) or of all of them (`select_all`), to
//! another port (SPAN: a VM running a monitor), to a VLAN (RSPAN: every
//! port carrying it, tagged) or over GRE to a remote address (ERSPAN type
//! II or III, from the host's own IP stack, as the distributed switch's
//! "encapsulated remote mirroring" sends from a VMkernel adapter).
//!
//! A mirror never delays or loses the original: a copy takes a buffer of
//! the source port's own, is dropped (and counted) when there is none or
//! its destination is full, and ERSPAN copies are sent without waiting.
//! A port that is a mirror's output is that mirror's alone (as in Open
//! vSwitch): nothing else is forwarded to it, and what it sends is
//! dropped (`mirror_port`). A copy is never mirrored again.

use hvnet_wire::erspan::{self, Erspan, Version};
use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

/// Where a mirror's copies go.
#[derive(Clone, Debug)]
pub enum Output {
    /// SPAN: to this port (by name).
    Port(String),
    /// RSPAN: to every port carrying this VLAN, in it.
    Vlan(u16),
    /// ERSPAN: over GRE to a remote address.
    Erspan(Arc<ErspanSender>),
}

/// One mirror as configured.
#[derive(Clone, Debug)]
pub struct MirrorSpec {
    /// Its name (`hvnet mirror`).
    pub name: String,
    /// Every frame.
    pub select_all: bool,
    /// Frames these ports send.
    pub select_src_port: Vec<String>,
    /// Frames sent to these ports.
    pub select_dst_port: Vec<String>,
    /// Frames on these VLANs (0: untagged), either way.
    pub select_vlan: Vec<u16>,
    /// Where its copies go.
    pub output: Output,
}

/// A mirror and its counters.
#[derive(Debug)]
pub struct Mirror {
    /// As configured.
    pub spec: MirrorSpec,
    /// Copies sent (to every output port, or over GRE).
    pub copies: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// Copies not made or not sent: no buffer, the output down or full,
    /// the remote unreachable.
    pub lost: AtomicU64,
}

/// The switch's mirrors: a list replaced whole.
#[derive(Debug, Default)]
pub struct Mirrors {
    all: RwLock<Arc<Vec<Arc<Mirror>>>>,
}

impl Mirrors {
    /// Takes a new set of mirrors (counters start again for every mirror
    /// whose spec changed; those kept keep theirs).
    pub fn install(&self, specs: Vec<MirrorSpec>) {
        let mut all = self.all.write().expect("mirrors lock");
        let next = specs
            .into_iter()
            .map(|spec| {
                all.iter()
                    .find(|m| same(&m.spec, &spec))
                    .cloned()
                    .unwrap_or_else(|| {
                        Arc::new(Mirror {
                            spec,
                            copies: AtomicU64::new(0),
                            bytes: AtomicU64::new(0),
                            lost: AtomicU64::new(0),
                        })
                    })
            })
            .collect();
        *all = Arc::new(next);
    }

    /// The mirrors now.
    pub fn list(&self) -> Arc<Vec<Arc<Mirror>>> {
        Arc::clone(&self.all.read().expect("mirrors lock"))
    }
}

fn same(a: &MirrorSpec, b: &MirrorSpec) -> bool {
    let out = match (&a.output, &b.output) {
        (Output::Port(x), Output::Port(y)) => x == y,
        (Output::Vlan(x), Output::Vlan(y)) => x == y,
        (Output::Erspan(x), Output::Erspan(y)) => x.config == y.config,
        _ => false,
    };
    out && a.name == b.name
        && a.select_all == b.select_all
        && a.select_src_port == b.select_src_port
        && a.select_dst_port == b.select_dst_port
        && a.select_vlan == b.select_vlan
}

/// An ERSPAN session's settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ErspanConfig {
    /// Where the copies go.
    pub remote: IpAddr,
    /// Type II or III (2 or 3).
    pub version: u8,
    /// The session ID (0..=1023).
    pub session: u16,
    /// Bytes of each frame sent at most (longer ones are cut and say so).
    pub max_frame: usize,
}

/// An ERSPAN session's raw GRE socket (the kernel routes it and writes
/// the outer IP header).
#[derive(Debug)]
pub struct ErspanSender {
    /// Its settings.
    pub config: ErspanConfig,
    sock: Socket,
    to: SockAddr,
    seq: AtomicU32,
}

impl ErspanSender {
    /// Opens the session's socket.
    pub fn open(config: ErspanConfig) -> std::io::Result<ErspanSender> {
        let domain = match config.remote {
            IpAddr::V4(_) => Domain::IPV4,
            IpAddr::V6(_) => Domain::IPV6,
        };
        let proto = Protocol::from(i32::from(erspan::IPPROTO_GRE));
        let sock = Socket::new(domain, Type::RAW, Some(proto))?;
        sock.set_nonblocking(true)?;
        // Nothing comes back on it: what it would queue is never read.
        sock.set_recv_buffer_size(0)?;
        let to = SockAddr::from(SocketAddr::new(config.remote, 0));
        Ok(ErspanSender {
            config,
            sock,
            to,
            seq: AtomicU32::new(0),
        })
    }

    /// Sends one frame (its bytes, its VLAN, the way it was mirrored);
    /// false if the kernel did not take it.
    pub fn send(
        &self,
        frame: &[u8],
        vlan: u16,
        tagged: bool,
        egress: bool,
        out: &mut Vec<u8>,
    ) -> bool {
        let version = if self.config.version == 2 {
            Version::II
        } else {
            Version::III
        };
        let keep = frame.len().min(self.config.max_frame);
        let e = Erspan {
            version,
            session: self.config.session,
            vlan,
            tagged,
            egress,
            truncated: keep < frame.len(),
        };
        let ts = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| (d.as_micros() / 100) as u32);
        out.clear();
        out.resize(e.header_len(), 0);
        let seq = self.seq.fetch_add(1, Relaxed);
        e.emit(out, seq, ts);
        out.extend_from_slice(&frame[..keep]);
        self.sock.send_to(out, &self.to).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, out: u16) -> MirrorSpec {
        MirrorSpec {
            name: name.into(),
            select_all: false,
            select_src_port: vec!["a".into()],
            select_dst_port: vec![],
            select_vlan: vec![],
            output: Output::Vlan(out),
        }
    }

    #[test]
    fn a_mirror_kept_keeps_its_counters_and_a_changed_one_starts_again() {
        let m = Mirrors::default();
        m.install(vec![spec("m1", 10), spec("m2", 20)]);
        for x in m.list().iter() {
            x.copies.store(5, Relaxed);
        }
        m.install(vec![spec("m1", 10), spec("m2", 21)]);
        let l = m.list();
        assert_eq!(l[0].copies.load(Relaxed), 5);
        assert_eq!(l[1].copies.load(Relaxed), 0);
    }
}
