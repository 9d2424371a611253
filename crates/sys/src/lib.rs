//! Thin wrappers over the Linux calls hvnet needs that the standard library
//! does not offer: opening TAP queues (`TUNSETIFF` with `IFF_VNET_HDR` and
//! `IFF_MULTI_QUEUE`), setting the virtio-net header size and the offloads
//! the kernel may hand us (`TUNSETVNETHDRSZ`, `TUNSETOFFLOAD`), and `poll`.
//!
//! This is the only hvnet crate allowed `unsafe`. Every block has a
//! `SAFETY:` note. File descriptors are wrapped in `OwnedFd` as soon as the
//! kernel returns them, so they are closed exactly once; reads and vectored
//! writes then go through `std::fs::File` (plain `read(2)` / `writev(2)`).
//!
//! The ioctl numbers and flag values are those of `include/uapi/linux/if_tun.h`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub mod exit_event;
pub mod netns;
pub mod packet;
pub mod scm;
pub mod uring;
pub use packet::{
    open_senders, open_uplink, recv_frames_aux, send_frames, set_fanout_program, socket_drops,
    AuxStatus, BpfInsn, Fanout, PacketError, RxHeader, SEND_BATCH,
};
pub use uring::BatchWriter;
/// epoll(7), as rust-vmm wraps it (the datapath workers sleep in it).
pub use vmm_sys_util::epoll;
/// eventfd(2), as rust-vmm wraps it.
pub use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// `TUNSETIFF` = `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `TUNSETPERSIST` = `_IOW('T', 203, int)`.
const TUNSETPERSIST: libc::c_ulong = 0x4004_54cb;
/// `TUNSETOFFLOAD` = `_IOW('T', 208, unsigned int)`.
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
/// `TUNSETVNETHDRSZ` = `_IOW('T', 216, int)`.
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;

const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
/// `IFF_TUN_EXCL` (0x8000): the device must be new.
const IFF_TUN_EXCL: libc::c_short = 0x8000u16 as libc::c_short;

/// `TUNSETOFFLOAD` flags: what the kernel may hand us from the guest.
pub mod offload {
    /// Partial checksums (`NEEDS_CSUM`).
    pub const CSUM: u32 = 0x01;
    /// TCP segmentation offload, IPv4.
    pub const TSO4: u32 = 0x02;
    /// TCP segmentation offload, IPv6.
    pub const TSO6: u32 = 0x04;
    /// TSO with ECN (CWR) bits.
    pub const TSO_ECN: u32 = 0x08;
    /// UDP segmentation offload, IPv4.
    pub const USO4: u32 = 0x20;
    /// UDP segmentation offload, IPv6.
    pub const USO6: u32 = 0x40;
    /// GSO frames inside a UDP tunnel (Linux 6.17; needs a 24-byte header).
    pub const UDP_TUNNEL_GSO: u32 = 0x80;
    /// ... whose outer UDP checksum is partial.
    pub const UDP_TUNNEL_GSO_CSUM: u32 = 0x100;
}

/// Builds the `struct ifreq` for `TUNSETIFF` (name and flags only).
struct IfReqBuilder {
    req: libc::ifreq,
}

impl IfReqBuilder {
    fn new(name: &str) -> io::Result<IfReqBuilder> {
        let c = CString::new(name).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL byte")
        })?;
        let bytes = c.as_bytes_with_nul();
        if bytes.len() > libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "interface name longer than 15 bytes",
            ));
        }
        // SAFETY: ifreq is a plain C struct (arrays and a union of plain
        // data); all-zero is a valid value for it.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        Ok(IfReqBuilder { req })
    }

    fn flags(mut self, flags: libc::c_short) -> Self {
        self.req.ifr_ifru.ifru_flags = flags;
        self
    }

    fn name(&self) -> String {
        let raw: Vec<u8> = self
            .req
            .ifr_name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&raw).into_owned()
    }
}

/// A file descriptor that carries one frame, behind a 12-byte virtio-net
/// header, per `read(2)` and per `writev(2)`: a queue of a TAP device, or
/// an uplink's AF_PACKET socket ([`packet`]).
#[derive(Debug)]
pub struct FrameQueue {
    file: File,
    name: String,
}

impl FrameQueue {
    /// Opens (creating if needed) queue of TAP device `name` with
    /// `IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | IFF_MULTI_QUEUE`. Open it once
    /// per queue. Needs CAP_NET_ADMIN.
    pub fn open_tap(name: &str) -> io::Result<FrameQueue> {
        FrameQueue::open_tap_flags(name, 0)
    }

    /// As [`FrameQueue::open_tap`], for a device that must not exist yet
    /// (`IFF_TUN_EXCL`: `EBUSY` if one of that name does), so that hvnet
    /// never takes over someone else's TAP.
    pub fn open_new_tap(name: &str) -> io::Result<FrameQueue> {
        FrameQueue::open_tap_flags(name, IFF_TUN_EXCL)
    }

    fn open_tap_flags(name: &str, extra: libc::c_short) -> io::Result<FrameQueue> {
        let path = CString::new("/dev/net/tun").expect("static path");
        // SAFETY: `path` is a valid NUL-terminated string; open has no other
        // preconditions. The result is checked before use.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut req = IfReqBuilder::new(name)?
            .flags(IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | IFF_MULTI_QUEUE | extra);
        // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `req`
        // is, and it lives for the duration of the call.
        let r = unsafe {
            libc::ioctl(
                owned.as_raw_fd(),
                TUNSETIFF,
                &mut req.req as *mut libc::ifreq,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(FrameQueue {
            name: req.name(),
            file: File::from(owned),
        })
    }

    /// A TAP queue from an fd someone else opened (for tests that use a
    /// socketpair instead of a TAP, and for fuzzing).
    pub fn from_fd(fd: OwnedFd, name: &str) -> FrameQueue {
        FrameQueue {
            file: File::from(fd),
            name: name.to_string(),
        }
    }

    /// The interface name the kernel gave the device.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the virtio-net header size (10 or 12).
    pub fn set_vnet_hdr_size(&self, size: i32) -> io::Result<()> {
        let v: libc::c_int = size;
        // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, which
        // points at `v` for the duration of the call.
        let r = unsafe {
            libc::ioctl(
                self.file.as_raw_fd(),
                TUNSETVNETHDRSZ,
                &v as *const libc::c_int,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Tells the kernel which offloads it may use in frames it hands us
    /// (TUN_F_* flags); the guest's `ethtool -k` then shows them on.
    pub fn set_offload(&self, flags: u32) -> io::Result<()> {
        // SAFETY: TUNSETOFFLOAD takes its argument by value (an unsigned
        // long); no memory is passed.
        let r =
            unsafe { libc::ioctl(self.file.as_raw_fd(), TUNSETOFFLOAD, flags as libc::c_ulong) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Makes the TAP device outlive its queues' file descriptors (or not):
    /// a persistent device keeps its name, MAC, addresses and namespace
    /// while no process holds it, so a restarted switch re-attaches to it.
    pub fn set_persist(&self, on: bool) -> io::Result<()> {
        // SAFETY: TUNSETPERSIST takes its argument by value; no memory is
        // passed.
        let r = unsafe {
            libc::ioctl(
                self.file.as_raw_fd(),
                TUNSETPERSIST,
                libc::c_ulong::from(on),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Switches O_NONBLOCK on or off.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        set_nonblocking(self.file.as_raw_fd(), on)
    }

    /// The file, for `read` and `write_vectored`.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The raw fd, for `poll`.
    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Asks the CPU to start bringing the cache line at `p` into its caches
/// (`PREFETCHT0`), as DPDK's `rte_prefetch0`: a guest's buffer its front
/// end just wrote on another core is then on its way while the frames
/// before it are worked. No effect on what any thread sees; a no-op on
/// other architectures.
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing into the program,
    // never faults (an address outside the mappings is ignored), and SSE,
    // which it needs, is part of every x86_64 CPU.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Sets or clears O_NONBLOCK on an fd.
pub fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFL takes no argument and only reads the fd's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: F_SETFL takes an int of flags by value.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until `fd` is readable or `timeout_ms` passes (-1: forever).
/// Returns true when readable; POLLHUP/POLLERR also count as readable so
/// that the caller's read reports the condition.
pub fn poll_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd, count 1, lives across the call.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(r > 0);
    }
}

/// Sets the process's file mode creation mask, so that files and sockets
/// are created with their final permissions (no window before a chmod).
pub fn set_umask(mask: u32) {
    // SAFETY: umask takes a mode by value, touches no memory and cannot
    // fail.
    unsafe { libc::umask(mask as libc::mode_t) };
}

/// Gives up root for good: supplementary groups cleared, then the group and
/// user ids set to `gid` and `uid` (real, effective and saved). Leaving uid
/// 0 clears every capability. glibc applies these calls to every thread of
/// the process, so threads already running lose them too.
pub fn drop_to(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: a size of 0 with a null list is setgroups' documented way to
    // clear the supplementary groups; no memory is read.
    if unsafe { libc::setgroups(0, std::ptr::null()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: setresgid and setresuid take ids by value and touch no
    // memory.
    if unsafe { libc::setresgid(gid, gid, gid) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::setresuid(uid, uid, uid) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Restores the default action of SIGPIPE (Rust ignores it), so that a
/// command whose reader went away (`hvnet ports | head -1`) ends quietly,
/// as other command-line tools do, instead of failing to print.
pub fn default_sigpipe() {
    // SAFETY: installing SIG_DFL for SIGPIPE passes no handler code and
    // touches no memory.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// A task's `schedstat` (`/proc/PID/task/TID/schedstat`): nanoseconds on
/// a CPU and nanoseconds runnable but waiting for one (esxtop's %RDY);
/// `None` for a task that is gone.
pub fn schedstat(path: &std::path::Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut f = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

/// Clock ticks per second, the unit of `/proc/PID/stat`'s CPU times.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf takes a constant by value and touches no memory.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// True when running as root (effective user id 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The calling thread's kernel thread id (what `/proc/PID/task/` lists and
/// what cgroups and `top -H` take).
pub fn gettid() -> i32 {
    // SAFETY: gettid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::gettid() }
}

/// A connected pair of datagram sockets, standing in for a TAP queue in
/// tests that need no root (one datagram = one frame, as on a TAP).
pub fn frame_socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: socketpair writes two fds into the 2-element array.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just returned by socketpair and are unowned.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn socketpair_keeps_frame_boundaries() {
        let (a, b) = frame_socketpair().unwrap();
        let qa = FrameQueue::from_fd(a, "pair0");
        let qb = FrameQueue::from_fd(b, "pair1");
        qa.file().write_all(b"frame one").unwrap();
        qa.file().write_all(b"two").unwrap();
        assert!(poll_readable(qb.raw_fd(), 1000).unwrap());
        let mut buf = [0u8; 64];
        assert_eq!(qb.file().read(&mut buf).unwrap(), 9);
        assert_eq!(qb.file().read(&mut buf).unwrap(), 3);
        qb.set_nonblocking(true).unwrap();
        assert_eq!(
            qb.file().read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    #[test]
    fn long_interface_name_is_refused() {
        assert!(IfReqBuilder::new("a-name-that-is-too-long").is_err());
        assert_eq!(IfReqBuilder::new("tap0").unwrap().name(), "tap0");
    }
}

/// Bytes of the CPU masks [`allowed_cpus`] and [`pin_to_cpu`] pass (1,024
/// CPUs, glibc's `cpu_set_t`).
const CPU_MASK_WORDS: usize = 16;

/// The CPUs the calling thread may run on (`sched_getaffinity(2)`), in
/// order: what `taskset -p` shows, and the default home of the switch's
/// workers.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let mut mask = [0u64; CPU_MASK_WORDS];
    // SAFETY: the kernel writes at most `size_of_val(&mask)` bytes into the
    // array, which lives across the call.
    let r = unsafe {
        libc::sched_getaffinity(
            0,
            std::mem::size_of_val(&mask),
            mask.as_mut_ptr().cast::<libc::cpu_set_t>(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..CPU_MASK_WORDS * 64)
        .filter(|&c| mask[c / 64] & (1 << (c % 64)) != 0)
        .collect())
}

/// Pins the calling thread to CPU `cpu` (`sched_setaffinity(2)` with one
/// CPU), as Open vSwitch pins a poll-mode thread to its core.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= CPU_MASK_WORDS * 64 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut mask = [0u64; CPU_MASK_WORDS];
    mask[cpu / 64] |= 1 << (cpu % 64);
    // SAFETY: the kernel reads `size_of_val(&mask)` bytes from the array,
    // which lives across the call.
    let r = unsafe {
        libc::sched_setaffinity(
            0,
            std::mem::size_of_val(&mask),
            mask.as_ptr().cast::<libc::cpu_set_t>(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the calling thread's nice value (`setpriority(2)` on its thread
/// id: on Linux a nice value is per thread), the weight the scheduler
/// gives it against the other threads of its CPU.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: no pointers; the thread id names the calling thread.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, gettid() as libc::id_t, nice) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod cpu_tests {
    #[test]
    fn the_calling_thread_may_run_somewhere_and_pins_there() {
        let cpus = super::allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let first = cpus[0];
        std::thread::spawn(move || {
            super::pin_to_cpu(first).unwrap();
            assert_eq!(super::allowed_cpus().unwrap(), vec![first]);
        })
        .join()
        .unwrap();
        assert!(super::pin_to_cpu(1 << 20).is_err());
    }
}
