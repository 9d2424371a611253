//! A deterministic, single-threaded switch for tests and fuzzing: ports
//! over socketpairs instead of TAPs (no root), and the very worker and
//! delivery code the threads run, stepped by hand. The guest end of each
//! port is a socket the test writes frames (with their 12-byte virtio-net
//! header) into and reads deliveries from.

use crate::deliver::{self, Scratch};
use crate::item::{RingItem, BATCH};
use crate::ring::{Consumer, Slot};
use crate::settings::PortSettings;
use crate::switch::{PortSpec, Switch, SwitchConfig};
use crate::worker::{Batch, Worker};
use hvnet_port::{TapPort, Transmitter, TxOptions};
use hvnet_sys::FrameQueue;
use hvnet_wire::MacAddr;
use std::io::{Read, Write};
use std::sync::Arc;

/// A port's guest end.
pub struct Guest {
    /// One socket per queue.
    pub queues: Vec<FrameQueue>,
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
    workers: Vec<Worker>,
    consumers: Vec<Receive>,
    batch: Vec<Slot<RingItem>>,
    scratch: Scratch,
}

impl Harness {
    /// A switch with one port per `(mac, queues, settings)`.
    pub fn new(ports: &[(MacAddr, usize, PortSettings)], cfg: SwitchConfig) -> Harness {
        let mut specs = Vec::new();
        let mut guests = Vec::new();
        for (i, (mac, nq, settings)) in ports.iter().enumerate() {
            let mut sw_side = Vec::new();
            let mut guest = Vec::new();
            for _ in 0..(*nq).max(1) {
                let (a, b) = hvnet_sys::frame_socketpair().expect("socketpair");
                let (qa, qb) = (
                    FrameQueue::from_fd(a, "sw"),
                    FrameQueue::from_fd(b, "guest"),
                );
                qa.set_nonblocking(true).expect("nonblocking");
                qb.set_nonblocking(true).expect("nonblocking");
                sw_side.push(qa);
                guest.push(qb);
            }
            specs.push(PortSpec {
                name: format!("p{i}"),
                dev: Arc::new(TapPort::from_queues(&format!("p{i}"), sw_side)),
                mac: *mac,
                vlan: 0,
                tunnel: None,
                settings: settings.clone(),
            });
            guests.push(Guest { queues: guest });
        }
        let sw = Switch::new(specs, cfg);
        let mut workers = Vec::new();
        let mut consumers = Vec::new();
        for p in &sw.ports {
            for q in 0..p.rxq.len() {
                workers.push(Worker::new(Arc::clone(&sw), Arc::clone(p), q));
                let tx = Arc::clone(&p.dev).transmitter(q, TxOptions::default());
                consumers.push(Receive {
                    port: p.id,
                    q,
                    consumer: Consumer::attach(&p.rxq[q].rings),
                    tx,
                });
            }
        }
        Harness {
            sw,
            guests,
            workers,
            consumers,
            batch: Vec::with_capacity(BATCH),
            scratch: Scratch::default(),
        }
    }

    /// The guest of `port` sends `bytes` (virtio-net header, then frame)
    /// on queue `q`. False when the socket is full.
    pub fn send(&self, port: usize, q: usize, bytes: &[u8]) -> bool {
        let g = &self.guests[port];
        g.queues[q % g.queues.len()].file().write(bytes).is_ok()
    }

    /// Runs every worker once and every delivery once; true if anything
    /// moved.
    pub fn step(&mut self) -> bool {
        let mut moved = false;
        for w in &mut self.workers {
            moved |= w.poll_batch() != Batch::Empty;
        }
        for r in &mut self.consumers {
            let port = &self.sw.ports[r.port];
            let ring = &port.rxq[r.q].rings;
            r.consumer.pop_batch(ring, &mut self.batch, BATCH);
            if self.batch.is_empty() {
                continue;
            }
            moved = true;
            let (r1, r2) = self
                .batch
                .iter()
                .fold((0, 0), |(a, b), x| (a + x.r1 as usize, b + x.r2 as usize));
            let s = port.settings();
            deliver::deliver_batch(
                port,
                &mut *r.tx,
                &ring.delivery,
                &s,
                &mut self.batch,
                &mut self.scratch,
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
            for q in &g.queues {
                while let Ok(n) = q.file().read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    any = true;
                    out.push((p, buf[..n].to_vec()));
                }
            }
        }
        any
    }

    /// Checks the accounting identities of every port once settled:
    /// frames in = forwarded + named drops; offered = delivered + drops,
    /// nothing in flight; buffers within the cap. Returns what is wrong.
    pub fn check_accounting(&self) -> Result<(), String> {
        for p in &self.sw.ports {
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

#[cfg(test)]
mod tests {
    use super::*;
    use hvnet_offload::testutil::TcpSpec;

    fn mac(i: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, i])
    }

    fn with_hdr(frame: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; 12];
        v.extend_from_slice(frame);
        v
    }

    #[test]
    fn frames_cross_and_everything_is_accounted() {
        let s = PortSettings::default();
        let mut h = Harness::new(
            &[
                (mac(1), 1, s.clone()),
                (mac(2), 2, s.clone()),
                (mac(3), 1, s),
            ],
            SwitchConfig::default(),
        );
        // Unknown destination first (flooded to both), then learned.
        for seq in 0..20u32 {
            let f = TcpSpec {
                src_mac: mac(1).0,
                dst_mac: mac(2).0,
                seq: 1000 + seq * 100,
                payload: vec![seq as u8; 100],
                ..TcpSpec::default()
            }
            .build();
            assert!(h.send(0, 0, &with_hdr(&f)));
        }
        let mut out = Vec::new();
        h.settle(100, &mut out);
        h.check_accounting().unwrap();
        let to_b: usize = out.iter().filter(|(p, _)| *p == 1).count();
        assert!(to_b >= 1, "b got its frames (coalesced: fewer than 20)");
        let i = h.sw.ports[0].ingress_stats();
        assert_eq!(i.frames, 20);
        let e = h.sw.ports[1].egress_stats();
        assert_eq!(e.delivered_source_frames, 20, "{e:?}");
    }
}
