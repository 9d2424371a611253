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

pub(crate) mod stage;
pub(crate) mod view;

use hvnet_wire::erspan::{self, Erspan, Version};
use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

/// Where a mirror's copies go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// SPAN: to this port (by name).
    Port(String),
    /// RSPAN: to every port carrying this VLAN, in it.
    Vlan(u16),
    /// ERSPAN: over GRE to a remote address.
    Erspan(ErspanConfig),
}

/// One mirror as configured (`[[mirror]]`).
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// A mirror installed: its spec, its ERSPAN session's socket, its
/// counters.
#[derive(Debug)]
pub struct Mirror {
    /// As configured.
    pub spec: MirrorSpec,
    /// Its ERSPAN socket (`Output::Erspan`).
    pub erspan: Option<Arc<ErspanSender>>,
    /// Copies sent (to every output port, or over GRE).
    pub copies: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// Copies not made or not sent: no buffer, the remote unreachable.
    pub lost: AtomicU64,
}

/// The switch's mirrors: a list replaced whole.
#[derive(Debug, Default)]
pub struct Mirrors {
    all: RwLock<Arc<Vec<Arc<Mirror>>>>,
}

impl Mirrors {
    /// Takes a new set of mirrors: a mirror kept as it was keeps its
    /// counters and socket; the others start again, their ERSPAN sockets
    /// opened first (nothing changes if one cannot be).
    pub fn install(&self, specs: Vec<MirrorSpec>) -> std::io::Result<()> {
        let mut all = self.all.write().expect("mirrors lock");
        let mut next = Vec::with_capacity(specs.len());
        for spec in specs {
            if let Some(m) = all.iter().find(|m| m.spec == spec) {
                next.push(Arc::clone(m));
                continue;
            }
            let erspan = match &spec.output {
                Output::Erspan(c) => Some(Arc::new(ErspanSender::open(c.clone())?)),
                _ => None,
            };
            next.push(Arc::new(Mirror {
                spec,
                erspan,
                copies: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
                lost: AtomicU64::new(0),
            }));
        }
        *all = Arc::new(next);
        Ok(())
    }

    /// The mirrors now.
    pub fn list(&self) -> Arc<Vec<Arc<Mirror>>> {
        Arc::clone(&self.all.read().expect("mirrors lock"))
    }
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

    /// Sends one frame (its bytes, in pieces: a segment's header and
    /// payload; its VLAN, the way it was mirrored); false if the kernel
    /// did not take it.
    pub fn send(
        &self,
        frame: &[&[u8]],
        vlan: u16,
        tagged: bool,
        egress: bool,
        out: &mut Vec<u8>,
    ) -> bool {
        let len: usize = frame.iter().map(|p| p.len()).sum();
        let version = if self.config.version == 2 {
            Version::II
        } else {
            Version::III
        };
        let keep = len.min(self.config.max_frame);
        let e = Erspan {
            version,
            session: self.config.session,
            vlan,
            tagged,
            egress,
            truncated: keep < len,
        };
        let ts = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| (d.as_micros() / 100) as u32);
        out.clear();
        out.resize(e.header_len(), 0);
        let seq = self.seq.fetch_add(1, Relaxed);
        e.emit(out, seq, ts);
        for p in frame {
            let room = keep + e.header_len() - out.len();
            out.extend_from_slice(&p[..p.len().min(room)]);
        }
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
        m.install(vec![spec("m1", 10), spec("m2", 20)]).unwrap();
        for x in m.list().iter() {
            x.copies.store(5, Relaxed);
        }
        m.install(vec![spec("m1", 10), spec("m2", 21)]).unwrap();
        let l = m.list();
        assert_eq!(l[0].copies.load(Relaxed), 5);
        assert_eq!(l[1].copies.load(Relaxed), 0);
    }
}
