"""`hvnet trace PORT --live FILTER` on real frames between namespace VMs:
each stage's line on the frame's path and its verdict — delivered (to
which port) or dropped (the named reason, the same the counters give) —
bad filters refused with the reason, and a trace whose port goes ends
saying so."""

import contextlib
import json
import subprocess
import time

import pytest

import hvlab
from helpers import vm

pytestmark = pytest.mark.root


def trace(t, port, live, *more, check=True):
    r = t.hv("trace", port, "--live", live, *more, "--json", check=check)
    return json.loads(r.stdout) if r.stdout.strip() else r


@contextlib.contextmanager
def pinging(t, args):
    """VM a pings with `args` (every 0.2 s) while inside."""
    pinger = t.popen("a", f"ping -i 0.2 -c 50 {args}", stdout=subprocess.DEVNULL)
    try:
        yield
    finally:
        pinger.kill()


def test_a_frames_path_through_the_stages_to_its_port_or_its_drop(tmp_path):
    vms = [vm("a", "198.18.71.1", source_guard=True), vm("b", "198.18.71.2", mtu=1400)]
    with hvlab.Topology(tmp_path, vms, prefix="tr") as t:
        t.sh("a", "ping -c 1 -W 5 198.18.71.2")
        # An echo request a sends while the trace waits: its path, each
        # stage a line, out to b.
        with pinging(t, "198.18.71.2"):
            v = trace(t, "a", "icmp[icmptype] == icmp-echo", "-c", "2")
        assert v["ended"] == "count" and len(v["frames"]) == 2, v
        f = v["frames"][0]
        stages = [s["stage"] for s in f["stages"]]
        for s in ("guard", "vlan", "fdb", "forward", "queue", "tag", "write"):
            assert s in stages, (s, stages)
        assert stages.index("guard") < stages.index("fdb") < stages.index("forward") < stages.index("write")
        assert f["dropped"] is None and [d.split(" queue")[0] for d in f["delivered"]] == ["to b"], f
        # The same frame, told in words.
        with pinging(t, "198.18.71.2"):
            text = t.hv("trace", "a", "--live", "icmp").stdout
        assert text.startswith("frame 1 from a:") and "=> delivered to b queue" in text, text
        # A frame from an address not a's: the source guard drops it, and
        # the trace says so by the counter's own name.
        t.sh("a", "ip addr add 198.18.71.99/24 dev eth0")
        with pinging(t, "-I 198.18.71.99 198.18.71.2"):
            v = trace(t, "a", "icmp and src host 198.18.71.99")
        assert v["frames"][0]["dropped"] == "source_guard" and not v["frames"][0]["delivered"], v
        assert json.loads(t.hv("port", "a", "--json").stdout)["drops"]["from_port"]["source_guard"] > 0
        t.sh("a", "ip addr del 198.18.71.99/24 dev eth0")
        # A frame longer than b's MTU (1400) passes every stage in and is
        # dropped on its way out to b, by the counter's name.
        with pinging(t, "-s 1420 -M do 198.18.71.2"):
            v = trace(t, "a", "icmp and greater 1400")
        f = v["frames"][0]
        assert f["dropped"] is None and f["delivered"] == [] and f["dropped_at"] == ["to b: mtu_exceeded"], f


def test_bad_words_are_refused_and_a_trace_ends_with_its_port(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "198.18.72.1"), vm("c", "198.18.72.3")], prefix="tr") as t:
        r = t.hv("trace", "a", "--live", "tcp port", check=False)
        assert r.returncode != 0 and "does not compile" in r.stderr, r.stderr
        r = t.hv("trace", "a", "--live", "icmp", "-c", "65", check=False)
        assert r.returncode != 0 and "1 to 64" in r.stderr, r.stderr
        r = t.hv("trace", "nosuch", "--live", "icmp", check=False)
        assert r.returncode != 0 and "nosuch" in r.stderr, r.stderr
        # Nothing matches: the time runs out with no frame, said.
        v = trace(t, "a", "udp port 9", "--timeout", "0.5")
        assert v["ended"] == "timeout" and v["frames"] == [], v
        def traced(port):
            return json.loads(t.hv("port", port, "--json").stdout)["traced"]

        def waiting_trace(port):
            return subprocess.Popen([hvlab.hvnet_bin(), "trace", "-t", t.name, port, "--live", "udp port 9",
                                     "--timeout", "60", "--json"], stdout=subprocess.PIPE, text=True)

        # A client that leaves ends its trace: the port is free again.
        gone = waiting_trace("a")
        try:
            assert hvlab.eventually(lambda: traced("a"), timeout=10)
        finally:
            gone.kill()
            gone.wait()
        assert hvlab.eventually(lambda: not traced("a"), timeout=10)
        # One trace at a time at a port; the port removed under it.
        waiting = waiting_trace("c")
        try:
            assert hvlab.eventually(lambda: traced("c"), timeout=10)
            r = t.hv("trace", "c", "--live", "icmp", "--timeout", "0.1", check=False)
            assert r.returncode != 0 and "being traced" in r.stderr, r.stderr
            start = time.monotonic()
            t.hv("vm", "del", "c")
            out, _ = waiting.communicate(timeout=30)
        finally:
            waiting.kill()
        assert json.loads(out)["ended"] == "the port was removed" and time.monotonic() - start < 30
