//! TCP connection states as Linux's conntrack tracks them
//! (`net/netfilter/nf_conntrack_proto_tcp.c`: its `tcp_conntracks`
//! table of transitions by direction, flags and state, and its default
//! timeouts), with its default midstream pickup
//! (`nf_conntrack_tcp_loose = 1`: a bare ACK of an unknown connection
//! opens it as established, so connections survive a daemon restart).
//! Its sequence-window checks are [`super::window`]'s. (Open vSwitch's
//! userspace tracker, `lib/conntrack-tcp.c`, follows pf instead.)

use serde::Serialize;
use std::time::Duration;

/// A tracked TCP connection's state (Linux's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TcpState {
    /// A SYN seen from the originator.
    SynSent,
    /// The SYN-ACK seen from the responder.
    SynRecv,
    /// The handshake completed (or picked up midstream).
    Established,
    /// A FIN seen.
    FinWait,
    /// The other side's FIN seen after the first was acknowledged.
    CloseWait,
    /// Both FINs seen.
    LastAck,
    /// Closed by FINs, waiting out stray segments.
    TimeWait,
    /// Reset.
    Close,
    /// A SYN from the responder too (simultaneous open).
    SynSent2,
}

impl TcpState {
    /// As `conntrack -L` prints it.
    pub fn name(self) -> &'static str {
        match self {
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::Established => "ESTABLISHED",
            TcpState::FinWait => "FIN_WAIT",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::LastAck => "LAST_ACK",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Close => "CLOSE",
            TcpState::SynSent2 => "SYN_SENT2",
        }
    }

    /// Linux's default timeout in this state.
    pub fn timeout(self) -> Duration {
        let s = match self {
            TcpState::SynSent | TcpState::SynSent2 => 120,
            TcpState::SynRecv => 60,
            TcpState::Established => 5 * 24 * 3600,
            TcpState::FinWait | TcpState::TimeWait => 120,
            TcpState::CloseWait => 60,
            TcpState::LastAck => 30,
            TcpState::Close => 10,
        };
        Duration::from_secs(s)
    }

    fn index(self) -> usize {
        match self {
            TcpState::SynSent => 1,
            TcpState::SynRecv => 2,
            TcpState::Established => 3,
            TcpState::FinWait => 4,
            TcpState::CloseWait => 5,
            TcpState::LastAck => 6,
            TcpState::TimeWait => 7,
            TcpState::Close => 8,
            TcpState::SynSent2 => 9,
        }
    }
}

/// What a segment does to a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// It moves to this state (maybe the same).
    To(TcpState),
    /// Let through, state unchanged (Linux's "ignore").
    Ignore,
    /// Not a segment of this connection in this state: dropped.
    Invalid,
}

use hvnet_wire::tcp::flags::{ACK, FIN, RST, SYN};

/// The row of the transition table for a flags byte: SYN, SYN-ACK, FIN,
/// ACK, RST, none (Linux's `get_conntrack_index`, RST first).
fn flag_index(flags: u8) -> usize {
    if flags & RST != 0 {
        4
    } else if flags & SYN != 0 {
        if flags & ACK != 0 {
            1
        } else {
            0
        }
    } else if flags & FIN != 0 {
        2
    } else if flags & ACK != 0 {
        3
    } else {
        5
    }
}

use Step::{Ignore as IG, Invalid as IV};
use TcpState::{
    Close as CL, CloseWait as CW, Established as ES, FinWait as FW, LastAck as LA, SynRecv as SR,
    SynSent as SS, SynSent2 as S2, TimeWait as TW,
};

const fn t(s: TcpState) -> Step {
    Step::To(s)
}

/// Transitions by direction (original, reply), flag row, and state
/// (none, then [`TcpState`]'s order).
#[rustfmt::skip]
const TABLE: [[[Step; 10]; 6]; 2] = [
    [
        // original:  none   SS     SR     ES     FW     CW     LA     TW     CL     S2
        /* syn    */ [t(SS), t(SS), IG,    IG,    IG,    IG,    IG,    t(SS), t(SS), t(S2)],
        /* synack */ [IV,    IV,    t(SR), IV,    IV,    IV,    IV,    IV,    IV,    t(SR)],
        /* fin    */ [IV,    IV,    t(FW), t(FW), t(LA), t(LA), t(LA), t(TW), t(CL), IV],
        /* ack    */ [t(ES), IV,    t(ES), t(ES), t(CW), t(CW), t(TW), t(TW), t(CL), IV],
        /* rst    */ [IV,    t(CL), t(CL), t(CL), t(CL), t(CL), t(CL), t(CL), t(CL), t(CL)],
        /* none   */ [IV,    IV,    IV,    IV,    IV,    IV,    IV,    IV,    IV,    IV],
    ],
    [
        // reply:     none   SS     SR     ES     FW     CW     LA     TW     CL     S2
        /* syn    */ [IV,    t(S2), IV,    IV,    IV,    IV,    IV,    t(SS), IV,    t(S2)],
        /* synack */ [IV,    t(SR), IG,    IG,    IG,    IG,    IG,    IG,    IG,    t(SR)],
        /* fin    */ [IV,    IV,    t(FW), t(FW), t(LA), t(LA), t(LA), t(TW), t(CL), IV],
        /* ack    */ [IV,    IG,    t(SR), t(ES), t(CW), t(CW), t(TW), t(TW), t(CL), IG],
        /* rst    */ [IV,    t(CL), t(CL), t(CL), t(CL), t(CL), t(CL), t(CL), t(CL), t(CL)],
        /* none   */ [IV,    IV,    IV,    IV,    IV,    IV,    IV,    IV,    IV,    IV],
    ],
];

/// What a segment with `flags` does to a connection in `state` (`None`:
/// not tracked yet), going the way it was opened (`reply` false) or back.
pub fn step(state: Option<TcpState>, reply: bool, flags: u8) -> Step {
    let col = state.map_or(0, TcpState::index);
    TABLE[usize::from(reply)][flag_index(flags)][col]
}

/// Whether a segment with `flags` may open a connection: a SYN, or a
/// bare ACK picked up midstream.
pub fn opens(flags: u8) -> Option<TcpState> {
    match step(None, false, flags) {
        Step::To(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handshake_data_and_close_go_as_linux_tracks_them() {
        let mut s = opens(SYN).unwrap();
        assert_eq!(s, SS);
        for (reply, flags, want) in [
            (true, SYN | ACK, SR),
            (false, ACK, ES),
            (false, ACK | 0x08, ES),
            (true, ACK, ES),
            (false, FIN | ACK, FW),
            (true, ACK, CW),
            (true, FIN | ACK, LA),
            (false, ACK, TW),
        ] {
            match step(Some(s), reply, flags) {
                Step::To(n) => s = n,
                other => panic!("{s:?} {reply} {flags:#x}: {other:?}"),
            }
            assert_eq!(s, want, "{reply} {flags:#x}");
        }
        assert_eq!(step(Some(TW), false, SYN), Step::To(SS), "reopened");
    }

    #[test]
    fn only_a_syn_or_a_bare_ack_opens_and_a_reset_closes() {
        assert_eq!(opens(SYN), Some(SS));
        assert_eq!(opens(ACK), Some(ES), "midstream pickup");
        for f in [SYN | ACK, FIN | ACK, RST, RST | ACK, 0, FIN] {
            assert_eq!(opens(f), None, "{f:#x}");
        }
        assert_eq!(step(Some(ES), true, RST), Step::To(CL));
        assert_eq!(step(Some(SS), false, SYN | ACK), Step::Invalid);
        assert_eq!(step(Some(SS), true, ACK), Step::Ignore);
        assert!(CL.timeout() < ES.timeout());
    }
}
