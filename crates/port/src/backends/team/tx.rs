//! A team's transmit queue: each frame's member chosen by the policy
//! ([`super::policy`]), then each run of frames for one member written by
//! that member's own transmitter for queue `q` (a batch per `sendmmsg`),
//! results reported in order. The member set is read once per batch.

use super::policy::{flow_hash, source, Teaming};
use super::state::Distribution;
use super::TeamPort;
use crate::device::{Device, SendError, Transmitter, TxOptions};
use crate::outgoing::{BatchOptions, OutFrame, Written};
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
    placed: Vec<hvnet_wire::MacAddr>,
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
        let usable = &self.dist.usable;
        if usable.is_empty() {
            self.picks.resize(frames.len(), None);
            return;
        }
        let teaming = self.team.teaming();
        if !teaming.switch_independent() {
            let ports = teaming == Teaming::Lacp;
            self.picks.extend(
                frames
                    .iter()
                    .map(|f| Some(usable[flow_hash(f, ports) as usize % usable.len()])),
            );
            return;
        }
        let n = self.team.members.len();
        let now = Instant::now();
        self.placed.clear();
        let mut inner = self.team.inner.lock().expect("team lock");
        for f in frames {
            let pick = match source(f) {
                Some(s) => {
                    let pick =
                        inner
                            .placements
                            .member_of(teaming, &s, f.len() as u64, usable, n, now);
                    if pick.new {
                        self.placed.push(s.mac);
                    }
                    pick.member
                }
                None => usable[0],
            };
            self.picks.push(Some(pick));
        }
        self.team.change_own(&self.placed, &[]);
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
                    (i..j).for_each(|_| done(Err(SendError::Failed)));
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
}
