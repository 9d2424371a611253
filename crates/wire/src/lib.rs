//! Zero-copy views and builders for the headers a virtual switch sees:
//! Ethernet with 802.1Q tags, ARP, IPv4 with options, IPv6 with extension
//! headers, TCP with options, UDP, VXLAN, the virtio-net header, and the
//! IGMP and MLD messages multicast snooping reads.
//!
//! # Why these are written here
//!
//! smoltcp's `wire` module has the right shape (a `Packet<T: AsRef<[u8]>>`
//! view with `new_checked`, setters on `AsMut`, a `Repr` with `parse` and
//! `emit`) and this crate follows it, but it has no 802.1Q, VXLAN or
//! virtio-net header, walks no IPv6 extension headers, and its checksum is a
//! simple loop. etherparse parses everything we need but into owned header
//! structs, so rewriting a field in place (a sequence number, a length, a
//! checksum in each of 44 segments of a TSO frame) means a copy out and a
//! copy back. The offload engines do exactly that kind of in-place work on
//! the hot path, so the views are written here; etherparse is used in the
//! tests as an independent parser to check them against.
//!
//! # Panic contract
//!
//! Parse untrusted input only through `new_checked` (or [`Layers::parse`]):
//! after it succeeds, every getter is in bounds. `new_unchecked` is for
//! buffers we are building; never call `new_checked` on an emit buffer that
//! is not filled in yet.
//!
//! ```
//! use hvnet_wire::{Ipv4Packet, Ipv4Repr};
//! let repr = Ipv4Repr { src: [10, 0, 0, 1], dst: [10, 0, 0, 2], protocol: 17,
//!     payload_len: 8, ttl: 64, tos: 0, ident: 7, dont_frag: true };
//! let mut buf = vec![0u8; repr.buffer_len() + 8];
//! repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]));
//! let back = Ipv4Repr::parse(&Ipv4Packet::new_checked(&buf[..]).unwrap()).unwrap();
//! assert_eq!(back, repr);
//! assert!(Ipv4Packet::new_checked(&buf[..]).unwrap().verify_checksum());
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod arp;
pub mod checksum;
pub mod dhcp;
pub mod error;
pub mod erspan;
pub mod ethernet;
pub mod igmp;
pub mod ipv4;
pub mod ipv6;
pub mod lacp;
pub mod layers;
pub mod membership;
pub mod mld;
pub mod nd;
pub mod pretty;
pub mod tcp;
pub mod udp;
pub mod virtio_net;
pub mod vxlan;

pub use error::{Error, Result};
pub use ethernet::{EtherType, Frame as EthernetFrame, MacAddr, Repr as EthernetRepr};
pub use ipv4::{Packet as Ipv4Packet, Repr as Ipv4Repr};
pub use ipv6::{Packet as Ipv6Packet, Repr as Ipv6Repr};
pub use layers::{ip_protocol, Layers, Net, NetKind, Transport, Vxlan};
pub use tcp::{Packet as TcpPacket, Repr as TcpRepr};
pub use udp::Packet as UdpPacket;
pub use virtio_net::{GsoType, Repr as VirtioNetHdr};
pub use vxlan::Packet as VxlanPacket;
