"""IGMP/MLD snooping against the kernel's own IGMP and MLD: namespace VMs
join groups with sockets (the kernel reports, answers queries and leaves),
and hvnet delivers a group's datagrams to its members only (a VM that did
not join sees none of them at L2), keeps a member that left for the last
member time, takes a query's port as a router port, forgets a VM removed
while a member, and counts malformed reports and a flood of thousands of
groups (bounded) while it goes on forwarding.

One topology, one test: the suite's time is short. Every VM has one
queue, so that one sender's frames are delivered in the order it sent
them: a VM that got the "mark" sent last has got everything before it."""

import json
import os
import queue
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

import hvlab
import helpers

pytestmark = pytest.mark.root

PROBE = Path(__file__).with_name("mcast_probe.py")
PY = os.sys.executable
G4, G6 = "239.1.1.1", "ff0e::1:1"
MACS = "01:00:5e:01:01:01 33:33:00:01:00:01"
N = 200


def vm(name, i):
    return helpers.vm(name, f"198.18.72.{i}", f"fd00:72::{i}", queues=1)


VMS = [vm("s", 1), vm("m1", 2), vm("m2", 3), vm("n", 4)]


class Lines:
    """A process's output lines, read in the background."""

    def __init__(self, p):
        self.p, self.q = p, queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in iter(self.p.stdout.readline, ""):
            self.q.put(line.strip())
        self.q.put(None)

    def expect(self, text, timeout=30):
        while True:
            line = self.q.get(timeout=timeout)
            assert line is not None, f"ended before {text!r}"
            if text in line:
                return line


def mdb(t):
    return json.loads(t.hv("mdb", "--json").stdout)


def members(t):
    return {(r["port_name"], r["group"]) for r in mdb(t)["mdb"]}


def test_snooping_against_the_kernels_igmp_and_mld(tmp_path):
    with hvlab.Topology(tmp_path, VMS, prefix="mc", switch={"multicast_querier": True}) as t:
        v = mdb(t)
        assert v["multicast_snooping"] and v["multicast_querier"] and not v["multicast_flood_unknown"], v
        # Joins: the kernels' own reports (IGMP for G4, MLD for G6).
        recv = {}
        for who, g, port in [("m1", G4, 5001), ("m2", G4, 5001), ("m1", G6, 5002)]:
            p = t.popen(who, f"{PY} {PROBE} recv {g} {port} {N}", stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, text=True)
            recv[(who, g)] = Lines(p)
            recv[(who, g)].expect("joined")
        assert hvlab.eventually(lambda: set(recv) <= members(t), timeout=15), mdb(t)
        # The switch's querier prunes once its first query's response time
        # (10 s) is over; group frames flood until then.
        ready = lambda: {(q["family"], q["pruning"]) for q in mdb(t)["own_querier"] if q["vlan"] == 0}
        assert hvlab.eventually(lambda: ready() == {("ipv4", True), ("ipv6", True)}, timeout=20), mdb(t)
        token = uuid.uuid4().hex
        sniff = Lines(t.popen("n", f"{PY} {PROBE} sniff {token} {MACS}", stdout=subprocess.PIPE, text=True))
        sniff.expect("ready")
        # The group streams: to the members, and nothing of them to n.
        t.sh("s", f"{PY} {PROBE} send {G4} 5001 {N}")
        t.sh("s", f"{PY} {PROBE} send {G6} 5002 {N}")
        for r in recv.values():
            r.expect(f"got {N}")
        t.sh("s", f"{PY} {PROBE} mark 198.18.72.4 9 {token}")
        assert sniff.expect("") == "0", "n got group frames"
        tx = t.stats("/ports/s/tx_summary")
        assert tx["mcast_to_members"] >= 2 * N, tx
        for p in ["s", "m1", "m2", "n"]:
            assert t.stats(f"/ports/{p}/accounting")["ingress"]["balanced"]

        # A leave: m2's socket closes, the kernel leaves; gone after the
        # last member time.
        m2 = recv.pop(("m2", G4)).p
        m2.stdin.close()
        m2.wait(timeout=10)
        assert hvlab.eventually(lambda: ("m2", G4) not in members(t), timeout=15), mdb(t)

        # A query from n: its port becomes a router port, a querier is
        # heard, and m1's kernel answers it with a report.
        before = t.stats("/ports/m1/tx_summary")["mcast_reports"]
        t.sh("n", f"{PY} {PROBE} igmp-query")
        v = mdb(t)
        assert any(r["port_name"] == "n" and r["state"] == "temp" for r in v["router"]), v
        assert [(q["addr"], q["port_name"]) for q in v["queriers"]] == [("198.18.72.4", "n")], v
        assert hvlab.eventually(lambda: t.stats("/ports/m1/tx_summary")["mcast_reports"] > before, timeout=15)

        # A VM removed while a member: its memberships go with its port.
        t.hv("vm", "del", "m1")
        assert not any(p == "m1" for p, _ in members(t)), mdb(t)

        # Bad input from n: a malformed report dropped and counted;
        # thousands of groups bounded (1,024 a port) and counted.
        t.sh("n", f"{PY} {PROBE} igmp-bad")
        t.sh("n", f"{PY} {PROBE} igmp-flood 5000")
        assert hvlab.eventually(lambda: t.stats("/ports/n/tx_summary")["mdb_refused"] == 5000 - 1024, timeout=15)
        tx = t.stats("/ports/n/tx_summary")
        assert tx["drop_bad_igmp"] == 1, tx
        assert sum(1 for p, _ in members(t) if p == "n") == 1024
        assert "3.3.3" not in json.dumps(mdb(t)["mdb"])
        # The switch goes on forwarding.
        t.sh("s", "ping -c 1 -W 5 198.18.72.4")
        t.sh("s", "ping -c 1 -W 5 198.18.72.3")
