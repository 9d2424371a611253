//! A team's members' carriers heard from the kernel as they change
//! (rtnetlink's link group, as Open vSwitch's netdev-linux hears them),
//! rather than only at the member set's 100 ms look: a member that loses
//! its carrier is out of the distribution at the next wake-up of the
//! queue that watches it.

use rustix::fd::{AsFd, OwnedFd};
use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SocketFlags, SocketType};

/// rtnetlink's multicast group of link changes (`RTMGRP_LINK`).
const RTMGRP_LINK: u32 = 1;
/// `RTM_NEWLINK` and `RTM_DELLINK`.
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
/// `struct nlmsghdr` and `struct ifinfomsg`'s sizes.
const NLMSG_HDR: usize = 16;
const IFINFO: usize = 16;

/// A socket that hears every link change of the namespace it was opened
/// in.
pub(crate) struct LinkWatch {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl LinkWatch {
    /// Opens it (non-blocking), in the calling thread's namespace.
    pub(crate) fn open() -> std::io::Result<LinkWatch> {
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, RTMGRP_LINK))?;
        Ok(LinkWatch {
            fd,
            buf: vec![0; 16 * 1024],
        })
    }

    /// Its descriptor, to wait on.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Reads what the kernel said since the last call; true if any of it
    /// was about one of the interfaces `ifindexes` (or was lost: the
    /// socket's buffer overran, so anything may have changed).
    pub(crate) fn changed(&mut self, ifindexes: &[u32]) -> bool {
        let mut any = false;
        loop {
            match rustix::net::recv(&self.fd, &mut self.buf[..], RecvFlags::DONTWAIT) {
                Ok((0, _)) => return any,
                Ok((n, _)) => {
                    let n = n.min(self.buf.len());
                    any |= about(&self.buf[..n], ifindexes);
                }
                Err(rustix::io::Errno::AGAIN) => return any,
                Err(rustix::io::Errno::NOBUFS) => any = true,
                Err(_) => return any,
            }
        }
    }
}

/// Whether a datagram of netlink messages holds a link message about one
/// of `ifindexes`; every length read is checked, a short or lying
/// message ends the walk.
fn about(mut msgs: &[u8], ifindexes: &[u32]) -> bool {
    while msgs.len() >= NLMSG_HDR {
        let len = u32::from_ne_bytes(msgs[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(msgs[4..6].try_into().expect("2 bytes"));
        if len < NLMSG_HDR || len > msgs.len() {
            return false;
        }
        if matches!(kind, RTM_NEWLINK | RTM_DELLINK) && len >= NLMSG_HDR + IFINFO {
            let at = NLMSG_HDR + 4;
            let index = i32::from_ne_bytes(msgs[at..at + 4].try_into().expect("4 bytes"));
            if u32::try_from(index).is_ok_and(|i| ifindexes.contains(&i)) {
                return true;
            }
        }
        // Messages are aligned to 4 bytes.
        let next = len.div_ceil(4) * 4;
        msgs = msgs.get(next..).unwrap_or_default();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link_msg(kind: u16, index: i32, extra: usize) -> Vec<u8> {
        let len = NLMSG_HDR + IFINFO + extra;
        let mut m = vec![0u8; len];
        m[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&kind.to_ne_bytes());
        m[NLMSG_HDR + 4..NLMSG_HDR + 8].copy_from_slice(&index.to_ne_bytes());
        m
    }

    #[test]
    fn a_link_message_about_a_member_is_heard_and_others_are_not() {
        let mut both = link_msg(RTM_NEWLINK, 3, 6);
        both.resize(both.len().div_ceil(4) * 4, 0);
        both.extend(link_msg(RTM_DELLINK, 7, 0));
        assert!(about(&both, &[7]));
        assert!(about(&both, &[3]));
        assert!(!about(&both, &[4]));
        // Another kind of message, a short one, a lying length.
        assert!(!about(&link_msg(20, 3, 0), &[3]));
        assert!(!about(&both[..10], &[3]));
        let mut lying = link_msg(RTM_NEWLINK, 3, 0);
        lying[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(!about(&lying, &[3]));
    }

    #[test]
    fn a_members_carrier_change_is_heard_and_anothers_is_not() {
        // A veth pair of this test's own (root only: skipped elsewhere).
        if !hvnet_sys::is_root() {
            return;
        }
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        };
        let (a, b) = (
            format!("hvlw{}a", std::process::id()),
            format!("hvlw{}b", std::process::id()),
        );
        if !ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]) {
            return;
        }
        let index = |d: &str| {
            std::fs::read_to_string(format!("/sys/class/net/{d}/ifindex"))
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
                .expect("ifindex")
        };
        let (ia, ib) = (index(&a), index(&b));
        assert_ne!(ia, ib);
        let mut w = LinkWatch::open().expect("a netlink socket");
        let heard = |w: &mut LinkWatch, of: &[u32]| {
            (0..100).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                w.changed(of)
            })
        };
        assert!(ip(&["link", "set", &a, "up"]));
        let got_a = heard(&mut w, &[ia]);
        // b's own change only: not a's.
        assert!(ip(&["link", "set", &b, "mtu", "1400"]));
        let got_b_for_a = heard(&mut w, &[ia]);
        ip(&["link", "del", &a]);
        assert!(got_a, "a's change heard");
        assert!(!got_b_for_a, "b's change is not a's");
    }
}
