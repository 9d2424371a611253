//! The workers' scheduling weight (`[switch] nice`). A fixed pool of a few
//! workers shares its CPUs with every guest process placed there; a thread
//! per queue, as the switch had before the pool, got one share per queue
//! from the scheduler, the pool gets one per worker. With `auto` (the
//! default) a worker takes back what the threads it replaces would have
//! had: the weight of as many threads at nice 0 as it has queues with
//! traffic, which the kernel's weights (each nice step about 1.25×,
//! `sched_prio_to_weight`) give as nice −log₁.₂₅(queues), to −20. One VM
//! pair's stream leaves the worker at nice 0 to −3, where it does not
//! preempt the pair's receiver at every frame; 64 senders take it to −18.

use serde::Serialize;

/// How the workers' nice value is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerNice {
    /// Follows the queues with traffic (see the module's documentation).
    Auto,
    /// A fixed nice value, −20 to 19 (nice(1)).
    Fixed(i32),
}

/// The nice value that weighs a thread as `queues` threads at nice 0.
pub fn nice_for(queues: usize) -> i32 {
    if queues <= 1 {
        return 0;
    }
    let steps = (queues as f64).ln() / 1.25f64.ln();
    -(steps.round() as i32).min(20)
}

/// A worker's weight under `auto`: the queues that had traffic since the
/// last look, and the nice value it set last.
#[derive(Debug, Default)]
pub(super) struct Weight {
    active: usize,
    nice: i32,
}

impl Weight {
    /// A queue had traffic (counted once a look: `first` is whether it is
    /// the queue's first turn with traffic since then).
    pub(super) fn active(&mut self, first: bool) {
        self.active += usize::from(first);
    }

    /// Every look: the nice value for the queues counted since the last,
    /// if it changed (the caller sets it), and the count starts again.
    pub(super) fn look(&mut self) -> Option<i32> {
        let nice = nice_for(self.active);
        self.active = 0;
        (nice != self.nice).then(|| {
            self.nice = nice;
            nice
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_weighs_as_the_threads_its_busy_queues_would_have_been() {
        assert_eq!(nice_for(0), 0);
        assert_eq!(nice_for(1), 0);
        assert_eq!(nice_for(2), -3);
        assert_eq!(nice_for(32), -16);
        assert_eq!(nice_for(64), -19);
        assert_eq!(nice_for(4096), -20);
        // Never lighter with more queues.
        for n in 1..200 {
            assert!(nice_for(n + 1) <= nice_for(n));
        }
    }

    #[test]
    fn the_weight_changes_only_when_the_busy_queues_do() {
        let mut w = Weight::default();
        assert_eq!(w.look(), None, "idle: nice 0, as set");
        (0..32).for_each(|_| w.active(true));
        w.active(false);
        assert_eq!(w.look(), Some(-16));
        (0..32).for_each(|_| w.active(true));
        assert_eq!(w.look(), None, "the same weight is not set again");
        assert_eq!(w.look(), Some(0), "gone quiet: back to nice 0");
    }
}
