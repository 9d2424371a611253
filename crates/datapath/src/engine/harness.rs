//! A deterministic, single-threaded switch for tests and fuzzing: ports
//! of any backend that needs no root — TAP queues over socketpairs, or
//! [`ReplayPort`]'s in-memory queues — and the very worker and delivery
//! code the threads run, stepped by hand, through the port interface alone.
//! The test writes each port's frames (with their 12-byte virtio-net
//! header) into its far end and reads deliveries from it.

use crate::deliver::{self, Scratch};
use crate::engine::worker::{Batch, Rxq};
use crate::engine::{Port, PortSpec, Switch, SwitchConfig};
use crate::item::{RingItem, BATCH};
use crate::ring::{Consumer, Slot};
use crate::settings::PortSettings;
use hvnet_port::vxlan::VtepConfig;
use hvnet_port::{Device, ReplayPort, TapPort, Transmitter, TxOptions, VxlanPort};
use hvnet_sys::FrameQueue;
use hvnet_wire::MacAddr;
use std::io::{Read, Write};
use std::sync::Arc;

/// Which backend a harness port is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A TAP port whose queues are socketpairs.
    Tap,
    /// A [`ReplayPort`].
    Replay,
}

/// A port's far end (the guest's side).
pub enum Guest {
    /// One socket per queue.
    Tap(Vec<FrameQueue>),
    /// The replay port itself.
    Replay(Arc<ReplayPort>),
}

/// A guest receive queue's stepped delivery: its port and queue, the
/// consumer of its ring, its transmitter.
struct Receive {
    port: usize,
    q: usize,
    consumer: Consumer<RingItem>,
    tx: Box<dyn Transmitter>,
}

/// The switch and its stepped threads.
pub struct Harness {
    /// The switch.
    pub sw: Arc<Switch>,
    /// Guest ends, by port.
    pub guests: Vec<Guest>,
    workers: Vec<Rxq>,
    consumers: Vec<Receive>,
    batch: Vec<Slot<RingItem>>,
    scratch: Scratch,
}

impl Harness {
    /// A switch with one TAP port per `(mac, queues, settings)`.
    pub fn new(ports: &[(MacAddr, usize, PortSettings)], cfg: SwitchConfig) -> Harness {
        let tap: Vec<_> = ports.iter().map(|_| Backend::Tap).collect();
        Harness::with_backends(ports, &tap, cfg)
    }

    /// A switch with one port per `(mac, queues, settings)`, port `i` of
    /// backend `backends[i]` (TAP where the list is short).
    pub fn with_backends(
        ports: &[(MacAddr, usize, PortSettings)],
        backends: &[Backend],
        cfg: SwitchConfig,
    ) -> Harness {
        Harness::with_tunnel(ports, backends, None, cfg)
    }

    /// [`Harness::with_backends`], port `tunnel.0` a VXLAN tunnel endpoint
    /// over its backend (the underlay) with settings `tunnel.1` (its
    /// tables filled by the test, as the control plane fills them).
    pub fn with_tunnel(
        ports: &[(MacAddr, usize, PortSettings)],
        backends: &[Backend],
        tunnel: Option<(usize, VtepConfig)>,
        cfg: SwitchConfig,
    ) -> Harness {
        Harness::build(ports, backends, tunnel, &[], cfg)
    }

    /// [`Harness::new`], port `i` on access VLAN `vlans[i]` (0 where the
    /// list is short).
    pub fn with_access_vlans(
        ports: &[(MacAddr, usize, PortSettings)],
        vlans: &[u16],
        cfg: SwitchConfig,
    ) -> Harness {
        Harness::build(ports, &[], None, vlans, cfg)
    }

    /// [`Harness::with_backends`], port `i` on access VLAN `vlans[i]`.
    pub fn with_backends_on_vlans(
        ports: &[(MacAddr, usize, PortSettings)],
        backends: &[Backend],
        vlans: &[u16],
        cfg: SwitchConfig,
    ) -> Harness {
        Harness::build(ports, backends, None, vlans, cfg)
    }

    fn build(
        ports: &[(MacAddr, usize, PortSettings)],
        backends: &[Backend],
        tunnel: Option<(usize, VtepConfig)>,
        vlans: &[u16],
        cfg: SwitchConfig,
    ) -> Harness {
        let mut specs = Vec::new();
        let mut guests = Vec::new();
        for (i, (mac, nq, settings)) in ports.iter().enumerate() {
            let name = format!("p{i}");
            let nq = (*nq).max(1);
            let (dev, guest): (Arc<dyn Device>, Guest) =
                match backends.get(i).copied().unwrap_or(Backend::Tap) {
                    Backend::Tap => {
                        let (sw_side, guest) = socket_queues(nq);
                        (
                            Arc::new(TapPort::from_queues(&name, sw_side)),
                            Guest::Tap(guest),
                        )
                    }
                    Backend::Replay => {
                        let r = Arc::new(ReplayPort::new(&name, nq).expect("replay port"));
                        (Arc::clone(&r) as Arc<dyn Device>, Guest::Replay(r))
                    }
                };
            let (dev, endpoint) = match tunnel.as_ref().filter(|(t, _)| *t == i) {
                Some((_, cfg)) => {
                    let vx = VxlanPort::new(dev, cfg.clone(), None);
                    let endpoint = Arc::clone(vx.endpoint());
                    (Arc::new(vx) as Arc<dyn Device>, Some(endpoint))
                }
                None => (dev, None),
            };
            specs.push(PortSpec {
                name,
                dev,
                mac: *mac,
                vlan: vlans.get(i).copied().unwrap_or(0),
                endpoint,
                settings: settings.clone(),
                external_ids: Vec::new(),
            });
            guests.push(guest);
        }
        let sw = Switch::new(specs, cfg);
        let mut h = Harness {
            sw: Arc::clone(&sw),
            guests,
            workers: Vec::new(),
            consumers: Vec::new(),
            batch: Vec::with_capacity(BATCH),
            scratch: Scratch::default(),
        };
        for p in sw.ports().iter() {
            h.attach(p);
        }
        h
    }

    /// Gives each queue of `port` its stepped worker and delivery.
    fn attach(&mut self, port: &Arc<Port>) {
        for q in 0..port.rxq.len() {
            self.workers
                .push(Rxq::new(Arc::clone(&self.sw), Arc::clone(port), q));
            self.consumers.push(Receive {
                port: port.id,
                q,
                consumer: Consumer::attach(&port.rxq[q].rings),
                tx: Arc::clone(&port.dev).transmitter(q, TxOptions::default()),
            });
        }
    }

    /// The guest of `port` sends `bytes` (virtio-net header, then frame)
    /// on queue `q`. False when the socket is full.
    pub fn send(&self, port: usize, q: usize, bytes: &[u8]) -> bool {
        match &self.guests[port] {
            Guest::Tap(queues) => queues[q % queues.len()].file().write(bytes).is_ok(),
            Guest::Replay(r) => {
                r.push(q, bytes.to_vec());
                true
            }
        }
    }

    /// Runs every worker once and every delivery once; true if anything
    /// moved.
    pub fn step(&mut self) -> bool {
        let mut moved = false;
        for w in &mut self.workers {
            moved |= w.poll_batch() != Batch::Empty;
        }
        for r in &mut self.consumers {
            let port = &self.sw.ports()[r.port];
            let ring = &port.rxq[r.q].rings;
            r.consumer.pop_batch(ring, &mut self.batch, BATCH);
            if self.batch.is_empty() {
                continue;
            }
            moved = true;
            let (r1, r2) = self
                .batch
                .iter()
                .fold((0, 0), |(a, b), x| (a + x.r1(), b + x.r2()));
            let s = port.settings();
            deliver::deliver_batch(
                &mut *r.tx,
                &ring.delivery,
                &s,
                deliver::hold(&s),
                &mut self.batch,
                &mut self.scratch,
                deliver::Tap::of(port, r.q),
            );
            ring.release(r1, r2);
        }
        moved
    }

    /// Steps until nothing moves (at most `max` steps), reading every
    /// guest's deliveries into `out` as `(port, bytes)`.
    pub fn settle(&mut self, max: usize, out: &mut Vec<(usize, Vec<u8>)>) {
        for _ in 0..max {
            let moved = self.step();
            let read = self.drain_guests(out);
            if !moved && !read {
                break;
            }
        }
        for w in &mut self.workers {
            w.finish();
        }
        self.step();
        self.drain_guests(out);
    }

    fn drain_guests(&self, out: &mut Vec<(usize, Vec<u8>)>) -> bool {
        let mut any = false;
        let mut buf = vec![0u8; 70_000];
        for (p, g) in self.guests.iter().enumerate() {
            match g {
                Guest::Tap(queues) => {
                    for q in queues {
                        while let Ok(n) = q.file().read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            any = true;
                            out.push((p, buf[..n].to_vec()));
                        }
                    }
                }
                Guest::Replay(r) => {
                    for (_, f) in r.take_sent() {
                        any = true;
                        out.push((p, f));
                    }
                }
            }
        }
        any
    }

    /// Adds a TAP port over socketpairs while frames flow, as the control
    /// plane adds a VM: the switch's [`Switch::add_port`], then its queues'
    /// stepped workers and deliveries. Its guest is `guests[id]` (an id a
    /// removed port left is reused). Returns the port's id.
    pub fn add_port(
        &mut self,
        name: &str,
        mac: MacAddr,
        queues: usize,
        settings: PortSettings,
    ) -> Result<usize, crate::TableError> {
        let (spec, guest) = tap_port(name, mac, queues, settings);
        let port = self.sw.add_port(spec)?;
        if port.id == self.guests.len() {
            self.guests.push(Guest::Tap(guest));
        } else {
            self.guests[port.id] = Guest::Tap(guest);
        }
        self.attach(&port);
        Ok(port.id)
    }

    /// Removes port `name` while frames flow: the switch's
    /// [`Switch::remove_port`], then its queues leave their workers at a
    /// batch boundary (what they held flushed) and its deliveries stop.
    /// The other queues learn of it at their next batch.
    pub fn remove_port(&mut self, name: &str) -> Result<usize, crate::TableError> {
        let port = self.sw.remove_port(name)?;
        let mut i = 0;
        while i < self.workers.len() {
            if Arc::ptr_eq(self.workers[i].port(), &port) {
                self.workers.remove(i).finish();
            } else {
                i += 1;
            }
        }
        // What its rings hold goes with it (its counters with it).
        self.consumers.retain(|r| r.port != port.id);
        Ok(port.id)
    }

    /// Gives every queue its worker's idle look (the kernel's drops, the
    /// link, the own querier's queries), as a worker does once a second.
    pub fn look(&mut self) {
        let now = std::time::Instant::now();
        for w in &mut self.workers {
            w.tick(now, true);
        }
    }

    /// Moves queues between workers as the placement does: each keeps its
    /// state and is read in a different order from now on (`k` turns the
    /// order round).
    pub fn rebalance(&mut self, k: usize) {
        if !self.workers.is_empty() {
            let n = self.workers.len();
            self.workers.rotate_left(k % n);
        }
    }

    /// Checks the accounting identities of every port once settled:
    /// frames in = forwarded + named drops; offered = delivered + drops,
    /// nothing in flight; buffers within the cap. Returns what is wrong.
    pub fn check_accounting(&self) -> Result<(), String> {
        for p in self.sw.ports().iter() {
            let i = p.ingress_stats();
            if !i.balanced() {
                return Err(format!("{}: ingress {i:?}", p.name));
            }
            let e = p.egress_stats();
            if e.in_flight() != 0 {
                return Err(format!(
                    "{}: egress in flight {} of {e:?}",
                    p.name,
                    e.in_flight()
                ));
            }
            let b = p.buffers();
            if b.bytes > b.cap_bytes {
                return Err(format!("{}: buffers {b:?} over the cap", p.name));
            }
        }
        Ok(())
    }
}

/// A TAP port over socketpairs, to add to a running switch: its spec and
/// its guest's end.
pub fn tap_port(
    name: &str,
    mac: MacAddr,
    queues: usize,
    settings: PortSettings,
) -> (PortSpec, Vec<FrameQueue>) {
    let (sw_side, guest) = socket_queues(queues.max(1));
    let spec = PortSpec {
        name: name.into(),
        dev: Arc::new(TapPort::from_queues(name, sw_side)),
        mac,
        vlan: 0,
        endpoint: None,
        settings,
        external_ids: Vec::new(),
    };
    (spec, guest)
}

/// `n` socketpairs, nonblocking: the switch's ends and the guest's.
fn socket_queues(n: usize) -> (Vec<FrameQueue>, Vec<FrameQueue>) {
    (0..n)
        .map(|_| {
            let (a, b) = hvnet_sys::frame_socketpair().expect("socketpair");
            let (qa, qb) = (
                FrameQueue::from_fd(a, "sw"),
                FrameQueue::from_fd(b, "guest"),
            );
            qa.set_nonblocking(true).expect("nonblocking");
            qb.set_nonblocking(true).expect("nonblocking");
            (qa, qb)
        })
        .unzip()
}

#[cfg(test)]
#[path = "harness_tests.rs"]
mod tests;
