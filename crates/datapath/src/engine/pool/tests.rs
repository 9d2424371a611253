//! The pool on real threads, over TAP ports whose queues are socketpairs
//! (no root): queues moved while frames flow, and one destination written
//! by every worker at once.

use crate::engine::SwitchConfig;
use crate::harness::{tap_port, Guest, Harness};
use crate::settings::PortSettings;
use hvnet_offload::testutil::TcpSpec;
use hvnet_wire::MacAddr;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn mac(i: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, i])
}

/// A TCP frame from port `from` to port `to`, its sequence number `seq`,
/// with its virtio-net header.
fn frame(from: u8, to: u8, seq: u32) -> Vec<u8> {
    let mut v = vec![0u8; 12];
    v.extend_from_slice(
        &TcpSpec {
            src_mac: mac(from).0,
            dst_mac: mac(to).0,
            seq,
            payload: vec![7; 64],
            ..TcpSpec::default()
        }
        .build(),
    );
    v
}

/// (source MAC's last byte, TCP sequence number) of a delivered frame.
fn origin(bytes: &[u8]) -> (u8, u32) {
    let f = &bytes[12..];
    (
        f[11],
        u32::from_be_bytes(f[38..42].try_into().expect("a TCP header")),
    )
}

/// A running switch of `n` TAP ports with LRO off (each frame delivered
/// as sent), on two workers, placement by hand only.
fn running(n: u8) -> (Harness, Vec<std::thread::JoinHandle<()>>) {
    let s = PortSettings {
        lro: false,
        ..PortSettings::default()
    };
    let ports: Vec<_> = (1..=n).map(|i| (mac(i), 1, s.clone())).collect();
    let cpu = hvnet_sys::allowed_cpus().unwrap()[0];
    let h = Harness::new(
        &ports,
        SwitchConfig {
            cpus: vec![cpu, cpu],
            rebalance: false,
            ..SwitchConfig::default()
        },
    );
    let threads = h.sw.start();
    (h, threads)
}

fn guest_queue(h: &Harness, port: usize) -> &hvnet_sys::FrameQueue {
    match &h.guests[port] {
        Guest::Tap(q) => &q[0],
        Guest::Replay(_) => unreachable!("TAP ports"),
    }
}

/// Reads what port `port`'s guest got until `want` frames came (or a
/// minute passed: a hang, not a speed, is what this bounds).
fn receive(h: &Harness, port: usize, want: usize, out: &mut Vec<(u8, u32)>) {
    let q = guest_queue(h, port);
    let mut buf = vec![0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < want && Instant::now() < deadline {
        match q.file().read(&mut buf) {
            Ok(n) => out.push(origin(&buf[..n])),
            Err(_) => std::thread::sleep(Duration::from_micros(100)),
        }
    }
}

fn send(h: &Harness, port: usize, bytes: &[u8]) {
    let q = guest_queue(h, port);
    while q.file().write(bytes).is_err() {
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn stop(h: Harness, threads: Vec<std::thread::JoinHandle<()>>) {
    h.sw.stop();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_queue_moved_between_workers_while_frames_flow_loses_and_reorders_nothing() {
    let (h, threads) = running(2);
    // Learn port 2's address first, so that nothing is flooded.
    send(&h, 1, &frame(2, 1, 0));
    let mut got = Vec::new();
    receive(&h, 0, 1, &mut got);
    got.clear();
    let (mut seq, mut moves) = (0u32, 0);
    for round in 0..60 {
        for _ in 0..100 {
            seq += 1;
            send(&h, 0, &frame(1, 2, seq));
        }
        // The queue moves with frames of the round still in its socket.
        let from = h.sw.workers.owner((0, 0)).expect("the queue has a worker");
        if h.sw.workers.move_queue((0, 0), from, 1 - from) {
            moves += 1;
        }
        receive(&h, 1, 100 * (round + 1), &mut got);
    }
    assert_eq!(moves, 60, "every move was made");
    let want: Vec<(u8, u32)> = (1..=seq).map(|s| (1, s)).collect();
    assert_eq!(got, want, "every frame arrived, in order");
    h.check_accounting().unwrap();
    assert_eq!(h.sw.ports()[0].ingress_stats().frames, u64::from(seq));
    stop(h, threads);
}

#[test]
fn a_destination_written_by_every_worker_at_once_gets_each_flow_whole_and_in_order() {
    let (h, threads) = running(3);
    let w0 = h.sw.workers.owner((0, 0)).unwrap();
    let w1 = h.sw.workers.owner((1, 0)).unwrap();
    if w0 == w1 {
        assert!(h.sw.workers.move_queue((1, 0), w1, 1 - w1));
    }
    assert_ne!(h.sw.workers.owner((0, 0)), h.sw.workers.owner((1, 0)));
    send(&h, 2, &frame(3, 1, 0));
    let mut got = Vec::new();
    receive(&h, 0, 1, &mut got);
    got.clear();
    // Rounds of 2 × 50 frames sent at once by two threads (the two
    // workers write port 3 at the same time), each round read before the
    // next: a socketpair, unlike a TAP, refuses writes when full.
    const ROUND: u32 = 50;
    const N: u32 = 40 * ROUND;
    let queues = [guest_queue(&h, 0), guest_queue(&h, 1)];
    for round in 0..N / ROUND {
        std::thread::scope(|s| {
            for (q, from) in queues.iter().zip([1u8, 2]) {
                let mut q = q.file();
                s.spawn(move || {
                    for seq in round * ROUND + 1..=(round + 1) * ROUND {
                        let f = frame(from, 3, seq);
                        while q.write(&f).is_err() {
                            std::thread::sleep(Duration::from_micros(50));
                        }
                    }
                });
            }
        });
        receive(&h, 2, (2 * (round + 1) * ROUND) as usize, &mut got);
    }
    for from in [1u8, 2] {
        let flow: Vec<u32> = got.iter().filter(|o| o.0 == from).map(|o| o.1).collect();
        assert_eq!(
            flow,
            (1..=N).collect::<Vec<_>>(),
            "port {from}'s flow whole and in order"
        );
    }
    h.check_accounting().unwrap();
    stop(h, threads);
}

#[test]
fn ports_added_and_removed_while_a_flow_runs_leave_it_whole_and_are_reachable() {
    let (h, threads) = running(2);
    send(&h, 1, &frame(2, 1, 0));
    let mut got = Vec::new();
    receive(&h, 0, 1, &mut got);
    got.clear();
    let s = PortSettings {
        lro: false,
        ..PortSettings::default()
    };
    let (mut seq, mut added) = (0u32, None);
    let mut buf = vec![0u8; 2048];
    for round in 0..40u8 {
        for _ in 0..50 {
            seq += 1;
            send(&h, 0, &frame(1, 2, seq));
        }
        // A new port (its index the last one's, once that one is gone),
        // reached by a frame from port 1; the last one removed.
        let mac = MacAddr([2, 0, 0, 0, 1, round]);
        let (spec, guest) = tap_port(&format!("n{round}"), mac, 1, s.clone());
        let port = h.sw.add_port(spec).unwrap();
        assert_eq!(
            h.sw.add_port(tap_port(&format!("n{round}"), mac, 1, s.clone()).0)
                .err(),
            Some(crate::TableError::Exists(format!("n{round}")))
        );
        let mut to_new = frame(1, 0, 0);
        to_new[12..18].copy_from_slice(&mac.0);
        send(&h, 0, &to_new);
        let deadline = Instant::now() + Duration::from_secs(60);
        let n = loop {
            match guest[0].file().read(&mut buf) {
                Ok(n) => break n,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(100))
                }
                Err(e) => panic!(
                    "the new port got nothing: {e}; from port 1 {:?}; to the new port {:?}",
                    h.sw.ports()[0].ingress_stats(),
                    port.egress_stats()
                ),
            }
        };
        assert_eq!(&buf[12..18], &mac.0, "the frame reached the new port");
        assert!(n > 12);
        if let Some(old) = added.replace(port) {
            let old: std::sync::Arc<crate::Port> = old;
            let gone = h.sw.remove_port(&old.name).unwrap();
            assert_eq!(gone.state(), crate::PortState::Removed);
            assert!(h.sw.port(&old.name).is_none());
            assert_eq!(
                h.sw.workers.owner((gone.id, 0)),
                h.sw.workers
                    .owner((gone.id, 0))
                    .filter(|_| h.sw.ports().get(gone.id).is_some())
            );
        }
        receive(&h, 1, 50 * (usize::from(round) + 1), &mut got);
    }
    let want: Vec<(u8, u32)> = (1..=seq).map(|s| (1, s)).collect();
    assert!(
        got == want,
        "the flow lost or reordered frames: {} of {}",
        got.len(),
        want.len()
    );
    assert_eq!(
        h.sw.ports().count(),
        3,
        "the two ports and the last one added"
    );
    assert_eq!(
        h.sw.remove_port("nope").err(),
        Some(crate::TableError::NoPort("nope".into()))
    );
    h.check_accounting().unwrap();
    stop(h, threads);
}

#[test]
fn a_shaped_port_is_delivered_by_its_threads_at_its_rate_and_takes_them_when_removed() {
    let (h, threads) = running(2);
    let s = PortSettings {
        lro: false,
        rx_rate: Some(crate::rate::Rate(8_000_000)), // 1 MB/s
        // The least burst: 100 frames of 1,400 bytes are over it.
        rx_burst: Some(crate::rate::Burst(crate::rate::MIN_BURST)),
        ..PortSettings::default()
    };
    let mac = MacAddr([2, 0, 0, 0, 2, 1]);
    let (spec, guest) = tap_port("shaped", mac, 1, s);
    let port = h.sw.add_port(spec).unwrap();
    // Its queue's delivery thread runs (the shaper's pace is kept there).
    let named = |p: &crate::Port| {
        p.threads
            .lock()
            .unwrap()
            .iter()
            .any(|t| t.role == "delivery")
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !named(&port) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(named(&port), "a delivery thread for the shaped port");
    // Frames from port 1 arrive, paced (the bucket's burst, then waits).
    let mut to_shaped = frame(1, 0, 0);
    to_shaped[12..18].copy_from_slice(&mac.0);
    to_shaped.resize(1400, 0);
    for _ in 0..100 {
        send(&h, 0, &to_shaped);
    }
    let mut buf = vec![0u8; 2048];
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while got < 100 && Instant::now() < deadline {
        match guest[0].file().read(&mut buf) {
            Ok(n) => {
                assert_eq!(&buf[12..18], &mac.0, "{n} bytes to the shaped port");
                got += 1
            }
            Err(_) => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    assert_eq!(got, 100);
    assert!(
        port.egress_stats().shaper_waits > 0,
        "{:?}",
        port.egress_stats()
    );
    // Removed, it takes its delivery thread with it.
    let gone = h.sw.remove_port("shaped").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while named(&gone) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!named(&gone), "the delivery thread ended with its port");
    stop(h, threads);
}
