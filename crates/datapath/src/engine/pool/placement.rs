//! Where queues go: pure functions over the workers' measured loads, so
//! that they are tested without threads.
//!
//! A new queue goes to the worker with the fewest queues, ties to the
//! least busy. At run time the pool looks at each worker's share of the
//! last interval spent in turns ([`rebalance`]): when one worker is
//! saturated and another has room, the busiest worker's queue that best
//! evens them out moves (Open vSwitch's `pmd-auto-lb`); when every worker
//! is lightly loaded and their queues would fit on fewer, the least busy
//! worker's queues are packed onto the others, so idle cores stay idle
//! (Dynamic NetQueue's packing, in NIC Technology in vSphere).

/// A worker's load as the placement sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerLoad {
    /// Queues it owns (and is about to).
    pub queues: usize,
    /// Nanoseconds it spent in turns, in all.
    pub busy_ns: u64,
}

/// The worker a new queue goes to.
pub fn least_loaded(loads: &[WorkerLoad]) -> usize {
    loads
        .iter()
        .enumerate()
        .min_by_key(|(_, l)| (l.queues, l.busy_ns))
        .map_or(0, |(i, _)| i)
}

/// A worker's share of busy time above which it is saturated.
pub const SPREAD_ABOVE: f64 = 0.80;
/// A worker's share of busy time below which its queues may be packed
/// onto the others (when they all stay below [`SPREAD_ABOVE`] after).
pub const PACK_BELOW: f64 = 0.20;

/// Packing fills a worker up to this share only, well below
/// [`SPREAD_ABOVE`], so that a packed worker does not spread again at once.
pub const PACK_UP_TO: f64 = 0.40;

/// A queue's load over the last interval: its worker, and its share of
/// one CPU (0.0 to 1.0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueueLoad<Q> {
    /// The queue.
    pub id: Q,
    /// The worker that owns it.
    pub worker: usize,
    /// Its share of a CPU.
    pub load: f64,
}

/// One move the pool should make.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Move<Q> {
    /// The queue.
    pub id: Q,
    /// From this worker.
    pub from: usize,
    /// To this one.
    pub to: usize,
}

/// At most one move that improves the placement of `queues` on `workers`
/// workers, or none: spread a saturated worker's queue onto the least
/// loaded one when that lowers the higher of the two loads; else pack the
/// lightest worker's queues away when everything stays unsaturated.
pub fn rebalance<Q: Copy>(workers: usize, queues: &[QueueLoad<Q>]) -> Vec<Move<Q>> {
    if workers < 2 {
        return Vec::new();
    }
    let mut load = vec![0.0f64; workers];
    let mut count = vec![0usize; workers];
    for q in queues.iter().filter(|q| q.worker < workers) {
        load[q.worker] += q.load;
        count[q.worker] += 1;
    }
    let by_load = |a: &usize, b: &usize| load[*a].total_cmp(&load[*b]);
    let busiest = (0..workers).max_by(by_load).expect("two workers or more");
    let idlest = (0..workers).min_by(by_load).expect("two workers or more");
    if load[busiest] > SPREAD_ABOVE && count[busiest] > 1 {
        // The queue whose move leaves the two closest, if that lowers the
        // higher of them.
        let best = queues
            .iter()
            .filter(|q| q.worker == busiest)
            .map(|q| {
                let after = (load[busiest] - q.load).max(load[idlest] + q.load);
                (q, after)
            })
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((q, after)) = best {
            if after < load[busiest] - 0.05 {
                return vec![Move {
                    id: q.id,
                    from: busiest,
                    to: idlest,
                }];
            }
        }
        return Vec::new();
    }
    // Pack: the lightest worker with queues, if everything it has fits on
    // the others without saturating any.
    let Some(light) = (0..workers).filter(|w| count[*w] > 0).min_by(by_load) else {
        return Vec::new();
    };
    if load[light] > PACK_BELOW {
        return Vec::new();
    }
    let mut others: Vec<usize> = (0..workers)
        .filter(|w| *w != light && count[*w] > 0)
        .collect();
    if others.is_empty() {
        return Vec::new();
    }
    let mut moves = Vec::new();
    for q in queues.iter().filter(|q| q.worker == light) {
        others.sort_by(|a, b| load[*a].total_cmp(&load[*b]));
        let to = others[0];
        if load[to] + q.load > PACK_UP_TO {
            return Vec::new();
        }
        load[to] += q.load;
        moves.push(Move {
            id: q.id,
            from: light,
            to,
        });
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(id: u32, worker: usize, load: f64) -> QueueLoad<u32> {
        QueueLoad { id, worker, load }
    }

    #[test]
    fn a_new_queue_goes_to_the_worker_with_fewest_queues() {
        let l = |queues, busy_ns| WorkerLoad { queues, busy_ns };
        assert_eq!(least_loaded(&[l(2, 0), l(1, 50), l(1, 10)]), 2);
        assert_eq!(least_loaded(&[]), 0);
    }

    #[test]
    fn a_saturated_worker_gives_the_queue_that_evens_the_load() {
        let m = rebalance(2, &[q(1, 0, 0.5), q(2, 0, 0.45), q(3, 1, 0.1)]);
        assert_eq!(
            m,
            vec![Move {
                id: 2,
                from: 0,
                to: 1
            }]
        );
    }

    #[test]
    fn one_queue_saturating_its_worker_stays() {
        assert!(rebalance(2, &[q(1, 0, 0.99), q(2, 1, 0.1)]).is_empty());
    }

    #[test]
    fn light_load_is_packed_onto_one_worker() {
        let m = rebalance(2, &[q(1, 0, 0.05), q(2, 1, 0.02), q(3, 1, 0.01)]);
        assert_eq!(
            m,
            vec![
                Move {
                    id: 2,
                    from: 1,
                    to: 0
                },
                Move {
                    id: 3,
                    from: 1,
                    to: 0
                }
            ]
        );
        // Packed already: nothing moves.
        assert!(rebalance(2, &[q(1, 0, 0.05), q(2, 0, 0.02)]).is_empty());
    }

    proptest! {
        /// A move goes between two real workers, of a queue its source owns,
        /// and never leaves a worker above the load the busiest had.
        #[test]
        fn moves_never_make_the_busiest_busier(
            loads in proptest::collection::vec((0usize..4, 0.0f64..1.0), 0..24),
            workers in 1usize..5,
        ) {
            let queues: Vec<QueueLoad<u32>> = loads
                .iter()
                .enumerate()
                .map(|(i, (w, l))| q(i as u32, w % workers, *l))
                .collect();
            let mut load = vec![0.0; workers];
            for x in &queues { load[x.worker] += x.load; }
            let max_before = load.iter().cloned().fold(0.0, f64::max);
            let moves = rebalance(workers, &queues);
            for m in &moves {
                prop_assert!(m.from < workers && m.to < workers && m.from != m.to);
                let x = queues.iter().find(|x| x.id == m.id).unwrap();
                prop_assert_eq!(x.worker, m.from);
                load[m.from] -= x.load;
                load[m.to] += x.load;
            }
            let max_after = load.iter().cloned().fold(0.0, f64::max);
            prop_assert!(max_after <= max_before.max(SPREAD_ABOVE) + 1e-9);
        }
    }
}
