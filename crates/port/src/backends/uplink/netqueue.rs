//! NetQueue's receive filters at an uplink, as classic BPF: frames for a
//! filtered MAC address (for a VXLAN endpoint, the inner destination)
//! go to that filter's queue, everything else to queue 0, the default
//! queue. The program is the fanout program of the uplink's AF_PACKET
//! sockets (`PACKET_FANOUT_CBPF`), so the kernel classifies each frame
//! as it arrives, on whichever CPU received it, and hands it to that
//! queue's socket: no reader thread does the NIC's work for the others.
//!
//! Loads are relative to the Ethernet header (`SKF_LL_OFF`): the kernel
//! runs fanout programs with the frame's data at its network header.

use super::bpf::{insn, JEQ_K, LD_B_ABS, LD_H_ABS, LD_W_ABS, LL, RET_K};
pub use crate::filters::{Filter, Filters};
use hvnet_sys::BpfInsn;

/// Where a VXLAN frame's inner Ethernet header starts: outer Ethernet,
/// IPv4 without options, UDP, VXLAN.
pub(crate) const INNER: u32 = 14 + 20 + 8 + 8;
/// What makes a frame VXLAN for us: IPv4 without options, UDP, to the
/// endpoint's UDP port `port` (load, offset, value).
pub(crate) fn vxlan_checks(port: u16) -> [(u16, u32, u32); 4] {
    [
        (LD_H_ABS, 12, 0x0800),
        (LD_B_ABS, 14, 0x45),
        (LD_B_ABS, 23, 17),
        (LD_H_ABS, 36, u32::from(port)),
    ]
}
/// The most filters one program holds (5 instructions each, well under
/// the kernel's 4096).
pub const MAX_FILTERS: usize = 512;

/// The fanout program for a filter table (at most [`MAX_FILTERS`]
/// entries are used).
pub fn program(f: &Filters) -> Vec<BpfInsn> {
    let entries = &f.entries[..f.entries.len().min(MAX_FILTERS)];
    let mut p = Vec::with_capacity(12 + 5 * entries.len());
    let base = if let Some(port) = f.tunnel {
        // VXLAN over IPv4 without options, UDP to 4789; anything else goes
        // to the default queue. Each check jumps to the final `ret 0`.
        let checks = vxlan_checks(port);
        let total = 2 * checks.len() + 5 * entries.len();
        for (i, (load, off, want)) in checks.into_iter().enumerate() {
            p.push(insn(load, 0, 0, LL.wrapping_add(off)));
            // From the jeq (index 2i+1), the final ret is at `total`.
            let to_default = total - (2 * i + 2);
            p.push(insn(JEQ_K, 0, to_default as u8, want));
        }
        INNER
    } else {
        0
    };
    for e in entries {
        let m = e.mac.0;
        let hi = u32::from(u16::from_be_bytes([m[0], m[1]]));
        let lo = u32::from_be_bytes([m[2], m[3], m[4], m[5]]);
        p.push(insn(LD_H_ABS, 0, 0, LL.wrapping_add(base)));
        p.push(insn(JEQ_K, 0, 3, hi));
        p.push(insn(LD_W_ABS, 0, 0, LL.wrapping_add(base + 2)));
        p.push(insn(JEQ_K, 0, 1, lo));
        p.push(insn(RET_K, 0, 0, e.queue));
    }
    p.push(insn(RET_K, 0, 0, 0));
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::uplink::bpf::run;
    use hvnet_wire::MacAddr;

    fn filters(tunnel: bool) -> Filters {
        Filters {
            tunnel: tunnel.then_some(4789),
            entries: vec![
                Filter {
                    mac: MacAddr([2, 0, 0, 0, 0, 1]),
                    queue: 1,
                },
                Filter {
                    mac: MacAddr([2, 0, 0, 0, 0, 2]),
                    queue: 2,
                },
            ],
        }
    }

    fn frame_to(mac: [u8; 6]) -> Vec<u8> {
        let mut f = mac.to_vec();
        f.extend([2, 0, 0, 0, 0, 9, 0x08, 0x00]);
        f.extend([0u8; 46]);
        f
    }

    #[test]
    fn frames_go_to_their_filter_or_the_default_queue() {
        let p = program(&filters(false));
        assert_eq!(run(&p, &frame_to([2, 0, 0, 0, 0, 1])), 1);
        assert_eq!(run(&p, &frame_to([2, 0, 0, 0, 0, 2])), 2);
        assert_eq!(run(&p, &frame_to([2, 0, 0, 0, 0, 3])), 0);
        assert_eq!(run(&p, &frame_to([0xff; 6])), 0);
        assert_eq!(
            run(&p, &frame_to([2, 0, 0, 9, 0, 1])),
            0,
            "the last four bytes count"
        );
    }

    #[test]
    fn a_tunnel_endpoint_filters_on_the_inner_destination() {
        let p = program(&filters(true));
        let vxlan = |inner: [u8; 6], dport: u16, ihl: u8| {
            let mut f = vec![0u8; 14];
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            let mut ip = vec![0u8; 20];
            ip[0] = ihl;
            ip[9] = 17;
            f.extend(ip);
            f.extend([0x9c, 0x40]);
            f.extend(dport.to_be_bytes());
            f.extend([0, 0, 0, 0, 0x08, 0, 0, 0, 0, 0, 42, 0]);
            f.extend(frame_to(inner));
            f
        };
        assert_eq!(run(&p, &vxlan([2, 0, 0, 0, 0, 2], 4789, 0x45)), 2);
        assert_eq!(run(&p, &vxlan([2, 0, 0, 0, 0, 1], 4789, 0x45)), 1);
        assert_eq!(run(&p, &vxlan([2, 0, 0, 0, 0, 7], 4789, 0x45)), 0);
        assert_eq!(
            run(&p, &vxlan([2, 0, 0, 0, 0, 2], 4790, 0x45)),
            0,
            "not VXLAN"
        );
        assert_eq!(
            run(&p, &vxlan([2, 0, 0, 0, 0, 2], 4789, 0x46)),
            0,
            "IP options"
        );
        assert_eq!(run(&p, &frame_to([2, 0, 0, 0, 0, 2])), 0, "not tunnelled");
    }
}
