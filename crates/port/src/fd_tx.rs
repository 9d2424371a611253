//! Writing frames to a file descriptor queue — a TAP queue or an uplink's
//! packet socket — behind the virtio-net header, with the fewest system
//! calls the descriptor allows: `sendmmsg(2)` for a socket (a batch per
//! call), io_uring writes for a TAP when asked for, else one `writev(2)`
//! per frame (a TAP takes one frame per write).

use crate::device::Transmitter;
use crate::outgoing::SendError;
use crate::outgoing::{BatchOptions, OutFrame, Slices, Written};
use hvnet_sys::{BatchWriter, FrameQueue};
use std::io::{self, IoSlice};
use std::sync::Arc;

/// How a queue's batches are written.
enum Batching {
    /// One `writev` per frame.
    Writev,
    /// One `sendmmsg` per batch (packet sockets).
    Mmsg,
    /// Through io_uring (TAP queues, `HVNET_IO_WRITE=uring`).
    Uring(Box<BatchWriter>, Vec<io::Result<usize>>),
}

/// A transmitter over the queue `queue` returns from its device.
pub(crate) struct FdTransmitter<D> {
    dev: Arc<D>,
    queue: fn(&D, usize) -> &FrameQueue,
    q: usize,
    batching: Batching,
    slices: Slices,
}

impl<D: Send + Sync + 'static> FdTransmitter<D> {
    /// Writes frame by frame (or through io_uring when `uring`, if the
    /// ring can be made; else frame by frame).
    pub(crate) fn writev(
        dev: Arc<D>,
        queue: fn(&D, usize) -> &FrameQueue,
        q: usize,
        uring: bool,
    ) -> FdTransmitter<D> {
        let batching = if uring {
            match BatchWriter::new(queue(&dev, q).file(), hvnet_sys::SEND_BATCH as u32) {
                Ok(w) => Batching::Uring(Box::new(w), Vec::new()),
                Err(_) => Batching::Writev,
            }
        } else {
            Batching::Writev
        };
        FdTransmitter {
            dev,
            queue,
            q,
            batching,
            slices: Slices::default(),
        }
    }

    /// Writes a batch per `sendmmsg` (the queue is a socket).
    pub(crate) fn mmsg(
        dev: Arc<D>,
        queue: fn(&D, usize) -> &FrameQueue,
        q: usize,
    ) -> FdTransmitter<D> {
        FdTransmitter {
            dev,
            queue,
            q,
            batching: Batching::Mmsg,
            slices: Slices::default(),
        }
    }
}

impl<D: Send + Sync + 'static> Transmitter for FdTransmitter<D> {
    fn send_batch(
        &mut self,
        frames: &[OutFrame<'_>],
        _how: BatchOptions,
        done: &mut dyn FnMut(Result<Written, SendError>),
    ) {
        let fq = (self.queue)(&self.dev, self.q);
        let batching = &mut self.batching;
        self.slices.write(frames, done, |slices, done| {
            write_slices(fq, batching, slices, done)
        });
    }
}

/// Writes frames serialised behind their virtio-net headers, as the
/// queue's batching says, telling `done` each one's result in order.
fn write_slices(
    fq: &FrameQueue,
    batching: &mut Batching,
    frames: &[&[IoSlice<'_>]],
    done: &mut dyn FnMut(Result<(), SendError>),
) {
    match batching {
        Batching::Writev => {
            for f in frames {
                done(crate::vnet::write_frame(fq, f).map_err(|_| SendError::Failed));
            }
        }
        Batching::Mmsg => {
            // A frame the kernel refused stops the call; it is counted
            // failed and the rest are tried again after it.
            let mut rest = frames;
            while !rest.is_empty() {
                let n = hvnet_sys::send_frames(fq, rest).unwrap_or(0);
                (0..n).for_each(|_| done(Ok(())));
                if n < rest.len() {
                    done(Err(SendError::Failed));
                    rest = &rest[n + 1..];
                } else {
                    rest = &[];
                }
            }
        }
        Batching::Uring(w, written) => {
            // Nothing is written twice: a batch that failed part-way
            // counts as failed writes for the frames it did not report
            // on (and a short write as a failed one, as `writev` does).
            let _ = w.write_batch(frames, written);
            let total = |f: &&[IoSlice<'_>]| f.iter().map(|s| s.len()).sum::<usize>();
            for (i, f) in frames.iter().enumerate() {
                let r = match written.get(i) {
                    Some(Ok(n)) if *n == total(f) => Ok(()),
                    _ => Err(SendError::Failed),
                };
                done(r);
            }
        }
    }
}
