//! A team's receive queue: queue `q` of every member, read in turn, waited
//! on through one `epoll` descriptor of their sockets. LACPDUs are the
//! team's own and go no further; the rest is admitted as the policy says
//! (Open vSwitch's `bond_check_admissibility`): a switch-independent team
//! takes broadcasts and multicasts from its active member only (the
//! physical switch floods them to every member) and drops a frame from one
//! of its own VMs (sent on one member, sent back on another); an
//! `active-backup` team takes only what its active member receives; LACP
//! collects from the members in the aggregate.

use super::policy::Teaming;
use super::state::{Distribution, OwnMacs};
use super::TeamPort;
use crate::device::Receiver;
use crate::packet::Packet;
use crate::pool::Pool;
use crate::uplink::socket_batch::{Framing, SocketBatchReader};
use crate::uplink::UplinkRead;
use crate::vnet::{RecvError, TeamRefusal};
use hvnet_sys::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use hvnet_wire::lacp;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Reads queue `q` of every member.
pub(super) struct TeamReceiver {
    team: Arc<TeamPort>,
    q: usize,
    readers: Vec<SocketBatchReader>,
    /// Member sockets whose device is gone are out of `epoll`.
    gone: Vec<bool>,
    epoll: Epoll,
    /// The member read first next time (each gets a turn at the front).
    next: usize,
    /// Queue 0's: the kernel's word on the members' links, and their
    /// indexes.
    links: Option<(super::links::LinkWatch, Vec<u32>)>,
}

impl TeamReceiver {
    pub(super) fn new(team: Arc<TeamPort>, q: usize) -> TeamReceiver {
        let epoll = Epoll::new().expect("epoll_create1");
        for (i, m) in team.members.iter().enumerate() {
            let ev = EpollEvent::new(EventSet::IN, i as u64);
            // A socket that cannot be watched is still read on every turn.
            let _ = epoll.ctl(ControlOperation::Add, m.port.queue(q).raw_fd(), ev);
        }
        let readers = team
            .members
            .iter()
            .map(|m| {
                let framing = match team.read {
                    UplinkRead::Vnet { .. } => Framing::Vnet,
                    UplinkRead::Whole { tunnel, .. } => Framing::Whole { tunnel },
                };
                SocketBatchReader::new(framing, m.port.read_batch())
            })
            .collect();
        let n = team.members.len();
        // Queue 0 does the member set's work: it hears link changes too
        // (without the socket, the 100 ms look still finds them).
        let links = (q == 0)
            .then(super::links::LinkWatch::open)
            .and_then(|w| {
                w.map_err(|e| tracing::warn!(error = %e, "team: no link notifications; carriers looked at every 100 ms"))
                    .ok()
            })
            .map(|w| {
                let ev = EpollEvent::new(EventSet::IN, u64::MAX);
                let _ = epoll.ctl(ControlOperation::Add, w.fd().as_raw_fd(), ev);
                (w, team.ifindexes())
            });
        TeamReceiver {
            team,
            q,
            readers,
            gone: vec![false; n],
            epoll,
            next: 0,
            links,
        }
    }
}

/// How long a VM must have sent nothing through the team before its
/// announcement from the wire is taken as a move (Open vSwitch locks a
/// gratuitous ARP's MAC as long).
const MOVED_AFTER: Duration = Duration::from_secs(5);

/// What becomes of a frame from member `m`.
enum Verdict {
    Take,
    Lacp,
    Drop(TeamRefusal),
}

/// A reverse-ARP or gratuitous ARP: its sender announces where it is now
/// (a VM migrated away, now behind the wire).
fn announces_itself(f: &[u8]) -> bool {
    match f.get(12..14) {
        Some([0x80, 0x35]) => true,
        Some([0x08, 0x06]) => f.len() >= 42 && f[28..32] == f[38..42],
        _ => false,
    }
}

impl TeamReceiver {
    fn verdict(&self, m: usize, pkt: &Packet, d: &Distribution, own: &OwnMacs) -> Verdict {
        let f = pkt.frame();
        if f.get(12..14) == Some(&lacp::ETHERTYPE.to_be_bytes()[..]) {
            return Verdict::Lacp;
        }
        let team = &self.team;
        match team.teaming() {
            Teaming::Lacp if !d.collecting[m] => {
                return Verdict::Drop(TeamRefusal::NotCollecting);
            }
            Teaming::Lacp => {}
            Teaming::IpHash => {}
            Teaming::ActiveBackup if d.active != Some(m) => {
                return Verdict::Drop(TeamRefusal::NotActiveMember);
            }
            _ if pkt.dst().is_multicast() && d.active != Some(m) => {
                return Verdict::Drop(TeamRefusal::NotActiveMember);
            }
            _ => {}
        }
        if team.teaming().switch_independent() && own.contains(&pkt.src()) {
            // One of the team's VMs: a reflection, unless it announces
            // itself from the wire and has sent nothing here for a while
            // (it migrated away; its own announcements, and the team's
            // for it, come back while it is still here).
            if !announces_itself(f) {
                return Verdict::Drop(TeamRefusal::Looped);
            }
            let mut inner = team.inner.lock().expect("team lock");
            let quiet = inner
                .placements
                .get(&pkt.src())
                .is_none_or(|p| p.seen.elapsed() >= MOVED_AFTER);
            if !quiet {
                return Verdict::Drop(TeamRefusal::Looped);
            }
            if inner.placements.forget(&pkt.src()) {
                team.change_own(&[], &[pkt.src()]);
            }
        }
        Verdict::Take
    }
}

impl TeamPort {
    /// A LACPDU (after its Ethernet header) from member `m`: read, or
    /// why not.
    fn lacpdu(&self, m: usize, payload: &[u8], now: Instant) -> Result<(), TeamRefusal> {
        let pdu = match lacp::Packet::new_checked(payload) {
            Ok(p) => lacp::Repr::parse(&p),
            Err(_) => return Err(TeamRefusal::LacpMalformed),
        };
        let mut inner = self.inner.lock().expect("team lock");
        let Some(l) = inner.lacp.as_mut() else {
            return Err(TeamRefusal::LacpNotRunning);
        };
        match l.receive(m, &pdu, now) {
            Ok(true) => {}
            // The partner said again what it said: its timer restarted.
            Ok(false) => return Ok(()),
            Err(super::lacp::Refusal::SecondPartner) => {
                return Err(TeamRefusal::LacpSecondPartner);
            }
            Err(super::lacp::Refusal::TooMany) => return Err(TeamRefusal::LacpTooMany),
        }
        let up: Vec<bool> = self
            .members
            .iter()
            .map(|x| x.carrier.load(Relaxed) == super::CARRIER_UP)
            .collect();
        inner.update(self, &up, now);
        let out = inner.take_outbox();
        drop(inner);
        self.send_outbox(out);
        Ok(())
    }
}

impl Receiver for TeamReceiver {
    fn recv_batch(
        &mut self,
        pool: &mut Pool,
        max: usize,
        out: &mut Vec<Result<Packet, RecvError>>,
    ) -> Result<(), RecvError> {
        if let Some((w, members)) = &mut self.links {
            if w.changed(members) {
                self.team.refresh_now(Instant::now());
            }
        }
        let (d, _) = self.team.distribution();
        let own = self.team.own_macs();
        let n = self.team.members.len();
        let mut got = 0;
        let start = self.next;
        self.next = (self.next + 1) % n;
        for k in 0..n {
            let m = (start + k) % n;
            if self.gone[m] {
                continue;
            }
            let member = &self.team.members[m];
            let (fq, mtu) = (member.port.queue(self.q), member.port.mtu());
            let (mut taken, mut bytes) = (0, 0);
            while got < max {
                match self.readers[m].read(fq, pool, mtu) {
                    Ok(pkt) => match self.verdict(m, &pkt, &d, &own) {
                        Verdict::Take => {
                            bytes += pkt.len() as u64;
                            out.push(Ok(pkt));
                            got += 1;
                            taken += 1;
                        }
                        Verdict::Lacp => {
                            let read = self.team.lacpdu(m, &pkt.frame()[14..], Instant::now());
                            pool.keep(pkt.buf);
                            if let Err(why) = read {
                                self.team.drops.count(why);
                                out.push(Err(RecvError::Team(why)));
                                got += 1;
                            }
                        }
                        Verdict::Drop(why) => {
                            self.team.drops.count(why);
                            pool.keep(pkt.buf);
                            out.push(Err(RecvError::Team(why)));
                            got += 1;
                        }
                    },
                    Err(RecvError::WouldBlock | RecvError::LinkDown) => break,
                    Err(RecvError::Gone) => {
                        // Its device was deleted: the team goes on with
                        // the others.
                        let _ = self.epoll.ctl(
                            ControlOperation::Delete,
                            fq.raw_fd(),
                            EpollEvent::default(),
                        );
                        self.gone[m] = true;
                        break;
                    }
                    Err(RecvError::NoBuffer) => {
                        member.rx_frames.fetch_add(taken, Relaxed);
                        member.rx_bytes.fetch_add(bytes, Relaxed);
                        return Err(RecvError::NoBuffer);
                    }
                    Err(e) => {
                        out.push(Err(e));
                        got += 1;
                    }
                }
            }
            member.rx_frames.fetch_add(taken, Relaxed);
            member.rx_bytes.fetch_add(bytes, Relaxed);
        }
        if got >= max {
            Ok(())
        } else {
            Err(RecvError::WouldBlock)
        }
    }

    fn wait_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn kernel_drops(&mut self) -> u64 {
        (0..self.team.members.len())
            .map(|m| self.team.members[m].port.kernel_drops(self.q))
            .sum()
    }

    fn release(&mut self, pool: &mut Pool) {
        for r in &mut self.readers {
            r.release(pool);
        }
    }

    /// Queue 0 runs the member set's periodic work.
    fn ticks(&self) -> bool {
        self.q == 0
    }

    fn tick(&mut self, now: Instant) {
        self.team.refresh(now);
    }
}
