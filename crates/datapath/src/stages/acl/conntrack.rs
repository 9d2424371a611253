//! A port's connection table (its conntrack zone, as OVN gives each
//! logical port one): connections its rules let through, found by either
//! direction's tuple, each with its protocol state and a deadline — TCP
//! by [`super::tcp`], UDP, ICMP queries and other protocols by timeout
//! (Linux's defaults: UDP 30 s unreplied and 120 s once replied, ICMP
//! 30 s, others 600 s).
//!
//! Bounded: at most `max` entries in the table and a switch-wide total
//! shared by every port's table. A full table first takes the place of
//! an expired entry or of one not assured — a TCP connection whose
//! handshake never completed, a datagram flow never answered (Linux's
//! early drop) — looking at a few slots from a rotating
//! cursor; failing that the new connection is refused and counted. The
//! same cursor expires a few slots at every insertion, so the table is
//! swept as it is used, with no thread of its own. Memory is one slot
//! and one map entry per connection: a guest that opens a million
//! half-open connections holds `max` of them.

use super::flow::{Family, Tuple};
use super::rules::Direction;
use super::tcp::{self, Step, TcpState};
use super::window::{Phase, Segment, Windows};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Seconds since the ACL's epoch.
pub type Secs = u32;

/// Slots looked at for an expired or unassured entry when the table is
/// full, and expired at every insertion.
const SCAN: usize = 16;

/// UDP (and other protocols') timeouts, as Linux's.
const UDP_UNREPLIED: Secs = 30;
const UDP_REPLIED: Secs = 120;
const ICMP: Secs = 30;
const OTHER: Secs = 600;

/// A connection's protocol state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// TCP, and where its handshake and close are.
    Tcp(TcpState),
    /// Anything else: whether a reply was seen.
    Datagram {
        /// A frame went the other way.
        replied: bool,
    },
}

/// One tracked connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conn {
    /// The flow as its first frame went.
    pub orig: Tuple,
    /// Its state.
    pub state: ConnState,
    /// When it expires.
    pub expires: Secs,
    /// The stage that let it in: `Out` for one the VM opened, `In` for
    /// one opened to it.
    pub stage: Direction,
    /// The index of the rule that allowed it (in the rules it was
    /// allowed by).
    pub rule: u16,
    /// Frames each way (original, reply).
    pub frames: [u64; 2],
    /// A TCP connection's windows (`super::window`).
    pub window: Windows,
}

impl Conn {
    /// Whether a frame came back (conntrack's `[UNREPLIED]` when not).
    pub fn replied(&self) -> bool {
        match self.state {
            ConnState::Tcp(s) => !matches!(s, TcpState::SynSent | TcpState::SynSent2),
            ConnState::Datagram { replied } => replied,
        }
    }

    /// Linux's `ASSURED`: a TCP connection whose handshake completed, a
    /// datagram flow that was answered. Only the others give their place
    /// to a new connection in a full table (so a SYN flood, whose
    /// connections stay half-open, cannot keep others out).
    pub fn assured(&self) -> bool {
        match self.state {
            ConnState::Tcp(s) => !matches!(
                s,
                TcpState::SynSent | TcpState::SynSent2 | TcpState::SynRecv | TcpState::Close
            ),
            ConnState::Datagram { replied } => replied,
        }
    }
}

/// The key both directions share: the tuple with its ends in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    family: Family,
    proto: u8,
    a: (u128, u16),
    b: (u128, u16),
}

impl Key {
    fn of(t: &Tuple) -> Key {
        let (x, y) = ((t.src, t.sport), (t.dst, t.dport));
        let (a, b) = if x <= y { (x, y) } else { (y, x) };
        Key {
            family: t.family,
            proto: t.proto,
            a,
            b,
        }
    }
}

/// What the table did with a frame of a tracked connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A frame of a known connection: let through.
    Known,
    /// A known connection, but a TCP segment its state does not take.
    Invalid,
    /// A known connection, but a TCP segment outside its windows.
    OutOfWindow,
    /// No such connection.
    Unknown,
}

/// Why a connection could not be added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The table (or every table's total) is full of replied connections.
    Full,
    /// A TCP segment that cannot open a connection (not a SYN or an ACK).
    Invalid,
}

/// A port's connection table.
#[derive(Debug)]
pub struct Table {
    map: HashMap<Key, u32>,
    slots: Vec<Option<Conn>>,
    free: Vec<u32>,
    cursor: usize,
    max: usize,
    total: Arc<Total>,
}

/// Every table's entries together, against the switch-wide bound.
#[derive(Debug, Default)]
pub struct Total {
    /// Entries now.
    pub n: AtomicUsize,
    /// The bound.
    pub max: AtomicUsize,
}

impl Total {
    /// A total bounded at `max`.
    pub fn new(max: usize) -> Arc<Total> {
        Arc::new(Total {
            n: AtomicUsize::new(0),
            max: AtomicUsize::new(max),
        })
    }
    fn take(&self) -> bool {
        let max = self.max.load(Ordering::Relaxed);
        self.n
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }
    fn give(&self, k: usize) {
        self.n.fetch_sub(k, Ordering::Relaxed);
    }
}

/// Where a TCP state is in the handshake, as window tracking asks.
fn phase(s: TcpState) -> Phase {
    match s {
        TcpState::SynSent | TcpState::SynSent2 => Phase::SynSent,
        TcpState::SynRecv => Phase::SynRecv,
        _ => Phase::Later,
    }
}

fn datagram_timeout(proto: u8, replied: bool) -> Secs {
    use super::flow::proto::{ICMP as P_ICMP, ICMPV6, TCP, UDP};
    match proto {
        UDP if replied => UDP_REPLIED,
        UDP => UDP_UNREPLIED,
        P_ICMP | ICMPV6 => ICMP,
        TCP => TcpState::Established.timeout().as_secs() as Secs,
        _ => OTHER,
    }
}

fn tcp_deadline(now: Secs, s: TcpState) -> Secs {
    now.saturating_add(s.timeout().as_secs() as Secs)
}

impl Table {
    /// An empty table of at most `max` connections, counted in `total`.
    pub fn new(max: usize, total: Arc<Total>) -> Table {
        Table {
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            cursor: 0,
            max,
            total,
        }
    }

    /// Connections held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A new bound (connections beyond it stay until they end).
    pub fn set_max(&mut self, max: usize) {
        self.max = max;
    }

    /// A frame of flow `t` (TCP flags `flags`, 0 otherwise; a TCP
    /// segment's numbers `seg`, judged against its windows when
    /// `windows`) at time `now`: updates its connection if there is one.
    pub fn see(&mut self, t: &Tuple, flags: u8, seg: &Segment, windows: bool, now: Secs) -> Seen {
        let Some(&i) = self.map.get(&Key::of(t)) else {
            return Seen::Unknown;
        };
        let slot = &mut self.slots[i as usize];
        let Some(c) = slot.as_mut() else {
            return Seen::Unknown;
        };
        if c.expires <= now {
            self.remove(i);
            return Seen::Unknown;
        }
        let reply = *t != c.orig;
        match c.state {
            ConnState::Tcp(s) => match tcp::step(Some(s), reply, flags) {
                Step::To(n) => {
                    // Judged before the state moves (Linux's order): a
                    // segment out of its windows changes nothing.
                    if windows && !c.window.admits(reply, phase(s), seg, flags) {
                        return Seen::OutOfWindow;
                    }
                    c.state = ConnState::Tcp(n);
                    c.expires = tcp_deadline(now, n);
                }
                Step::Ignore => {}
                Step::Invalid => return Seen::Invalid,
            },
            ConnState::Datagram { replied } => {
                let replied = replied || reply;
                c.state = ConnState::Datagram { replied };
                c.expires = now.saturating_add(datagram_timeout(t.proto, replied));
            }
        }
        c.frames[usize::from(reply)] += 1;
        Seen::Known
    }

    /// Whether a connection of `t` (either way) is held: an ICMP error
    /// quoting one of its packets is related to it.
    pub fn holds(&self, t: &Tuple, now: Secs) -> bool {
        self.map
            .get(&Key::of(t))
            .and_then(|&i| self.slots[i as usize].as_ref())
            .is_some_and(|c| c.expires > now)
    }

    /// Adds the connection `t` opens (its first frame's TCP flags
    /// `flags`), let in at `stage` by rule `rule`.
    pub fn open(
        &mut self,
        t: &Tuple,
        flags: u8,
        seg: &Segment,
        stage: Direction,
        rule: u16,
        now: Secs,
    ) -> Result<(), Refused> {
        let state = if t.proto == super::flow::proto::TCP {
            ConnState::Tcp(tcp::opens(flags).ok_or(Refused::Invalid)?)
        } else {
            ConnState::Datagram { replied: false }
        };
        let expires = match state {
            ConnState::Tcp(s) => tcp_deadline(now, s),
            ConnState::Datagram { replied } => {
                now.saturating_add(datagram_timeout(t.proto, replied))
            }
        };
        self.sweep(now, SCAN);
        if self.map.len() >= self.max || !self.total.take() {
            // Full: an unassured connection's place, if one is near.
            if !self.early_drop(now) {
                return Err(Refused::Full);
            }
            if self.map.len() >= self.max || !self.total.take() {
                return Err(Refused::Full);
            }
        }
        let conn = Conn {
            orig: *t,
            state,
            expires,
            stage,
            rule,
            frames: [1, 0],
            window: Windows::opening(seg, flags),
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(conn);
                i
            }
            None => {
                self.slots.push(Some(conn));
                (self.slots.len() - 1) as u32
            }
        };
        if let Some(old) = self.map.insert(Key::of(t), i) {
            // Only after an expired entry of the same key was left in
            // place (not looked up since): it goes now.
            self.slots[old as usize] = None;
            self.free.push(old);
            self.total.give(1);
        }
        Ok(())
    }

    fn remove(&mut self, i: u32) {
        if let Some(c) = self.slots[i as usize].take() {
            self.map.remove(&Key::of(&c.orig));
            self.free.push(i);
            self.total.give(1);
        }
    }

    /// Expires up to `n` slots from the cursor.
    pub fn sweep(&mut self, now: Secs, n: usize) {
        for _ in 0..n.min(self.slots.len()) {
            self.cursor = (self.cursor + 1) % self.slots.len();
            let i = self.cursor;
            if self.slots[i].is_some_and(|c| c.expires <= now) {
                self.remove(i as u32);
            }
        }
    }

    /// Every expired connection removed (for views).
    pub fn expire_all(&mut self, now: Secs) {
        let n = self.slots.len();
        self.sweep(now, n);
    }

    /// Frees the place of an expired or unassured connection near the
    /// cursor; false if none was found.
    fn early_drop(&mut self, now: Secs) -> bool {
        let n = self.slots.len();
        for _ in 0..SCAN.min(n) {
            self.cursor = (self.cursor + 1) % n;
            let i = self.cursor;
            if self.slots[i].is_some_and(|c| c.expires <= now || !c.assured()) {
                self.remove(i as u32);
                return true;
            }
        }
        false
    }

    /// Removes the connections `keep` says no to; how many went.
    pub fn retain(&mut self, mut keep: impl FnMut(&Conn) -> bool) -> usize {
        let mut gone = 0;
        for i in 0..self.slots.len() {
            if self.slots[i].as_ref().is_some_and(|c| !keep(c)) {
                self.remove(i as u32);
                gone += 1;
            }
        }
        gone
    }

    /// The connections held, in no order.
    pub fn conns(&self) -> impl Iterator<Item = &Conn> + '_ {
        self.slots.iter().flatten()
    }

    /// Bytes the table holds, about (its map and slots).
    pub fn memory(&self) -> usize {
        self.map.capacity() * (std::mem::size_of::<(Key, u32)>() + 8)
            + self.slots.capacity() * std::mem::size_of::<Option<Conn>>()
            + self.free.capacity() * 4
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        self.total.give(self.map.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_SEG: Segment = Segment {
        seq: 0,
        ack: 0,
        win: 0,
        len: 0,
        wscale: None,
    };

    fn udp(sport: u16) -> Tuple {
        Tuple {
            family: Family::V4,
            proto: 17,
            src: 0xc612_0001,
            dst: 0xc612_0002,
            sport,
            dport: 53,
        }
    }

    #[test]
    fn a_reply_finds_the_connection_and_it_expires() {
        let total = Total::new(10);
        let mut t = Table::new(4, total.clone());
        let f = udp(1000);
        assert_eq!(t.see(&f, 0, &NO_SEG, true, 0), Seen::Unknown);
        t.open(&f, 0, &NO_SEG, Direction::Out, 0, 0).unwrap();
        assert_eq!(t.see(&f.reversed(), 0, &NO_SEG, true, 1), Seen::Known);
        assert!(t.conns().next().unwrap().replied());
        assert_eq!(
            t.see(&f, 0, &NO_SEG, true, 1 + UDP_REPLIED),
            Seen::Unknown,
            "expired"
        );
        assert_eq!(t.len(), 0);
        assert_eq!(total.n.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_full_table_drops_unreplied_ones_first_then_refuses() {
        let total = Total::new(100);
        let mut t = Table::new(3, total.clone());
        for p in 0..3 {
            t.open(&udp(p), 0, &NO_SEG, Direction::Out, 0, 0).unwrap();
            t.see(&udp(p).reversed(), 0, &NO_SEG, true, 0);
        }
        assert_eq!(
            t.open(&udp(9), 0, &NO_SEG, Direction::Out, 0, 0),
            Err(Refused::Full),
            "every one replied"
        );
        t.retain(|c| c.orig.sport != 0);
        t.open(&udp(9), 0, &NO_SEG, Direction::Out, 0, 0).unwrap();
        // An unreplied one gives its place.
        t.open(&udp(10), 0, &NO_SEG, Direction::Out, 0, 0).unwrap();
        assert_eq!(t.len(), 3);
        assert!(!t.holds(&udp(9), 0), "the unreplied one went");
        drop(t);
        assert_eq!(total.n.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_switch_wide_total_bounds_every_table() {
        let total = Total::new(2);
        let mut a = Table::new(10, total.clone());
        let mut b = Table::new(10, total.clone());
        a.open(&udp(1), 0, &NO_SEG, Direction::Out, 0, 0).unwrap();
        a.see(&udp(1).reversed(), 0, &NO_SEG, true, 0);
        b.open(&udp(2), 0, &NO_SEG, Direction::Out, 0, 0).unwrap();
        b.see(&udp(2).reversed(), 0, &NO_SEG, true, 0);
        assert_eq!(
            b.open(&udp(3), 0, &NO_SEG, Direction::Out, 0, 0),
            Err(Refused::Full)
        );
    }
}
