"""Ring exhaustion, as in CPU Scheduling and VMXNET3 Ring Exhaustion (part
2): a receiving VM whose "vCPU" (its delivery thread, and its iperf3
server) is held to a small CPU share by a cgroup quota, with many parallel
streams. With 256-entry rings, ring-full drops appear and the sender
retransmits; with 4096-entry rings both fall sharply."""

import json

import pytest

import hvlab

pytestmark = pytest.mark.root


def nstat_retrans(t, vm):
    out = t.sh(vm, "nstat -az TcpRetransSegs").stdout
    return int(next(line.split()[1] for line in out.splitlines() if line.startswith("TcpRetransSegs")))


def run_load(t, seconds=4):
    r0 = nstat_retrans(t, "a")
    d0 = t.stats("/ports/b/rx_summary")
    out = t.sh("a", f"iperf3 -c 10.71.0.2 -t {seconds} -P 12 -J", timeout=seconds + 60).stdout
    d1 = t.stats("/ports/b/rx_summary")
    drops = sum(d1[k] - d0[k] for k in ("drop_ring1_full", "drop_ring2_full"))
    # Under the quota the server's own totals may not reach the client
    # (iperf3 then reports the sender's only); the rate is shown, not judged.
    end = json.loads(out)["end"]
    total = end.get("sum_received") or end.get("sum_sent") or {}
    return {
        "gbps": total.get("bits_per_second", 0) / 1e9,
        "ring_drops": drops,
        "ring1_full": d1["drop_ring1_full"] - d0["drop_ring1_full"],
        "ring2_full": d1["drop_ring2_full"] - d0["drop_ring2_full"],
        "retransmits": nstat_retrans(t, "a") - r0,
    }


def test_small_rings_drop_under_cpu_contention_and_big_rings_do_not(tmp_path):
    # The VMXNET3 behaviour under study: one queue, a full ring drops, and
    # the VM's delivery thread (its "vCPU") does all the delivery work.
    vms = [dict(name="a", ipv4="10.71.0.1/24"), dict(name="b", ipv4="10.71.0.2/24", queues=1, rx_overflow="drop", delivery="thread")]
    with hvlab.Topology(tmp_path, vms) as t, hvlab.CpuLimit(25) as cpu:
        server = t.popen("b", "iperf3 -s -B 10.71.0.2", stdout=hvlab.subprocess.DEVNULL, stderr=hvlab.subprocess.DEVNULL)
        hvlab.wait_listening(t.ns("b"), 5201)
        cpu.add(t.thread("b", "delivery", 0))
        cpu.add(server.pid)
        for tid in hvlab.Path(f"/proc/{server.pid}/task").iterdir():
            cpu.add(int(tid.name))
        results = {}
        for rings in (256, 4096):
            t.hv("port", "b", "set", f"ring1={rings}", f"ring2={rings}")
            results[rings] = run_load(t)
        small, big = results[256], results[4096]
        print(results)
        assert small["ring_drops"] > 100, results
        assert big["ring_drops"] * 3 < small["ring_drops"], results
        assert big["retransmits"] < small["retransmits"], results
