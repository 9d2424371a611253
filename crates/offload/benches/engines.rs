//! Throughput of the offload engines, beside the machine's memcpy bandwidth
//! measured in the same run (the ceiling a switch that copies bytes is
//! held to). Run: `cargo bench -p hvnet-offload --features test-utils`.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use hvnet_offload::gro::{GroConfig, GroTable};
use hvnet_offload::gso::{self, CsumMode};
use hvnet_offload::rss::{Toeplitz, DEFAULT_KEY};
use hvnet_offload::testutil::{parsed, TcpSpec, ACK};
use hvnet_offload::{CsumState, GsoInfo, OffloadInfo};
use hvnet_wire::{GsoType, Layers};

const MSS: usize = 1448;

fn memcpy(c: &mut Criterion) {
    let src = vec![7u8; 65536];
    let mut dst = vec![0u8; 65536];
    let mut g = c.benchmark_group("memcpy");
    g.throughput(Throughput::Bytes(65536));
    g.bench_function("64KiB", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&dst);
        })
    });
    // The same copy from and to memory that is not in cache: 64 KiB blocks
    // walking through 256 MiB, the bandwidth a TAP read or write is held to.
    let big_src = vec![3u8; 256 << 20];
    let mut big_dst = vec![0u8; 256 << 20];
    let blocks = big_src.len() / 65536;
    let mut i = 0;
    g.bench_function("64KiB_from_memory", |b| {
        b.iter(|| {
            let r = (i % blocks) * 65536..(i % blocks + 1) * 65536;
            big_dst[r.clone()].copy_from_slice(black_box(&big_src[r]));
            i += 1;
        })
    });
    g.finish();
}

fn checksum(c: &mut Criterion) {
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 31) as u8).collect();
    let mut g = c.benchmark_group("checksum");
    g.throughput(Throughput::Bytes(65536));
    g.bench_function("rfc1071_64KiB", |b| {
        b.iter(|| hvnet_wire::checksum::checksum(black_box(&data)))
    });
    g.finish();
}

/// 64 flows, each with 44 in-order 1448-byte segments (one 64 KiB run per
/// flow), interleaved round-robin, as many parallel streams arrive.
fn interleaved_segments(flows: u16) -> Vec<Vec<u8>> {
    let per_flow = 44;
    let mut frames = Vec::new();
    for i in 0..per_flow {
        for f in 0..flows {
            frames.push(
                TcpSpec {
                    src_port: 10000 + f,
                    seq: (i * MSS) as u32,
                    ident: i as u16,
                    flags: ACK,
                    payload: vec![f as u8; MSS],
                    ..TcpSpec::default()
                }
                .build(),
            );
        }
    }
    frames
}

fn gro(c: &mut Criterion) {
    let frames = interleaved_segments(
        std::env::var("GRO_FLOWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(64),
    );
    let mut g = c.benchmark_group("gro");
    g.throughput(Throughput::Elements(frames.len() as u64));
    for (name, csum) in [
        ("64_flows_csum_offloaded", CsumState::Good),
        ("64_flows_csum_validated", CsumState::Unknown),
    ] {
        // Buffers are borrowed (`&[u8]`): the engine holds references, not
        // copies, exactly as the switch holds pool buffers.
        // 64 buckets: the flows fit without evictions (Linux's 8x8 table would
        // evict on hash collisions with 64 flows).
        let mut table: GroTable<&[u8]> = GroTable::new(GroConfig {
            buckets: 64,
            ..GroConfig::default()
        });
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut out = 0usize;
                table.coalesce_burst(
                    // Each frame parsed as it is taken (as the switch
                    // parses where a frame enters): the parse is measured.
                    frames
                        .iter()
                        .map(|f| parsed(f.as_slice(), OffloadInfo { gso: None, csum })),
                    0,
                    &mut |o| {
                        out += 1;
                        if let hvnet_offload::gro::GroOutput::Coalesced(c) = o {
                            black_box(c.header());
                        }
                    },
                );
                black_box(out)
            })
        });
    }
    g.finish();
}

fn gso_bench(c: &mut Criterion) {
    let frame = TcpSpec {
        payload: vec![0x5a; 65536 - 54 - 14],
        flags: ACK,
        ..TcpSpec::default()
    }
    .build();
    let payload = frame.len() - 54;
    let mut g = c.benchmark_group("gso");
    g.throughput(Throughput::Bytes(payload as u64));
    for (name, mode) in [
        ("64KiB_to_1448_full_csum", CsumMode::Full),
        ("64KiB_to_1448_partial_csum", CsumMode::Partial),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || (),
                |_| {
                    let mut n = 0;
                    // Parsed in the loop, as the segmenting used to parse
                    // it: the figures stay comparable.
                    let frame = black_box(&frame);
                    let l = Layers::parse(frame).unwrap();
                    gso::segment(
                        frame,
                        &l,
                        GsoInfo {
                            kind: GsoType::TcpV4,
                            size: MSS as u16,
                            ecn: false,
                        },
                        mode,
                        &mut |s| {
                            black_box(s.header);
                            n += 1;
                        },
                    )
                    .unwrap();
                    n
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn toeplitz(c: &mut Criterion) {
    let t = Toeplitz::new(&DEFAULT_KEY).unwrap();
    let tuples: Vec<[u8; 12]> = (0..1024u32)
        .map(|i| {
            let mut b = [0u8; 12];
            b[..4].copy_from_slice(&(0x0a00_0000 | i).to_be_bytes());
            b[4..8].copy_from_slice(&[10, 1, 0, 1]);
            b[8..10].copy_from_slice(&(40000 + i as u16).to_be_bytes());
            b[10..12].copy_from_slice(&5201u16.to_be_bytes());
            b
        })
        .collect();
    let mut g = c.benchmark_group("rss");
    g.throughput(Throughput::Elements(tuples.len() as u64));
    g.bench_function("toeplitz_tcp_ipv4", |b| {
        b.iter(|| {
            tuples
                .iter()
                .fold(0u32, |acc, x| acc ^ t.hash(black_box(x)))
        })
    });
    g.finish();
}

criterion_group!(benches, memcpy, checksum, gro, gso_bench, toeplitz);
criterion_main!(benches);
