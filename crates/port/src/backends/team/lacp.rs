//! LACP (IEEE 802.1AX) for a team's members, as Open vSwitch's `lib/lacp.c`
//! runs it rather than the standard's six state machines: each member's
//! partner information is current (a LACPDU came within three of the
//! actor's intervals), expired (one more short timeout to go) or defaulted
//! (none), and the members whose current partner is one system with one
//! key form the aggregate; a member is attached (collecting) while it is in
//! the aggregate, and distributes once its partner says it is in sync.
//! Pure: time is passed in, frames go out through the caller.

use hvnet_wire::lacp::{Info, Repr, State};
use hvnet_wire::MacAddr;
use std::time::{Duration, Instant};

/// How often LACPDUs are asked for (the actor's timeout bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LacpRate {
    /// One a second (short timeout: 3 s).
    Fast,
    /// One every 30 s (long timeout: 90 s).
    Slow,
}

impl LacpRate {
    fn interval(self) -> Duration {
        match self {
            LacpRate::Fast => Duration::from_secs(1),
            LacpRate::Slow => Duration::from_secs(30),
        }
    }
}

/// Whether the team speaks first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LacpMode {
    /// Sends LACPDUs whether or not the partner does.
    Active,
    /// Sends only once the partner is active.
    Passive,
}

/// Where a member's partner information stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartnerStatus {
    /// A LACPDU came in time.
    Current,
    /// The timeout passed once; one more short timeout before it goes.
    Expired,
    /// No partner information (none came, or it went).
    Defaulted,
}

impl PartnerStatus {
    /// The word views show.
    pub fn word(self) -> &'static str {
        match self {
            PartnerStatus::Current => "current",
            PartnerStatus::Expired => "expired",
            PartnerStatus::Defaulted => "defaulted",
        }
    }
}

/// Why a received LACPDU was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It came from another system than the member's current partner (a
    /// second switch on the same link, or a forged PDU): the current one
    /// stays until it expires.
    SecondPartner,
    /// More than [`MAX_PER_SECOND`] came on the member within a second:
    /// 802.1AX lets a sender send no more, so the rest is a flood.
    TooMany,
}

/// LACPDUs taken from one member per second: 802.1AX limits a sender to
/// three in any Fast_Periodic_Time (1 s).
pub const MAX_PER_SECOND: u8 = 3;

/// One member's LACP state.
#[derive(Clone, Debug)]
pub struct MemberLacp {
    /// The partner as its last LACPDU described itself.
    pub partner: Info,
    /// Where that stands.
    pub status: PartnerStatus,
    /// In the aggregate: frames from it are collected.
    pub attached: bool,
    /// The actor's state this member sends.
    pub actor_state: State,
    /// LACPDUs received and sent.
    pub rx: u64,
    /// LACPDUs sent.
    pub tx: u64,
    rx_until: Option<Instant>,
    next_tx: Option<Instant>,
    ntt: bool,
    /// The second LACPDUs are being counted in, from its first one, and
    /// how many came in it.
    window: Option<Instant>,
    in_window: u8,
}

impl Default for MemberLacp {
    fn default() -> Self {
        MemberLacp {
            partner: Info::default(),
            status: PartnerStatus::Defaulted,
            attached: false,
            actor_state: State::default(),
            rx: 0,
            tx: 0,
            rx_until: None,
            next_tx: None,
            ntt: true,
            window: None,
            in_window: 0,
        }
    }
}

impl MemberLacp {
    /// The partner says it is in sync with this member's aggregate (and
    /// collects): frames may be distributed on it.
    pub fn distributing(&self) -> bool {
        self.attached
            && self.status != PartnerStatus::Defaulted
            && self.partner.state.has(State::SYNCHRONIZATION)
    }
}

/// The actor's side of the protocol, for every member of one team.
#[derive(Clone, Debug)]
pub struct Lacp {
    /// The team's system identifier (its first member's address).
    pub system: MacAddr,
    /// The actor's key (the team's one aggregate).
    pub key: u16,
    /// Rate asked of the partner.
    pub rate: LacpRate,
    /// Active or passive.
    pub mode: LacpMode,
    /// Each member's state, in the team's member order.
    pub members: Vec<MemberLacp>,
}

/// System priority sent (the default of Linux's bonding and of Open vSwitch).
const SYSTEM_PRIORITY: u16 = 65535;
/// Port priority sent.
const PORT_PRIORITY: u16 = 255;

impl Lacp {
    /// The protocol for `n` members.
    pub fn new(system: MacAddr, key: u16, rate: LacpRate, mode: LacpMode, n: usize) -> Lacp {
        Lacp {
            system,
            key,
            rate,
            mode,
            members: vec![MemberLacp::default(); n],
        }
    }

    /// The actor's information for member `m`, as it sends it.
    pub fn actor(&self, m: usize) -> Info {
        Info {
            system_priority: SYSTEM_PRIORITY,
            system: self.system,
            key: self.key,
            port_priority: PORT_PRIORITY,
            port: m as u16 + 1,
            state: self.members[m].actor_state,
        }
    }

    /// A LACPDU received on member `m`. True if it changed something the
    /// aggregate depends on or that must be told back (the partner's
    /// information or its standing, or its view of the actor): only then
    /// is the member set looked at again — a partner repeating itself
    /// costs no more than its timer being restarted.
    pub fn receive(&mut self, m: usize, pdu: &Repr, now: Instant) -> Result<bool, Refusal> {
        let actor = self.actor(m);
        let rate = self.rate;
        let me = &mut self.members[m];
        if me.status == PartnerStatus::Current
            && (pdu.actor.system, pdu.actor.system_priority)
                != (me.partner.system, me.partner.system_priority)
        {
            return Err(Refusal::SecondPartner);
        }
        // After the second-partner check, so that another system's flood
        // does not use up the current partner's LACPDUs.
        match me.window {
            Some(t) if now.duration_since(t) < Duration::from_secs(1) => {
                if me.in_window >= MAX_PER_SECOND {
                    return Err(Refusal::TooMany);
                }
                me.in_window += 1;
            }
            _ => {
                me.window = Some(now);
                me.in_window = 1;
            }
        }
        me.rx += 1;
        let mut changed = me.status != PartnerStatus::Current;
        // What the partner believes of us is stale: tell it again now.
        let believes = pdu.partner;
        if (believes.system, believes.key, believes.port, believes.state)
            != (actor.system, actor.key, actor.port, actor.state)
        {
            me.ntt = true;
            changed = true;
        }
        if me.partner != pdu.actor {
            me.ntt = true;
            changed = true;
        }
        me.partner = pdu.actor;
        me.status = PartnerStatus::Current;
        me.rx_until = Some(now + 3 * rate.interval());
        Ok(changed)
    }

    /// Member `m`'s carrier went: its partner is forgotten at once.
    pub fn carrier_lost(&mut self, m: usize) {
        let me = &mut self.members[m];
        me.status = PartnerStatus::Defaulted;
        me.partner = Info::default();
        me.rx_until = None;
        me.ntt = true;
    }

    /// The timers and the aggregate, at `now`, for members whose carrier
    /// is `up`: partners whose LACPDUs stopped expire and then go; the
    /// members with one current partner system and key are attached.
    /// True if any member's attachment or distribution changed.
    pub fn run(&mut self, up: &[bool], now: Instant) -> bool {
        let short = 3 * LacpRate::Fast.interval();
        for (m, me) in self.members.iter_mut().enumerate() {
            if !up[m] {
                continue;
            }
            match (me.status, me.rx_until) {
                (PartnerStatus::Current, Some(t)) if now >= t => {
                    me.status = PartnerStatus::Expired;
                    // As the standard's receive machine: the partner is
                    // asked to hurry (short timeout), and has one more.
                    me.partner.state.0 |= State::TIMEOUT;
                    me.partner.state.0 &= !State::SYNCHRONIZATION;
                    me.rx_until = Some(now + short);
                    me.ntt = true;
                }
                (PartnerStatus::Expired, Some(t)) if now >= t => {
                    me.status = PartnerStatus::Defaulted;
                    me.partner = Info::default();
                    me.rx_until = None;
                    me.ntt = true;
                }
                _ => {}
            }
        }
        // The aggregate: the partner (system, key) of the first member
        // with one that may aggregate; ties go to member order, as the
        // lowest port number would.
        let lead = self
            .members
            .iter()
            .enumerate()
            .find(|(m, me)| {
                up[*m]
                    && me.status != PartnerStatus::Defaulted
                    && me.partner.state.has(State::AGGREGATION)
            })
            .map(|(_, me)| (me.partner.system, me.partner.key));
        let (mode, rate) = (self.mode, self.rate);
        let mut changed = false;
        for (me, &up) in self.members.iter_mut().zip(up) {
            let before = (me.attached, me.distributing());
            let attached = up
                && me.status != PartnerStatus::Defaulted
                && lead == Some((me.partner.system, me.partner.key));
            let mut state = State::AGGREGATION;
            if mode == LacpMode::Active {
                state |= State::ACTIVITY;
            }
            if rate == LacpRate::Fast {
                state |= State::TIMEOUT;
            }
            if attached {
                state |= State::SYNCHRONIZATION | State::COLLECTING | State::DISTRIBUTING;
            }
            match me.status {
                PartnerStatus::Defaulted => state |= State::DEFAULTED,
                PartnerStatus::Expired => state |= State::EXPIRED,
                PartnerStatus::Current => {}
            }
            if me.actor_state.0 != state {
                me.actor_state = State(state);
                me.ntt = true;
            }
            me.attached = attached;
            changed |= before != (me.attached, me.distributing());
        }
        changed
    }

    /// The LACPDU member `m` (carrier up) sends at `now`, if one is due:
    /// when something changed (need to transmit), else at the rate the
    /// partner asked for (its timeout bit). A passive actor speaks only to
    /// an active partner.
    pub fn due(&mut self, m: usize, now: Instant) -> Option<Repr> {
        let active = self.mode == LacpMode::Active;
        let me = &self.members[m];
        let partner_active =
            me.status != PartnerStatus::Defaulted && me.partner.state.has(State::ACTIVITY);
        if !active && !partner_active {
            return None;
        }
        let periodic = me.next_tx.is_none_or(|t| now >= t);
        if !me.ntt && !periodic {
            return None;
        }
        let interval =
            if me.status == PartnerStatus::Defaulted || me.partner.state.has(State::TIMEOUT) {
                LacpRate::Fast.interval()
            } else {
                LacpRate::Slow.interval()
            };
        let pdu = Repr {
            actor: self.actor(m),
            partner: match me.status {
                PartnerStatus::Defaulted => Info::default(),
                _ => me.partner,
            },
            collector_max_delay: 0,
        };
        let me = &mut self.members[m];
        me.ntt = false;
        me.next_tx = Some(now + interval);
        me.tx += 1;
        Some(pdu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const SWITCH: MacAddr = MacAddr([2, 0x5e, 0, 0, 0, 9]);

    fn switch_pdu(port: u16, state: u8, system: MacAddr) -> Repr {
        Repr {
            actor: Info {
                system_priority: 65534,
                system,
                key: 7,
                port_priority: 65535,
                port,
                state: State(state),
            },
            partner: Info::default(),
            collector_max_delay: 0,
        }
    }

    const IN_SYNC: u8 = State::ACTIVITY
        | State::TIMEOUT
        | State::AGGREGATION
        | State::SYNCHRONIZATION
        | State::COLLECTING
        | State::DISTRIBUTING;

    #[test]
    fn two_members_with_one_partner_aggregate_and_distribute() {
        let t0 = Instant::now();
        let mut l = Lacp::new(US, 1, LacpRate::Fast, LacpMode::Active, 2);
        l.run(&[true, true], t0);
        let first = l.due(0, t0).expect("an active actor speaks first");
        assert!(first.actor.state.has(State::ACTIVITY | State::DEFAULTED));
        assert!(!l.members[0].attached);
        for m in 0..2 {
            l.receive(m, &switch_pdu(m as u16 + 3, IN_SYNC, SWITCH), t0)
                .unwrap();
        }
        assert!(l.run(&[true, true], t0));
        assert!(l.members.iter().all(|m| m.attached && m.distributing()));
        let pdu = l.due(1, t0).expect("the change is told at once");
        assert!(pdu
            .actor
            .state
            .has(State::SYNCHRONIZATION | State::DISTRIBUTING));
        assert_eq!(pdu.partner.system, SWITCH);
        assert!(l.due(1, t0).is_none(), "nothing more before the interval");
        assert!(l.due(1, t0 + Duration::from_secs(1)).is_some(), "fast rate");
    }

    #[test]
    fn a_partner_that_goes_quiet_expires_then_is_defaulted() {
        let t0 = Instant::now();
        let mut l = Lacp::new(US, 1, LacpRate::Fast, LacpMode::Active, 2);
        for m in 0..2 {
            l.receive(m, &switch_pdu(m as u16, IN_SYNC, SWITCH), t0)
                .unwrap();
        }
        l.run(&[true, true], t0);
        // Member 1 keeps hearing from the switch, member 0 does not.
        let t3 = t0 + Duration::from_secs(3);
        l.receive(1, &switch_pdu(1, IN_SYNC, SWITCH), t3).unwrap();
        l.run(&[true, true], t3);
        assert_eq!(l.members[0].status, PartnerStatus::Expired);
        assert!(
            !l.members[0].distributing(),
            "an expired partner is not in sync"
        );
        let t6 = t3 + Duration::from_secs(3);
        l.receive(1, &switch_pdu(1, IN_SYNC, SWITCH), t6).unwrap();
        assert!(l.run(&[true, true], t6) || !l.members[0].attached);
        assert_eq!(l.members[0].status, PartnerStatus::Defaulted);
        assert!(!l.members[0].attached && l.members[1].distributing());
    }

    #[test]
    fn a_second_partner_is_refused_while_the_first_is_current() {
        let t0 = Instant::now();
        let mut l = Lacp::new(US, 1, LacpRate::Slow, LacpMode::Active, 2);
        l.receive(0, &switch_pdu(1, IN_SYNC, SWITCH), t0).unwrap();
        let other = MacAddr([2, 0x5e, 0, 0, 0, 0x66]);
        assert_eq!(
            l.receive(0, &switch_pdu(1, IN_SYNC, other), t0),
            Err(Refusal::SecondPartner)
        );
        // On the other member it is heard, but that member is not in the
        // aggregate of the first.
        l.receive(1, &switch_pdu(2, IN_SYNC, other), t0).unwrap();
        l.run(&[true, true], t0);
        assert!(l.members[0].attached && !l.members[1].attached);
    }

    #[test]
    fn a_passive_actor_waits_for_an_active_partner() {
        let t0 = Instant::now();
        let mut l = Lacp::new(US, 1, LacpRate::Slow, LacpMode::Passive, 1);
        l.run(&[true], t0);
        assert!(l.due(0, t0).is_none());
        l.receive(0, &switch_pdu(1, IN_SYNC, SWITCH), t0).unwrap();
        l.run(&[true], t0);
        let pdu = l.due(0, t0).expect("answers an active partner");
        assert!(!pdu.actor.state.has(State::ACTIVITY));
        assert!(!pdu.actor.state.has(State::TIMEOUT), "slow rate asked");
    }

    #[test]
    fn a_partner_repeating_itself_changes_nothing_and_a_flood_is_refused() {
        let t0 = Instant::now();
        let mut l = Lacp::new(US, 1, LacpRate::Fast, LacpMode::Active, 1);
        let mut pdu = switch_pdu(1, IN_SYNC, SWITCH);
        assert_eq!(l.receive(0, &pdu, t0), Ok(true), "a new partner");
        l.run(&[true], t0);
        l.due(0, t0).expect("told what it is");
        // The partner now says what the actor says of itself.
        pdu.partner = l.actor(0);
        for k in 1..6 {
            let t = t0 + Duration::from_secs(k);
            assert_eq!(l.receive(0, &pdu, t), Ok(false), "the same again");
            assert!(!l.run(&[true], t));
        }
        // A partner that says something new is looked at again.
        pdu.actor.state = State(IN_SYNC & !State::DISTRIBUTING);
        let t = t0 + Duration::from_secs(6);
        assert_eq!(l.receive(0, &pdu, t), Ok(true));
        // Past three in one second, LACPDUs are not read.
        let t = t0 + Duration::from_secs(10);
        let rx = l.members[0].rx;
        for _ in 0..MAX_PER_SECOND {
            assert_eq!(l.receive(0, &pdu, t), Ok(false));
        }
        assert_eq!(l.receive(0, &pdu, t), Err(Refusal::TooMany));
        assert_eq!(l.members[0].rx, rx + u64::from(MAX_PER_SECOND));
        let later = t + Duration::from_secs(1);
        assert_eq!(l.receive(0, &pdu, later), Ok(false), "the next second");
    }
}
