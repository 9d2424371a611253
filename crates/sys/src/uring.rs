//! Batched TAP I/O with io_uring: one system call moves many frames.
//!
//! A TAP takes one frame per `writev(2)`, so at wire-sized frames system
//! calls, not copies, are the limit. A [`BatchWriter`] submits a batch of
//! vectored writes with one `io_uring_enter`. (Reads through io_uring were
//! measured worse than reading until the queue is empty, and were removed
//! with the two-size-class reads of the datapath rework:
//! `docs/perf/live-switch.md`.)
//!
//! Memory safety rests on one rule, kept by this type: an iovec and the
//! memory it points to, handed to the kernel, stay alive and unmoved until
//! the write's completion has been reaped. The writer returns only after
//! reaping every write it submitted, and never frees what the kernel may
//! still read.

use io_uring::{opcode, squeue, types, IoUring};
use std::fs::File;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;

/// Writes batches of frames to one TAP queue through io_uring.
pub struct BatchWriter {
    ring: IoUring,
    file: File,
    depth: usize,
}

impl BatchWriter {
    /// A writer over a duplicate of `file`'s descriptor submitting up to
    /// `depth` writes per system call.
    pub fn new(file: &File, depth: u32) -> io::Result<BatchWriter> {
        let file = file.try_clone()?;
        Ok(BatchWriter {
            ring: IoUring::new(depth.next_power_of_two())?,
            file,
            depth: depth.next_power_of_two() as usize,
        })
    }

    /// Writes each frame (a list of pieces) with one vectored write, all of
    /// them with as few system calls as the ring depth allows. Returns each
    /// write's result, in order.
    pub fn write_batch(
        &mut self,
        frames: &[&[IoSlice<'_>]],
        results: &mut Vec<io::Result<usize>>,
    ) -> io::Result<()> {
        results.clear();
        for chunk in frames.chunks(self.depth) {
            let base = results.len();
            results.extend(chunk.iter().map(|_| Ok(0)));
            let mut pushed = 0;
            for (i, iov) in chunk.iter().enumerate() {
                let e = opcode::Writev::new(
                    types::Fd(self.file.as_raw_fd()),
                    iov.as_ptr().cast(),
                    iov.len() as u32,
                )
                .build()
                .flags(squeue::Flags::empty())
                .user_data(i as u64);
                // SAFETY: `IoSlice` is ABI-compatible with `struct iovec`;
                // the iovec arrays and the memory they point to are borrowed
                // from `frames`, which outlives this call, and every write
                // pushed here is reaped below before returning.
                if unsafe { self.ring.submission().push(&e) }.is_err() {
                    break;
                }
                pushed += 1;
            }
            let (mut submitted, mut reaped, mut failures) = (0, 0, 0);
            while reaped < pushed {
                match self.ring.submit_and_wait(pushed - reaped) {
                    Ok(n) => submitted += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        failures += 1;
                        if submitted == reaped || failures > 100 {
                            if submitted != reaped {
                                // Writes to a TAP complete inside the
                                // submitting call; this is not expected.
                                // Never free what the kernel may read.
                                std::mem::forget(std::mem::replace(
                                    &mut self.ring,
                                    IoUring::new(self.depth as u32)?,
                                ));
                            } else {
                                // Nothing in flight: a fresh ring drops the
                                // entries that were never submitted.
                                self.ring = IoUring::new(self.depth as u32)?;
                            }
                            return Err(e);
                        }
                    }
                }
                for cqe in self.ring.completion() {
                    let i = cqe.user_data() as usize;
                    let r = cqe.result();
                    results[base + i] = if r < 0 {
                        Err(io::Error::from_raw_os_error(-r))
                    } else {
                        Ok(r as usize)
                    };
                    reaped += 1;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn pair() -> (File, File) {
        let (a, b) = crate::frame_socketpair().unwrap();
        (File::from(a), File::from(b))
    }

    #[test]
    fn writer_sends_each_frame_whole() {
        let (a, b) = pair();
        let mut w = BatchWriter::new(&a, 4).unwrap();
        let hdr = [7u8; 3];
        let bodies: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 50 + i as usize]).collect();
        let iovs: Vec<[IoSlice<'_>; 2]> = bodies
            .iter()
            .map(|body| [IoSlice::new(&hdr), IoSlice::new(body)])
            .collect();
        let frames: Vec<&[IoSlice<'_>]> = iovs.iter().map(|x| &x[..]).collect();
        let mut results = Vec::new();
        w.write_batch(&frames, &mut results).unwrap();
        assert_eq!(results.len(), 10);
        let mut buf = [0u8; 256];
        for i in 0..10u8 {
            assert_eq!(*results[i as usize].as_ref().unwrap(), 53 + i as usize);
            let n = (&b).read(&mut buf).unwrap();
            assert_eq!(n, 53 + i as usize);
            assert_eq!(buf[3], i);
        }
    }
}
