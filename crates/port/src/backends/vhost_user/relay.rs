//! The relay between a front end and the crate's handler (see the
//! module's parent for why it exists).

use super::Shared;
use std::io;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

/// Where front ends come from: a socket the port listens on, or one it
/// connects to.
pub(super) enum Front {
    Listen(UnixListener),
    Connect(std::path::PathBuf),
}

/// The port's public side, and the crate's side of the relay.
pub(super) struct Relay {
    pub(super) public: Front,
    pub(super) inner: vhost::vhost_user::Listener,
    pub(super) inner_addr: SocketAddr,
}

/// Requests and header flags of the protocol, as the relay needs them.
const SET_FEATURES: u32 = 2;
const SET_MEM_TABLE: u32 = 5;
const SET_LOG_BASE: u32 = 6;
const SET_VRING_KICK: u32 = 12;
const SET_VRING_ENABLE: u32 = 18;
const SEND_RARP: u32 = 19;
const ADD_MEM_REG: u32 = 37;
/// `VHOST_F_LOG_ALL`: the front end is migrating the guest; every page
/// the back end writes must be marked in the log.
const LOG_ALL: u64 = 1 << 26;
const VERSION_1: u32 = 0x1;
const FLAG_REPLY: u32 = 0x4;
const FLAG_NEED_REPLY: u32 = 0x8;
/// Bytes of a message header: request, flags, size.
const MSG_HEADER: usize = 12;
/// Bytes of `struct VhostUserMemory` before its regions, and of a region.
const MEM_TABLE_HEAD: usize = 8;
const MEM_REGION: usize = 32;
/// Longest message payload relayed (the protocol's own limit is 4 KiB of
/// config space plus headers).
const MAX_PAYLOAD: usize = 0x1000 + 64;

/// Reads exactly `buf.len()` bytes; descriptors attached to them are
/// returned.
fn recv_exact(sock: &UnixStream, buf: &mut [u8]) -> io::Result<Vec<std::os::fd::OwnedFd>> {
    let mut fds = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let (n, f) = hvnet_sys::scm::recv_with_fds(sock, &mut buf[at..])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        fds.extend(f);
        at += n;
    }
    Ok(fds)
}

/// Answers a request that asked for a reply (`NEED_REPLY`) with
/// success, for the messages the relay takes itself.
fn ack(front: &UnixStream, request: u32, flags: u32) -> io::Result<()> {
    if flags & FLAG_NEED_REPLY == 0 {
        return Ok(());
    }
    let mut reply = [0u8; MSG_HEADER + 8];
    reply[0..4].copy_from_slice(&request.to_le_bytes());
    reply[4..8].copy_from_slice(&(VERSION_1 | FLAG_REPLY).to_le_bytes());
    reply[8..12].copy_from_slice(&8u32.to_le_bytes());
    hvnet_sys::scm::send_with_fds(front, &reply, &[])
}

fn refuse(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// A dirty log the front end hands over (`SET_LOG_BASE`: size and offset,
/// then the shared memory's descriptor) must lie within that memory: the
/// crate maps the range as given, and a write past the end of the file
/// behind it would kill the switch (`SIGBUS`), not the connection.
fn check_log(payload: &[u8], fds: &[std::os::fd::OwnedFd]) -> io::Result<()> {
    if payload.len() < 16 || fds.len() != 1 {
        return Err(refuse(format!(
            "SET_LOG_BASE with {} payload bytes and {} descriptors (16 and 1 expected)",
            payload.len(),
            fds.len()
        )));
    }
    let size = u64::from_le_bytes(payload[0..8].try_into().expect("8 bytes"));
    let offset = u64::from_le_bytes(payload[8..16].try_into().expect("8 bytes"));
    let have = file_len(&fds[0])?;
    if size == 0 || !within(offset, size, have) {
        return Err(refuse(format!(
            "dirty log of {size} bytes at offset {offset} in shared memory of {have} bytes"
        )));
    }
    Ok(())
}

/// The length of the file behind a descriptor the front end sent.
fn file_len(fd: &std::os::fd::OwnedFd) -> io::Result<u64> {
    Ok(std::fs::File::from(fd.try_clone()?).metadata()?.len())
}

/// True if `size` bytes at `offset` lie within a file of `len` bytes.
fn within(offset: u64, size: u64, len: u64) -> bool {
    offset.checked_add(size).is_some_and(|end| end <= len)
}

/// Bytes of `ADD_MEM_REG`'s payload before its one region (padding).
const SINGLE_REGION_HEAD: usize = 8;

/// Each region of guest memory the front end hands over (`SET_MEM_TABLE`,
/// `ADD_MEM_REG`: a region's size and offset in the file of its
/// descriptor) must lie within its file, for the same reason as a log:
/// the crate maps what it is told, and the first read of a descriptor
/// past the file's end would kill the switch (`SIGBUS`).
fn check_regions(regions: &[u8], fds: &[std::os::fd::OwnedFd]) -> io::Result<()> {
    let count = regions.len() / MEM_REGION;
    if fds.len() < count {
        return Err(refuse(format!(
            "{count} memory regions with {} descriptors",
            fds.len()
        )));
    }
    for (region, fd) in regions.chunks_exact(MEM_REGION).zip(fds) {
        let size = u64::from_le_bytes(region[8..16].try_into().expect("8 bytes"));
        let offset = u64::from_le_bytes(region[24..32].try_into().expect("8 bytes"));
        let have = file_len(fd)?;
        if !within(offset, size, have) {
            return Err(refuse(format!(
                "memory region of {size} bytes at offset {offset} in a file of {have} bytes"
            )));
        }
    }
    Ok(())
}

/// Passes the front end's messages to the crate, each with its
/// descriptors; trims a `SET_MEM_TABLE` longer than its regions, and holds
/// a `SET_VRING_ENABLE` sent before the features are set (QEMU sends them
/// at start-up; the crate refuses them until `PROTOCOL_FEATURES` is acked
/// and would drop the connection) until they are, answering its reply
/// request itself; refuses memory regions past their files' ends. For
/// live migration: a dirty log outside its memory is refused, as is a
/// memory table changed while the guest is being migrated, its log handed
/// over (the crate would give the new regions no log: pages written there
/// would silently not be copied); `SEND_RARP`, which the crate does not
/// know, is taken here and announced on the port ([`Shared::announce`]).
/// A refusal ends the connection: the front end fails its migration and
/// keeps its guest, which reconnects.
pub(super) fn relay(sh: &Shared, front: &UnixStream, back: &UnixStream) -> io::Result<()> {
    let mut msg = vec![0u8; MSG_HEADER + MAX_PAYLOAD];
    let mut features_set = false;
    let (mut logging, mut log_set) = (false, false);
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut fds = recv_exact(front, &mut msg[..MSG_HEADER])?;
        let request = u32::from_le_bytes(msg[0..4].try_into().expect("4 bytes"));
        let flags = u32::from_le_bytes(msg[4..8].try_into().expect("4 bytes"));
        let mut size = u32::from_le_bytes(msg[8..12].try_into().expect("4 bytes")) as usize;
        if size > MAX_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message too long",
            ));
        }
        fds.extend(recv_exact(front, &mut msg[MSG_HEADER..MSG_HEADER + size])?);
        if logging && log_set && matches!(request, SET_MEM_TABLE | ADD_MEM_REG) {
            return Err(refuse(
                "the guest's memory changed while it is being migrated".into(),
            ));
        }
        match request {
            SET_MEM_TABLE if size >= MEM_TABLE_HEAD => {
                let p = &msg[MSG_HEADER..];
                let regions = u32::from_le_bytes(p[0..4].try_into().expect("4 bytes")) as usize;
                let want = MEM_TABLE_HEAD + regions.min(8) * MEM_REGION;
                if size > want {
                    size = want;
                    msg[8..12].copy_from_slice(&(size as u32).to_le_bytes());
                }
                let whole = (size - MEM_TABLE_HEAD) / MEM_REGION * MEM_REGION;
                check_regions(&msg[MSG_HEADER + MEM_TABLE_HEAD..][..whole], &fds)?;
            }
            ADD_MEM_REG if size >= SINGLE_REGION_HEAD + MEM_REGION => {
                let region = &msg[MSG_HEADER + SINGLE_REGION_HEAD..][..MEM_REGION];
                check_regions(region, &fds)?;
            }
            SET_VRING_ENABLE if !features_set => {
                // Held without its reply request (answered here: the front
                // end waits for it, and nothing else is outstanding).
                let mut m = msg[..MSG_HEADER + size].to_vec();
                m[4..8].copy_from_slice(&(flags & !FLAG_NEED_REPLY).to_le_bytes());
                held.push(m);
                ack(front, request, flags)?;
                continue;
            }
            SEND_RARP => {
                if size < 6 {
                    return Err(refuse(format!("SEND_RARP with {size} payload bytes")));
                }
                let mac: [u8; 6] = msg[MSG_HEADER..MSG_HEADER + 6].try_into().expect("6 bytes");
                sh.announce(mac);
                ack(front, request, flags)?;
                continue;
            }
            SET_LOG_BASE => {
                check_log(&msg[MSG_HEADER..MSG_HEADER + size], &fds)?;
                log_set = true;
            }
            SET_FEATURES if size >= 8 => {
                let features = u64::from_le_bytes(
                    msg[MSG_HEADER..MSG_HEADER + 8].try_into().expect("8 bytes"),
                );
                logging = features & LOG_ALL != 0;
            }
            _ => {}
        }
        hvnet_sys::scm::send_with_fds(back, &msg[..MSG_HEADER + size], &fds)?;
        if request == SET_VRING_KICK {
            // One kick of our own as the ring is set up: a ring that a
            // previous back end left with notifications off (it stopped
            // while draining) is looked at once, its notifications put
            // back on, and a front end that kicks only when asked is heard
            // from again.
            if let Some(kick) = fds.into_iter().next() {
                use std::io::Write;
                let _ = std::fs::File::from(kick).write_all(&1u64.to_ne_bytes());
            }
        }
        if request == SET_FEATURES && !features_set {
            features_set = true;
            for m in held.drain(..) {
                hvnet_sys::scm::send_with_fds(back, &m, &[])?;
            }
        }
    }
}
