//! The bodies of hvnet's fuzz targets, shared by the cargo-fuzz binaries
//! (coverage-guided exploration, nightly) and by `tests/replay_corpus.rs`
//! (every committed corpus input, on stable, in the test command).
//!
//! Each body feeds outside bytes to a parser or engine and checks the
//! invariants that must hold for any input: no panic, and accounting that
//! adds up.

use hvnet_offload::gro::{GroConfig, GroOutput, GroTable};
use hvnet_offload::gso::{self, CsumMode};
use hvnet_offload::rss::{Rss, DEFAULT_KEY};
use hvnet_offload::{vxlan, CsumState, GsoInfo, OffloadInfo};
use hvnet_wire::{GsoType, Layers, VirtioNetHdr};

/// Every wire view over arbitrary bytes: the header-stack parser, the
/// pretty printer, and the views it hands out.
pub fn wire_layers(data: &[u8]) {
    if let Ok(l) = Layers::parse(data) {
        let _ = l.payload_offset();
        // The inner stack parsed with the outer one is the inner frame's
        // own, and lies within the outer IP packet.
        if let Some(v) = l.vxlan() {
            let (off, end) = (v.inner_offset as usize, l.net().expect("IP").end);
            let own = data
                .get(off..end)
                .ok_or(hvnet_wire::Error::Truncated)
                .and_then(Layers::parse)
                .map(|il| il.without_vxlan());
            assert_eq!(v.inner(), own);
            if let Ok(il) = v.inner() {
                assert!(off + il.net().map_or(0, |n| n.end) <= end);
            }
        }
        if let (Some(n), Some(t)) = (l.net(), l.transport()) {
            assert!(n.offset < t.offset && t.offset + t.header_len <= n.end && n.end <= data.len());
        }
        // A guest's neighbor solicitation, as ND suppression reads it; an
        // answer to it is a well-formed advertisement of that target.
        if let Some(n) = l.net() {
            if let Some(target) = hvnet_wire::nd::solicited_target(&data[n.offset..]) {
                let src: [u8; 16] = data[n.offset + 8..n.offset + 24]
                    .try_into()
                    .expect("16 bytes");
                let f = hvnet_wire::nd::advertisement(
                    hvnet_wire::MacAddr([2; 6]),
                    target,
                    hvnet_wire::MacAddr([4; 6]),
                    src,
                );
                assert_eq!(
                    hvnet_wire::nd::solicited_target(&f[14..]),
                    None,
                    "an advertisement is no solicitation"
                );
                assert_eq!(
                    hvnet_wire::nd::advertised(&f[14..]),
                    Some((target, Some(hvnet_wire::MacAddr([2; 6])))),
                    "and reads back as the advertisement it is"
                );
            }
            // An advertisement as a tunnel endpoint reads it: its target
            // from within the packet.
            if let Some((target, _)) = hvnet_wire::nd::advertised(&data[n.offset..]) {
                assert_eq!(&data[n.offset + 48..n.offset + 64], &target[..]);
            }
        }
    }
    let _ = hvnet_wire::pretty::Pretty(data).to_string();
}

/// A virtio-net header followed by a frame, as a TAP hands them over:
/// parse, validate against the frame, and segment if it says GSO.
pub fn vnet_hdr(data: &[u8]) {
    if data.len() < 12 {
        return;
    }
    let Ok(h) = VirtioNetHdr::parse(data, 12) else {
        return;
    };
    let frame = &data[12..];
    // Parsed once, as at the port; a frame the parser refuses goes no
    // further.
    let Ok(l) = Layers::parse(frame) else {
        return;
    };
    if let Ok(info) = gso::validate_vnet(frame, &h, &l) {
        if let Some(g) = info.gso {
            let mut n = 0;
            if let Ok(count) = gso::segment(frame, &l, g, CsumMode::Partial, &mut |_| n += 1) {
                assert_eq!(count, n);
            }
        }
        let mut out = [0u8; 12];
        info.to_vnet(h.hdr_len).emit(&mut out, 12);
    }
}

/// The stateful GRO table driven by a sequence of API calls decoded from
/// the input: receive a frame (16-bit little-endian length prefix), flush expired, flush all.
/// Frames in must equal frames out plus frames merged.
pub fn gro_table(data: &[u8]) {
    let mut t: GroTable<Vec<u8>> = GroTable::new(GroConfig {
        buckets: 2,
        flows_per_bucket: 2,
        ..GroConfig::default()
    });
    let mut out = 0u64;
    let mut now = 0u64;
    let mut rest = data;
    let mut sink = |o: GroOutput<Vec<u8>>| {
        if let GroOutput::Coalesced(mut c) = o {
            c.fill_checksums();
            let _ = c.to_vec();
        }
        out += 1;
    };
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op % 4 {
            0 | 1 => {
                if rest.len() < 2 {
                    break;
                }
                let len = (u16::from_le_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
                let tail = &rest[2..];
                let (frame, tail) = tail.split_at(len);
                rest = tail;
                let csum = if op & 0x10 != 0 {
                    CsumState::Good
                } else {
                    CsumState::Unknown
                };
                // Parsed first, as the switch parses where a frame
                // enters; one the parser refuses never reaches the table.
                if let Ok(l) = Layers::parse(frame) {
                    t.receive(
                        frame.to_vec(),
                        OffloadInfo { gso: None, csum },
                        &l,
                        now,
                        &mut sink,
                    );
                }
            }
            2 => {
                now += (op >> 2) as u64 * 10_000;
                t.flush_expired(now, &mut sink);
            }
            _ => t.flush_all(&mut sink),
        }
    }
    t.flush_all(&mut sink);
    let s = t.stats();
    assert_eq!(s.frames_out, out);
    assert_eq!(s.frames_in, s.frames_out + s.merged);
    assert_eq!(t.held(), 0);
}

/// GSO of an arbitrary frame with a GSO type and size from the input.
pub fn gso_segment(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let kind = [
        GsoType::TcpV4,
        GsoType::TcpV6,
        GsoType::UdpL4,
        GsoType::None,
    ][data[0] as usize % 4];
    let size = u16::from_le_bytes([data[1], data[2]]);
    let frame = &data[3..];
    let Ok(l) = Layers::parse(frame) else {
        return;
    };
    for mode in [CsumMode::Full, CsumMode::Partial] {
        let mut total = 0usize;
        if gso::segment(
            frame,
            &l,
            GsoInfo {
                kind,
                size,
                ecn: false,
            },
            mode,
            &mut |s| total += s.payload.len(),
        )
        .is_ok()
        {
            assert!(total <= frame.len());
        }
    }
}

/// RSS hashing and VXLAN encap/decap of an arbitrary frame.
pub fn rss_vxlan(data: &[u8]) {
    let rss = Rss::new(&DEFAULT_KEY, 4).expect("default key");
    // Parsed once, as where a frame enters; what the parser refuses is
    // neither hashed, decapsulated nor encapsulated.
    let Ok(l) = Layers::parse(data) else {
        return;
    };
    let q = rss.queue_of(data, &l);
    assert!(q < 4);
    let _ = vxlan::decap(data, &l, OffloadInfo::NONE, hvnet_wire::vxlan::PORT);
    let t = vxlan::Tunnel::new(1, [10, 0, 0, 1], [10, 0, 0, 2]);
    let hash = rss.hash(data, &l).map(|(h, _)| h);
    if let Ok((f, info)) = vxlan::encap(&t, data, hash, OffloadInfo::NONE) {
        let fl = Layers::parse(&f).expect("what we encapsulate parses");
        let d = vxlan::decap(&f, &fl, info, hvnet_wire::vxlan::PORT)
            .expect("what we encapsulate decapsulates");
        assert_eq!(&f[d.inner_offset..d.inner_end], data);
    }
}

/// The switch itself, single-threaded over socketpair ports: up to four
/// ports (one or two queues, settings from the input), then a sequence of
/// operations decoded from the input — a guest sends a virtio-net header
/// and a frame (source and destination MACs often set to real ports'),
/// the switch runs a step, a port's settings change (its features too, so
/// its arcs are rebuilt among the frames: a policer, guards, DHCP
/// snooping, the link; switch-wide, a mirror of everything and security
/// groups), a port is added or
/// removed while frames are in flight, or queues move between workers
/// (the harness's order of turns changes, each queue's state kept). Small buffer caps,
/// so that the caps are hit. Invariants: no panic, every frame accounted
/// (frames in = forwarded + named drops; offered = delivered + drops,
/// nothing left in flight), buffers within each port's cap.
pub fn switch_ops(data: &[u8]) {
    use hvnet_datapath::harness::{Backend, Harness};
    use hvnet_datapath::{Delivery, PortSettings, RxOverflow, SwitchConfig};
    use hvnet_port::PoolCaps;
    use hvnet_wire::MacAddr;

    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    // Which backend each port is: bit i of the second byte, a replay
    // port's in-memory queues, else TAP queues over socketpairs.
    let Some((&kinds, mut rest)) = rest.split_first() else {
        return;
    };
    let nports = 2 + (shape & 3) as usize % 3;
    let mac = |i: usize| MacAddr([2, 0, 0, 0, 0, 1 + i as u8]);
    let settings = |bits: u8| PortSettings {
        lro: bits & 1 != 0,
        csum: bits & 2 != 0,
        mtu: [1500, 9000, 576, 68][(bits >> 2) as usize & 3],
        ring1: [32, 256, 4096][(bits >> 4) as usize % 3],
        ring2: [32, 256, 4096][(bits >> 5) as usize % 3],
        rx_overflow: RxOverflow::Drop,
        delivery: if bits & 0x80 != 0 {
            Delivery::Thread
        } else {
            Delivery::Auto
        },
        allow_forged_transmits: bits & 0x40 != 0,
        ..PortSettings::default()
    };
    let ports: Vec<(MacAddr, usize, PortSettings)> = (0..nports)
        .map(|i| {
            (
                mac(i),
                1 + ((shape >> (2 + i)) & 1) as usize,
                settings(shape.rotate_left(i as u32)),
            )
        })
        .collect();
    let cfg = SwitchConfig {
        pool_caps: PoolCaps {
            small: 64,
            large: 8,
        },
        ..SwitchConfig::default()
    };
    let backends: Vec<Backend> = (0..nports)
        .map(|i| {
            if kinds >> i & 1 != 0 {
                Backend::Replay
            } else {
                Backend::Tap
            }
        })
        .collect();
    // With the second byte's top bit, the ports are on VLANs 1 and 2 in
    // turn, a tenant's two segments, routed at its gateway (whose MAC
    // frames are sent to).
    let gateway = hvnet_datapath::route::DEFAULT_GATEWAY_MAC;
    let routed = kinds & 0x80 != 0;
    let vlans: Vec<u16> = (0..nports).map(|i| if routed { 1 + (i % 2) as u16 } else { 0 }).collect();
    let mut h = Harness::with_backends_on_vlans(&ports, &backends, &vlans, cfg);
    if routed {
        use hvnet_datapath::route::{Gateway, RouterConfig, Tenant};
        let gw = |vlan: u16| Gateway {
            vlan,
            ipv4: (std::net::Ipv4Addr::new(198, 19, vlan as u8, 254), 24),
            ipv6: Some((std::net::Ipv6Addr::new(0xfd80, vlan, 0, 0, 0, 0, 0, 1), 64)),
        };
        let cfg = RouterConfig {
            tenants: vec![Tenant {
                name: "t".into(),
                mac: gateway,
                gateways: vec![gw(1), gw(2)],
                routes: vec![],
                l3: None,
            }],
            neighbours: vec![],
            router_mac: MacAddr([2, 0x72, 0, 0, 0, 1]),
        };
        hvnet_datapath::route::set(&h.sw, Some(cfg));
    }
    // The ports present: id, name, MAC (ids of removed ports are reused).
    let mut live: Vec<(usize, String, MacAddr)> =
        (0..nports).map(|i| (i, format!("p{i}"), mac(i))).collect();
    let mut added = 0u8;
    let mut out = Vec::new();
    let mut frame = Vec::with_capacity(70_000);
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op % 8 {
            0..=4 => {
                if rest.len() < 3 || live.is_empty() {
                    break;
                }
                let at = rest[0] as usize % live.len();
                let port = live[at].0;
                let len = (u16::from_le_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
                let (bytes, tail) = rest[3..].split_at(len);
                rest = tail;
                frame.clear();
                frame.extend_from_slice(bytes);
                // Make most frames look like they come from their port and
                // go to another, so that they get past policy and the FDB.
                if op & 0x10 != 0 && frame.len() >= 12 + 12 {
                    let dst = &live[(at + 1 + (op >> 5) as usize) % live.len()];
                    frame[12..18].copy_from_slice(&dst.2 .0);
                    frame[18..24].copy_from_slice(&live[at].2 .0);
                }
                if routed && op & 0x08 != 0 && frame.len() >= 18 && frame.len() <= 30_000 {
                    frame[12..18].copy_from_slice(&gateway.0);
                }
                if op & 0x08 != 0 && frame.len() > 30_000 {
                    // A large frame, repeated from its head (a GSO frame).
                    let head = frame[..30_000.min(frame.len())].to_vec();
                    frame.extend_from_slice(&head);
                }
                h.send(port, (op >> 5) as usize, &frame);
            }
            5 | 6 => {
                h.step();
                out.clear();
                h.settle(1, &mut out);
            }
            // 7: a change at run time, by bits 3 and 4.
            _ => match (op >> 3) & 3 {
                0 | 1 => {
                    let Some((&bits, tail)) = rest.split_first() else {
                        continue;
                    };
                    rest = tail;
                    let Some((port, name, _)) = live.get((op >> 4) as usize % live.len().max(1))
                    else {
                        continue;
                    };
                    let mut s = settings(bits);
                    // The next byte, where there is one, turns features of
                    // the port on and off (its arcs are rebuilt).
                    if let Some((&feat, tail)) = rest.split_first() {
                        rest = tail;
                        s.tx_rate = (feat & 1 != 0)
                            .then_some(hvnet_datapath::rate::Rate(1_000_000 << (feat >> 5)));
                        s.source_guard = feat & 2 != 0;
                        s.arp_guard = feat & 2 != 0;
                        s.dhcp_guard = feat & 4 != 0;
                        s.dhcp_snooping = feat & 8 != 0;
                        s.connected = feat & 16 != 0 || feat & 1 == 0;
                    }
                    let cur = h.sw.ports()[*port].settings();
                    // Offload flags are ioctls a socketpair cannot take.
                    s.tso = cur.tso;
                    s.csum = cur.csum;
                    let _ = h.sw.set_port(name, s);
                }
                2 if op & 0x20 != 0 && live.len() > 1 => {
                    let (_, name, _) = live.remove((op >> 6) as usize % live.len());
                    h.remove_port(&name).expect("a present port is removed");
                }
                2 if live.len() < 8 => {
                    let Some((&bits, tail)) = rest.split_first() else {
                        continue;
                    };
                    rest = tail;
                    added = added.wrapping_add(1);
                    let (name, m) = (format!("n{added}"), MacAddr([2, 0, 0, 0, 1, added]));
                    // A name reused too soon (256 adds) is refused, and no
                    // port is added.
                    if let Ok(id) = h.add_port(&name, m, 1 + (op >> 6) as usize % 2, settings(bits))
                    {
                        live.push((id, name, m));
                    }
                }
                2 => {}
                // Switch-wide features on and off: a mirror of everything
                // to the last port, security groups that allow everything.
                _ if op & 0x80 != 0 => {
                    use hvnet_datapath::acl::{AclConfig, Action, Direction, Rule, RuleSet};
                    use hvnet_datapath::mirror::{MirrorSpec, Output};
                    let mirrors = match live.last().filter(|_| op & 0x40 != 0) {
                        Some((_, name, _)) => vec![MirrorSpec {
                            name: "m".into(),
                            select_all: true,
                            select_src_port: Vec::new(),
                            select_dst_port: Vec::new(),
                            select_vlan: Vec::new(),
                            output: Output::Port(name.clone()),
                        }],
                        None => Vec::new(),
                    };
                    let _ = h.sw.set_mirrors(mirrors);
                    let rule = |direction| Rule {
                        stateless: op & 0x10 != 0,
                        ..Rule::any("open#0", direction, Action::Allow)
                    };
                    let set = RuleSet {
                        rules: vec![rule(Direction::Out), rule(Direction::In)],
                        groups: vec!["open".into()],
                    };
                    let ports = live.iter().filter(|_| op & 0x20 != 0);
                    h.sw.set_acl(AclConfig {
                        ports: ports.map(|(_, n, _)| (n.clone(), set.clone())).collect(),
                        ..AclConfig::default()
                    });
                }
                _ => h.rebalance((op >> 5) as usize),
            },
        }
    }
    out.clear();
    h.settle(1000, &mut out);
    if let Err(e) = h.check_accounting() {
        panic!("accounting: {e}");
    }
}

/// A VXLAN tunnel endpoint's receive path, as an uplink hands it frames: a
/// virtio-net header and a frame from the wire, checked at the port, then
/// classified (VXLAN to us decapsulated in place, ARP for us answered,
/// the rest dropped). Invariants: no panic; an inner frame is within the
/// outer one and parses; an ARP reply is addressed to the asker.
pub fn vtep_receive(data: &[u8]) {
    use hvnet_port::vxlan::{Received, Vtep, VtepConfig};
    use hvnet_port::{check, Home, Pool, PoolCaps, SizeClass};
    use hvnet_wire::MacAddr;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    // The first byte picks the underlay's family.
    let Some((&family, data)) = data.split_first() else {
        return;
    };
    let home = Home::new(PoolCaps { small: 1, large: 1 });
    let mut pool = Pool::new(home);
    let mut buf = pool.take(SizeClass::Large).expect("one buffer");
    let n = data.len().min(buf.storage().len());
    buf.storage_mut()[..n].copy_from_slice(&data[..n]);
    buf.set_len(n.saturating_sub(12));
    let Ok(pkt) = check(buf, n) else {
        return;
    };
    let outer_len = pkt.len();
    let (local, remote, overhead): (IpAddr, IpAddr, usize) = if family & 1 == 0 {
        (
            Ipv4Addr::new(198, 18, 9, 1).into(),
            Ipv4Addr::new(198, 18, 9, 2).into(),
            50,
        )
    } else {
        (
            Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 1).into(),
            Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 2).into(),
            70,
        )
    };
    let vtep = Vtep::new(
        VtepConfig {
            vni: 42,
            local,
            prefix: 24,
            mac: MacAddr([2, 0, 0, 0, 9, 1]),
            remotes: vec![remote],
            port: 4789,
            udp_csum: false,
            vlans: Vec::new(),
        },
        None,
    );
    match vtep.receive(pkt, std::time::Instant::now()) {
        // A frame marked for a trace is a frame as any other, its mark
        // beside it (a report is consumed, kept bounded).
        Received::Inner(inner) | Received::Traced(inner, ..) => {
            assert!(inner.len() + overhead <= outer_len);
            // The stack it carries is what parsing it afresh gives.
            assert_eq!(Layers::parse(inner.frame()), Ok(inner.meta.layers));
        }
        Received::Report => {}
        Received::Neighbour(Some(reply)) => {
            let reply = reply.bytes();
            assert_eq!(&reply[6..12], &[2, 0, 0, 0, 9, 1]);
            let ethertype = if local.is_ipv6() {
                [0x86, 0xdd]
            } else {
                [8, 6]
            };
            assert_eq!(&reply[12..14], &ethertype);
        }
        Received::Neighbour(None) | Received::Drop(_) => {}
    }
    let _ = vtep.view(std::time::Instant::now());
}

/// A guest's virtqueues as a hostile front end writes them: descriptors
/// with any address, length, flags and next index (outside memory,
/// looping, overlapping, indirect, device-writable on the transmit side),
/// any available ring, and memory contents from the input. hvnet's
/// transmit reader and receive writer run over them (with
/// `virtio-queue`'s mock queue in real guest memory): no panic, every
/// chain taken is given back or left available, no buffer kept. Bit 1
/// of the second byte reads with payloads left in the guest's memory
/// (copied out after, the chains given back at the end of each batch);
/// bit 7 picks a packed ring instead ([`virtqueue_packed`]).
pub fn virtqueue(data: &[u8]) {
    use hvnet_port::virtq::GuestMemoryMmap;
    use hvnet_port::{virtq, Home, Pool, PoolCaps};
    use std::io::IoSlice;
    use virtio_queue::desc::{split::Descriptor, RawDescriptor};
    use virtio_queue::mock::MockSplitQueue;
    use virtio_queue::{Queue, QueueT};
    use vm_memory::{Bytes, GuestAddress};

    if data.len() < 2 {
        return;
    }
    if data[1] & 0x80 != 0 {
        return virtqueue_packed(data);
    }
    let size = 1u16 << (1 + data[0] % 6); // 2..64
    let mergeable = data[1] & 1 != 0;
    let mut rest = &data[2..];
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x20_0000)]).expect("memory");
    let vq = MockSplitQueue::new(&mem, size);
    let mut take = |n: usize| -> Option<&[u8]> {
        if rest.len() < n {
            return None;
        }
        let (a, b) = rest.split_at(n);
        rest = b;
        Some(a)
    };
    for i in 0..size {
        let Some(b) = take(10) else { break };
        let addr = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64 % 0x30_0000;
        let len = u16::from_le_bytes([b[4], b[5]]) as u32 * (1 + (b[6] as u32 & 3));
        let flags = b[7] as u16 & 0x7;
        let next = u16::from_le_bytes([b[8], b[9]]) % (size + 2);
        let _ = vq.desc_table().store(
            i,
            RawDescriptor::from(Descriptor::new(addr, len, flags, next)),
        );
    }
    let avail = take(1).map_or(0, |b| b[0] as u16 % (size * 2 + 1));
    for i in 0..avail.min(size) {
        let head = take(1).map_or(0, |b| b[0] as u16 % (size + 1));
        if let Ok(r) = vq.avail().ring().ref_at(i as usize) {
            r.store(head.to_le());
        }
    }
    vq.avail().idx().store(avail.to_le());
    // The rest fills the guest's buffer area (frames to read).
    let _ = mem.write_slice(rest, GuestAddress(0x10_0000));
    let Ok(mut q) = vq.create_queue::<Queue>() else {
        return;
    };
    let home = Home::new(PoolCaps {
        small: 16,
        large: 2,
    });
    let mut pool = Pool::new(std::sync::Arc::clone(&home));
    if data[1] & 2 != 0 {
        // Payloads left in the guest's memory (one copy guest to guest):
        // each copied out as a stage that reads it would, the chains
        // given back at the end of the batch.
        let shared = std::sync::Arc::new(mem.clone());
        let mut held = virtq::Held::default();
        for _ in 0..(2 * size) {
            let mut out = Vec::new();
            let b = virtq::read_batch_leaving(
                &mut q,
                &shared,
                virtq::Layout::Split,
                &mut pool,
                4,
                &mut out,
                &mut held,
            );
            for mut pkt in out.into_iter().flatten() {
                pkt.buf.fill_pending();
            }
            virtq::complete_batch(&mut q, &shared, virtq::Layout::Split, &mut held);
            assert!(held.is_empty());
            if b.taken == 0 {
                break;
            }
        }
    }
    for _ in 0..(2 * size) {
        match virtq::read_frame(&mut q, &mem, &mut pool) {
            Err(hvnet_port::RecvError::WouldBlock) => break,
            Ok(pkt) => drop(pkt),
            Err(_) => {}
        }
    }
    // The same queue as a receive queue: frames written into whatever
    // chains are left.
    let mut q2 = match vq.create_queue::<Queue>() {
        Ok(q) => q,
        Err(_) => return,
    };
    let hdr = [0u8; 12];
    let body = vec![0xabu8; 3000];
    for len in [60usize, 1500, 3000] {
        let iov = [IoSlice::new(&hdr), IoSlice::new(&body[..len])];
        let _ = virtq::write_frame(&mut q2, &mem, &iov, mergeable);
        // Chains taken are used or put back; the only ones that stay
        // unreported have heads past the table (the queue refuses them),
        // including heads the guest's own buffers overwrote (buffers may
        // overlap its rings).
        assert!(q2.next_avail().wrapping_sub(q2.next_used()) <= size);
    }
    drop(pool);
    let st = home.status();
    assert_eq!(st.small_alive - st.small_idle, 0, "a buffer was kept");
}

/// A packed ring (virtio 1.1, 2.8) as a hostile front end writes it,
/// for [`virtqueue`]: descriptors of any flags (`AVAIL` and `USED` for
/// either wrap counter, `NEXT` chains running around the ring, indirect
/// tables nested or of any length), ids and addresses (outside memory,
/// near the top of the address space, over the ring itself), the
/// position and wrap counter to start at, the ring partly or wholly
/// outside memory, and the driver's event suppression. The ring is read
/// a burst at a time, then, laid again, written into as a receive ring:
/// no panic, no hang (each burst and each frame bounded by the ring), the
/// position always a slot of the ring, no buffer kept.
///
/// Input: the size byte and the flags byte (bit 0 mergeable, bit 6 the
/// wrap counter, bit 5 the event areas outside memory) as for split
/// rings; the start index, the ring's placement (bit 7: the last `b & 63`
/// slots' worth of memory, so the rest lies past its end), the driver's
/// event flags and `off_wrap`, the burst size; ten bytes a slot (address,
/// length, id, flags, length multiplier and high address bit); the rest
/// fills the buffer area at 1 MiB (frames and indirect tables).
fn virtqueue_packed(data: &[u8]) {
    use hvnet_port::virtq::{self, GuestMemoryMmap, Layout};
    use hvnet_port::{Home, Pool, PoolCaps};
    use std::io::IoSlice;
    use virtio_queue::{Queue, QueueT};
    use vm_memory::{Bytes, GuestAddress};

    const MEM: u64 = 0x20_0000;
    const WRAP: u16 = 1 << 15;
    if data.len() < 8 {
        return;
    }
    let size = 1u16 << (1 + data[0] % 6); // 2..64
    let mergeable = data[1] & 1 != 0;
    let wrap = data[1] & 0x40 != 0;
    let start = (u16::from(data[2]) % size) | if wrap { WRAP } else { 0 };
    let ring = if data[3] & 0x80 != 0 {
        MEM - 16 * u64::from(data[3] & 0x3f)
    } else {
        0
    };
    let (driver_area, device_area) = if data[1] & 0x20 != 0 {
        (MEM, MEM + 0x1000)
    } else {
        (0x1000, 0x2000)
    };
    let event_flags = u16::from(data[4] & 3);
    let off_wrap = u16::from_le_bytes([data[5], data[6]]);
    let max = 1 + usize::from(data[7] % 16);
    let mut rest = &data[8..];
    // Each slot: address, length, id, flags (NEXT, WRITE, INDIRECT;
    // bit 3 AVAIL, bit 4 USED), the length's multiplier and, in bit 7
    // of that byte, an address near the top of the address space.
    let mut slots: Vec<[u8; 16]> = Vec::with_capacity(usize::from(size));
    for _ in 0..size {
        let Some((b, r)) = rest.split_first_chunk::<10>() else {
            break;
        };
        rest = r;
        let mut addr = u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])) % 0x30_0000;
        if b[9] & 0x80 != 0 {
            addr |= 0xffff_ffff_0000_0000;
        }
        let len = u32::from(u16::from_le_bytes([b[4], b[5]])) * (1 + u32::from(b[9] & 3));
        let flags = u16::from(b[8] & 0x7)
            | if b[8] & 0x08 != 0 { 1 << 7 } else { 0 }
            | if b[8] & 0x10 != 0 { 1 << 15 } else { 0 };
        let mut raw = [0u8; 16];
        raw[0..8].copy_from_slice(&addr.to_le_bytes());
        raw[8..12].copy_from_slice(&len.to_le_bytes());
        raw[12..14].copy_from_slice(&b[6..8]);
        raw[14..16].copy_from_slice(&flags.to_le_bytes());
        slots.push(raw);
    }
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM as usize)]).expect("memory");
    // The ring and the driver's event area as the input has them (slots
    // past the end of memory are not written); laid again before the
    // receive pass.
    let lay = || {
        for i in 0..u64::from(size) {
            let raw = slots.get(i as usize).copied().unwrap_or([0; 16]);
            let _ = mem.write_slice(&raw, GuestAddress(ring + 16 * i));
        }
        let _ = mem.write_obj(off_wrap.to_le(), GuestAddress(driver_area));
        let _ = mem.write_obj(event_flags.to_le(), GuestAddress(driver_area + 2));
    };
    // The rest fills the guest's buffer area (frames and indirect tables
    // to read).
    let _ = mem.write_slice(rest, GuestAddress(0x10_0000));
    lay();
    let queue = || -> Option<Queue> {
        let mut q = Queue::new(size).ok()?;
        q.set_size(size);
        let split = |a: u64| (Some(a as u32), Some((a >> 32) as u32));
        let (l, h) = split(ring);
        q.set_desc_table_address(l, h);
        let (l, h) = split(driver_area);
        q.set_avail_ring_address(l, h);
        let (l, h) = split(device_area);
        q.set_used_ring_address(l, h);
        q.set_next_avail(start);
        q.set_next_used(start);
        q.set_ready(true);
        Some(q)
    };
    // The queue keeps one position for both sides: a slot of the ring
    // and a wrap counter.
    let check = |q: &Queue| {
        assert!(q.next_avail() & !WRAP < size, "position past the ring");
        assert_eq!(q.next_used(), q.next_avail());
    };
    let Some(mut q) = queue() else {
        return;
    };
    let home = Home::new(PoolCaps {
        small: 16,
        large: 2,
    });
    let mut pool = Pool::new(std::sync::Arc::clone(&home));
    let mut out = Vec::new();
    for _ in 0..(2 * size + 2) {
        let old = virtq::used_mark(&q, Layout::Packed);
        let burst = virtq::read_batch(&mut q, &mem, Layout::Packed, &mut pool, max, &mut out);
        assert!(burst.taken <= max);
        // A ring that cannot be read adds one refusal for the burst.
        assert!(out.len() <= burst.taken + 1);
        check(&q);
        let _ = virtq::wants_signal(&q, &mem, Layout::Packed, old);
        out.clear();
        if burst.taken == 0 {
            break;
        }
    }
    let _ = virtq::set_kicks(&q, &mem, Layout::Packed, true);
    let _ = virtq::set_kicks(&q, &mem, Layout::Packed, false);
    // The same ring, laid again, as a receive ring: frames written into
    // whatever chains it offers, two batches.
    lay();
    let Some(mut q) = queue() else {
        return;
    };
    let hdr = [0u8; 12];
    let body = vec![0xabu8; 3000];
    let iovs: Vec<[IoSlice<'_>; 2]> = [60usize, 1500, 3000]
        .iter()
        .map(|&len| [IoSlice::new(&hdr), IoSlice::new(&body[..len])])
        .collect();
    let frames: Vec<&[IoSlice<'_>]> = iovs.iter().map(|v| &v[..]).collect();
    for _ in 0..2 {
        let mut results = 0;
        let n = virtq::write_batch(
            &mut q,
            &mem,
            Layout::Packed,
            &frames,
            mergeable,
            &mut |_| results += 1,
        );
        assert!(n <= frames.len());
        assert_eq!(n, results);
        check(&q);
    }
    drop(pool);
    let st = home.status();
    assert_eq!(st.small_alive - st.small_idle, 0, "a buffer was kept");
}

/// What a container runtime hands the CNI plugin: the environment's verb
/// and attachment (from the first byte) and the network's configuration
/// (the rest). Read and checked by the plugin's own code, and the port's
/// `[[vm]]` table made from it read by the topology's parser: a typed
/// CNI error, or a table the switch refuses with a line and a reason,
/// never a panic.
pub fn cni_config(data: &[u8]) {
    let Some((&verb, conf)) = data.split_first() else {
        return;
    };
    let command = ["ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION", "PUT"][usize::from(verb % 7)];
    let ifname = ["eth0", "", "a/b", "sixteen-chars-xx"][usize::from(verb >> 6)];
    let var = |k: &str| -> Option<String> {
        match k {
            "CNI_COMMAND" => Some(command.into()),
            "CNI_CONTAINERID" => Some(if verb & 8 == 0 {
                "c1".into()
            } else {
                "-x".into()
            }),
            "CNI_NETNS" => Some("/run/netns/x".into()),
            "CNI_IFNAME" => Some(ifname.into()),
            "CNI_ARGS" => Some("IgnoreUnknown=1;K8S_POD_NAME=p".into()),
            _ => None,
        }
    };
    // The whole call only where it asks no switch anything (a running
    // topology of the configuration's name would get real ports).
    if matches!(command, "VERSION" | "PUT") {
        let (out, ok) = hvnet_cni::run(var, conf);
        let v = out.expect("an answer");
        if ok {
            assert!(v["supportedVersions"].is_array(), "{v}");
        } else {
            assert!(v["code"].as_u64().is_some_and(|c| c > 0), "{v}");
            assert!(v["msg"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        }
    }
    let (Ok(env), Ok(conf)) = (
        hvnet_cni::env::Env::read(var),
        hvnet_cni::config::NetConf::parse(conf),
    ) else {
        return;
    };
    let leases = hvnet_cni::ipam::Leases {
        ips: vec![("198.18.0.2".parse().expect("an address"), 24, None)],
        ..Default::default()
    };
    if let Ok(table) = hvnet_cni::verbs::vm_table(&env, &conf, &leases) {
        if let Err(e) = hvnet_control::topology::parse(&format!("name = \"t\"\n{table}")) {
            assert!(e.line >= 1 && !e.reason.is_empty());
        }
    }
}

/// A control-socket request line as a client may send it: parsed by the
/// daemon's own parser and, when it is a `port set`, merged into a port's
/// settings by the daemon's own merge. Either a clear error or settings
/// whose every field came from the request or the port.
pub fn ctl_request(data: &[u8]) {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let req = hvnet_control::ctl_server::parse_request(line);
    // `hvnet up FILE` on a running topology: the file's text, from the
    // socket, read as a topology ([[mirror]], [ipfix] and the rest) —
    // refused with a line and a reason, never a panic.
    if let Ok(hvnet_control::proto::Request::Apply { text }) = &req {
        if let Err(e) = hvnet_control::topology::parse(text) {
            assert!(e.line >= 1 && !e.reason.is_empty());
        }
    }
    if let Ok(hvnet_control::proto::Request::PortSet { changes, .. }) = req {
        let cur = hvnet_datapath::PortSettings::default();
        match hvnet_control::reconcile::merge::read_changes(&cur, changes.clone()) {
            Ok((new, vlan)) => {
                // A VLAN asked for is one a port can be in.
                assert!(vlan.is_none_or(|v| v <= 4094));
                // Untouched fields keep the port's value.
                if changes.get("mtu").is_none() {
                    assert_eq!(new.mtu, cur.mtu);
                }
                if changes.get("ring1").is_none() {
                    assert_eq!(new.ring1, cur.ring1);
                }
            }
            Err(e) => {
                // A refusal reaches the client typed, as it was.
                let reply = hvnet_control::proto::Reply::new(Err(e.clone()));
                let line = serde_json::to_string(&reply).expect("reply serializes");
                let back: hvnet_control::proto::Reply =
                    serde_json::from_str(&line).expect("reply parses");
                assert_eq!(back.detail, Some(e));
            }
        }
    }
}

/// A hostile vhost-user front end on a real port's socket: any sequence
/// of messages (any request, flags and payload; a shared file of any size
/// attached where the input says, so memory tables and dirty logs name
/// real memory), sent through the port's relay to `vhost-user-backend`.
/// The logging messages are among them: logs outside their file, too
/// small, set before or after tables, `LOG_ALL` on and off,
/// `SEND_RARP`. Whatever arrives, the switch survives it (no panic, no
/// `SIGBUS` from a mapping past a file's end), the connection ends when
/// the front end does, and the port takes the next one.
///
/// Input: messages of `request: u8, flags: u8, size: u8, attach: u8,
/// payload: size bytes`; `attach` > 0 sends a shared file of `attach` ×
/// 16 KiB with the message.
pub fn vhost_front_end(data: &[u8]) {
    use hvnet_port::VhostUserPort;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    static PORT: OnceLock<(VhostUserPort, std::path::PathBuf)> = OnceLock::new();
    let (port, sock) = PORT.get_or_init(|| {
        // In the fuzz crate's target directory, not /tmp: the port lives
        // as long as the process and leaves its socket behind.
        let sock = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target")
            .join(format!("hvnet-fuzz-vu-{}.sock", std::process::id()));
        let port = VhostUserPort::listen("fuzz", &sock, 2, [2, 0, 0, 0, 0, 1], 1500).expect("port");
        (port, sock)
    });
    let before = port.connections();
    let front = UnixStream::connect(sock).expect("the port accepts a front end");
    // Replies are read (and dropped) so that the back end never blocks.
    let reader = {
        let mut r = front.try_clone().expect("clone");
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        })
    };
    let mut rest = data;
    while rest.len() >= 4 {
        let (req, flags, size, attach) = (rest[0], rest[1], rest[2] as usize, rest[3]);
        rest = &rest[4..];
        let payload = &rest[..size.min(rest.len())];
        rest = &rest[payload.len()..];
        let mut msg = Vec::with_capacity(12 + payload.len());
        msg.extend_from_slice(&u32::from(req).to_le_bytes());
        msg.extend_from_slice(&u32::from(flags).to_le_bytes());
        msg.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        msg.extend_from_slice(payload);
        let fds: Vec<OwnedFd> = if attach > 0 {
            vec![shared_file(u64::from(attach) * 16384).into()]
        } else {
            Vec::new()
        };
        if hvnet_sys::scm::send_with_fds(&front, &msg, &fds).is_err() {
            break; // the port ended the connection
        }
    }
    let _ = front.shutdown(std::net::Shutdown::Write);
    let _ = reader.join();
    // The port has let the connection go and is ready for the next.
    let deadline = Instant::now() + Duration::from_secs(10);
    while (port.is_connected() || port.connections() == before) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        !port.is_connected(),
        "the connection ended with the front end ({} connections, {before} before)",
        port.connections()
    );
}

/// A shared file of `len` bytes (already unlinked), as a front end shares
/// guest memory or a dirty log.
fn shared_file(len: u64) -> std::fs::File {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path = format!(
        "/dev/shm/hvnet-fuzz-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .expect("shared file");
    let _ = std::fs::remove_file(&path);
    f.set_len(len).expect("size");
    f
}

/// A domain's XML, as libvirt's hook hands it to the control socket (any
/// bytes a domain's author wrote): read, or refused with a reason; each
/// vhost-user interface read makes a `[[vm]]` table that is TOML, names
/// the interface's socket and MAC as the XML did, and injects no key of
/// its own (a domain's name or a socket's path with quotes, newlines or
/// `]]` in it stays a value).
pub fn libvirt_domain(data: &[u8]) {
    let Ok(xml) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(dom) = hvnet_control::libvirt::domain::parse(xml) else {
        return;
    };
    let lv = hvnet_control::topology::Libvirt {
        sockets: "/run/hvnet-libvirt/fuzz".into(),
        group: "root".into(),
        gid: 0,
        uri: "qemu:///system".into(),
    };
    for nic in &dom.nics {
        let table = hvnet_control::libvirt::vm_table(&lv, &dom, nic);
        let t: toml::Table = toml::from_str(&table).unwrap_or_else(|e| panic!("{e}\n{table}"));
        let vm = t["vm"].as_array().expect("[[vm]]")[0]
            .as_table()
            .expect("a table");
        assert_eq!(t.len(), 1, "one [[vm]] and nothing else: {table}");
        assert_eq!(vm["socket"].as_str(), nic.socket.to_str(), "{table}");
        assert_eq!(vm["mac"].as_str(), Some(nic.mac.to_string().as_str()));
        assert_eq!(
            vm["name"].as_str(),
            Some(hvnet_control::libvirt::port_name(nic).as_str())
        );
        let allowed = [
            "name",
            "kind",
            "mac",
            "queues",
            "connected",
            "socket",
            "mode",
            "socket_group",
            "socket_mode",
            "vlan",
            "vlan_mode",
            "vlans",
            "native_vlan",
            "tx_rate",
            "tx_burst",
            "rx_rate",
            "rx_burst",
            "domain",
            "domain_uuid",
            "alias",
        ];
        assert!(vm.keys().all(|k| allowed.contains(&k.as_str())), "{table}");
    }
}

/// IGMP and MLD messages as snooping reads them, from a whole frame: the
/// header stack, then the message behind it — never a panic; a report's
/// records are as many as it says and each names a group; and what they
/// say, applied to a small multicast database, stays within its limits.
pub fn membership(data: &[u8]) {
    use hvnet_datapath::mdb::{Mdb, MdbLimits, SnoopConfig};
    use hvnet_wire::membership::{is_group, Effect, Message};
    use hvnet_wire::{igmp, mld, NetKind};
    let check = |m: Message<'_>| {
        let mdb = Mdb::new(SnoopConfig {
            querier: true,
            limits: MdbLimits {
                per_port: 4,
                total: 6,
            },
            ..SnoopConfig::default()
        });
        let now = std::time::Instant::now();
        match m {
            Message::Report(r) => {
                let n = r.len();
                let mut seen = 0;
                for (i, rec) in r.enumerate() {
                    assert!(is_group(rec.group));
                    seen += 1;
                    match rec.effect() {
                        Effect::Join => {
                            mdb.join(0, rec.group, i % 3, now);
                        }
                        Effect::Leave => mdb.leave(0, rec.group, i % 3, now),
                        Effect::None => {}
                    }
                }
                assert_eq!(seen, n);
                assert!(mdb.len() <= 6);
            }
            Message::Join(g) | Message::Leave(g) => assert!(is_group(g)),
            Message::Query { group, .. } => assert!(group.is_none_or(is_group)),
            Message::Other => {}
        }
    };
    if let Ok(m) = igmp::parse(data) {
        check(m);
    }
    if let Ok(Some(m)) = mld::parse(data, [0; 16], [0; 16]) {
        check(m);
    }
    let Ok(l) = Layers::parse(data) else {
        return;
    };
    let Some(n) = l.net() else {
        return;
    };
    let Some(body) = data.get(n.offset + n.header_len..n.end) else {
        return;
    };
    match n.kind {
        NetKind::Ipv4 if n.protocol == igmp::PROTOCOL => {
            if let Ok(m) = igmp::parse(body) {
                check(m);
            }
        }
        NetKind::Ipv6 => {
            let ip = &data[n.offset..];
            let (s, d) = (
                ip[8..24].try_into().unwrap(),
                ip[24..40].try_into().unwrap(),
            );
            if let Ok(Some(m)) = mld::parse(body, s, d) {
                check(m);
            }
        }
        _ => {}
    }
}

/// A LACPDU from the wire (after its Ethernet header), as a team member
/// reads one: refused for a reason or parsed; a parsed one written again
/// reads the same, and taken by LACP's state machine (whatever it says of
/// itself) leaves it able to answer.
pub fn lacpdu(data: &[u8]) {
    use hvnet_port::team::lacp::{Lacp, LacpMode, LacpRate};
    use hvnet_wire::lacp::{Packet, Repr, LEN};
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let pdu = Repr::parse(&p);
    let mut out = [0u8; LEN];
    pdu.emit(&mut Packet::new_unchecked(&mut out[..]));
    let back = Repr::parse(&Packet::new_checked(&out[..]).expect("what was emitted parses"));
    assert_eq!(back, pdu);
    let now = std::time::Instant::now();
    let mut l = Lacp::new(
        hvnet_wire::MacAddr([2, 0, 0, 0, 0, 1]),
        1,
        LacpRate::Fast,
        LacpMode::Passive,
        2,
    );
    let _ = l.receive(0, &pdu, now);
    let _ = l.receive(1, &pdu, now);
    l.run(&[true, false], now);
    let _ = l.due(0, now);
    assert!(
        !l.members[1].attached,
        "a member without carrier is never attached"
    );
}

/// Security group rules as a topology file writes them (the input is the
/// text after a VM that takes group `g`): refused with a line inside the
/// text and a reason, or accepted and compiled — no panic, every port's
/// rules within the bound, every port range the right way round.
pub fn acl_rules(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let head = "name = \"f\"\n[[vm]]\nname = \"a\"\nipv4 = \"10.0.0.1/24\"\nsecurity_groups = [\"g\"]\n[[vm]]\nname = \"b\"\nipv6 = \"fd00::2/64\"\nsecurity_groups = [\"h\"]\n";
    let all = format!("{head}{text}");
    match hvnet_control::topology::parse(&all) {
        Err(e) => {
            let (line, reason) = (e.line, &e.reason);
            assert!(
                line >= 1 && line <= all.lines().count() + 1,
                "{line}: {reason}"
            );
            assert!(!reason.is_empty());
        }
        Ok(t) => {
            let cfg = t.acl_config();
            for rules in cfg.ports.values() {
                assert!(rules.rules.len() <= 4096);
                for r in &rules.rules {
                    if let Some((lo, hi)) = r.ports {
                        assert!(lo <= hi);
                    }
                }
            }
            assert!(cfg.limits.max_per_port <= cfg.limits.max);
        }
    }
}

/// The connection tracker over frames from both ways: the input is
/// frames, each a length byte, a byte whose low bit is the stage (in or
/// out) and whose other bits advance the clock, and the frame. Whatever
/// they are: no panic, a table never past its bound, the switch-wide
/// count the tables' sum, and with no rule letting anything in, a frame
/// in passes only as part of what went out (or of an ICMP error about
/// it, or the few messages every port takes).
pub fn conntrack(data: &[u8]) {
    use hvnet_datapath::acl::{
        flow::Flow, Acl, AclConfig, Action, Direction, Limits, Rule, RuleSet,
    };
    let acl = Acl::new();
    let out = Rule::any("g#0", Direction::Out, Action::Allow);
    let mut cfg = AclConfig {
        limits: Limits {
            max_per_port: 16,
            max: 24,
            tcp_be_liberal: false,
        },
        ..AclConfig::default()
    };
    cfg.ports.insert(
        "a".into(),
        RuleSet {
            rules: vec![out],
            groups: vec!["g".into()],
        },
    );
    acl.install(cfg);
    let p = acl.port("a").expect("installed");
    let epoch = std::time::Instant::now();
    let mut now = 0u32;
    let mut rest = data;
    while let [len, ctl, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (frame, next) = tail.split_at(n);
        rest = next;
        now += u32::from(ctl >> 1);
        let stage = if ctl & 1 == 0 {
            Direction::Out
        } else {
            Direction::In
        };
        let Ok(l) = Layers::parse(frame) else {
            continue;
        };
        let Some(f) = Flow::of(frame, &l) else {
            continue;
        };
        let before = p.view(epoch).counters;
        let r = p.check_flow(stage, &f, now);
        let v = p.view(epoch);
        assert!(v.connections <= 16);
        assert_eq!(acl.total(), v.connections);
        if stage == Direction::In && r.is_ok() {
            // Nothing opened from outside: it was a tracked connection's,
            // an error about one, or a message every port takes.
            let c = v.counters;
            assert_eq!((c.new, c.stateless), (before.new, before.stateless));
            assert!(
                c.established + c.related + c.untracked
                    > before.established + before.related + before.untracked
            );
        }
    }
    p.reapply();
    p.flush();
    assert_eq!(acl.total(), 0);
}

/// The guards (`hvnet_datapath::guard`) on any frame a guest sends: the
/// first byte picks the port's guarded families and which other port owns
/// what; the rest is the frame. A frame is passed or named, never a panic;
/// a port with every guard off passes everything; and a port's addresses
/// read from the same bytes as text are refused or read back the same.
pub fn guard(data: &[u8]) {
    use hvnet_datapath::guard::{inspect, Addresses, PortView};
    use hvnet_datapath::PortSettings;
    use hvnet_wire::MacAddr;
    let Some((&pick, frame)) = data.split_first() else {
        return;
    };
    let addresses = match pick & 3 {
        0 => "",
        1 => "198.18.0.1",
        2 => "fd00::1, fe80::/64",
        _ => "198.18.0.1, 198.18.8.0/24, fd00::1",
    };
    let on = PortSettings {
        addresses: Addresses::parse(addresses).expect("valid"),
        ..PortSettings::default()
    };
    let off = PortSettings {
        source_guard: false,
        arp_guard: false,
        nd_guard: false,
        dhcp_guard: false,
        ra_guard: false,
        ..on.clone()
    };
    let mac = MacAddr([2, 0, 0, 0, 0, pick]);
    if let Ok(layers) = Layers::parse(frame) {
        let elsewhere = |ip: std::net::IpAddr| pick & 4 != 0 && !ip.is_loopback();
        let guarded = PortView {
            mac,
            settings: &on,
            owned_elsewhere: elsewhere,
            now: std::time::Instant::now(),
        };
        let _ = inspect(frame, &layers, &guarded);
        let open = PortView {
            mac,
            settings: &off,
            owned_elsewhere: elsewhere,
            now: std::time::Instant::now(),
        };
        assert_eq!(inspect(frame, &layers, &open), Ok(()));
        // DHCP snooping reads a server's ACK: the address it gives is
        // never 0.0.0.0 and its lease is capped.
        if let Some((_, ip, secs)) = hvnet_datapath::lease::acked(frame, &layers) {
            assert!(!ip.is_unspecified() && secs <= hvnet_datapath::lease::MAX_LEASE);
        }
    }
    if let Ok(m) = hvnet_wire::dhcp::Message::new_checked(frame) {
        let _ = (m.message_type(), m.lease_secs(), m.option(pick));
    }
    if let Ok(text) = std::str::from_utf8(frame) {
        if let Ok(a) = Addresses::parse(text) {
            let again = a
                .entries()
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",");
            assert_eq!(Addresses::parse(&again), Ok(a));
        }
    }
}

/// `hvnet trace PORT FLOW`'s words, from the control socket: refused with
/// the word and a reason, or read into a frame that parses as the words
/// describe, whatever the bytes.
pub fn flow_words(data: &[u8]) {
    use hvnet_control::flow_spec::{build, parse, Proto, Resolved};
    let Ok(words) = std::str::from_utf8(data) else {
        return;
    };
    let spec = match parse(words) {
        Ok(s) => s,
        Err(e) => {
            assert!(!e.reason.is_empty());
            assert!(e.word.is_empty() || words.contains(e.word.as_str()) || e.word.chars().count() == 64);
            return;
        }
    };
    for ips in [("198.18.0.1", "198.18.0.2"), ("2001:db8::1", "2001:db8::2")] {
        let r = Resolved {
            smac: hvnet_wire::MacAddr([2, 0, 0, 0, 0, 1]),
            dmac: hvnet_wire::MacAddr([2, 0, 0, 0, 0, 2]),
            vlan: spec.vlan,
            ips: Some((ips.0.parse().unwrap(), ips.1.parse().unwrap())),
        };
        let Ok(f) = build(&spec, &r) else {
            continue;
        };
        let l = Layers::parse(&f).expect("a built frame parses");
        assert_eq!(l.outer_vlan(), spec.vlan);
        if spec.proto != Some(Proto::Arp) {
            let net = l.net().expect("an IP frame");
            if let Some(n) = spec.size {
                assert_eq!(net.end - net.offset, usize::from(n));
            }
        }
    }
}
