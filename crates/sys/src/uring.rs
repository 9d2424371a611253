//! Batched TAP I/O with io_uring: one system call moves many frames.
//!
//! A TAP gives one frame per `read(2)` and takes one per `writev(2)`, so at
//! wire-sized frames system calls, not copies, are the limit. A
//! [`BatchReader`] keeps many reads armed on a TAP queue (each completes
//! with one frame as it arrives) and collects what completed with one
//! `io_uring_enter` that also re-arms; a [`BatchWriter`] submits a batch of
//! vectored writes with one `io_uring_enter`.
//!
//! Memory safety rests on one rule, kept by these types: a buffer or iovec
//! handed to the kernel stays alive and unmoved until its completion has
//! been reaped. The reader owns its in-flight buffers (a `Vec<u8>`'s heap
//! block does not move when the `Vec` is moved) and, when dropped, cancels
//! and reaps every read before freeing them; the writer returns only after
//! reaping every write it submitted.

use io_uring::{opcode, squeue, types, IoUring};
use std::fs::File;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Reads from one TAP queue through io_uring.
pub struct BatchReader {
    ring: IoUring,
    file: File,
    slots: Vec<Option<Vec<u8>>>,
    in_flight: usize,
}

impl BatchReader {
    /// A reader over a duplicate of `file`'s descriptor, with up to `depth`
    /// reads armed. The descriptor is switched to blocking mode: io_uring
    /// then waits for frames itself instead of failing with EAGAIN.
    pub fn new(file: &File, depth: u32) -> io::Result<BatchReader> {
        let file = file.try_clone()?;
        crate::set_nonblocking(file.as_raw_fd(), false)?;
        Ok(BatchReader {
            ring: IoUring::new(depth.next_power_of_two() * 2)?,
            file,
            slots: (0..depth).map(|_| None).collect(),
            in_flight: 0,
        })
    }

    /// Reads armed now.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Arms a read into `buf` (its full length). Gives the buffer back when
    /// every slot is busy.
    pub fn arm(&mut self, mut buf: Vec<u8>) -> Result<(), Vec<u8>> {
        let Some(slot) = self.slots.iter().position(Option::is_none) else {
            return Err(buf);
        };
        let len = buf.len().min(u32::MAX as usize) as u32;
        let entry = opcode::Read::new(types::Fd(self.file.as_raw_fd()), buf.as_mut_ptr(), len)
            .build()
            .user_data(slot as u64);
        // SAFETY: the buffer's heap block is stored in `self.slots[slot]`
        // right below and is neither freed nor reallocated until this
        // read's completion is reaped in `wait` or `Drop`.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            return Err(buf);
        }
        self.slots[slot] = Some(buf);
        self.in_flight += 1;
        Ok(())
    }

    /// Submits the armed reads and waits up to `timeout` for at least one
    /// to complete; moves every completed read's buffer and result into
    /// `out` (the result is the frame length, or the read's error).
    pub fn wait(
        &mut self,
        timeout: Duration,
        out: &mut Vec<(Vec<u8>, io::Result<usize>)>,
    ) -> io::Result<()> {
        let ts = types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e)
                if e.raw_os_error() == Some(libc::ETIME)
                    || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        self.reap(out);
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<(Vec<u8>, io::Result<usize>)>) {
        for cqe in self.ring.completion() {
            let slot = cqe.user_data() as usize;
            let Some(buf) = self.slots.get_mut(slot).and_then(Option::take) else {
                continue;
            };
            self.in_flight -= 1;
            let r = cqe.result();
            out.push((
                buf,
                if r < 0 {
                    Err(io::Error::from_raw_os_error(-r))
                } else {
                    Ok(r as usize)
                },
            ));
        }
    }
}

impl Drop for BatchReader {
    fn drop(&mut self) {
        // Cancel every armed read and reap it before the buffers are freed.
        for slot in 0..self.slots.len() {
            if self.slots[slot].is_some() {
                let e = opcode::AsyncCancel::new(slot as u64)
                    .build()
                    .user_data(u64::MAX);
                // SAFETY: a cancel request references no memory.
                let _ = unsafe { self.ring.submission().push(&e) };
            }
        }
        let mut sink = Vec::new();
        let mut spins = 0;
        while self.in_flight > 0 && spins < 1000 {
            let _ = self.wait(Duration::from_millis(10), &mut sink);
            spins += 1;
        }
        if self.in_flight > 0 {
            // The kernel still holds buffers: leak them rather than free
            // memory it may write to.
            for b in self.slots.iter_mut().filter_map(Option::take) {
                std::mem::forget(b);
            }
        }
    }
}

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
    use std::io::{Read, Write};

    fn pair() -> (File, File) {
        let (a, b) = crate::frame_socketpair().unwrap();
        (File::from(a), File::from(b))
    }

    #[test]
    fn reader_collects_many_frames_per_call() {
        let (a, b) = pair();
        let mut r = BatchReader::new(&b, 8).unwrap();
        for _ in 0..8 {
            r.arm(vec![0u8; 2048]).unwrap();
        }
        assert!(r.arm(vec![0u8; 16]).is_err(), "all slots busy");
        for i in 0..5u8 {
            (&a).write_all(&[i; 100]).unwrap();
        }
        let mut out = Vec::new();
        while out.len() < 5 {
            r.wait(Duration::from_secs(2), &mut out).unwrap();
        }
        let mut got: Vec<u8> = out
            .iter()
            .map(|(b, n)| {
                assert_eq!(*n.as_ref().unwrap(), 100);
                b[0]
            })
            .collect();
        got.sort();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        assert_eq!(r.in_flight(), 3);
        drop(r); // cancels and reaps the three still armed
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
