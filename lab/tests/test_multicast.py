"""The multicast experiment's logic without running anything: the BPF
filter that counts a group's frames in a VM (run here by a small classic
BPF interpreter over frames built by hand), a run's figures from two
snapshots, and where each configuration is drawn."""

import ipaddress
import struct

from hvnet_lab import mcast_peer
from hvnet_lab.multicast import CONFIGS, label, place, receivers, stat_fields, window


def run_bpf(prog, frame):
    """Classic BPF as the kernel runs the instructions the filter uses
    (absolute loads, jeq against a constant, return): the bytes to keep."""
    pc, a = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code in (0x20, 0x28, 0x30):
            size = {0x20: 4, 0x28: 2, 0x30: 1}[code]
            if k + size > len(frame):
                return 0
            a = int.from_bytes(frame[k:k + size], "big")
            pc += 1
        elif code == 0x15:
            pc += 1 + (jt if a == k else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"instruction {code:#x}")


def udp_frame(group="239.1.1.1", port=5001, mac=None, proto=17, ethertype=0x0800):
    mac = mac if mac is not None else mcast_peer.group_mac(group)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + 100, 0, 0, 1, proto, 0, bytes([198, 18, 80, 1]),
                     ipaddress.IPv4Address(group).packed)
    return mac + bytes(6) + struct.pack("!H", ethertype) + ip + struct.pack("!HHHH", 40000, port, 108, 0) + bytes(100)


def test_a_groups_mac_is_01_00_5e_and_its_low_23_bits():
    assert mcast_peer.group_mac("239.1.1.1").hex(":") == "01:00:5e:01:01:01"
    assert mcast_peer.group_mac("239.129.1.1").hex(":") == "01:00:5e:01:01:01"
    assert mcast_peer.group_mac("224.0.0.251").hex(":") == "01:00:5e:00:00:fb"


def test_the_filter_takes_the_groups_udp_frames_to_its_port_and_nothing_else():
    prog = mcast_peer.bpf_program("239.1.1.1", 5001)
    assert len(struct.pack("HBBI", *prog[0])) == 8
    assert run_bpf(prog, udp_frame()) == 64
    # Another port, another group (its MAC the same: 23 bits), another
    # MAC, not UDP (an IGMP report to the group), not IPv4, a short frame.
    assert run_bpf(prog, udp_frame(port=5002)) == 0
    assert run_bpf(prog, udp_frame(group="239.129.1.1")) == 0
    assert run_bpf(prog, udp_frame(mac=bytes.fromhex("01005e010102"))) == 0
    assert run_bpf(prog, udp_frame(proto=2)) == 0
    assert run_bpf(prog, udp_frame(ethertype=0x86DD)) == 0
    assert run_bpf(prog, udp_frame()[:30]) == 0


def snap(t, ticks, sent, members, others, switch=None):
    stat = dict(user=ticks["user"], nice=0, system=ticks["system"], idle=ticks["idle"], iowait=0, irq=0,
                softirq=ticks["softirq"], steal=0)
    return {"t": t, "stat": stat, "switch_ticks": switch, "sent": sent,
            "members": [{"l2": m, "app": m} for m in members], "others": [{"l2": o} for o in others]}


def test_a_runs_figures_are_per_frame_delivered_to_a_member_over_the_window():
    hz = 100
    a = snap(10.0, dict(user=0, system=0, idle=0, softirq=0), 1000, [0, 0], [5, 5], switch=0)
    # 2 s: 2 members got 8,000 each of 8,000 sent; the others 2 frames;
    # the daemon 50 ticks (0.5 s), the machine 100 busy ticks (1 s).
    b = snap(12.0, dict(user=30, system=40, idle=300, softirq=30), 9000, [8000, 8000], [6, 6], switch=50)
    r = window(a, b, 2, hz)
    assert r["delivered"] == 16000 and r["sent"] == 8000 and r["nonmember_frames"] == 2
    assert r["delivered_pct"] == 100.0 and r["nonmember_per_s"] == 1.0
    assert abs(r["switch_ns_per_frame"] - 0.5e9 / 16000) < 1e-6
    assert abs(r["machine_ns_per_frame"] - 1e9 / 16000) < 1e-6
    assert abs(r["busy_cores"] - 0.5) < 1e-9 and abs(r["switch_cores"] - 0.25) < 1e-9
    assert abs(r["sent_mbps"] - 8000 * 1472 * 8 / 2 / 1e6) < 1e-9
    # The bridge: no daemon; its CPU is the machine's softirq time.
    a["switch_ticks"] = b["switch_ticks"] = None
    r = window(a, b, 2, hz)
    assert abs(r["switch_ns_per_frame"] - 0.3e9 / 16000) < 1e-6
    # Nothing delivered: no division by zero.
    b["members"] = a["members"]
    assert window(a, b, 2, hz)["delivered_pct"] == 0.0


def test_proc_stat_and_the_configurations():
    f = stat_fields("cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 1 1 1 1 1 1 1 1 0 0\n")
    assert f == dict(user=1, nice=2, system=3, idle=4, iowait=5, irq=6, softirq=7, steal=8)
    assert receivers(16) == ([f"r{i}" for i in range(4)], [f"r{i}" for i in range(4, 16)])
    assert receivers(8)[0] == ["r0", "r1"]
    assert [label(c) for c in CONFIGS][:2] == ["hvnet snooping split", "hvnet snooping together"]
    assert place(("hvnet", "flooding", "split")) == ("hvnet, SplitRxMode on", "flooding")
    assert place(("hvnet", "snooping", "together")) == ("hvnet, SplitRxMode off", "snooping")
    assert place(("bridge", "snooping", None)) == ("Linux bridge", "snooping")
    # Every series has both forwardings, every point one configuration.
    assert len({place(c) for c in CONFIGS}) == len(CONFIGS) == 6
