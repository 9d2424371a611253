//! Frame builders for tests, benchmarks and fuzz seeds. Compiled only for
//! tests or with the `test-utils` feature.

use crate::meta::OffloadInfo;
use crate::rss::{HashType, Rss};
use hvnet_wire::{
    ipv4, ipv6, tcp, udp, vxlan, EtherType, EthernetFrame, EthernetRepr, Layers, MacAddr,
};

/// ACK flag, re-exported for brevity in tests.
pub const ACK: u8 = tcp::flags::ACK;

/// Everything that varies between the TCP frames the tests build.
#[derive(Clone, Debug)]
pub struct TcpSpec {
    /// IPv6 instead of IPv4.
    pub v6: bool,
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// One 802.1Q tag.
    pub vlan: Option<u16>,
    /// Source address (IPv4 uses the last 4 bytes).
    pub src_ip: [u8; 16],
    /// Destination address.
    pub dst_ip: [u8; 16],
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// TCP flags.
    pub flags: u8,
    /// TCP options (multiple of 4).
    pub options: Vec<u8>,
    /// Payload.
    pub payload: Vec<u8>,
    /// TTL / hop limit.
    pub ttl: u8,
    /// TOS / traffic class.
    pub tos: u8,
    /// IPv4 identification.
    pub ident: u16,
    /// IPv4 DF.
    pub df: bool,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// IPv6 extension headers, raw (their next-header chain must end in 6).
    pub ext: Vec<u8>,
    /// The fixed header's next-header when `ext` is not empty.
    pub first_ext: u8,
}

impl Default for TcpSpec {
    fn default() -> Self {
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src[12..].copy_from_slice(&[192, 168, 1, 200]);
        dst[12..].copy_from_slice(&[192, 168, 1, 100]);
        TcpSpec {
            v6: false,
            src_mac: [0xaa, 0, 0, 0, 0, 2],
            dst_mac: [0xaa, 0, 0, 0, 0, 1],
            vlan: None,
            src_ip: src,
            dst_ip: dst,
            src_port: 1500,
            dst_port: 8000,
            seq: 100,
            ack: 100,
            flags: ACK,
            options: Vec::new(),
            payload: vec![b'a'; 100],
            ttl: 8,
            tos: 0,
            ident: 0,
            df: true,
            flow_label: 0,
            ext: Vec::new(),
            first_ext: 0,
        }
    }
}

impl TcpSpec {
    /// IPv6 defaults (fdaa::2 > fdaa::1), as in the kernel GRO selftest.
    pub fn v6() -> TcpSpec {
        let mut s = TcpSpec {
            v6: true,
            ..TcpSpec::default()
        };
        s.src_ip = [0xfd, 0xaa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        s.dst_ip = [0xfd, 0xaa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        s
    }

    /// Builds the frame with every checksum valid.
    pub fn build(&self) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        EthernetRepr {
            dst: MacAddr(self.dst_mac),
            src: MacAddr(self.src_mac),
            ethertype: if self.vlan.is_some() {
                EtherType::Vlan
            } else if self.v6 {
                EtherType::Ipv6
            } else {
                EtherType::Ipv4
            },
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
        if let Some(v) = self.vlan {
            f.extend_from_slice(&v.to_be_bytes());
            f.extend_from_slice(&(if self.v6 { 0x86ddu16 } else { 0x0800 }).to_be_bytes());
        }
        let ip_off = f.len();
        let tcp_len = 20 + self.options.len() + self.payload.len();
        if self.v6 {
            let mut ip = vec![0u8; 40];
            let mut a = [0; 16];
            a.copy_from_slice(&self.src_ip);
            ipv6::Repr {
                src: a,
                dst: self.dst_ip,
                next_header: if self.ext.is_empty() {
                    6
                } else {
                    self.first_ext
                },
                payload_len: self.ext.len() + tcp_len,
                hop_limit: self.ttl,
                traffic_class: self.tos,
                flow_label: self.flow_label,
            }
            .emit(&mut ipv6::Packet::new_unchecked(&mut ip[..]));
            f.extend_from_slice(&ip);
            f.extend_from_slice(&self.ext);
        } else {
            let mut ip = vec![0u8; 20];
            let mut s = [0; 4];
            s.copy_from_slice(&self.src_ip[12..]);
            let mut d = [0; 4];
            d.copy_from_slice(&self.dst_ip[12..]);
            ipv4::Repr {
                src: s,
                dst: d,
                protocol: 6,
                payload_len: tcp_len,
                ttl: self.ttl,
                tos: self.tos,
                ident: self.ident,
                dont_frag: self.df,
            }
            .emit(&mut ipv4::Packet::new_unchecked(&mut ip[..]));
            f.extend_from_slice(&ip);
        }
        let t_off = f.len();
        f.resize(t_off + 20 + self.options.len(), 0);
        tcp::Repr {
            src_port: self.src_port,
            dst_port: self.dst_port,
            seq: self.seq,
            ack: self.ack,
            flags: self.flags,
            window: 65535,
            options: &self.options,
        }
        .emit(&mut tcp::Packet::new_unchecked(&mut f[t_off..]));
        f.extend_from_slice(&self.payload);
        let ph = if self.v6 {
            hvnet_wire::checksum::pseudo_header_v6(
                ipv6::Packet::new_unchecked(&f[ip_off..]).src(),
                self.dst_ip,
                6,
                tcp_len as u32,
            )
        } else {
            ipv4::Packet::new_unchecked(&f[ip_off..]).pseudo_header(tcp_len as u32)
        };
        tcp::Packet::new_unchecked(&mut f[t_off..]).fill_checksum(ph);
        f
    }
}

/// A TCP/IPv4 frame with the default addresses and a patterned payload.
pub fn tcp4_frame(seq: u32, ident: u16, payload_len: usize, flags: u8) -> Vec<u8> {
    TcpSpec {
        seq,
        ident,
        flags,
        payload: (0..payload_len).map(|i| (seq as usize + i) as u8).collect(),
        ..TcpSpec::default()
    }
    .build()
}

/// Wraps an inner Ethernet frame in Ethernet/IPv4/UDP/VXLAN with valid
/// checksums (UDP checksum computed unless `udp_csum` is false).
pub fn vxlan_wrap(inner: &[u8], vni: u32, src_port: u16, ident: u16, udp_csum: bool) -> Vec<u8> {
    let mut f = vec![0u8; 14];
    EthernetRepr {
        dst: MacAddr([0x02, 0, 0, 0, 0, 0x0b]),
        src: MacAddr([0x02, 0, 0, 0, 0, 0x0a]),
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    let udp_len = 8 + 8 + inner.len();
    let mut ip = vec![0u8; 20];
    ipv4::Repr {
        src: [10, 99, 0, 1],
        dst: [10, 99, 0, 2],
        protocol: 17,
        payload_len: udp_len,
        ttl: 64,
        tos: 0,
        ident,
        dont_frag: true,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut ip[..]));
    f.extend_from_slice(&ip);
    let u_off = f.len();
    f.resize(u_off + 16, 0);
    {
        let mut u = udp::Packet::new_unchecked(&mut f[u_off..]);
        u.set_src_port(src_port);
        u.set_dst_port(vxlan::PORT);
        u.set_len(udp_len as u16);
    }
    vxlan::Packet::new_unchecked(&mut f[u_off + 8..]).emit(vni);
    f.extend_from_slice(inner);
    if udp_csum {
        let ph = ipv4::Packet::new_unchecked(&f[14..]).pseudo_header(udp_len as u32);
        udp::Packet::new_unchecked(&mut f[u_off..]).fill_checksum(ph);
    }
    f
}

/// A frame as a GRO burst takes it ([`crate::gro::GroTable::coalesce_burst`]):
/// with its metadata and what the parser made of it, parsed here as the
/// switch parses a frame where it enters.
pub fn parsed<B: AsRef<[u8]>>(
    frame: B,
    info: OffloadInfo,
) -> (B, OffloadInfo, hvnet_wire::Result<Layers>) {
    let l = Layers::parse(frame.as_ref());
    (frame, info, l)
}

/// RSS's hash of a frame parsed here (as the switch parses a frame where
/// it enters): `None` for one the parser refuses or with no IP header.
pub fn rss_hash(rss: &Rss, frame: &[u8]) -> Option<(u32, HashType)> {
    rss.hash(frame, &Layers::parse(frame).ok()?)
}

/// The queue RSS gives a frame parsed here: 0 for one the parser refuses
/// or with no IP header, as on a NIC.
pub fn rss_queue(rss: &Rss, frame: &[u8]) -> u16 {
    Layers::parse(frame).map_or(0, |l| rss.queue_of(frame, &l))
}
