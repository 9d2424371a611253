//! AF_PACKET sockets for uplinks: a socket bound to an existing interface
//! that reads and writes whole Ethernet frames with the same 12-byte
//! virtio-net header as a TAP queue (`PACKET_VNET_HDR` with
//! `PACKET_VNET_HDR_SZ`, Linux 6.2 and later). Frames the device already
//! coalesced (its GRO, the NIC's "hardware LRO") arrive whole with their
//! GSO metadata, and GSO frames written go to the device whole (its TSO,
//! or the kernel's GSO just before the driver), as Open vSwitch's
//! `netdev-linux` does with its AF_PACKET path.
//!
//! Several sockets of one interface form a fanout group
//! (`PACKET_FANOUT_HASH`): the kernel spreads received flows over them by
//! the flow hash, so each receive queue is read by its own thread and no
//! thread has to classify for the others.
//!
//! Constants are those of `include/uapi/linux/if_packet.h`.

use crate::FrameQueue;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SOL_PACKET: libc::c_int = 263;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_AUXDATA: libc::c_int = 8;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_VNET_HDR_SZ: libc::c_int = 24;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const PACKET_FANOUT_DATA: libc::c_int = 22;
const PACKET_FANOUT_HASH: u32 = 0;
const PACKET_FANOUT_CBPF: u32 = 6;
const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;
/// A fanout group takes its own word on outgoing frames (Linux 6.2): the
/// group's hook replaces its members', and their `PACKET_IGNORE_OUTGOING`
/// with it.
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: u32 = 0x4000;
const ETH_P_ALL: u16 = 0x0003;

/// Socket buffer size each way: a receive burst of 64 KiB coalesced
/// frames must not overflow the default (about 200 KiB, three such frames).
const SOCKET_BUFFER: libc::c_int = 8 << 20;

/// Why an uplink socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PacketError {
    /// No interface of that name in this namespace.
    #[error("no network interface named {0:?}")]
    NoDevice(String),
    /// The kernel cannot give a 12-byte virtio-net header on packet sockets.
    #[error("this kernel cannot put a 12-byte virtio-net header on AF_PACKET sockets (PACKET_VNET_HDR_SZ needs Linux 6.2 or later)")]
    NoVnetHdrSize(#[source] io::Error),
    /// A system call failed.
    #[error("{call} on the packet socket for {device}")]
    Sys {
        /// The call or option.
        call: &'static str,
        /// The interface.
        device: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// The interface index of `device`, if it exists in this namespace.
pub fn ifindex(device: &str) -> Option<u32> {
    let c = CString::new(device).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string for the call's duration.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points at a live `T` of `size_of::<T>()` bytes, which
    // is the option's type for every caller in this module.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn getsockopt_u32(fd: &OwnedFd, level: libc::c_int, name: libc::c_int) -> io::Result<u32> {
    let mut v: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live and sized for a 4-byte option.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut u32).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// How an uplink's fanout group spreads received frames over its queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fanout {
    /// By the kernel's flow hash of each frame (RSS-like: a flow stays on
    /// one queue).
    Hash,
    /// By a classic BPF program whose return value is the queue
    /// ([`set_fanout_program`]): NetQueue's filters.
    Program,
}

/// One classic BPF instruction (`struct sock_filter`).
pub type BpfInsn = libc::sock_filter;

/// Installs `prog` as the fanout program of the group `q` belongs to (one
/// member suffices; every member's frames then go where it says). The
/// kernel checks the program before it takes it.
pub fn set_fanout_program(q: &FrameQueue, prog: &[BpfInsn]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr() as *mut BpfInsn,
    };
    let fd = q.raw_fd();
    // SAFETY: `fprog` points at `prog`, which lives for the call; the kernel
    // copies the program and does not write through the pointer.
    let r = unsafe {
        libc::setsockopt(
            fd,
            SOL_PACKET,
            PACKET_FANOUT_DATA,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What a receive socket puts in front of each frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxHeader {
    /// A 12-byte virtio-net header, as a TAP queue: GSO and checksum state
    /// for every frame the header can express. A frame it cannot (a
    /// tunnelled GSO frame) is dropped, and counted in [`socket_drops`], or
    /// handed over as plain TCP GSO, depending on the kernel.
    Vnet,
    /// Nothing: the whole frame as the kernel has it, however it is
    /// segmented, with its checksum state beside it (`PACKET_AUXDATA`,
    /// read by [`recv_frames_aux`]). Sends go through [`open_senders`].
    Aux,
}

/// The receive queues of one uplink: `queues` packet sockets bound to
/// `device`, in one fanout group when there are several, non-blocking.
/// The first socket puts the device in promiscuous mode for as long as it
/// is open (the switch receives for its VMs' addresses); none of them sees
/// the frames the switch itself sends (`PACKET_IGNORE_OUTGOING`, and for a
/// fanout group its flag of the same name: without it every frame sent on
/// the device came back to one of the queues).
pub fn open_uplink(
    device: &str,
    queues: usize,
    fanout: Fanout,
    header: RxHeader,
) -> Result<Vec<FrameQueue>, PacketError> {
    let mode = match fanout {
        Fanout::Hash => PACKET_FANOUT_HASH,
        Fanout::Program => PACKET_FANOUT_CBPF,
    };
    let index = ifindex(device).ok_or_else(|| PacketError::NoDevice(device.into()))?;
    let sys = |call| sys_error(device, call);
    let mut out = Vec::with_capacity(queues.max(1));
    let mut group: Option<u32> = None;
    for i in 0..queues.max(1) {
        // Protocol 0: nothing is received until bind names ETH_P_ALL, after
        // the header options are set.
        let fd = packet_socket().map_err(sys("socket(AF_PACKET)"))?;
        if header == RxHeader::Vnet {
            set_vnet_hdr(&fd, device)?;
        }
        // Both: the tag Linux took off a received frame is only here.
        setsockopt(&fd, SOL_PACKET, PACKET_AUXDATA, &1i32).map_err(sys("PACKET_AUXDATA"))?;
        setsockopt(&fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32)
            .map_err(sys("PACKET_IGNORE_OUTGOING"))?;
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &SOCKET_BUFFER)
            .map_err(sys("SO_RCVBUFFORCE"))?;
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &SOCKET_BUFFER)
            .map_err(sys("SO_SNDBUFFORCE"))?;
        bind(&fd, index, ETH_P_ALL).map_err(sys("bind"))?;
        if i == 0 {
            // SAFETY: packet_mreq is plain data; all-zero is a valid value.
            let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
            mr.mr_ifindex = index as libc::c_int;
            mr.mr_type = PACKET_MR_PROMISC;
            setsockopt(&fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr)
                .map_err(sys("PACKET_MR_PROMISC"))?;
        }
        if queues > 1 {
            // The first socket makes a group with an id no one else has;
            // the others join it by that id.
            // The option is (mode and flags) << 16 | group id.
            let mode = mode | PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
            let arg: u32 = match group {
                None => (mode | PACKET_FANOUT_FLAG_UNIQUEID) << 16,
                Some(id) => (mode << 16) | id,
            };
            setsockopt(&fd, SOL_PACKET, PACKET_FANOUT, &arg).map_err(sys("PACKET_FANOUT"))?;
            if group.is_none() {
                let id = getsockopt_u32(&fd, SOL_PACKET, PACKET_FANOUT)
                    .map_err(sys("getsockopt(PACKET_FANOUT)"))?;
                group = Some(id & 0xffff);
            }
        }
        out.push(FrameQueue::from_fd(fd, device));
    }
    Ok(out)
}

/// A non-blocking raw packet socket of protocol 0 (it receives nothing
/// until bound to a protocol).
fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket takes plain integers; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket and is owned by nobody.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Binds packet socket `fd` to interface `index` for `protocol` (host
/// order; 0: nothing is received).
fn bind(fd: &OwnedFd, index: u32, protocol: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = index as libc::c_int;
    // SAFETY: `sll` is a live sockaddr_ll and the length says so.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What a failed `call` on `device`'s packet socket is reported as.
fn sys_error(device: &str, call: &'static str) -> impl FnOnce(io::Error) -> PacketError {
    let device = device.to_string();
    move |source| PacketError::Sys {
        call,
        device,
        source,
    }
}

fn set_vnet_hdr(fd: &OwnedFd, device: &str) -> Result<(), PacketError> {
    setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &1i32)
        .map_err(sys_error(device, "PACKET_VNET_HDR"))?;
    setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR_SZ, &12i32).map_err(PacketError::NoVnetHdrSize)
}

/// Send-only sockets for an uplink whose receive sockets carry no
/// virtio-net header ([`RxHeader::Aux`]): `n` packet sockets bound to
/// `device` with protocol 0 (so they receive nothing), each writing frames
/// behind a 12-byte virtio-net header, GSO and partial checksums left to
/// the device.
pub fn open_senders(device: &str, n: usize) -> Result<Vec<FrameQueue>, PacketError> {
    let index = ifindex(device).ok_or_else(|| PacketError::NoDevice(device.into()))?;
    let sys = |call| sys_error(device, call);
    let mut out = Vec::with_capacity(n.max(1));
    for _ in 0..n.max(1) {
        let fd = packet_socket().map_err(sys("socket(AF_PACKET)"))?;
        set_vnet_hdr(&fd, device)?;
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &SOCKET_BUFFER)
            .map_err(sys("SO_SNDBUFFORCE"))?;
        // Protocol 0: this socket receives nothing.
        bind(&fd, index, 0).map_err(sys("bind"))?;
        out.push(FrameQueue::from_fd(fd, device));
    }
    Ok(out)
}

/// Frames the kernel dropped at packet socket `q` since the last call
/// (`PACKET_STATISTICS`, which the read resets): its receive buffer was
/// full, or a frame could not be handed over as the socket asked (a GSO
/// frame a virtio-net header cannot express).
pub fn socket_drops(q: &FrameQueue) -> io::Result<u32> {
    let mut st = [0u32; 2];
    let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
    // SAFETY: `st` is a live `struct tpacket_stats` (two u32: packets,
    // drops) and `len` says its size; the kernel writes at most that.
    let r = unsafe {
        libc::getsockopt(
            q.raw_fd(),
            SOL_PACKET,
            PACKET_STATISTICS,
            st.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st[1])
}

/// What the kernel says of a frame read from an uplink's packet socket
/// (`struct tpacket_auxdata`): its status bits, and the 802.1Q tag the
/// kernel took off the frame (Linux moves a received frame's outer tag out
/// of its bytes before any packet socket sees it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuxStatus {
    /// `tp_status`.
    pub bits: u32,
    /// `tp_vlan_tci`, valid with [`AuxStatus::VLAN_VALID`].
    pub vlan_tci: u16,
    /// `tp_vlan_tpid`, valid with [`AuxStatus::VLAN_TPID_VALID`].
    pub vlan_tpid: u16,
}

impl AuxStatus {
    /// `TP_STATUS_VLAN_VALID`: the frame had an outer tag, now in
    /// `vlan_tci`.
    pub const VLAN_VALID: u32 = 1 << 4;
    /// `TP_STATUS_VLAN_TPID_VALID`: `vlan_tpid` says which kind of tag.
    pub const VLAN_TPID_VALID: u32 = 1 << 6;

    /// Status bits alone (no tag).
    pub fn of(bits: u32) -> AuxStatus {
        AuxStatus {
            bits,
            ..AuxStatus::default()
        }
    }

    /// The outer tag the kernel took off: (TPID, TCI). An older kernel that
    /// does not say the TPID took off an 802.1Q tag.
    pub fn vlan(self) -> Option<(u16, u16)> {
        if !self.has(Self::VLAN_VALID) {
            return None;
        }
        let tpid = if self.has(Self::VLAN_TPID_VALID) {
            self.vlan_tpid
        } else {
            0x8100
        };
        Some((tpid, self.vlan_tci))
    }

    /// `TP_STATUS_CSUMNOTREADY`: the transport checksum is partial (the
    /// sender left it to the device).
    pub const CSUM_NOT_READY: u32 = 1 << 3;
    /// `TP_STATUS_CSUM_VALID`: the checksum was verified.
    pub const CSUM_VALID: u32 = 1 << 7;
    /// `TP_STATUS_GSO_TCP`: a TCP GSO frame, not yet segmented.
    pub const GSO_TCP: u32 = 1 << 8;

    /// True if every bit of `bits` is set.
    pub fn has(self, bits: u32) -> bool {
        self.bits & bits == bits
    }
}

/// Room for one `PACKET_AUXDATA` control message.
const AUX_SPACE: usize = 64;

/// Reads up to `bufs.len()` frames (at most [`SEND_BATCH`]) with one
/// `recvmmsg(2)` from an [`RxHeader::Aux`] socket, without waiting: frame
/// `i` lands in the I/O slices `bufs[i]` (a small buffer with a large one
/// behind it, say), its length in `lens[i]`, whether the kernel cut it in
/// `truncated[i]`, and its checksum and GSO state in `status[i]`. Returns
/// how many frames were read (0: none ready).
pub fn recv_frames_aux(
    q: &FrameQueue,
    bufs: &mut [[std::io::IoSliceMut<'_>; 2]],
    lens: &mut [usize],
    truncated: &mut [bool],
    status: &mut [AuxStatus],
) -> io::Result<usize> {
    let n = bufs
        .len()
        .min(SEND_BATCH)
        .min(lens.len())
        .min(truncated.len())
        .min(status.len());
    if n == 0 {
        return Ok(0);
    }
    // u64 elements keep every control buffer aligned for cmsghdr.
    let mut control = [[0u64; AUX_SPACE / 8]; SEND_BATCH];
    // SAFETY: mmsghdr is plain data; all-zero is a valid value.
    let mut hdrs: [libc::mmsghdr; SEND_BATCH] = unsafe { std::mem::zeroed() };
    for ((h, b), c) in hdrs
        .iter_mut()
        .zip(bufs.iter_mut())
        .zip(control.iter_mut())
        .take(n)
    {
        // IoSliceMut is ABI-compatible with iovec on Unix (std documents it).
        h.msg_hdr.msg_iov = b.as_mut_ptr().cast::<libc::iovec>();
        h.msg_hdr.msg_iovlen = b.len();
        h.msg_hdr.msg_control = c.as_mut_ptr().cast();
        h.msg_hdr.msg_controllen = AUX_SPACE;
    }
    // SAFETY: the first `n` headers each point at two live iovecs over
    // buffers borrowed mutably from `bufs`, and at a control buffer of
    // AUX_SPACE bytes in `control`, for the whole call; the kernel writes
    // at most each iovec's and the control buffer's length, and
    // `msg_len`/`msg_flags`/`msg_controllen`.
    let r = unsafe {
        libc::recvmmsg(
            q.raw_fd(),
            hdrs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(0)
        } else {
            Err(e)
        };
    }
    for (i, h) in hdrs.iter().take(r as usize).enumerate() {
        lens[i] = h.msg_len as usize;
        truncated[i] = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        status[i] = aux_status(&h.msg_hdr);
    }
    Ok(r as usize)
}

/// The `PACKET_AUXDATA` status among a received message's control data.
fn aux_status(m: &libc::msghdr) -> AuxStatus {
    // SAFETY: `m` is a header the kernel filled by recvmmsg, its control
    // pointer and length describe the control buffer it wrote; CMSG_FIRSTHDR
    // and CMSG_NXTHDR stay inside that length, and each cmsg's data is read
    // only when its length covers a tpacket_auxdata's first u32.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            let enough = (*c).cmsg_len as usize >= libc::CMSG_LEN(4) as usize;
            if (*c).cmsg_level == SOL_PACKET && (*c).cmsg_type == PACKET_AUXDATA && enough {
                let data = libc::CMSG_DATA(c);
                let mut a = AuxStatus::of(std::ptr::read_unaligned(data.cast::<u32>()));
                // tp_vlan_tci and tp_vlan_tpid follow tp_status, tp_len,
                // tp_snaplen, tp_mac and tp_net (bytes 16..20).
                if (*c).cmsg_len as usize >= libc::CMSG_LEN(20) as usize {
                    a.vlan_tci = std::ptr::read_unaligned(data.add(16).cast::<u16>());
                    a.vlan_tpid = std::ptr::read_unaligned(data.add(18).cast::<u16>());
                }
                return a;
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    AuxStatus::default()
}

/// Most frames [`send_frames`] writes with one system call.
pub const SEND_BATCH: usize = 64;

/// Writes frames, each given as I/O slices (its virtio-net header first),
/// with one `sendmmsg(2)` per [`SEND_BATCH`]: the segments of a tunnelled
/// GSO frame go out in one system call instead of one each. Returns how
/// many frames were sent; an error only if the first of a call failed.
pub fn send_frames(q: &FrameQueue, frames: &[&[std::io::IoSlice<'_>]]) -> io::Result<usize> {
    let mut sent = 0;
    for chunk in frames.chunks(SEND_BATCH) {
        // SAFETY: mmsghdr is plain data; all-zero is a valid value (no
        // address, no control data).
        let mut hdrs: [libc::mmsghdr; SEND_BATCH] = unsafe { std::mem::zeroed() };
        for (h, f) in hdrs.iter_mut().zip(chunk) {
            // IoSlice is ABI-compatible with iovec on Unix (std documents
            // it); the kernel only reads through this pointer.
            h.msg_hdr.msg_iov = f.as_ptr() as *mut libc::iovec;
            h.msg_hdr.msg_iovlen = f.len();
        }
        // SAFETY: the first `chunk.len()` headers point at iovec arrays
        // that live (borrowed from `frames`) for the whole call, each of
        // the length given; the kernel writes only `msg_len` in them.
        let n = unsafe {
            libc::sendmmsg(
                q.raw_fd(),
                hdrs.as_mut_ptr(),
                chunk.len() as libc::c_uint,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if sent == 0 { Err(e) } else { Ok(sent) };
        }
        sent += n as usize;
        if (n as usize) < chunk.len() {
            break;
        }
    }
    Ok(sent)
}

/// Whether `device` is up with carrier (`IFF_UP` and `IFF_RUNNING`, what
/// `operstate` says as "up" or "unknown") and its MTU, asked of the kernel
/// with ioctls: this thread's namespace's device, where sysfs would show
/// the devices of the namespace it was mounted in.
pub fn link_flags_mtu(device: &str) -> Option<(bool, u32)> {
    if device.len() >= libc::IFNAMSIZ {
        return None;
    }
    // SAFETY: socket takes plain integers; the result is checked below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a fresh descriptor this function owns from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all zeros is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(device.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: `req` is a live ifreq with a NUL-terminated name (the
    // length is checked above); SIOCGIFFLAGS writes its flags union field.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return None;
    }
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { req.ifr_ifru.ifru_flags } as libc::c_int;
    let running = flags & libc::IFF_UP != 0 && flags & libc::IFF_RUNNING != 0;
    // SAFETY: as above; SIOCGIFMTU writes the MTU member.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } < 0 {
        return None;
    }
    // SAFETY: SIOCGIFMTU filled the mtu member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Some((running, mtu as u32))
}
