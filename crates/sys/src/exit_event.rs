//! Exit events for `vhost-user-backend`'s worker threads that do not leak.
//!
//! The crate (0.24) registers the consumer end a back end hands it
//! (`VhostUserBackend::exit_event`) in its epoll set through
//! `into_raw_fd` and never closes it: one descriptor lost per worker
//! thread per connection, which a front end that reconnects in a loop
//! turns into `EMFILE` for the whole switch. The event here is a pipe
//! (vmm-sys-util's consumer and notifier work on either), because a pipe
//! has an inode of its own: once the crate's handler is gone, the read
//! end is closed only if that descriptor number still names this pipe, so
//! a crate that closes it itself one day costs nothing.

use std::io;
use std::os::fd::{FromRawFd, RawFd};
use vmm_sys_util::event::{EventConsumer, EventNotifier};

/// The read end the crate keeps, as it was when handed over.
#[derive(Debug)]
pub struct LeakedConsumer {
    fd: RawFd,
    dev: u64,
    ino: u64,
}

fn identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat only writes into `st`; a closed or reused number is
    // answered (EBADF, or another file's identity), never acted on.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}

/// A consumer and notifier over one new pipe (non-blocking, close on
/// exec), and the record that closes the consumer's descriptor later.
pub fn exit_event() -> io::Result<(EventConsumer, EventNotifier, LeakedConsumer)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let (dev, ino) = identity(fds[0]).ok_or_else(io::Error::last_os_error)?;
    // SAFETY: both descriptors were just created and are owned by nobody
    // else; each is wrapped exactly once.
    let (consumer, notifier) = unsafe {
        (
            EventConsumer::from_raw_fd(fds[0]),
            EventNotifier::from_raw_fd(fds[1]),
        )
    };
    Ok((
        consumer,
        notifier,
        LeakedConsumer {
            fd: fds[0],
            dev,
            ino,
        },
    ))
}

impl LeakedConsumer {
    /// Closes the consumer's descriptor if it is still open on the same
    /// pipe. Call only once whoever was handed the consumer is gone (the
    /// crate's handler dropped, its threads joined).
    pub fn close(self) {
        if identity(self.fd) == Some((self.dev, self.ino)) {
            // SAFETY: the number still names the pipe this record made
            // (same device and inode), whose consumer was turned into a raw
            // descriptor and abandoned by its only user, now gone; nothing
            // else holds this number, so it is closed exactly once.
            unsafe { libc::close(self.fd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, IntoRawFd};

    #[test]
    fn notify_wakes_the_consumer_and_an_abandoned_read_end_is_closed() {
        let (c, n, leaked) = exit_event().unwrap();
        n.notify().unwrap();
        c.consume().unwrap();
        let raw = c.into_raw_fd(); // as the crate does
        let pipe = Some((leaked.dev, leaked.ino));
        assert_eq!(identity(raw), pipe);
        leaked.close();
        // Closed (the number may since name another test's file).
        assert_ne!(identity(raw), pipe);
    }

    #[test]
    fn a_number_reused_by_another_file_is_left_alone() {
        let (c, _n, leaked) = exit_event().unwrap();
        let raw = c.as_raw_fd();
        drop(c); // closed by its owner after all
        let other = std::fs::File::open("/dev/null").unwrap();
        leaked.close();
        if other.as_raw_fd() == raw {
            assert!(identity(raw).is_some(), "the reused number stays open");
        }
        drop(other);
    }
}
