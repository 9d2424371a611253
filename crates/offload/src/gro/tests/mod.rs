use super::*;
use crate::meta::{CsumState, GsoInfo, OffloadInfo};
use crate::testutil::{parsed, vxlan_wrap, TcpSpec, ACK};
use hvnet_wire::tcp::flags::*;
use hvnet_wire::GsoType;

const P: usize = 100;

/// Runs a burst through a one-bucket table (like the kernel with no rx hash)
/// and returns, per output frame, its TCP payload length.
fn run(frames: &[Vec<u8>]) -> Vec<usize> {
    run_out(frames)
        .iter()
        .map(|o| payload_len(&o.to_vec()))
        .collect()
}

fn run_out(frames: &[Vec<u8>]) -> Vec<GroOutput<Vec<u8>>> {
    let mut t = GroTable::new(GroConfig {
        buckets: 1,
        ..GroConfig::default()
    });
    let mut outs = Vec::new();
    t.coalesce_burst(
        frames.iter().map(|f| parsed(f.clone(), OffloadInfo::NONE)),
        0,
        &mut |o| outs.push(o),
    );
    assert_eq!(t.held(), 0);
    outs
}

fn payload_len(f: &[u8]) -> usize {
    let l = hvnet_wire::Layers::parse(f).unwrap();
    let n = l.net().unwrap();
    match l.transport() {
        Some(t) => n.end - t.offset - t.header_len,
        None => n.end - n.offset - n.header_len,
    }
}

fn seg(i: u32, len: usize) -> TcpSpec {
    TcpSpec {
        seq: 100 + i * P as u32,
        payload: vec![b'a'; len],
        ..TcpSpec::default()
    }
}

fn seg6(i: u32, len: usize) -> TcpSpec {
    TcpSpec {
        seq: 100 + i * P as u32,
        payload: vec![b'a'; len],
        ..TcpSpec::v6()
    }
}

fn fin() -> Vec<u8> {
    TcpSpec {
        seq: 300,
        flags: ACK | FIN,
        payload: vec![],
        ..TcpSpec::default()
    }
    .build()
}

mod flush_rules;
mod selftest;
