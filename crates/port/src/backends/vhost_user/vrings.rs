//! The guest's virtqueues as the datapath's threads reach them: the kick
//! eventfds, kicks turned on and off, polling a transmit queue, waiting
//! for receive buffers, signalling the guest, and writing frames into its
//! receive queue.

use super::virtq::{self, VirtqError};
use super::{Memory, VhostUserPort, VringRwLock};
use std::io::IoSlice;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use vhost_user_backend::VringT;
use virtio_queue::QueueT;
use vm_memory::GuestAddressSpace;

impl VhostUserPort {
    /// The eventfd that becomes readable when the guest kicks transmit
    /// queue `q` (the ingress worker polls it).
    pub fn tx_kick_fd(&self, q: usize) -> RawFd {
        self.sh.tx_kick[q].0.as_raw_fd()
    }

    /// The eventfd that becomes readable when the guest posts receive
    /// buffers on queue `q`.
    pub fn rx_kick_fd(&self, q: usize) -> RawFd {
        self.sh.rx_kick[q].0.as_raw_fd()
    }

    /// Clears the kick eventfds of queue `q` after a wake-up.
    pub fn consume_kicks(&self, q: usize) {
        let _ = self.sh.tx_kick[q].0.consume();
        let _ = self.sh.rx_kick[q].0.consume();
    }

    pub(crate) fn vring(&self, index: usize) -> Option<(VringRwLock, Memory)> {
        if !self.is_connected() {
            return None;
        }
        let v = self.sh.vrings.read().expect("vrings lock")[index].clone()?;
        let mem = self.sh.mem.read().expect("mem lock").clone()?;
        Some((v, mem))
    }

    /// Makes the guest's transmit queue `q` kick again when it has more
    /// (before the worker sleeps); true if frames arrived meanwhile.
    pub fn enable_tx_kicks(&self, q: usize) -> bool {
        self.set_kicks(2 * q + 1, true)
    }

    /// Asks the guest to kick virtqueue `index` when it makes buffers
    /// available, or not to; on, true if some arrived meanwhile.
    fn set_kicks(&self, index: usize, on: bool) -> bool {
        let Some((vring, mem)) = self.vring(index) else {
            return false;
        };
        let st = vring.get_ref();
        virtq::set_kicks(st.get_queue(), &mem.memory(), self.layout(), on)
    }

    /// Watches the guest's transmit queue `q` for up to `budget` without
    /// a system call or a kick; true as soon as it holds a chain not yet
    /// taken. The vring stays read-locked meanwhile (the protocol's
    /// messages wait at most the budget).
    pub fn poll_tx(&self, q: usize, budget: std::time::Duration) -> bool {
        let Some((vring, mem)) = self.vring(2 * q + 1) else {
            return false;
        };
        let st = vring.get_ref();
        virtq::wait_available(st.get_queue(), &mem.memory(), self.layout(), budget)
    }

    /// No kicks while the worker is reading anyway.
    pub fn disable_tx_kicks(&self, q: usize) {
        self.set_kicks(2 * q + 1, false);
    }

    /// Waits up to `timeout` for the guest to post receive buffers on
    /// queue `q` (its receive virtqueue was full); true if it may have.
    /// The guest is asked to kick when it adds buffers.
    pub fn wait_for_room(&self, q: usize, timeout: std::time::Duration) -> bool {
        if self.vring(2 * q).is_none() {
            return false;
        }
        // Tell the guest what it has received so far (it frees buffers
        // only once it knows), then ask for a kick on new buffers.
        self.signal_receive(q);
        if self.set_kicks(2 * q, true) {
            return true;
        }
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        let ready = hvnet_sys::poll_readable(self.rx_kick_fd(q), ms).unwrap_or(false);
        let _ = self.sh.rx_kick[q].0.consume();
        ready
    }

    /// The receive side publishes a frame's chains in one step (see
    /// [`virtq::write_frame`]), outside the crate's count of what was
    /// added: whether the guest wants a signal is decided from the used
    /// index at the last signal.
    pub(crate) fn signal_receive(&self, q: usize) {
        let Some((vring, mem)) = self.vring(2 * q) else {
            return;
        };
        let st = vring.get_ref();
        let queue = st.get_queue();
        let layout = self.layout();
        let old = self.sh.rx_signalled[q].load(Ordering::Relaxed);
        let now = virtq::used_mark(queue, layout);
        if now == old {
            return;
        }
        if virtq::wants_signal(queue, &mem.memory(), layout, old) {
            let _ = st.signal_used_queue();
        }
        self.sh.rx_signalled[q].store(now, Ordering::Relaxed);
    }

    /// Writes frames (each virtio-net header first) into the guest's
    /// receive queue `q` — each into one descriptor chain, or as many as
    /// it needs when the guest takes mergeable buffers; nothing of a frame
    /// when the guest has too few buffers — under one lock of the
    /// virtqueue, reporting each result to
    /// `done` in order; stops after the first frame that finds the ring
    /// full (the caller may wait for room and go on from there). Returns
    /// how many frames were reported.
    pub fn write_batch(
        &self,
        q: usize,
        frames: &[&[IoSlice<'_>]],
        tails: &[Option<&crate::pool::Pending>],
        done: &mut dyn FnMut(Result<(), VirtqError>),
    ) -> usize {
        let Some((vring, mem)) = self.vring(2 * q) else {
            frames.iter().for_each(|_| done(Err(VirtqError::NotReady)));
            return frames.len();
        };
        let mergeable = self.guest_offloads().mergeable;
        let mut st = vring.get_mut();
        if !st.get_queue().ready() || !st.is_enabled() {
            frames.iter().for_each(|_| done(Err(VirtqError::NotReady)));
            return frames.len();
        }
        let guard = mem.memory();
        virtq::write_batch_from(
            st.get_queue_mut(),
            &guard,
            self.layout(),
            frames,
            tails,
            mergeable,
            done,
        )
    }
}
