//! Messages with file descriptors attached (`SCM_RIGHTS`) on a Unix stream
//! socket: what vhost-user's control messages carry (memory regions,
//! kick and call eventfds).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Most descriptors one message carries (vhost-user sends at most 8, one
/// per memory region).
pub const MAX_FDS: usize = 8;

/// Receives up to `buf.len()` bytes and the descriptors attached to them.
/// `Ok((0, _))` is the end of the stream.
pub fn recv_with_fds(sock: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) };
    let mut control = vec![0u8; space as usize];
    // SAFETY: an all-zero msghdr is a valid value; its pointers are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len();
    let n = loop {
        // SAFETY: `msg` points at `iov` (over `buf`) and `control`, both
        // live and writable for the lengths given.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: `msg` was filled by recvmsg; the CMSG macros walk its control
    // buffer within `msg_controllen`.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        // SAFETY: `c` is a control message header inside `control`.
        let (level, kind, len) = unsafe { ((*c).cmsg_level, (*c).cmsg_type, (*c).cmsg_len) };
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN(0) is the header's size; the data follows.
            let data_len = len - unsafe { libc::CMSG_LEN(0) } as usize;
            let count = data_len / std::mem::size_of::<RawFd>();
            // SAFETY: CMSG_DATA points at `count` descriptors the kernel
            // wrote into this message.
            let data = unsafe { libc::CMSG_DATA(c) } as *const RawFd;
            for i in 0..count {
                // SAFETY: within the message's data (above); each received
                // descriptor is new and owned by this process alone.
                fds.push(unsafe { OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))) });
            }
        }
        // SAFETY: as above, within `control`.
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    Ok((n, fds))
}

/// Sends all of `data` with `fds` attached to its first byte.
pub fn send_with_fds(sock: &UnixStream, data: &[u8], fds: &[OwnedFd]) -> io::Result<()> {
    let mut sent = 0;
    let mut fds_left = fds;
    while sent < data.len() {
        let mut iov = libc::iovec {
            iov_base: data[sent..].as_ptr() as *mut libc::c_void,
            iov_len: data.len() - sent,
        };
        let raw: Vec<RawFd> = fds_left.iter().map(|f| f.as_raw_fd()).collect();
        let bytes = std::mem::size_of_val(raw.as_slice());
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
        let mut control = vec![0u8; if raw.is_empty() { 0 } else { space }];
        // SAFETY: an all-zero msghdr is a valid value; its pointers are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !raw.is_empty() {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = control.len();
            // SAFETY: the control buffer has room for one header and
            // `raw`'s descriptors (CMSG_SPACE above).
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(bytes as u32) as usize;
                std::ptr::copy_nonoverlapping(raw.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), bytes);
            }
        }
        // SAFETY: `msg` points at `iov` (over `data`) and `control`, both
        // live for the call.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        sent += n as usize;
        fds_left = &[];
    }
    Ok(())
}
