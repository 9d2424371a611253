//! The cases of Linux's `tools/testing/selftests/net/gro.c`.

use super::*;
// ---- The cases of tools/testing/selftests/net/gro.c, with the kernel's
// expected payload lengths. Each ends with the selftest's FIN packet.

#[test]
fn selftest_data_same_size() {
    assert_eq!(
        run(&[seg(0, P).build(), seg(1, P).build(), fin()]),
        vec![200, 0]
    );
}

#[test]
fn selftest_data_large_then_smaller() {
    assert_eq!(
        run(&[seg(0, P).build(), seg(1, P / 2).build(), fin()]),
        vec![150, 0]
    );
}

#[test]
fn selftest_data_small_then_larger() {
    let a = seg(0, P / 2).build();
    let b = TcpSpec {
        seq: 150,
        ..seg(0, P)
    }
    .build();
    assert_eq!(run(&[a, b, fin()]), vec![50, 100, 0]);
}

#[test]
fn selftest_pure_and_duplicate_acks() {
    let ack = TcpSpec {
        payload: vec![],
        ..TcpSpec::default()
    };
    let ack2 = TcpSpec {
        ack: 101,
        ..ack.clone()
    };
    assert_eq!(
        run(&[ack.build(), ack.build(), ack2.build(), fin()]),
        vec![0, 0, 0, 0]
    );
}

fn flag_case(flag: u8, with_payload: bool) -> Vec<usize> {
    let mut frames = Vec::new();
    for i in 0..5u32 {
        if i == 2 {
            let len = if with_payload { P } else { 0 };
            frames.push(
                TcpSpec {
                    flags: ACK | flag,
                    ..seg(2, len)
                }
                .build(),
            );
        } else {
            frames.push(seg(i, P).build());
        }
    }
    frames.push(fin());
    run(&frames)
}

#[test]
fn selftest_psh_ends_coalescing() {
    assert_eq!(flag_case(PSH, true), vec![300, 200, 0]);
}

#[test]
fn selftest_syn_rst_urg_end_coalescing() {
    for f in [SYN, RST, URG] {
        assert_eq!(flag_case(f, false), vec![200, 0, 200, 0], "flag {f:#x}");
    }
}

#[test]
fn selftest_changed_checksum_does_not_coalesce() {
    let mut b = seg(1, P).build();
    let c = 14 + 20 + 16;
    b[c + 1] = b[c + 1].wrapping_sub(1);
    let out = run_out(&[seg(0, P).build(), b]);
    // The bad packet goes up at once, before the held run: no pp in Linux.
    assert_eq!(
        out.iter()
            .map(|o| payload_len(&o.to_vec()))
            .collect::<Vec<_>>(),
        vec![100, 100]
    );
    assert_eq!(out[0].info().csum, CsumState::Bad);
}

#[test]
fn selftest_wrong_seq_does_not_coalesce() {
    let b = TcpSpec {
        seq: 201,
        ..seg(1, P)
    }
    .build();
    assert_eq!(run(&[seg(0, P).build(), b, fin()]), vec![100, 100, 0]);
}

fn ts_opts(order: u8, ts: u32) -> Vec<u8> {
    let mut t = vec![8, 10];
    t.extend_from_slice(&ts.to_ne_bytes());
    t.extend_from_slice(&[0, 0, 0, 0]);
    match order {
        0 => [vec![1, 1], t].concat(),
        1 => [vec![1], t, vec![1]].concat(),
        _ => [t, vec![1, 1]].concat(),
    }
}

#[test]
fn selftest_different_timestamps_do_not_coalesce() {
    let f = |i: u32, ts: u32, order: u8| {
        TcpSpec {
            options: ts_opts(order, ts),
            ..seg(i, P)
        }
        .build()
    };
    let out = run(&[
        f(0, 0, 0),
        f(1, 0, 0),
        f(2, 100, 0),
        f(3, 100, 1),
        f(4, 100, 2),
        fin(),
    ]);
    assert_eq!(out, vec![200, 100, 100, 100, 0]);
}

#[test]
fn selftest_different_options_do_not_coalesce() {
    let a = TcpSpec {
        options: ts_opts(0, 0),
        ..seg(0, P)
    }
    .build();
    let b = TcpSpec {
        options: ts_opts(0, 0),
        ..seg(1, P)
    }
    .build();
    let c = TcpSpec {
        options: vec![1, 3, 3, 0],
        ..seg(2, P)
    }
    .build();
    assert_eq!(run(&[a, b, c, fin()]), vec![200, 100, 0]);
}

#[test]
fn selftest_ip_ecn_tos_ttl_do_not_coalesce() {
    for spec in [
        TcpSpec {
            tos: 2,
            ..seg(1, P)
        },
        TcpSpec {
            tos: 1,
            ..seg(1, P)
        },
        TcpSpec {
            ttl: 7,
            ..seg(1, P)
        },
    ] {
        assert_eq!(
            run(&[seg(0, P).build(), spec.build(), fin()]),
            vec![100, 100, 0]
        );
    }
    let tc = TcpSpec {
        tos: 0xf0,
        ..seg6(1, P)
    };
    let fin6 = TcpSpec {
        seq: 300,
        flags: ACK | FIN,
        payload: vec![],
        ..TcpSpec::v6()
    }
    .build();
    assert_eq!(
        run(&[seg6(0, P).build(), tc.build(), fin6]),
        vec![100, 100, 0]
    );
}

#[test]
fn selftest_ipv4_options_do_not_coalesce() {
    let mut opt = seg(1, P).build();
    opt.splice(34..34, [0x44, 12, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut ip = hvnet_wire::Ipv4Packet::new_unchecked(&mut opt[14..]);
    ip.set_version_and_header_len(32);
    ip.set_total_len(20 + 12 + 20 + P as u16);
    ip.fill_checksum();
    // Linux passes the option packet up at once; held runs stay held.
    assert_eq!(
        run(&[seg(0, P).build(), opt, seg(2, P).build()]),
        vec![100, 100, 100]
    );
}

#[test]
fn selftest_ipv4_fragment_does_not_coalesce() {
    let mut frag = seg(1, P).build();
    let mut ip = hvnet_wire::Ipv4Packet::new_unchecked(&mut frag[14..]);
    ip.set_flags_frag(0x6000);
    ip.fill_checksum();
    let out = run_out(&[seg(0, P).build(), frag]);
    assert_eq!(out.len(), 2);
}

#[test]
fn selftest_ip_id_cases() {
    let mk = |i: u32, id: u16, df: bool| {
        TcpSpec {
            ident: id,
            df,
            ..seg(i, P)
        }
        .build()
    };
    assert_eq!(
        run(&[mk(0, 8, true), mk(1, 9, true)]),
        vec![200],
        "DF=1 incrementing"
    );
    assert_eq!(
        run(&[mk(0, 8, true), mk(1, 8, true)]),
        vec![200],
        "DF=1 fixed"
    );
    assert_eq!(
        run(&[mk(0, 8, false), mk(1, 9, false)]),
        vec![200],
        "DF=0 incrementing"
    );
    assert_eq!(
        run(&[mk(0, 8, false), mk(1, 8, false)]),
        vec![200],
        "DF=0 fixed"
    );
    assert_eq!(
        run(&[mk(0, 8, true), mk(1, 9, true), mk(2, 9, true)]),
        vec![200, 100]
    );
    assert_eq!(
        run(&[mk(0, 8, true), mk(1, 8, true), mk(2, 9, true)]),
        vec![200, 100]
    );
}

#[test]
fn selftest_ipv6_fragment_and_ext_headers() {
    let frag = TcpSpec {
        ext: vec![6, 0, 0, 0, 0, 0, 0, 0],
        first_ext: 44,
        ..seg6(2, P)
    }
    .build();
    // The fragment goes up at once (its length here counts the TCP header,
    // which is not parsed in a fragment); the run then ends at the gap.
    assert_eq!(
        run(&[
            seg6(0, P).build(),
            seg6(1, P).build(),
            frag,
            seg6(3, P).build()
        ]),
        vec![120, 200, 100]
    );
    let hbh = |i: u32, b: u8| {
        TcpSpec {
            ext: vec![6, 0, b, b, b, b, b, b],
            first_ext: 0,
            ..seg6(i, P)
        }
        .build()
    };
    assert_eq!(
        run(&[hbh(0, 0), hbh(1, 0)]),
        vec![200],
        "same ext header coalesces"
    );
    assert_eq!(
        run(&[hbh(0, 0), hbh(1, 0x11)]),
        vec![100, 100],
        "different ext payload does not"
    );
}

#[test]
fn selftest_large_does_not_exceed_64k() {
    for v6 in [false, true] {
        let mss = 4096 - 20 - 40;
        let max_payload = 65535 - 20 - 40;
        let offset = if v6 { 0 } else { 20 };
        let n = max_payload / mss;
        let remainder = (max_payload + offset) % mss;
        let base = if v6 {
            TcpSpec::v6()
        } else {
            TcpSpec::default()
        };
        let mk = |seq: usize, len: usize| {
            TcpSpec {
                seq: seq as u32,
                payload: vec![b'a'; len],
                ..base.clone()
            }
            .build()
        };
        let mut frames: Vec<_> = (0..n).map(|i| mk(i * mss, mss)).collect();
        frames.push(mk(n * mss, remainder));
        frames.push(mk((n + 1) * mss, remainder));
        assert_eq!(
            run(&frames),
            vec![max_payload + offset, remainder],
            "v6 {v6}"
        );
        let mut frames: Vec<_> = (0..n).map(|i| mk(i * mss, mss)).collect();
        frames.push(mk(n * mss, remainder + 1));
        frames.push(mk((n + 1) * mss, remainder + 1));
        assert_eq!(
            run(&frames),
            vec![
                max_payload + offset - remainder,
                remainder + 1,
                remainder + 1
            ]
        );
    }
}
