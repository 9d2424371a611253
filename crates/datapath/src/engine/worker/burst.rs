//! A burst: the frames one read gave, walked by each stage of the
//! port's ingress arc in turn. Frames stay where the read put them (a
//! refused one beside them, never live); a stage that drops or consumes
//! one clears its bit, and the stages after it pass it by. What a stage learns of a frame for a later one (its
//! lookup, the mirrors that copied it, snooping's targets) is kept beside
//! it, by index.

use crate::item::BATCH;
use crate::snoop::Snooped;
use crate::trace::Tracer;
use hvnet_port::{Packet, RecvError};
use std::ops::{Index, IndexMut};

// The live and traced frames are bits of one word.
const _: () = assert!(BATCH <= 64);

/// The frames of one read, in order, and what the stages found.
pub(crate) struct Burst {
    /// What the read gave, in order: frames (never moved until the
    /// forwarding stage takes them), and frames refused.
    pub(crate) frames: Vec<Result<Packet, RecvError>>,
    /// Bit i: frame i is still on its way (its entry is `Ok` exactly
    /// then: [`Burst::release`] puts an `Err` in a frame's place).
    live: u64,
    /// Bit i: frame i is traced, as `trace_ids[i]`.
    traced: u64,
    trace_ids: [u64; BATCH],
    /// Per frame: the mirrors that copied it as it came in.
    pub(crate) mirrored: [u64; BATCH],
    /// Per frame: the port its destination was learned on.
    pub(crate) learned: [Option<usize>; BATCH],
    /// Snooping's word on the group frames among them, by index, in
    /// order (the others are flooded or sent as their lookup says).
    pub(crate) snooped: Vec<(usize, Snooped)>,
}

impl Default for Burst {
    fn default() -> Self {
        Burst {
            frames: Vec::with_capacity(BATCH),
            live: 0,
            traced: 0,
            trace_ids: [0; BATCH],
            mirrored: [0; BATCH],
            learned: [None; BATCH],
            snooped: Vec::with_capacity(BATCH),
        }
    }
}

impl Burst {
    /// Starts a burst of the frames now in `frames` (the refused ones
    /// not live), marking those the port's tracer is armed for.
    pub(crate) fn begin(&mut self, tracer: &Tracer) {
        // The engine hands over at most a burst at a time.
        assert!(
            self.frames.len() <= BATCH,
            "a burst holds at most {BATCH} frames"
        );
        self.live = self
            .frames
            .iter()
            .enumerate()
            .fold(0, |m, (i, f)| m | (u64::from(f.is_ok()) << i));
        self.traced = 0;
        self.mirrored = [0; BATCH];
        self.snooped.clear();
        if tracer.armed() > 0 {
            for i in self.live() {
                if !tracer.wants(self[i].frame()) {
                    continue;
                }
                let Some(id) = tracer.mark() else { break };
                self.traced |= 1 << i;
                self.trace_ids[i] = id;
            }
        }
    }

    /// Starts a burst of one synthetic frame (in `frames`), traced as
    /// `id`.
    pub(crate) fn begin_synthetic(&mut self, id: u64) {
        assert!(matches!(self.frames[..], [Ok(_)]), "one synthetic frame");
        self.live = 1;
        self.traced = 1;
        self.trace_ids[0] = id;
        self.mirrored = [0; BATCH];
        self.snooped.clear();
    }

    /// The frames now in `frames` (every one a frame, as many as the
    /// burst had or fewer) replace the burst's (a stage that makes new
    /// frames of them: LRO). Its traces go on with the new frames in
    /// order, the first traced id with the first frame: a coalesced frame
    /// stands for several, so a trace through LRO is approximate, never
    /// more lines than were asked for.
    pub(crate) fn replaced(&mut self) {
        // What comes out of a table flushed at the burst's end is what
        // went in, or fewer frames.
        let n = self.frames.len();
        assert!(n <= BATCH, "a burst holds at most {BATCH} frames");
        let ids: smallvec::SmallVec<[u64; 4]> =
            Live(self.traced).map(|i| self.trace_ids[i]).collect();
        self.live = all(n);
        self.traced = all(ids.len().min(n));
        for (k, id) in ids.into_iter().take(n).enumerate() {
            self.trace_ids[k] = id;
        }
    }

    /// The indexes of the frames still on their way, in order (taken
    /// when called: a stage may drop the frame it is at).
    #[inline]
    pub(crate) fn live(&self) -> Live {
        Live(self.live)
    }

    /// Frame `i` goes no further (dropped, counted by the caller; or
    /// consumed): its buffer goes back now, not when the burst ends (the
    /// copies later stages make count against the same buffers).
    #[inline]
    pub(crate) fn release(&mut self, i: usize) {
        self.live &= !(1 << i);
        self.frames[i] = Err(RecvError::Consumed);
    }

    /// True if frame `i` is still on its way.
    pub(crate) fn is_live(&self, i: usize) -> bool {
        self.live & (1 << i) != 0
    }

    /// Frame `i` (live) is traced as `id` from here on.
    pub(crate) fn mark(&mut self, i: usize, id: u64) {
        self.traced |= 1 << i;
        self.trace_ids[i] = id;
    }

    /// Frame `i`'s trace number, if it is traced.
    #[inline]
    pub(crate) fn traced(&self, i: usize) -> Option<u64> {
        (self.traced & (1 << i) != 0).then(|| self.trace_ids[i])
    }

    /// A line from `stage` for frame `i`, if it is traced (`text` is
    /// made only then).
    #[inline]
    pub(crate) fn trace(
        &self,
        tracer: &Tracer,
        i: usize,
        stage: &'static str,
        text: impl FnOnce() -> String,
    ) {
        if let Some(id) = self.traced(i) {
            tracer.line(id, stage, text());
        }
    }
}

/// Frame `i`, which is live (a stage visits only those: a refused one
/// is never).
impl Index<usize> for Burst {
    type Output = Packet;

    #[inline]
    fn index(&self, i: usize) -> &Packet {
        match &self.frames[i] {
            Ok(p) => p,
            Err(_) => panic!("frame {i} of the burst was refused: it is never live"),
        }
    }
}

impl IndexMut<usize> for Burst {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut Packet {
        match &mut self.frames[i] {
            Ok(p) => p,
            Err(_) => panic!("frame {i} of the burst was refused: it is never live"),
        }
    }
}

/// Bits 0..n set.
fn all(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// The set bits of a word, lowest first.
pub(crate) struct Live(u64);

impl Iterator for Live {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let i = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(i)
    }
}
