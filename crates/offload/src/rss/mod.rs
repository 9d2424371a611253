//! Receive-side scaling: the Microsoft Toeplitz hash over a frame's flow
//! tuple, and an indirection table from hash to queue.
//!
//! Input layouts follow Microsoft's "RSS hashing types": source address,
//! destination address, then source port and destination port for the
//! TCP/UDP types, all in network byte order. For a VXLAN frame the inner
//! headers are hashed when [`Rss::inner`] is set, which is what spreads
//! many overlay flows between the same two hosts over queues.

mod toeplitz;

pub use toeplitz::{toeplitz, window, Toeplitz, DEFAULT_KEY};

use hvnet_wire::layers::{ip_protocol, Layers, NetKind};
use hvnet_wire::{ipv4, ipv6, tcp, udp};

/// Errors building an RSS configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RssError {
    /// Keys are 40 or 52 bytes.
    #[error("RSS key must be 40 or 52 bytes, got {0}")]
    KeyLength(usize),
    /// An indirection table needs at least one queue and a power-of-two size.
    #[error("indirection table needs 1..=65535 queues and a power-of-two size")]
    BadTable,
}

/// The tuple that was hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashType {
    /// Source and destination IPv4 addresses.
    Ipv4,
    /// IPv4 addresses and TCP ports.
    TcpIpv4,
    /// IPv4 addresses and UDP ports.
    UdpIpv4,
    /// Source and destination IPv6 addresses.
    Ipv6,
    /// IPv6 addresses and TCP ports.
    TcpIpv6,
    /// IPv6 addresses and UDP ports.
    UdpIpv6,
}

/// Which hash types are enabled (a NIC's `ethtool -N rx-flow-hash`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashTypes {
    /// Hash TCP over IPv4 on the 4-tuple.
    pub tcp_ipv4: bool,
    /// Hash UDP over IPv4 on the 4-tuple (off by default on many NICs
    /// because of fragments).
    pub udp_ipv4: bool,
    /// Hash TCP over IPv6 on the 4-tuple.
    pub tcp_ipv6: bool,
    /// Hash UDP over IPv6 on the 4-tuple.
    pub udp_ipv6: bool,
}

impl Default for HashTypes {
    fn default() -> Self {
        HashTypes {
            tcp_ipv4: true,
            udp_ipv4: true,
            tcp_ipv6: true,
            udp_ipv6: true,
        }
    }
}

/// The indirection table: entry `hash & (len - 1)` names the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reta(Vec<u16>);

impl Reta {
    /// The default table: `size` entries, entry i → queue i mod `queues`.
    pub fn spread(queues: u16, size: usize) -> Result<Reta, RssError> {
        if queues == 0 || size == 0 || !size.is_power_of_two() {
            return Err(RssError::BadTable);
        }
        Ok(Reta(
            (0..size).map(|i| (i % queues as usize) as u16).collect(),
        ))
    }
    /// A table with explicit entries (power-of-two length).
    pub fn from_entries(entries: Vec<u16>) -> Result<Reta, RssError> {
        if entries.is_empty() || !entries.len().is_power_of_two() {
            return Err(RssError::BadTable);
        }
        Ok(Reta(entries))
    }
    /// The queue for a hash.
    #[inline]
    pub fn queue(&self, hash: u32) -> u16 {
        self.0[hash as usize & (self.0.len() - 1)]
    }
    /// The entries.
    pub fn entries(&self) -> &[u16] {
        &self.0
    }
}

/// A hash input: at most 36 bytes (IPv6 addresses and ports).
#[derive(Clone, Copy, Debug)]
pub struct HashInput {
    bytes: [u8; 36],
    len: usize,
    /// The hash type this input is for.
    pub kind: HashType,
}

impl HashInput {
    /// The bytes to hash.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Extracts the RSS input of a parsed frame (the outer headers; see
/// [`Rss::hash`] for VXLAN).
pub fn hash_input(frame: &[u8], layers: &Layers, types: &HashTypes) -> Option<HashInput> {
    let net = layers.net()?;
    let mut bytes = [0u8; 36];
    let ip = &frame[net.offset..];
    let (mut len, v6) = match net.kind {
        NetKind::Ipv4 => {
            let p = ipv4::Packet::new_unchecked(ip);
            bytes[..4].copy_from_slice(&p.src());
            bytes[4..8].copy_from_slice(&p.dst());
            (8, false)
        }
        NetKind::Ipv6 => {
            let p = ipv6::Packet::new_unchecked(ip);
            bytes[..16].copy_from_slice(&p.src());
            bytes[16..32].copy_from_slice(&p.dst());
            (32, true)
        }
    };
    let l4 = layers.transport().filter(|t| match (t.protocol, v6) {
        (ip_protocol::TCP, false) => types.tcp_ipv4,
        (ip_protocol::UDP, false) => types.udp_ipv4,
        (ip_protocol::TCP, true) => types.tcp_ipv6,
        (ip_protocol::UDP, true) => types.udp_ipv6,
        _ => false,
    });
    let kind = match l4 {
        Some(t) => {
            let seg = &frame[t.offset..];
            let (sp, dp) = if t.protocol == ip_protocol::TCP {
                let p = tcp::Packet::new_unchecked(seg);
                (p.src_port(), p.dst_port())
            } else {
                let p = udp::Packet::new_unchecked(seg);
                (p.src_port(), p.dst_port())
            };
            bytes[len..len + 2].copy_from_slice(&sp.to_be_bytes());
            bytes[len + 2..len + 4].copy_from_slice(&dp.to_be_bytes());
            len += 4;
            match (t.protocol, v6) {
                (ip_protocol::TCP, false) => HashType::TcpIpv4,
                (_, false) => HashType::UdpIpv4,
                (ip_protocol::TCP, true) => HashType::TcpIpv6,
                (_, true) => HashType::UdpIpv6,
            }
        }
        None if v6 => HashType::Ipv6,
        None => HashType::Ipv4,
    };
    Some(HashInput { bytes, len, kind })
}

/// A complete RSS configuration: key, hash types, table.
#[derive(Clone, Debug)]
pub struct Rss {
    toeplitz: Toeplitz,
    /// Enabled hash types.
    pub types: HashTypes,
    /// The indirection table.
    pub reta: Reta,
    /// Hash a VXLAN frame's inner headers instead of its outer ones.
    pub inner: bool,
}

impl Rss {
    /// An RSS configuration with the given key and `queues` queues over a
    /// 128-entry table.
    pub fn new(key: &[u8], queues: u16) -> Result<Rss, RssError> {
        Ok(Rss {
            toeplitz: Toeplitz::new(key)?,
            types: HashTypes::default(),
            reta: Reta::spread(queues, 128)?,
            inner: true,
        })
    }

    /// Hashes a frame whose header stack (a VXLAN frame's inner one with
    /// it) was parsed where it entered: `None` for frames with no IP header
    /// (they go to queue 0, as on a NIC).
    pub fn hash(&self, frame: &[u8], l: &Layers) -> Option<(u32, HashType)> {
        if self.inner {
            if let Some((off, il)) = l.inner() {
                let inner = &frame[off..];
                if let Some(i) = hash_input(inner, &il, &self.types) {
                    return Some((self.toeplitz.hash(i.as_bytes()), i.kind));
                }
            }
        }
        let i = hash_input(frame, l, &self.types)?;
        Some((self.toeplitz.hash(i.as_bytes()), i.kind))
    }

    /// The queue for a frame whose header stack was parsed where it
    /// entered.
    pub fn queue_of(&self, frame: &[u8], l: &Layers) -> u16 {
        self.hash(frame, l).map_or(0, |(h, _)| self.reta.queue(h))
    }
}

#[cfg(test)]
mod tests;
