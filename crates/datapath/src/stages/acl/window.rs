//! TCP window tracking as Linux's conntrack does it (`tcp_in_window` in
//! `net/netfilter/nf_conntrack_proto_tcp.c`): each direction's highest
//! sequence sent, the highest the other side's window allows, and its
//! largest window, learned from the handshake (window scaling included);
//! a segment whose sequence or acknowledgement falls outside them is
//! invalid. What it stops is a segment no endpoint of the connection
//! would send: one spoofed into it, one of an old incarnation, one of a
//! stream whose connection was picked up again after a rule change.
//!
//! Linux's defaults: checked for connections tracked from their SYN; a
//! connection picked up midstream (its handshake unseen) is liberal, its
//! windows unknown; `[conntrack] tcp_be_liberal = true` (Linux's
//! `nf_conntrack_tcp_be_liberal = 1`) checks none. Not done: SACK blocks
//! (the cumulative acknowledgement is used, a bound at least as tight).

use hvnet_wire::tcp::flags::{ACK, FIN, RST, SYN};

/// The least window an acknowledgement may trail the data sent by
/// (Linux's `MAXACKWINCONST`).
const MAX_ACK_WINDOW: u32 = 66_000;

/// Largest window scale (RFC 7323).
pub const MAX_WSCALE: u8 = 14;

/// What a TCP segment says about the windows: read once with the flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Window field (unscaled).
    pub win: u16,
    /// Payload length (of a GSO frame, its whole payload).
    pub len: u32,
    /// The window scale option, on a SYN that carries one.
    pub wscale: Option<u8>,
}

impl Segment {
    /// The sequence number after it (SYN and FIN count one each).
    fn end(&self, flags: u8) -> u32 {
        self.seq
            .wrapping_add(self.len)
            .wrapping_add(u32::from(flags & SYN != 0))
            .wrapping_add(u32::from(flags & FIN != 0))
    }
}

fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// One direction's window state (Linux's `ip_ct_tcp_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Side {
    /// Highest sequence number sent, plus its length.
    end: u32,
    /// Highest sequence number the other side's window allows.
    maxend: u32,
    /// Largest window seen (scaled); 0: nothing sent yet.
    maxwin: u32,
    /// Window scale in force.
    scale: u8,
    /// Its SYN carried the window scale option.
    offered_scale: bool,
}

impl Side {
    fn from_syn(seg: &Segment, end: u32) -> Side {
        Side {
            end,
            maxend: end,
            maxwin: u32::from(seg.win).max(1),
            scale: seg.wscale.unwrap_or(0).min(MAX_WSCALE),
            offered_scale: seg.wscale.is_some(),
        }
    }
}

/// A tracked connection's windows, both directions (original, reply).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Windows {
    sides: [Side; 2],
    /// Picked up midstream: windows followed but never refused (as Linux
    /// marks such a connection `BE_LIBERAL`).
    liberal: bool,
}

/// Where a tracked TCP connection's handshake is, as far as the windows
/// care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The originator's SYN sent (`SYN_SENT`).
    SynSent,
    /// The responder's SYN-ACK sent (`SYN_RECV`).
    SynRecv,
    /// Any later state.
    Later,
}

impl Windows {
    /// The windows of a connection its first segment (`flags`) opens:
    /// from a SYN, the originator's side; from anything else (picked up
    /// midstream), what the segment shows, and liberal.
    pub fn opening(seg: &Segment, flags: u8) -> Windows {
        let end = seg.end(flags);
        if flags & SYN != 0 {
            let mut w = Windows::default();
            w.sides[0] = Side::from_syn(seg, end);
            return w;
        }
        let maxwin = u32::from(seg.win).max(1);
        let mut w = Windows {
            liberal: true,
            ..Windows::default()
        };
        w.sides[0] = Side {
            end,
            maxend: end.wrapping_add(maxwin),
            maxwin,
            ..Side::default()
        };
        w
    }

    /// Whether segment `seg` (its flags `flags`), sent the `reply` way
    /// while the handshake is at `phase`, lies within the windows; what
    /// it shows of them is learned either way (as Linux learns a side's
    /// first segment before judging it). A liberal connection admits
    /// every segment.
    pub fn admits(&mut self, reply: bool, phase: Phase, seg: &Segment, flags: u8) -> bool {
        let (s, r) = if reply { (1, 0) } else { (0, 1) };
        let (mut sender, mut receiver) = (self.sides[s], self.sides[r]);
        let ok = judge(&mut sender, &mut receiver, reply, phase, seg, flags);
        self.sides[s] = sender;
        self.sides[r] = receiver;
        ok || self.liberal
    }
}

/// Linux's `tcp_in_window`, for one segment from `sender` to `receiver`.
fn judge(
    sender: &mut Side,
    receiver: &mut Side,
    reply: bool,
    phase: Phase,
    seg: &Segment,
    flags: u8,
) -> bool {
    let (syn, has_ack, rst) = (flags & SYN != 0, flags & ACK != 0, flags & RST != 0);
    let mut end = seg.end(flags);
    let mut seq = seg.seq;
    let mut win = u32::from(seg.win);
    if sender.maxwin == 0 {
        if syn {
            // The responder's SYN-ACK (or a SYN the reply way in a
            // simultaneous open): its side starts here. Scaling holds
            // only if both SYNs offered it.
            *sender = Side::from_syn(seg, end);
            if !(sender.offered_scale && receiver.offered_scale) {
                sender.scale = 0;
                receiver.scale = 0;
            }
            if !has_ack {
                return true;
            }
        } else {
            // A side first seen midstream: what this segment shows.
            sender.end = end;
            sender.maxwin = (win << sender.scale).max(1);
            sender.maxend = end.wrapping_add(sender.maxwin);
            if receiver.maxwin == 0 {
                receiver.end = seg.ack;
                receiver.maxend = seg.ack;
            }
        }
    } else if ((phase == Phase::SynSent && !reply) || (phase == Phase::SynRecv && reply))
        && after(end, sender.end)
    {
        // A SYN (or SYN-ACK) sent again with a new sequence number: the
        // side starts again (RFC 793's reinitialized TCP).
        *sender = Side::from_syn(seg, end);
    }
    let mut ack = seg.ack;
    if !has_ack || (rst && ack == 0) {
        // No acknowledgement (or a stack's RST with ACK and a zero one):
        // as if it acknowledged what was sent.
        ack = receiver.end;
    }
    if seq == end && (!rst || (seq == 0 && phase == Phase::SynSent)) {
        // No data: only its acknowledgement is judged.
        seq = sender.end;
        end = sender.end;
    }
    let max_ack_window = sender.maxwin.max(MAX_ACK_WINDOW);
    let within = before(seq, sender.maxend.wrapping_add(1))
        && after(
            end,
            sender.end.wrapping_sub(receiver.maxwin).wrapping_sub(1),
        )
        && before(ack, receiver.end.wrapping_add(1))
        && after(
            ack,
            receiver.end.wrapping_sub(max_ack_window).wrapping_sub(1),
        );
    if !within {
        return false;
    }
    if !syn {
        win = win.checked_shl(u32::from(sender.scale)).unwrap_or(u32::MAX);
    }
    sender.maxwin = sender.maxwin.max(win);
    if after(end, sender.end) {
        sender.end = end;
    }
    if receiver.maxwin != 0 && after(end, sender.maxend) {
        receiver.maxwin = receiver
            .maxwin
            .wrapping_add(end.wrapping_sub(sender.maxend));
    }
    let edge = ack.wrapping_add(win);
    if after(edge, receiver.maxend.wrapping_sub(1)) {
        receiver.maxend = edge.wrapping_add(u32::from(win == 0));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seq: u32, ack: u32, win: u16, len: u32) -> Segment {
        Segment {
            seq,
            ack,
            win,
            len,
            wscale: None,
        }
    }

    /// A handshake between a client (ISN 1000, window 64240, scale 7)
    /// and a server (ISN 5000, window 65160, scale 7).
    fn established() -> Windows {
        let syn = Segment {
            wscale: Some(7),
            ..seg(1000, 0, 64240, 0)
        };
        let mut w = Windows::opening(&syn, SYN);
        let syn_ack = Segment {
            wscale: Some(7),
            ..seg(5000, 1001, 65160, 0)
        };
        assert!(w.admits(true, Phase::SynSent, &syn_ack, SYN | ACK));
        assert!(w.admits(false, Phase::SynRecv, &seg(1001, 5001, 502, 0), ACK));
        w
    }

    #[test]
    fn a_stream_within_its_windows_is_admitted() {
        let mut w = established();
        // The client sends 100 segments of 1448 bytes, the server
        // acknowledges each; then the server answers.
        let mut seq = 1001u32;
        for _ in 0..100 {
            assert!(w.admits(false, Phase::Later, &seg(seq, 5001, 502, 1448), ACK));
            seq += 1448;
            assert!(w.admits(true, Phase::Later, &seg(5001, seq, 509, 0), ACK));
        }
        // A GSO frame of 64 KiB within the window.
        assert!(w.admits(false, Phase::Later, &seg(seq, 5001, 502, 65_160), ACK));
        seq += 65_160;
        assert!(w.admits(true, Phase::Later, &seg(5001, seq, 509, 1000), ACK));
        // A retransmission of what was acknowledged lately, and a FIN.
        assert!(w.admits(false, Phase::Later, &seg(seq - 1448, 6001, 502, 1448), ACK));
        assert!(w.admits(false, Phase::Later, &seg(seq, 6001, 502, 0), FIN | ACK));
    }

    #[test]
    fn a_segment_outside_the_windows_is_refused() {
        let mut w = established();
        assert!(w.admits(false, Phase::Later, &seg(1001, 5001, 502, 1000), ACK));
        // Data far beyond what the server's window allows.
        assert!(!w.admits(
            false,
            Phase::Later,
            &seg(1001 + 50_000_000, 5001, 502, 100),
            ACK
        ));
        // Data from long before (an old incarnation's).
        assert!(!w.admits(
            false,
            Phase::Later,
            &seg(1001u32.wrapping_sub(50_000_000), 5001, 502, 100),
            ACK
        ));
        // An acknowledgement of data the client never sent.
        assert!(!w.admits(
            true,
            Phase::Later,
            &seg(5001, 1001 + 10_000_000, 509, 0),
            ACK
        ));
        // The connection goes on.
        assert!(w.admits(true, Phase::Later, &seg(5001, 2001, 509, 0), ACK));
    }

    #[test]
    fn a_connection_picked_up_midstream_is_liberal() {
        let mut w = Windows::opening(&seg(70_000, 9_000, 500, 100), ACK);
        assert!(w.admits(false, Phase::Later, &seg(70_100, 9_000, 500, 100), ACK));
        assert!(w.admits(false, Phase::Later, &seg(4_000_000, 9_000, 500, 100), ACK));
    }

    #[test]
    fn sequence_numbers_wrap() {
        let syn = seg(u32::MAX - 10, 0, 65535, 0);
        let mut w = Windows::opening(&syn, SYN);
        assert!(w.admits(
            true,
            Phase::SynSent,
            &seg(7, u32::MAX - 9, 65535, 0),
            SYN | ACK
        ));
        let mut seq = u32::MAX - 9;
        for _ in 0..4 {
            assert!(w.admits(false, Phase::Later, &seg(seq, 8, 65535, 1000), ACK));
            seq = seq.wrapping_add(1000);
            assert!(w.admits(true, Phase::Later, &seg(8, seq, 65535, 0), ACK));
        }
        assert!(seq < 10_000, "wrapped: {seq}");
    }
}
