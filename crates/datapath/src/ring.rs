//! A guest receive queue's rings, modelled on VMXNET3: ring 1 holds small
//! buffers (the first buffer of every frame), ring 2 holds large buffers
//! (4 KiB pages for the rest of jumbo and coalesced frames). A frame needs
//! one ring-1 buffer plus as many ring-2 buffers as its bytes past the first
//! buffer fill. When either ring lacks the buffers, the frame is dropped and
//! counted as "ring 1 full" or "ring 2 full", as VMXNET3 counts them.
//!
//! Buffers return to the rings when the queue's delivery thread (the VM's
//! "vCPU") has written the frame into the guest.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Size of one ring-2 buffer.
pub const RING2_BUF: usize = 4096;
/// Largest ring size (VMXNET3's maximum).
pub const MAX_RING: usize = 4096;

/// The ring-1 buffer size for an MTU: the whole frame up to a standard MTU,
/// the first 3 KiB of a jumbo frame.
pub fn ring1_buf_size(mtu: u16) -> usize {
    if mtu <= 1500 {
        1536
    } else {
        3072
    }
}

/// Buffers a frame of `len` bytes takes: (ring 1, ring 2).
pub fn buffers_for(len: usize, ring1_buf: usize) -> (usize, usize) {
    if len <= ring1_buf {
        (1, 0)
    } else {
        (1, (len - ring1_buf).div_ceil(RING2_BUF))
    }
}

/// Which ring refused a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// Not enough ring-1 buffers.
    Ring1,
    /// Not enough ring-2 buffers.
    Ring2,
}

struct Inner<T> {
    items: VecDeque<(T, usize, usize)>,
    used1: usize,
    used2: usize,
    size1: usize,
    size2: usize,
}

/// The rings of one guest receive queue.
pub struct Rings<T> {
    inner: Mutex<Inner<T>>,
    ready: Condvar,
}

/// Occupancy, for `rxqueues/N/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RingStatus {
    /// Ring 1 size (buffers).
    pub ring1_size: usize,
    /// Ring 2 size (buffers).
    pub ring2_size: usize,
    /// Ring 1 buffers holding frames not yet delivered.
    pub ring1_used: usize,
    /// Ring 2 buffers holding frames not yet delivered.
    pub ring2_used: usize,
    /// Frames waiting.
    pub frames_queued: usize,
}

impl<T> Rings<T> {
    /// Rings of the given sizes (in buffers).
    pub fn new(size1: usize, size2: usize) -> Rings<T> {
        Rings {
            inner: Mutex::new(Inner {
                items: VecDeque::new(),
                used1: 0,
                used2: 0,
                size1,
                size2,
            }),
            ready: Condvar::new(),
        }
    }

    /// Places a frame needing `(r1, r2)` buffers, or gives it back with the
    /// ring that is full.
    pub fn push(&self, item: T, r1: usize, r2: usize) -> Result<(), (T, Full)> {
        let mut g = self.inner.lock().expect("ring lock");
        if g.used1 + r1 > g.size1 {
            return Err((item, Full::Ring1));
        }
        if g.used2 + r2 > g.size2 {
            return Err((item, Full::Ring2));
        }
        g.used1 += r1;
        g.used2 += r2;
        g.items.push_back((item, r1, r2));
        drop(g);
        self.ready.notify_one();
        Ok(())
    }

    /// Waits up to `timeout` for frames and moves up to `max` of them into
    /// `out`, with their buffer counts (to pass to [`Rings::release`] once
    /// delivered).
    pub fn pop_batch(&self, out: &mut Vec<(T, usize, usize)>, max: usize, timeout: Duration) {
        let mut g = self.inner.lock().expect("ring lock");
        if g.items.is_empty() {
            g = self.ready.wait_timeout(g, timeout).expect("ring lock").0;
        }
        let n = g.items.len().min(max);
        out.extend(g.items.drain(..n));
    }

    /// Returns delivered frames' buffers to the rings.
    pub fn release(&self, r1: usize, r2: usize) {
        let mut g = self.inner.lock().expect("ring lock");
        g.used1 -= r1.min(g.used1);
        g.used2 -= r2.min(g.used2);
    }

    /// Resizes at run time; buffers in use stay in use (a ring shrunk below
    /// its use drains before it accepts again).
    pub fn resize(&self, size1: usize, size2: usize) {
        let mut g = self.inner.lock().expect("ring lock");
        g.size1 = size1;
        g.size2 = size2;
    }

    /// Current sizes and use.
    pub fn status(&self) -> RingStatus {
        let g = self.inner.lock().expect("ring lock");
        RingStatus {
            ring1_size: g.size1,
            ring2_size: g.size2,
            ring1_used: g.used1,
            ring2_used: g.used2,
            frames_queued: g.items.len(),
        }
    }

    /// Takes every waiting frame out (when the port goes down).
    pub fn drain(&self) -> Vec<T> {
        let mut g = self.inner.lock().expect("ring lock");
        g.used1 = 0;
        g.used2 = 0;
        g.items.drain(..).map(|(t, _, _)| t).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_for_frames() {
        assert_eq!(buffers_for(60, 1536), (1, 0));
        assert_eq!(buffers_for(1514, 1536), (1, 0));
        assert_eq!(buffers_for(9014, 3072), (1, 2));
        assert_eq!(
            buffers_for(65226, 1536),
            (1, 16),
            "a 64 KiB LRO frame takes 16 ring-2 pages"
        );
    }

    #[test]
    fn full_rings_refuse_and_release_frees() {
        let r: Rings<u32> = Rings::new(2, 16);
        r.push(1, 1, 0).unwrap();
        r.push(2, 1, 16).unwrap();
        assert_eq!(r.push(3, 1, 0).unwrap_err().1, Full::Ring1);
        let mut out = Vec::new();
        r.pop_batch(&mut out, 8, Duration::from_millis(1));
        assert_eq!(out.len(), 2);
        r.release(1, 0);
        assert_eq!(r.push(4, 1, 1).unwrap_err().1, Full::Ring2);
        r.release(1, 16);
        r.push(4, 1, 1).unwrap();
        r.resize(4096, 4096);
        assert_eq!(r.status().ring1_size, 4096);
        assert_eq!(r.drain(), vec![4]);
    }
}
