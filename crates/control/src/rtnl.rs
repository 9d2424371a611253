//! The link and address changes the control plane makes, as rtnetlink
//! requests (the messages of `netlink-packet-route`, over a `netlink-sys`
//! socket) instead of `ip` subprocesses: one socket per namespace, the
//! kernel's own errors (with its extended-ack text) instead of a parsed
//! stderr, and nothing to fork. A socket belongs to the namespace it was
//! opened in, so [`Rtnl::in_netns`] opens one from a thread that entered
//! the namespace, and every request on it acts there.

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CAPPED, NLM_F_CREATE,
    NLM_F_EXCL, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

/// A request the kernel refused, or a socket that failed.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The socket failed (open, send, receive).
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: String,
        /// Why it failed.
        source: io::Error,
    },
    /// The kernel's answer: its errno and, when it gave one, its own words.
    #[error("{op}: {}{}", .errno, .detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Kernel {
        /// What was asked.
        op: String,
        /// The errno of the refusal.
        errno: io::Error,
        /// The kernel's extended-ack message.
        detail: Option<String>,
    },
    /// An answer that does not parse as rtnetlink.
    #[error("{op}: the kernel's answer could not be parsed")]
    Malformed {
        /// What was asked.
        op: String,
    },
}

impl NetlinkError {
    /// The errno the kernel answered with, if it did.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            NetlinkError::Kernel { errno, .. } | NetlinkError::Io { source: errno, .. } => {
                errno.raw_os_error()
            }
            NetlinkError::Malformed { .. } => None,
        }
    }
}

/// What [`Rtnl::set_link`] changes on a device; `None` leaves it as is.
#[derive(Debug, Default)]
pub struct LinkChange<'a> {
    /// A new name.
    pub rename: Option<&'a str>,
    /// A new MAC address.
    pub mac: Option<[u8; 6]>,
    /// A new MTU.
    pub mtu: Option<u16>,
    /// Administratively up or down.
    pub up: Option<bool>,
    /// A new alias (`ifalias`): where hvnet keeps its ownership marker.
    pub alias: Option<&'a str>,
    /// Moves the device into the namespace of this handle.
    pub netns: Option<&'a File>,
}

/// An rtnetlink socket of one network namespace.
pub struct Rtnl {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Rtnl {
    /// A socket of the caller's (thread's) network namespace.
    pub fn new() -> Result<Rtnl, NetlinkError> {
        let io = |source| NetlinkError::Io {
            op: "open an rtnetlink socket".into(),
            source,
        };
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(io)?;
        socket.bind_auto().map_err(io)?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(io)?;
        // The kernel's text with its errors; acks without the request.
        let _ = socket.set_ext_ack(true);
        let _ = socket.set_cap_ack(true);
        Ok(Rtnl {
            socket,
            seq: 0,
            buf: vec![0; 32 * 1024],
        })
    }

    /// A socket of the named namespace `ns`: opened by a thread that
    /// entered it, so that every request acts inside `ns`.
    pub fn in_netns(ns: &str) -> Result<Rtnl, NetlinkError> {
        let handle = hvnet_sys::netns::open(ns).map_err(|source| NetlinkError::Io {
            op: format!("open network namespace {ns}"),
            source,
        })?;
        Rtnl::in_netns_of(&handle)
    }

    /// A socket of the namespace whose handle is `ns`.
    pub fn in_netns_of(ns: &File) -> Result<Rtnl, NetlinkError> {
        hvnet_sys::netns::run_in(ns, Rtnl::new).map_err(|source| NetlinkError::Io {
            op: "enter a network namespace".into(),
            source,
        })?
    }

    /// Sends one request and collects its answers up to the kernel's ack.
    pub(crate) fn request(
        &mut self,
        op: &str,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        let io = |source| NetlinkError::Io {
            op: op.into(),
            source,
        };
        self.seq = self.seq.wrapping_add(1);
        let mut packet = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(msg));
        packet.header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        packet.header.sequence_number = self.seq;
        packet.finalize();
        let mut out = vec![0; packet.buffer_len()];
        packet.serialize(&mut out);
        self.socket.send(&out, 0).map_err(io)?;
        let mut answers = Vec::new();
        loop {
            let n = self.socket.recv(&mut &mut self.buf[..], 0).map_err(io)?;
            let mut at = 0;
            while at < n {
                let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&self.buf[at..n])
                    .map_err(|_| NetlinkError::Malformed { op: op.into() })?;
                let len = m.header.length as usize;
                if len == 0 {
                    return Err(NetlinkError::Malformed { op: op.into() });
                }
                at += (len + 3) & !3;
                if m.header.sequence_number != self.seq {
                    continue;
                }
                match m.payload {
                    NetlinkPayload::InnerMessage(inner) => answers.push(inner),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => Ok(answers),
                            Some(code) => Err(NetlinkError::Kernel {
                                op: op.into(),
                                errno: io::Error::from_raw_os_error(-code.get()),
                                detail: ext_ack_text(&e.header, m.header.flags),
                            }),
                        };
                    }
                    NetlinkPayload::Done(_) => return Ok(answers),
                    _ => {}
                }
            }
        }
    }

    /// The device called `name` in this namespace, as the kernel describes
    /// it.
    fn link(&mut self, name: &str) -> Result<LinkMessage, NetlinkError> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.into()));
        let op = format!("find device {name}");
        self.request(&op, RouteNetlinkMessage::GetLink(msg), 0)?
            .into_iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .ok_or(NetlinkError::Malformed { op })
    }

    /// The interface index of device `name`.
    pub fn index(&mut self, name: &str) -> Result<u32, NetlinkError> {
        Ok(self.link(name)?.header.index)
    }

    /// The alias (`ifalias`) of device `name`, if it has one.
    pub fn alias(&mut self, name: &str) -> Result<Option<String>, NetlinkError> {
        Ok(self
            .link(name)?
            .attributes
            .into_iter()
            .find_map(|a| match a {
                LinkAttribute::IfAlias(s) => Some(s),
                _ => None,
            }))
    }

    /// The MAC address of device `name`, if it has one.
    pub fn mac(&mut self, name: &str) -> Result<Option<hvnet_wire::MacAddr>, NetlinkError> {
        Ok(self
            .link(name)?
            .attributes
            .into_iter()
            .find_map(|a| match a {
                LinkAttribute::Address(b) if b.len() == 6 => {
                    Some(hvnet_wire::MacAddr(b[..6].try_into().expect("6 bytes")))
                }
                _ => None,
            }))
    }

    /// The addresses of device `name`.
    pub fn addresses(&mut self, name: &str) -> Result<Vec<IpAddr>, NetlinkError> {
        let index = self.index(name)?;
        let msg = AddressMessage::default();
        let op = format!("list the addresses of {name}");
        Ok(self
            .request(
                &op,
                RouteNetlinkMessage::GetAddress(msg),
                netlink_packet_core::NLM_F_DUMP,
            )?
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) if a.header.index == index => {
                    a.attributes.into_iter().find_map(|x| match x {
                        AddressAttribute::Address(ip) => Some(ip),
                        _ => None,
                    })
                }
                _ => None,
            })
            .collect())
    }

    /// Applies `change` to device `name`, in one request.
    pub fn set_link(&mut self, name: &str, change: &LinkChange) -> Result<(), NetlinkError> {
        let mut msg = LinkMessage::default();
        msg.header.index = self.index(name)?;
        if let Some(up) = change.up {
            msg.header.change_mask = LinkFlags::Up;
            if up {
                msg.header.flags = LinkFlags::Up;
            }
        }
        let attrs = &mut msg.attributes;
        if let Some(n) = change.rename {
            attrs.push(LinkAttribute::IfName(n.into()));
        }
        if let Some(mac) = change.mac {
            attrs.push(LinkAttribute::Address(mac.to_vec()));
        }
        if let Some(mtu) = change.mtu {
            attrs.push(LinkAttribute::Mtu(mtu.into()));
        }
        if let Some(a) = change.alias {
            attrs.push(LinkAttribute::IfAlias(a.into()));
        }
        if let Some(ns) = change.netns {
            attrs.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
        }
        let op = format!("set device {name}");
        self.request(&op, RouteNetlinkMessage::SetLink(msg), 0)
            .map(drop)
    }

    /// Creates a veth pair: `name` here with MTU `mtu`, its peer `peer`
    /// inside the namespace of `peer_netns`.
    pub fn add_veth(
        &mut self,
        name: &str,
        mtu: u16,
        peer: &str,
        peer_netns: &File,
    ) -> Result<(), NetlinkError> {
        let mut peer_msg = LinkMessage::default();
        peer_msg.attributes = vec![
            LinkAttribute::IfName(peer.into()),
            LinkAttribute::NetNsFd(peer_netns.as_raw_fd()),
        ];
        let mut msg = LinkMessage::default();
        msg.attributes = vec![
            LinkAttribute::IfName(name.into()),
            LinkAttribute::Mtu(mtu.into()),
            LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Veth),
                LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_msg))),
            ]),
        ];
        let op = format!("create veth pair {name}/{peer}");
        self.create(&op, RouteNetlinkMessage::NewLink(msg))
    }

    /// A request that creates something, refused if it exists already.
    pub(crate) fn create(
        &mut self,
        op: &str,
        msg: RouteNetlinkMessage,
    ) -> Result<(), NetlinkError> {
        self.request(op, msg, NLM_F_CREATE | NLM_F_EXCL).map(drop)
    }

    /// Deletes device `name`.
    pub fn del_link(&mut self, name: &str) -> Result<(), NetlinkError> {
        let mut msg = LinkMessage::default();
        msg.header.index = self.index(name)?;
        self.request(
            &format!("delete device {name}"),
            RouteNetlinkMessage::DelLink(msg),
            0,
        )
        .map(drop)
    }

    /// Gives device `dev` the address `addr/prefix`; with `nodad`, an IPv6
    /// address is usable at once (no duplicate address detection).
    pub fn add_address(
        &mut self,
        dev: &str,
        addr: IpAddr,
        prefix: u8,
        nodad: bool,
    ) -> Result<(), NetlinkError> {
        let mut msg = AddressMessage::default();
        msg.header.family = family_of(addr);
        msg.header.prefix_len = prefix;
        msg.header.index = self.index(dev)?;
        msg.attributes = vec![
            AddressAttribute::Local(addr),
            AddressAttribute::Address(addr),
        ];
        if nodad {
            msg.attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
        }
        let op = format!("add address {addr}/{prefix} to {dev}");
        self.create(&op, RouteNetlinkMessage::NewAddress(msg))
    }
}

impl Rtnl {
    /// Adds a route through device `dev`: to `dst/prefix`, via `via` when
    /// it is not on the link (in the main table, as `ip route add` does).
    pub fn add_route(
        &mut self,
        dev: &str,
        dst: IpAddr,
        prefix: u8,
        via: Option<IpAddr>,
    ) -> Result<(), NetlinkError> {
        use netlink_packet_route::route::{
            RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
            RouteType,
        };
        let mut msg = RouteMessage::default();
        msg.header.address_family = family_of(dst);
        msg.header.destination_prefix_length = prefix;
        msg.header.table = RouteHeader::RT_TABLE_MAIN;
        msg.header.protocol = RouteProtocol::Boot;
        msg.header.scope = if via.is_some() {
            RouteScope::Universe
        } else {
            RouteScope::Link
        };
        msg.header.kind = RouteType::Unicast;
        msg.attributes = vec![RouteAttribute::Oif(self.index(dev)?)];
        if prefix > 0 {
            msg.attributes
                .push(RouteAttribute::Destination(RouteAddress::from(dst)));
        }
        if let Some(g) = via {
            msg.attributes
                .push(RouteAttribute::Gateway(RouteAddress::from(g)));
        }
        let to = match via {
            Some(g) => format!("{dst}/{prefix} via {g}"),
            None => format!("{dst}/{prefix}"),
        };
        self.create(
            &format!("add route {to} on {dev}"),
            RouteNetlinkMessage::NewRoute(msg),
        )
    }
}

/// The rtnetlink address family of `ip`.
pub(crate) fn family_of(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// The kernel's message in an extended ack (`NLMSGERR_ATTR_MSG`), found
/// after the echoed request header (only its 16-byte header when capped).
fn ext_ack_text(echoed: &[u8], flags: u16) -> Option<String> {
    const NLM_F_ACK_TLVS: u16 = 0x200;
    const NLMSGERR_ATTR_MSG: u16 = 1;
    if flags & NLM_F_ACK_TLVS == 0 || echoed.len() < 16 {
        return None;
    }
    let mut at = if flags & NLM_F_CAPPED != 0 {
        16
    } else {
        let len = u32::from_ne_bytes(echoed[..4].try_into().ok()?) as usize;
        (len + 3) & !3
    };
    while at + 4 <= echoed.len() {
        let len = u16::from_ne_bytes([echoed[at], echoed[at + 1]]) as usize;
        let kind = u16::from_ne_bytes([echoed[at + 2], echoed[at + 3]]) & 0x3fff;
        if len < 4 || at + len > echoed.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let text = &echoed[at + 4..at + len];
            let text = text.split(|&b| b == 0).next().unwrap_or_default();
            return Some(String::from_utf8_lossy(text).into_owned());
        }
        at += (len + 3) & !3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext_ack_text_after_a_capped_header() {
        let mut echoed = vec![0u8; 16];
        let msg = b"Invalid MTU\0";
        let len = (4 + msg.len()) as u16;
        echoed.extend(len.to_ne_bytes());
        echoed.extend(1u16.to_ne_bytes());
        echoed.extend(msg);
        let flags = 0x200 | NLM_F_CAPPED;
        assert_eq!(ext_ack_text(&echoed, flags).as_deref(), Some("Invalid MTU"));
        assert_eq!(ext_ack_text(&echoed, NLM_F_CAPPED), None);
        assert_eq!(ext_ack_text(&echoed[..18], flags), None);
    }

    /// Root only: the loopback of a fresh namespace, found, aliased and
    /// brought up through the socket of that namespace; a refused request
    /// carries the kernel's errno.
    #[test]
    fn requests_act_in_the_namespace_of_the_socket() {
        if !hvnet_sys::is_root() {
            return;
        }
        let name = format!("hvnet-rtnl-test-{}", std::process::id());
        hvnet_sys::netns::create(&name).unwrap();
        let result = std::panic::catch_unwind(|| {
            let mut rtnl = Rtnl::in_netns(&name).unwrap();
            let change = LinkChange {
                up: Some(true),
                alias: Some("hvnet test"),
                ..Default::default()
            };
            rtnl.set_link("lo", &change).unwrap();
            assert_eq!(rtnl.alias("lo").unwrap().as_deref(), Some("hvnet test"));
            let e = rtnl.index("nosuch0").unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc_enodev()));
            rtnl.add_address("lo", "198.18.200.1".parse().unwrap(), 24, false)
                .unwrap();
            let again = rtnl.add_address("lo", "198.18.200.1".parse().unwrap(), 24, false);
            assert!(again.is_err());
        });
        hvnet_sys::netns::delete(&name).unwrap();
        result.unwrap();
    }

    fn libc_enodev() -> i32 {
        19
    }
}
