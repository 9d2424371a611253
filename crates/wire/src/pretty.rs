//! One-line dumps of a frame's whole header stack, for traces and logs.
//!
//! ```
//! # use hvnet_wire::pretty::Pretty;
//! let frame = [0u8; 14];
//! assert!(Pretty(&frame).to_string().starts_with("eth 00:00:00:00:00:00 > 00:00:00:00:00:00"));
//! ```

use crate::layers::{ip_protocol, Layers, NetKind};
use crate::{ipv4, ipv6, tcp, udp, vxlan, EthernetFrame};
use core::fmt;

/// Displays a frame as `eth … | ipv4 … | tcp …`, recursing into VXLAN.
pub struct Pretty<'a>(pub &'a [u8]);

impl fmt::Display for Pretty<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_stack(f, self.0, 0)
    }
}

fn write_stack(f: &mut fmt::Formatter<'_>, frame: &[u8], depth: usize) -> fmt::Result {
    let layers = match Layers::parse(frame) {
        Ok(l) => l,
        Err(e) => return write!(f, "malformed ({e}), {} bytes", frame.len()),
    };
    let eth = EthernetFrame::new_unchecked(frame);
    write!(f, "eth {} > {}", eth.src(), eth.dst())?;
    for v in layers.l2().vlans.iter().flatten() {
        write!(f, " vlan {v}")?;
    }
    let Some(net) = layers.net() else {
        return write!(f, " type {:?} len {}", layers.ethertype(), frame.len());
    };
    let ip = &frame[net.offset..];
    match net.kind {
        NetKind::Ipv4 => {
            let p = ipv4::Packet::new_unchecked(ip);
            let a = p.src();
            let b = p.dst();
            write!(
                f,
                " | ipv4 {}.{}.{}.{} > {}.{}.{}.{} len {} id {} ttl {}{}",
                a[0],
                a[1],
                a[2],
                a[3],
                b[0],
                b[1],
                b[2],
                b[3],
                p.total_len(),
                p.ident(),
                p.ttl(),
                if p.dont_frag() { " DF" } else { "" }
            )?;
        }
        NetKind::Ipv6 => {
            let p = ipv6::Packet::new_unchecked(ip);
            let a = std::net::Ipv6Addr::from(p.src());
            let b = std::net::Ipv6Addr::from(p.dst());
            write!(
                f,
                " | ipv6 {a} > {b} plen {} hlim {}",
                p.payload_len(),
                p.hop_limit()
            )?;
        }
    }
    if net.fragment {
        write!(f, " frag")?;
    }
    let Some(t) = layers.transport() else {
        return write!(f, " proto {}", net.protocol);
    };
    let l4 = &frame[t.offset..net.end];
    match t.protocol {
        ip_protocol::TCP => {
            let p = tcp::Packet::new_unchecked(l4);
            let fl = p.flags();
            let names = [
                (tcp::flags::SYN, 'S'),
                (tcp::flags::FIN, 'F'),
                (tcp::flags::RST, 'R'),
                (tcp::flags::PSH, 'P'),
                (tcp::flags::ACK, '.'),
                (tcp::flags::URG, 'U'),
                (tcp::flags::ECE, 'E'),
                (tcp::flags::CWR, 'W'),
            ];
            let flags: String = names
                .iter()
                .filter(|(b, _)| fl & b != 0)
                .map(|(_, c)| *c)
                .collect();
            write!(
                f,
                " | tcp {} > {} [{}] seq {} ack {} len {}",
                p.src_port(),
                p.dst_port(),
                flags,
                p.seq(),
                p.ack(),
                l4.len() - p.header_len()
            )
        }
        _ => {
            let p = udp::Packet::new_unchecked(l4);
            write!(
                f,
                " | udp {} > {} len {}",
                p.src_port(),
                p.dst_port(),
                p.len()
            )?;
            match layers.vxlan_inner_offset(frame) {
                Some(inner) if depth < 2 => {
                    let v = vxlan::Packet::new_unchecked(&frame[inner - vxlan::HEADER_LEN..]);
                    write!(f, " | vxlan vni {} | ", v.vni())?;
                    write_stack(f, &frame[inner..net.end], depth + 1)
                }
                _ => Ok(()),
            }
        }
    }
}
