//! RSS at an uplink, as classic BPF: the Microsoft Toeplitz hash of each
//! frame's flow (for a VXLAN endpoint, the inner flow), then the queue of
//! a 128-entry indirection table (entry i → queue i mod n), exactly as
//! [`hvnet_offload::rss::Rss`] computes it. The program is the fanout
//! program of the uplink's AF_PACKET sockets, so the kernel hashes each
//! frame on the CPU that received it and hands it to its queue's socket,
//! as a NIC's RSS engine does; no reader thread classifies for the others.
//!
//! The key is fixed when the program is built, so each key window is a
//! constant: for each input bit the program tests the bit and XORs its
//! window into the hash (kept in scratch memory). Hashed: IPv4 and IPv6
//! addresses, and TCP/UDP ports when the packet is not a fragment and (for
//! IPv6) the transport header follows the fixed header; anything else that
//! is IP is hashed on its addresses; what is not IP (also inside a VXLAN
//! frame) goes to queue 0. IPv6 extension headers are not walked: such a
//! packet is hashed on its addresses.
//! Loads are relative to the Ethernet header (`SKF_LL_OFF`), as in
//! [`super::netqueue`].

use super::bpf::*;
use super::netqueue;
use hvnet_offload::rss::window;
use hvnet_sys::BpfInsn;

/// Scratch memory: the hash so far.
const HASH: u32 = 0;

/// The indirection table's size (entries), as [`hvnet_offload::rss::Rss`].
const RETA: u32 = 128;

/// An instruction, or a jump to a label resolved when the program is laid
/// out (classic BPF's conditional jumps reach 255 instructions forward,
/// `ja` any distance).
#[derive(Clone, Copy)]
enum Op {
    I(BpfInsn),
    /// Conditional jump: to `then` when true, to the next instruction
    /// otherwise.
    If(u16, u32, Label),
    /// Conditional jump: to the next instruction when true, to `otherwise`
    /// when false.
    Unless(u16, u32, Label),
    Goto(Label),
    At(Label),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    V4,
    V6,
    V4Ports,
    V6Ports,
    Done,
    Default,
}

fn i(code: u16, k: u32) -> Op {
    Op::I(insn(code, 0, 0, k))
}

/// XORs into the hash the windows of the set bits of one input byte, the
/// byte at input position `pos` (its first bit is window `8 * pos`),
/// loaded by `load`.
fn hash_byte(ops: &mut Vec<Op>, key: &[u8], pos: usize, load: BpfInsn) {
    ops.push(Op::I(load));
    ops.push(i(TAX, 0));
    for bit in 0..8 {
        ops.push(i(TXA, 0));
        // Bit clear: skip the three instructions that fold its window in.
        ops.push(Op::I(insn(JSET_K, 0, 3, 0x80 >> bit)));
        ops.push(i(LD_MEM, HASH));
        ops.push(i(XOR_K, window(key, pos * 8 + bit)));
        ops.push(i(ST, HASH));
    }
}

/// Hashes input bytes `from..to` of the flow tuple, found at frame offset
/// `at + (p - from)` for input position `p` (absolute loads).
fn hash_abs(ops: &mut Vec<Op>, key: &[u8], at: u32, from: usize, to: usize) {
    for p in from..to {
        let off = at + (p - from) as u32;
        hash_byte(ops, key, p, insn(LD_B_ABS, 0, 0, LL.wrapping_add(off)));
    }
}

/// The fanout program: queue `(hash & 127) % queues` of each frame.
/// `tunnel`: the uplink is a VXLAN endpoint on that UDP port; the inner
/// flow is hashed and anything that is not VXLAN to it goes to queue 0.
pub fn program(key: &[u8; 40], queues: u32, tunnel: Option<u16>) -> Vec<BpfInsn> {
    let mut ops = Vec::new();
    let base = if let Some(port) = tunnel {
        for (load, off, want) in netqueue::vxlan_checks(port) {
            ops.push(i(load, LL.wrapping_add(off)));
            ops.push(Op::Unless(JEQ_K, want, Label::Default));
        }
        netqueue::INNER
    } else {
        0
    };
    ops.push(i(LD_H_ABS, LL.wrapping_add(base + 12)));
    ops.push(Op::If(JEQ_K, 0x0800, Label::V4));
    ops.push(Op::If(JEQ_K, 0x86dd, Label::V6));
    ops.push(Op::Goto(Label::Default));

    // IPv4: addresses at 12..20 of the header, then the ports after
    // however long the header is (X = IHL * 4).
    let ip = base + 14;
    ops.push(Op::At(Label::V4));
    ops.push(i(LD_IMM, 0));
    ops.push(i(ST, HASH));
    hash_abs(&mut ops, key, ip + 12, 0, 8);
    ops.push(i(LD_H_ABS, LL.wrapping_add(ip + 6)));
    ops.push(Op::If(JSET_K, 0x3fff, Label::Done)); // a fragment: addresses only
    ops.push(i(LD_B_ABS, LL.wrapping_add(ip + 9)));
    ops.push(Op::If(JEQ_K, 6, Label::V4Ports));
    ops.push(Op::If(JEQ_K, 17, Label::V4Ports));
    ops.push(Op::Goto(Label::Done));
    ops.push(Op::At(Label::V4Ports));
    for p in 8..12 {
        ops.push(Op::I(insn(LDX_MSH, 0, 0, LL.wrapping_add(ip))));
        let port_byte = insn(LD_B_IND, 0, 0, LL.wrapping_add(ip + (p - 8) as u32));
        hash_byte(&mut ops, key, p, port_byte);
    }
    ops.push(Op::Goto(Label::Done));

    // IPv6: addresses at 8..40; ports right after the fixed header when
    // the next header is TCP or UDP.
    ops.push(Op::At(Label::V6));
    ops.push(i(LD_IMM, 0));
    ops.push(i(ST, HASH));
    hash_abs(&mut ops, key, ip + 8, 0, 32);
    ops.push(i(LD_B_ABS, LL.wrapping_add(ip + 6)));
    ops.push(Op::If(JEQ_K, 6, Label::V6Ports));
    ops.push(Op::If(JEQ_K, 17, Label::V6Ports));
    ops.push(Op::Goto(Label::Done));
    ops.push(Op::At(Label::V6Ports));
    hash_abs(&mut ops, key, ip + 40, 32, 36);

    ops.push(Op::At(Label::Done));
    ops.push(i(LD_MEM, HASH));
    ops.push(i(AND_K, RETA - 1));
    ops.push(i(MOD_K, queues.max(1)));
    ops.push(i(RET_A, 0));
    ops.push(Op::At(Label::Default));
    ops.push(i(RET_K, 0));
    assemble(&ops)
}

/// Lays the program out: labels to instruction offsets. A conditional
/// jump to a label becomes a short jump over an `ja` to it, so no label is
/// out of a conditional jump's 255-instruction reach.
fn assemble(ops: &[Op]) -> Vec<BpfInsn> {
    let mut flat = Vec::with_capacity(ops.len());
    for op in ops {
        match *op {
            Op::If(code, k, l) => flat.extend([Op::I(insn(code, 0, 1, k)), Op::Goto(l)]),
            Op::Unless(code, k, l) => flat.extend([Op::I(insn(code, 1, 0, k)), Op::Goto(l)]),
            other => flat.push(other),
        }
    }
    let mut at = Vec::new();
    let mut n = 0usize;
    for op in &flat {
        match op {
            Op::At(l) => at.push((*l, n)),
            _ => n += 1,
        }
    }
    let target = |l: Label| at.iter().find(|(x, _)| *x == l).expect("label placed").1;
    let mut out = Vec::with_capacity(n);
    for op in &flat {
        let pc = out.len();
        match *op {
            Op::I(x) => out.push(x),
            Op::Goto(l) => out.push(insn(JA, 0, 0, (target(l) - pc - 1) as u32)),
            Op::At(_) | Op::If(..) | Op::Unless(..) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::uplink::bpf::run;
    use hvnet_offload::rss::{Rss, DEFAULT_KEY};
    use hvnet_offload::testutil::rss_queue;

    fn eth(ethertype: u16, l3: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        f.extend(ethertype.to_be_bytes());
        f.extend(l3);
        f
    }

    fn ipv4(
        src: [u8; 4],
        dst: [u8; 4],
        proto: u8,
        frag: u16,
        options: usize,
        l4: &[u8],
    ) -> Vec<u8> {
        let ihl = 20 + options;
        let mut h = vec![0u8; ihl];
        h[0] = 0x40 | (ihl / 4) as u8;
        h[2..4].copy_from_slice(&((ihl + l4.len()) as u16).to_be_bytes());
        h[6..8].copy_from_slice(&frag.to_be_bytes());
        h[8] = 64;
        h[9] = proto;
        h[12..16].copy_from_slice(&src);
        h[16..20].copy_from_slice(&dst);
        let c = hvnet_wire::checksum::checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend(l4);
        h
    }

    fn ipv6(src: [u8; 16], dst: [u8; 16], next: u8, l4: &[u8]) -> Vec<u8> {
        let mut h = vec![0x60, 0, 0, 0];
        h.extend((l4.len() as u16).to_be_bytes());
        h.extend([next, 64]);
        h.extend(src);
        h.extend(dst);
        h.extend(l4);
        h
    }

    fn l4(proto: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut s = sport.to_be_bytes().to_vec();
        s.extend(dport.to_be_bytes());
        if proto == 6 {
            s.extend([0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
        } else {
            s.extend(8u16.to_be_bytes());
            s.extend([0, 0]);
        }
        s
    }

    fn vxlan(inner: &[u8]) -> Vec<u8> {
        let mut udp = 49152u16.to_be_bytes().to_vec();
        udp.extend(4789u16.to_be_bytes());
        udp.extend(((16 + inner.len()) as u16).to_be_bytes());
        udp.extend([0, 0, 0x08, 0, 0, 0, 0, 0, 42, 0]);
        udp.extend(inner);
        eth(
            0x0800,
            &ipv4([198, 18, 1, 2], [198, 18, 1, 1], 17, 0, 0, &udp),
        )
    }

    /// A spread of frames: IPv4 and IPv6, TCP, UDP and ICMP, fragments, IP
    /// options, and ARP.
    fn frames(seed: u32) -> Vec<Vec<u8>> {
        let b = |k: u32| (seed.wrapping_mul(2654435761).wrapping_add(k * 40503) >> 8) as u8;
        let a4 = |k| [198, 18, b(k), b(k + 1)];
        let mut a6 = [0u8; 16];
        for (k, x) in a6.iter_mut().enumerate() {
            *x = b(k as u32 + 7);
        }
        let mut d6 = a6;
        d6[15] ^= 0x5a;
        let (sp, dp) = (u16::from(b(3)) << 8 | u16::from(b(4)), 5201);
        vec![
            eth(0x0800, &ipv4(a4(0), a4(2), 6, 0, 0, &l4(6, sp, dp))),
            eth(0x0800, &ipv4(a4(0), a4(2), 17, 0, 0, &l4(17, sp, dp))),
            eth(0x0800, &ipv4(a4(0), a4(2), 6, 0, 8, &l4(6, sp, dp))),
            eth(0x0800, &ipv4(a4(0), a4(2), 17, 0x2000, 0, &l4(17, sp, dp))),
            eth(0x0800, &ipv4(a4(0), a4(2), 17, 0x0010, 0, &l4(17, sp, dp))),
            eth(
                0x0800,
                &ipv4(a4(0), a4(2), 1, 0, 0, &[8, 0, 0, 0, 0, 1, 0, 1]),
            ),
            eth(0x86dd, &ipv6(a6, d6, 6, &l4(6, sp, dp))),
            eth(0x86dd, &ipv6(a6, d6, 17, &l4(17, sp, dp))),
            eth(0x86dd, &ipv6(a6, d6, 58, &[128, 0, 0, 0, 0, 1, 0, 1])),
            eth(0x0806, &[0u8; 28]),
        ]
    }

    #[test]
    fn the_program_puts_each_frame_on_the_queue_rss_names() {
        for queues in [1u16, 2, 3, 4, 8] {
            let mut rss = Rss::new(&DEFAULT_KEY, queues).unwrap();
            rss.inner = false;
            let p = program(&DEFAULT_KEY, u32::from(queues), None);
            for seed in 0..64 {
                for f in frames(seed) {
                    assert_eq!(
                        run(&p, &f),
                        u32::from(rss_queue(&rss, &f)),
                        "{queues} queues, {f:02x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_programs_fit_the_kernels_limit() {
        for tunnel in [None, Some(4789)] {
            let n = program(&DEFAULT_KEY, 4, tunnel).len();
            assert!((2000..=4096).contains(&n), "{n} instructions");
        }
    }

    #[test]
    fn a_tunnel_endpoint_hashes_the_inner_flow() {
        let rss = Rss::new(&DEFAULT_KEY, 4).unwrap();
        let p = program(&DEFAULT_KEY, 4, Some(4789));
        let mut used = [false; 4];
        for seed in 0..64 {
            for inner in frames(seed) {
                let f = vxlan(&inner);
                let q = run(&p, &f);
                // An inner frame that is not IP (ARP) is the default
                // queue's; `Rss` would hash the outer headers instead.
                let ip = inner[12..14] != [0x08, 0x06];
                let want = if ip { rss_queue(&rss, &f) } else { 0 };
                assert_eq!(q, u32::from(want), "{f:02x?}");
                used[q as usize] = true;
            }
            // What is not VXLAN is the default queue's.
            assert_eq!(run(&p, &frames(seed)[0]), 0);
        }
        assert_eq!(used, [true; 4], "inner flows spread over every queue");
    }

    /// Microsoft's verification suite (the RSS spec's IPv4 table): the
    /// hash the program folds, before the table, is the published one.
    #[test]
    fn the_folded_hash_is_microsofts() {
        // 66.9.149.187:2794 → 161.142.100.80:1766, TCP: 0x51ccc178.
        let f = eth(
            0x0800,
            &ipv4(
                [66, 9, 149, 187],
                [161, 142, 100, 80],
                6,
                0,
                0,
                &l4(6, 2794, 1766),
            ),
        );
        let mut p = program(&DEFAULT_KEY, 1, None);
        // Return the hash itself: drop the table lookup (and, mod).
        let n = p.len();
        p.remove(n - 4);
        p.remove(n - 4);
        assert_eq!(run(&p, &f), 0x51cc_c178);
    }
}
