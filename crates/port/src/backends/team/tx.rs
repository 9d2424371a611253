//! A team's transmit queue: each frame's member chosen by the policy
//! ([`super::policy`]), then each run of frames for one member written by
//! that member's own transmitter for queue `q` (a batch per `sendmmsg`),
//! results reported in order. The member set is read once per batch.

use super::policy::{flow_hash, is_membership, source, Teaming};
use super::state::Distribution;
use super::TeamPort;
use crate::device::{Device, Transmitter, TxOptions};
use crate::outgoing::SendError;
use crate::outgoing::{BatchOptions, OutFrame, Written};
use crate::vxlan::PickMember;
use hvnet_offload::OffloadInfo;
use hvnet_wire::MacAddr;
use std::io::IoSlice;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

/// Writes queue `q` of the members.
pub(super) struct TeamTransmitter {
    team: Arc<TeamPort>,
    txs: Vec<Box<dyn Transmitter>>,
    dist: Arc<Distribution>,
    gen: u64,
    picks: Vec<Option<usize>>,
    /// Addresses the last batch placed (kept for its allocation).
    placed: Vec<MacAddr>,
}

impl TeamTransmitter {
    pub(super) fn new(team: Arc<TeamPort>, q: usize, opts: TxOptions) -> TeamTransmitter {
        let txs = team
            .members
            .iter()
            .map(|m| Arc::clone(&m.port).transmitter(q, opts))
            .collect();
        let (dist, gen) = team.distribution();
        TeamTransmitter {
            team,
            txs,
            dist,
            gen,
            picks: Vec::new(),
            placed: Vec::new(),
        }
    }

    /// Each frame's member (`None`: no member may send).
    fn pick(&mut self, frames: &[OutFrame<'_>]) {
        self.picks.clear();
        let with_len = frames.iter().map(|f| (f, f.len() as u64));
        self.team
            .pick(&self.dist, with_len, &mut self.picks, &mut self.placed);
    }
}

impl TeamPort {
    /// Each frame's member by the policy, pushed on `picks` (`None`: no
    /// member may send): per flow for `ip-hash` and `lacp`, else by where
    /// its source is placed (under the team's lock, once per batch), a
    /// membership report by the active member.
    /// Addresses placed for the first time join the team's own; `placed`
    /// is scratch. Each frame comes with the bytes it counts for (a
    /// frame in pieces may be given by its headers only).
    fn pick<'f, 'a: 'f>(
        &self,
        dist: &Distribution,
        frames: impl ExactSizeIterator<Item = (&'f OutFrame<'a>, u64)>,
        picks: &mut Vec<Option<usize>>,
        placed: &mut Vec<MacAddr>,
    ) {
        let usable = &dist.usable;
        if usable.is_empty() {
            picks.extend(frames.map(|_| None));
            return;
        }
        let teaming = self.teaming();
        if !teaming.switch_independent() {
            let ports = teaming == Teaming::Lacp;
            picks.extend(
                frames.map(|(f, _)| Some(usable[flow_hash(f, ports) as usize % usable.len()])),
            );
            return;
        }
        let n = self.members.len();
        let now = Instant::now();
        placed.clear();
        let mut inner = self.inner.lock().expect("team lock");
        let active = dist.active.unwrap_or(usable[0]);
        for (f, bytes) in frames {
            if is_membership(f) {
                picks.push(Some(active));
                continue;
            }
            let pick = match source(f) {
                Some(s) => {
                    let pick = inner
                        .placements
                        .member_of(teaming, &s, bytes, usable, n, now);
                    if pick.new {
                        placed.push(s.mac);
                    }
                    pick.member
                }
                None => usable[0],
            };
            picks.push(Some(pick));
        }
        // Under the team's lock, so in the order the placements changed.
        self.change_own(placed, &[]);
        drop(inner);
    }
}

impl TeamPort {
    /// The member frame `f` would leave by, and why, in words (a trace's
    /// line): read only, nothing placed or counted.
    fn explain(&self, f: &OutFrame<'_>) -> String {
        let (dist, _) = self.distribution();
        let usable = &dist.usable;
        let name = |m: usize| self.members[m].port.name().to_string();
        let teaming = self.teaming();
        if usable.is_empty() {
            return format!("{}: no member may send, every one is down", teaming.word());
        }
        if !teaming.switch_independent() {
            let m = usable[flow_hash(f, teaming == Teaming::Lacp) as usize % usable.len()];
            return format!(
                "by member {} ({}: the flow's hash over {} usable members)",
                name(m),
                teaming.word(),
                usable.len()
            );
        }
        if is_membership(f) {
            let m = dist.active.unwrap_or(usable[0]);
            return format!(
                "by member {} (the active one: a membership report)",
                name(m)
            );
        }
        let Some(s) = source(f) else {
            return format!("by member {} (no source address to place)", name(usable[0]));
        };
        let inner = self.inner.lock().expect("team lock");
        match inner.placements.get(&s.mac) {
            Some(p) if p.now == p.home => format!(
                "by member {} ({}: {} is placed there)",
                name(p.now),
                teaming.word(),
                s.mac
            ),
            Some(p) => format!(
                "by member {} ({}: {} moved there off {}, which may not send now)",
                name(p.now),
                teaming.word(),
                s.mac,
                name(p.home)
            ),
            None => format!(
                "by member {} ({}: {} is new to the team and would be placed there)",
                name(
                    inner
                        .placements
                        .would_place(teaming, s.mac, usable, self.members.len())
                ),
                teaming.word(),
                s.mac
            ),
        }
    }
}

/// A tunnel endpoint over the team writes its whole GSO frames into a TAP
/// per member: the team picks the member as for any frame of its own
/// transmitters (by the outer headers), and counts it there once written.
impl PickMember for TeamPort {
    fn pick(&self, head: &[u8], len: u64) -> Option<usize> {
        let (dist, _) = self.distribution();
        let pieces = [IoSlice::new(head)];
        let f = OutFrame::Pieces {
            pieces: &pieces,
            offload: OffloadInfo::default(),
        };
        let (mut picks, mut placed) = (Vec::with_capacity(1), Vec::new());
        self.pick(&dist, std::iter::once((&f, len)), &mut picks, &mut placed);
        let m = picks.first().copied().flatten();
        if m.is_none() {
            self.drops.no_member.fetch_add(1, Relaxed);
        }
        m
    }

    fn sent(&self, member: usize, len: u64) {
        let m = &self.members[member];
        m.tx_frames.fetch_add(1, Relaxed);
        m.tx_bytes.fetch_add(len, Relaxed);
    }
}

impl Transmitter for TeamTransmitter {
    fn send_batch(
        &mut self,
        frames: &[OutFrame<'_>],
        how: BatchOptions,
        done: &mut dyn FnMut(Result<Written, SendError>),
    ) {
        if self.team.gen() != self.gen {
            (self.dist, self.gen) = self.team.distribution();
        }
        self.pick(frames);
        let mut i = 0;
        while i < frames.len() {
            let m = self.picks[i];
            let mut j = i + 1;
            while j < frames.len() && self.picks[j] == m {
                j += 1;
            }
            match m {
                None => {
                    self.team.drops.no_member.fetch_add((j - i) as u64, Relaxed);
                    (i..j).for_each(|_| done(Err(SendError::NoMember)));
                }
                Some(m) => {
                    let member = &self.team.members[m];
                    let (mut frames_out, mut bytes_out) = (0, 0);
                    self.txs[m].send_batch(&frames[i..j], how, &mut |r| {
                        if let Ok(w) = &r {
                            frames_out += u64::from(w.frames);
                            bytes_out += w.bytes;
                        }
                        done(r)
                    });
                    member.tx_frames.fetch_add(frames_out, Relaxed);
                    member.tx_bytes.fetch_add(bytes_out, Relaxed);
                }
            }
            i = j;
        }
    }

    fn flush(&mut self) {
        for t in &mut self.txs {
            t.flush();
        }
    }

    fn explain(&self, pkt: &crate::packet::Packet) -> Option<String> {
        Some(self.team.explain(&OutFrame::Packet(pkt)))
    }
}
