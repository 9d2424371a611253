//! Classic BPF as the uplink's fanout programs use it: the opcodes, loads
//! relative to the link-layer header, and (for tests) an interpreter that
//! runs a program over a frame as the kernel would.

use hvnet_sys::BpfInsn;

/// `SKF_LL_OFF`: loads from here on are relative to the link-layer header
/// (the kernel runs fanout programs with the frame's data at its network
/// header).
pub(crate) const LL: u32 = (-0x20_0000i32) as u32;
pub(crate) const LD_W_ABS: u16 = 0x20;
pub(crate) const LD_H_ABS: u16 = 0x28;
pub(crate) const LD_B_ABS: u16 = 0x30;
pub(crate) const LD_B_IND: u16 = 0x50;
pub(crate) const LD_IMM: u16 = 0x00;
pub(crate) const LD_MEM: u16 = 0x60;
pub(crate) const LDX_MSH: u16 = 0xb1;
pub(crate) const ST: u16 = 0x02;
pub(crate) const TAX: u16 = 0x07;
pub(crate) const TXA: u16 = 0x87;
pub(crate) const XOR_K: u16 = 0xa4;
pub(crate) const AND_K: u16 = 0x54;
pub(crate) const MOD_K: u16 = 0x94;
pub(crate) const JA: u16 = 0x05;
pub(crate) const JEQ_K: u16 = 0x15;
pub(crate) const JSET_K: u16 = 0x45;
pub(crate) const RET_K: u16 = 0x06;
pub(crate) const RET_A: u16 = 0x16;

/// One instruction.
pub(crate) fn insn(code: u16, jt: u8, jf: u8, k: u32) -> BpfInsn {
    BpfInsn { code, jt, jf, k }
}

/// Runs classic BPF as the kernel would, loads relative to the
/// link-layer header; a load past the end ends the program with 0.
#[cfg(test)]
pub(crate) fn run(p: &[BpfInsn], frame: &[u8]) -> u32 {
    let (mut pc, mut a, mut x) = (0usize, 0u32, 0u32);
    let mut mem = [0u32; 16];
    let load = |off: usize, n: usize| {
        frame
            .get(off..off + n)
            .map(|b| b.iter().fold(0u32, |v, &y| v << 8 | u32::from(y)))
    };
    assert!(
        p.len() <= 4096,
        "the kernel takes at most 4096 instructions"
    );
    loop {
        let ins = p[pc];
        let off = ins.k.wrapping_sub(LL) as usize;
        match ins.code {
            LD_W_ABS | LD_H_ABS | LD_B_ABS => {
                let n = match ins.code {
                    LD_W_ABS => 4,
                    LD_H_ABS => 2,
                    _ => 1,
                };
                match load(off, n) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            LD_B_IND => match load(off + x as usize, 1) {
                Some(v) => a = v,
                None => return 0,
            },
            LDX_MSH => match load(off, 1) {
                Some(v) => x = (v & 0xf) * 4,
                None => return 0,
            },
            LD_IMM => a = ins.k,
            LD_MEM => a = mem[ins.k as usize],
            ST => mem[ins.k as usize] = a,
            TAX => x = a,
            TXA => a = x,
            XOR_K => a ^= ins.k,
            AND_K => a &= ins.k,
            MOD_K => a %= ins.k,
            JA => pc += ins.k as usize,
            JEQ_K => pc += if a == ins.k { ins.jt } else { ins.jf } as usize,
            JSET_K => pc += if a & ins.k != 0 { ins.jt } else { ins.jf } as usize,
            RET_K => return ins.k,
            RET_A => return a,
            c => panic!("unexpected opcode {c:#x}"),
        }
        pc += 1;
    }
}
