//! A team's member set: which members are usable, which one is active,
//! where each VM is placed — made again from the carriers and LACP on
//! each refresh, published to the transmitters and receivers as one
//! [`Distribution`], with the moves it caused announced.

use super::lacp::{Lacp, PartnerStatus};
use super::load::LoadLook;
use super::notify::announcements;
use super::policy::{Placement, Placements, Teaming};
use super::{TeamConfig, TeamPort};
use crate::status::TeamStatus;
use crate::status::{TeamDrops, TeamMemberLacp, TeamMemberStatus, TeamPartner, TeamPlacement};
use hvnet_wire::lacp::Info;
use hvnet_wire::MacAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// How often the member set is looked at, at most.
pub const REFRESH_EVERY: Duration = Duration::from_millis(100);
/// A VM address not heard from for this long is forgotten.
const PLACEMENT_AGE: Duration = Duration::from_secs(300);

/// The addresses a team's VMs send from.
pub type OwnMacs = std::collections::HashSet<hvnet_wire::MacAddr>;

/// What the transmitters and receivers go by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Distribution {
    /// Members frames may leave by, in the team's order (`active-backup`:
    /// the active one only).
    pub usable: Vec<usize>,
    /// The member broadcasts and multicasts are taken from (and the only
    /// one anything is taken from, for `active-backup`).
    pub active: Option<usize>,
    /// Members frames are collected from (LACP: attached; else carrier).
    pub collecting: Vec<bool>,
}

impl Distribution {
    /// No member usable.
    pub fn none(n: usize) -> Distribution {
        Distribution {
            usable: Vec::new(),
            active: None,
            collecting: vec![false; n],
        }
    }
}

/// The member set's state, under the team's lock.
#[derive(Debug)]
pub struct Inner {
    teaming: Teaming,
    order: Vec<usize>,
    failback: bool,
    pub(crate) lacp: Option<Lacp>,
    pub(crate) placements: Placements,
    /// `load-based`: its looks at the members' load.
    load: Option<LoadLook>,
    /// VMs moved off a busy member (`load-based`).
    rebalances: u64,
    current: Distribution,
    next_refresh: Option<Instant>,
    /// Each member was usable at the last refresh.
    was_usable: Vec<bool>,
    downs: Vec<u64>,
    failovers: u64,
    failbacks: u64,
    /// Frames to send once the lock is let go.
    outbox: Vec<Outgoing>,
    /// VMs announced on a new member, with the rounds still to send
    /// ([`ANNOUNCE_ROUNDS`]).
    again: Vec<(MacAddr, usize, u8)>,
}

/// Puts the frames that announce `mac` (as `p` last saw it) on member
/// `member` in `outbox`.
fn announce(outbox: &mut Vec<Outgoing>, mac: MacAddr, p: &Placement, member: usize) {
    outbox.extend(announcements(mac, p).into_iter().map(|frame| Outgoing {
        member,
        frame,
        announcement: true,
    }));
}

/// Times a moved VM is announced on its new member: at once, then at
/// each of the next looks (every [`REFRESH_EVERY`]), as QEMU's
/// `announce-self` sends rounds and Linux's bonding `num_grat_arp`: a
/// physical switch whose own port was changing then may miss the first.
pub const ANNOUNCE_ROUNDS: u8 = 3;

/// A frame the member set's work sends on a member (a LACPDU, an
/// announcement), held until the team's lock is let go.
#[derive(Debug)]
pub struct Outgoing {
    /// The member.
    pub member: usize,
    /// The frame, without a virtio-net header.
    pub frame: Vec<u8>,
    /// An announcement (counted when it left).
    pub announcement: bool,
}

impl Inner {
    pub(super) fn new(cfg: &TeamConfig) -> Inner {
        let n = cfg.members.len();
        let lacp = (cfg.teaming == Teaming::Lacp).then(|| {
            let system = cfg.members[0].1;
            Lacp::new(system, 1, cfg.lacp_rate, cfg.lacp_mode, n)
        });
        Inner {
            teaming: cfg.teaming,
            order: cfg.order.clone(),
            failback: cfg.failback,
            lacp,
            placements: Placements::default(),
            load: (cfg.teaming == Teaming::LoadBased)
                .then(|| LoadLook::new(cfg.members.iter().map(|(d, _)| speed(d)).collect())),
            rebalances: 0,
            current: Distribution::none(n),
            next_refresh: None,
            was_usable: vec![false; n],
            downs: vec![0; n],
            failovers: 0,
            failbacks: 0,
            outbox: Vec::new(),
            again: Vec::new(),
        }
    }

    /// True (and the next look set) when a refresh is due.
    pub(super) fn due(&mut self, now: Instant) -> bool {
        if self.next_refresh.is_some_and(|t| now < t) {
            return false;
        }
        self.next_refresh = Some(now + REFRESH_EVERY);
        true
    }

    /// Forgets the VM addresses not heard from for [`PLACEMENT_AGE`].
    pub(super) fn age_out(&mut self, team: &TeamPort, now: Instant) {
        if let Some(before) = now.checked_sub(PLACEMENT_AGE) {
            let gone = self.placements.age_out(before);
            team.change_own(&[], &gone);
        }
    }

    /// What the last work made to send.
    pub(super) fn take_outbox(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.outbox)
    }

    /// LACP's timers and LACPDUs, then the distribution made again from
    /// `up` (each member's carrier) and published if it changed, the VMs
    /// it moved announced on their new members.
    pub(super) fn update(&mut self, team: &TeamPort, up: &[bool], now: Instant) {
        self.announce_again();
        if let Some(l) = self.lacp.as_mut() {
            for (m, &u) in up.iter().enumerate() {
                if !u && l.members[m].status != PartnerStatus::Defaulted {
                    l.carrier_lost(m);
                }
            }
            l.run(up, now);
            for (m, &u) in up.iter().enumerate() {
                if let Some(pdu) = u.then(|| l.due(m, now)).flatten() {
                    self.outbox.push(Outgoing {
                        member: m,
                        frame: pdu.frame(team.members[m].mac).to_vec(),
                        announcement: false,
                    });
                }
            }
        }
        let usable: Vec<bool> = (0..up.len())
            .map(|m| {
                up[m]
                    && self
                        .lacp
                        .as_ref()
                        .is_none_or(|l| l.members[m].distributing())
            })
            .collect();
        let in_order: Vec<usize> = self.order.iter().copied().filter(|&m| usable[m]).collect();
        let keep = self.current.active.filter(|&a| usable[a] && !self.failback);
        let active = keep.or(in_order.first().copied());
        let d = Distribution {
            usable: match self.teaming {
                Teaming::ActiveBackup => active.into_iter().collect(),
                _ => in_order.clone(),
            },
            active,
            collecting: (0..up.len())
                .map(|m| match &self.lacp {
                    Some(l) => up[m] && l.members[m].attached,
                    None => up[m],
                })
                .collect(),
        };
        for ((downs, was), now) in self.downs.iter_mut().zip(&self.was_usable).zip(&usable) {
            if *was && !now {
                *downs += 1;
            }
        }
        if d == self.current {
            self.was_usable = usable;
            self.look_at_load(team, now);
            return;
        }
        let lost = (0..up.len()).any(|m| self.was_usable[m] && !usable[m]);
        // A member usable again after it went down (not one seen first).
        let came_back =
            (0..up.len()).any(|m| !self.was_usable[m] && usable[m] && self.downs[m] > 0);
        self.was_usable = usable;
        let moved = match self.teaming {
            Teaming::ActiveBackup => self.placements.replace(&d.usable, false),
            _ => self.placements.replace(&d.usable, self.failback),
        };
        if lost {
            self.failovers += 1;
        } else if came_back {
            self.failbacks += 1;
        }
        if self.teaming.switch_independent() {
            for (mac, m) in &moved {
                let Some(p) = self.placements.get(mac) else {
                    continue;
                };
                announce(&mut self.outbox, *mac, p, *m);
                self.again.retain(|(x, _, _)| x != mac);
                self.again.push((*mac, *m, ANNOUNCE_ROUNDS - 1));
            }
        }
        tracing::info!(
            team = %team.label,
            usable = ?d.usable,
            active = ?d.active,
            moved = moved.len(),
            "team members changed"
        );
        self.current = d.clone();
        team.publish(d);
    }

    /// The announcements' later rounds, for VMs still where they were
    /// announced.
    fn announce_again(&mut self) {
        let mut again = std::mem::take(&mut self.again);
        again.retain_mut(|(mac, m, left)| {
            let Some(p) = self.placements.get(mac).filter(|p| p.now == *m) else {
                return false;
            };
            announce(&mut self.outbox, *mac, p, *m);
            *left -= 1;
            *left > 0
        });
        self.again = again;
    }

    /// `load-based`: a VM moved off a busy member, announced there.
    fn look_at_load(&mut self, team: &TeamPort, now: Instant) {
        let Some(load) = self.load.as_mut() else {
            return;
        };
        let bytes: Vec<u64> = team
            .members
            .iter()
            .map(|m| m.tx_bytes.load(Relaxed) + m.rx_bytes.load(Relaxed))
            .collect();
        let Some((mac, to)) = load.look(now, &bytes, &mut self.placements, &self.current.usable)
        else {
            return;
        };
        self.rebalances += 1;
        tracing::info!(team = %team.label, %mac, member = to, "load-based: a VM moved off a busy member");
        if let Some(p) = self.placements.get(&mac) {
            announce(&mut self.outbox, mac, p, to);
        }
    }

    /// The team as views show it.
    pub(super) fn status(&self, team: &TeamPort) -> TeamStatus {
        let name = |m: usize| team.members[m].port.device().to_string();
        let partner_of = |i: &Info| TeamPartner {
            system: i.system.to_string(),
            system_priority: i.system_priority,
            key: i.key,
        };
        let members = (0..team.members.len())
            .map(|m| {
                let mem = &team.members[m];
                let carrier = mem.carrier.load(Relaxed) == super::CARRIER_UP;
                let lacp = self.lacp.as_ref().map(|l| &l.members[m]);
                let state = match lacp {
                    _ if !carrier => "down",
                    Some(x) if x.distributing() => "distributing",
                    Some(x) if x.attached => "collecting",
                    Some(x) if x.status == PartnerStatus::Defaulted => "no partner",
                    Some(_) => "not in aggregate",
                    None if self.current.usable.contains(&m) => "active",
                    None => "standby",
                };
                TeamMemberStatus {
                    device: name(m),
                    mac: mem.mac.to_string(),
                    carrier,
                    state,
                    tx_frames: mem.tx_frames.load(Relaxed),
                    tx_bytes: mem.tx_bytes.load(Relaxed),
                    rx_frames: mem.rx_frames.load(Relaxed),
                    downs: self.downs[m],
                    lacp: lacp.map(|x| TeamMemberLacp {
                        partner_status: x.status.word(),
                        partner: partner_of(&x.partner),
                        partner_port: x.partner.port,
                        actor_state: format!("0x{:02x}", x.actor_state.0),
                        partner_state: format!("0x{:02x}", x.partner.state.0),
                        rx: x.rx,
                        tx: x.tx,
                    }),
                }
            })
            .collect();
        let partner = self.lacp.as_ref().and_then(|l| {
            l.members
                .iter()
                .find(|x| x.attached)
                .map(|x| partner_of(&x.partner))
        });
        let mut placements: Vec<TeamPlacement> = self
            .placements
            .iter()
            .map(|(mac, p)| TeamPlacement {
                mac: mac.to_string(),
                member: name(p.now),
                home: name(p.home),
                frames: p.frames,
                bytes: p.bytes,
            })
            .collect();
        placements.sort_by(|a, b| a.mac.cmp(&b.mac));
        let d = &team.drops;
        TeamStatus {
            teaming: self.teaming.word(),
            members,
            active: self.current.active.map(name),
            partner,
            failovers: self.failovers,
            failbacks: self.failbacks,
            rebalances: self.rebalances,
            announcements: team.announced.load(Relaxed),
            drops: TeamDrops {
                not_active_member: d.not_active_member.load(Relaxed),
                looped: d.looped.load(Relaxed),
                not_collecting: d.not_collecting.load(Relaxed),
                no_member: d.no_member.load(Relaxed),
                lacp_malformed: d.lacp_malformed.load(Relaxed),
                lacp_second_partner: d.lacp_second_partner.load(Relaxed),
                lacp_not_running: d.lacp_not_running.load(Relaxed),
                lacp_too_many: d.lacp_too_many.load(Relaxed),
            },
            placements,
            placements_refused: self.placements.refused,
        }
    }
}

/// A member's speed in bits a second, as its driver reports it (10 Gbit/s
/// where it reports none: a veth, a device in another namespace).
fn speed(device: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{device}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|&mbps| mbps > 0)
        .map_or(10_000_000_000, |mbps| mbps as u64 * 1_000_000)
}
