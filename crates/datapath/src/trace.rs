//! The trace hook: a port armed to trace its next frames marks them as it
//! reads them, and every stage a marked frame passes writes one line —
//! what it decided and why — into that port's [`Tracer`]. An unmarked
//! frame pays one bit test per stage that could write; a port with no
//! trace armed, one relaxed load per burst. A synthetic frame (one
//! described in words, not sent by the guest) is handed to the tracer
//! and switched by the port's worker at its next tick, traced from the
//! start: it runs every decision but is delivered nowhere, learned
//! nowhere and counted nowhere, unless it was injected to be delivered.
//! This is what `hvnet trace` and `hvnet diagnose` read.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Lines a tracer keeps until they are taken; older ones go first.
pub const MAX_LINES: usize = 4096;

/// One stage's word on a traced frame.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TraceLine {
    /// The traced frame (numbered per port from 1, in the order read).
    pub frame: u64,
    /// The stage.
    pub stage: &'static str,
    /// What it decided and why.
    pub text: String,
}

/// Which frames a trace marks (a compiled tcpdump filter): true for one
/// to mark.
pub type TraceFilter = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// A port's trace: frames still to mark, and the lines written.
#[derive(Default)]
pub struct Tracer {
    armed: AtomicU32,
    marked: AtomicU64,
    lines: Mutex<VecDeque<TraceLine>>,
    /// Only frames it keeps are marked (all without one).
    filter: Mutex<Option<TraceFilter>>,
    /// A trace's reader holds the port's tracer (one at a time).
    held: AtomicBool,
    /// A synthetic frame waiting for the port's worker (`pending` is its
    /// one-load flag, looked at every tick), and the last one switched.
    injection: Mutex<Option<Injection>>,
    pending: AtomicBool,
    injected: AtomicU64,
}

/// A reader's hold on a tracer ([`Tracer::hold_for_reader`]): released,
/// its filter dropped, when it goes.
pub struct Hold<'a>(&'a Tracer);

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// A synthetic frame handed to a port's worker.
#[derive(Debug)]
pub(crate) struct Injection {
    /// The frame, as the port's guest would send it.
    pub(crate) frame: Vec<u8>,
    /// Delivered as a real frame (learned, counted, written), not only
    /// traced.
    pub(crate) deliver: bool,
    /// Its trace number.
    pub(crate) id: u64,
    /// A far end's synthetic frame: the token its lines are reported back
    /// with.
    pub(crate) report: Option<u16>,
}

/// A token for a trace that crosses a tunnel (never 0; starting where
/// the clock says, so that two hosts' tokens seldom meet).
pub(crate) fn next_token() -> u16 {
    use std::sync::atomic::AtomicU16;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(0, (std::process::id() as u16) | 1, Relaxed, Relaxed);
    loop {
        let t = NEXT.fetch_add(1, Relaxed);
        if t != 0 {
            return t;
        }
    }
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("armed", &self.armed)
            .field("marked", &self.marked)
            .finish()
    }
}

impl Tracer {
    /// Takes the tracer for one reader: false if another holds it.
    pub fn hold(&self) -> bool {
        !self.held.swap(true, Relaxed)
    }

    /// Takes the tracer for one reader, let go when the hold is dropped
    /// (however the reader ends); `None` if another holds it.
    pub fn hold_for_reader(&self) -> Option<Hold<'_>> {
        self.hold().then_some(Hold(self))
    }

    /// True while a trace's reader holds the tracer.
    pub fn is_held(&self) -> bool {
        self.held.load(Relaxed)
    }

    /// Lets the tracer go: nothing more is marked, the filter dropped.
    pub fn release(&self) {
        self.armed.store(0, Relaxed);
        *self.filter.lock().expect("trace lock") = None;
        self.held.store(false, Relaxed);
    }

    /// Marks the next `frames` frames `filter` keeps (any frame without
    /// one), instead of what was armed before.
    pub fn arm_matching(&self, frames: u32, filter: Option<TraceFilter>) {
        *self.filter.lock().expect("trace lock") = filter;
        self.armed.store(frames, Relaxed);
    }

    /// True if frame `bytes` is one to mark (asked only while armed).
    pub(crate) fn wants(&self, bytes: &[u8]) -> bool {
        self.filter
            .lock()
            .expect("trace lock")
            .as_ref()
            .is_none_or(|f| f(bytes))
    }

    /// Frames marked so far (numbered from 1 in that order).
    pub fn marked(&self) -> u64 {
        self.marked.load(Relaxed)
    }
    /// Marks the next `frames` frames read at the port (added to any
    /// still armed).
    pub fn arm(&self, frames: u32) {
        self.armed.fetch_add(frames, Relaxed);
    }

    /// Frames still to mark (one relaxed load: the worker asks once per
    /// burst).
    #[inline]
    pub fn armed(&self) -> u32 {
        self.armed.load(Relaxed)
    }

    /// Claims a mark for one frame read: its number, or `None` when no
    /// more are armed.
    pub(crate) fn mark(&self) -> Option<u64> {
        self.armed
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .ok()?;
        Some(self.next_number())
    }

    /// Hands a synthetic frame to the port's worker, traced: its trace
    /// number. `deliver` sends it on as the guest's own frame; without
    /// it the frame runs the decisions only. A frame not yet switched is
    /// replaced.
    pub fn inject(&self, frame: Vec<u8>, deliver: bool) -> u64 {
        let id = self.next_number();
        self.put(Injection {
            frame,
            deliver,
            id,
            report: None,
        });
        id
    }

    /// Hands a far end's synthetic frame to the port's worker (its lines
    /// go back with `token`): its trace number.
    pub(crate) fn inject_remote(&self, frame: Vec<u8>, token: u16) -> u64 {
        let id = self.next_number();
        self.put(Injection {
            frame,
            deliver: false,
            id,
            report: Some(token),
        });
        id
    }

    fn put(&self, i: Injection) {
        *self.injection.lock().expect("trace lock") = Some(i);
        self.pending.store(true, Relaxed);
    }

    /// The next trace number (marked, injected or marked by a far end:
    /// one sequence, numbered from 1).
    pub(crate) fn next_number(&self) -> u64 {
        self.marked.fetch_add(1, Relaxed) + 1
    }

    /// The lines of frame `id` only, taken.
    pub(crate) fn take_frame(&self, id: u64) -> Vec<TraceLine> {
        let mut lines = self.lines.lock().expect("trace lock");
        let mut out = Vec::new();
        lines.retain(|l| {
            if l.frame == id {
                out.push(l.clone());
                false
            } else {
                true
            }
        });
        out
    }

    /// True while a synthetic frame waits (one relaxed load).
    #[inline]
    pub(crate) fn injection_pending(&self) -> bool {
        self.pending.load(Relaxed)
    }

    /// The synthetic frame waiting, taken by the worker that switches it.
    pub(crate) fn take_injection(&self) -> Option<Injection> {
        self.pending.store(false, Relaxed);
        self.injection.lock().expect("trace lock").take()
    }

    /// Synthetic frame `id` was switched: every line of it is written.
    pub(crate) fn injected(&self, id: u64) {
        self.injected.fetch_max(id, Relaxed);
    }

    /// True once synthetic frame `id` was switched.
    pub fn was_injected(&self, id: u64) -> bool {
        self.injected.load(Relaxed) >= id
    }

    /// Writes a line for traced frame `frame`.
    pub(crate) fn line(&self, frame: u64, stage: &'static str, text: String) {
        let mut lines = self.lines.lock().expect("trace lock");
        if lines.len() == MAX_LINES {
            lines.pop_front();
        }
        lines.push_back(TraceLine { frame, stage, text });
    }

    /// The lines written so far, taken.
    pub fn take(&self) -> Vec<TraceLine> {
        self.lines.lock().expect("trace lock").drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_only_what_was_armed_and_keeps_the_newest_lines() {
        let t = Tracer::default();
        assert_eq!(t.mark(), None);
        t.arm(2);
        assert_eq!((t.mark(), t.mark(), t.mark()), (Some(1), Some(2), None));
        for i in 0..MAX_LINES + 3 {
            t.line(1, "x", i.to_string());
        }
        let lines = t.take();
        assert_eq!(lines.len(), MAX_LINES);
        assert_eq!(lines[0].text, "3");
        assert!(t.take().is_empty());
    }

    #[test]
    fn a_filter_picks_the_frames_and_one_reader_holds_the_tracer() {
        let t = Tracer::default();
        assert!(t.hold() && !t.hold());
        t.arm_matching(1, Some(Box::new(|b: &[u8]| b.first() == Some(&7))));
        assert!(!t.wants(&[1]) && t.wants(&[7]));
        t.release();
        assert!(t.hold() && t.armed() == 0 && t.wants(&[1]));
    }

    #[test]
    fn a_synthetic_frame_waits_once_and_is_numbered_with_the_marked_ones() {
        let t = Tracer::default();
        t.arm(1);
        assert_eq!(t.mark(), Some(1));
        assert!(!t.injection_pending());
        let id = t.inject(vec![1, 2], false);
        assert_eq!(id, 2);
        assert!(t.injection_pending() && !t.was_injected(id));
        let i = t.take_injection().expect("waiting");
        assert_eq!((i.frame, i.deliver, i.id), (vec![1, 2], false, 2));
        assert!(!t.injection_pending() && t.take_injection().is_none());
        t.injected(id);
        assert!(t.was_injected(id));
    }
}
