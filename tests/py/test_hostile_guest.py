"""A hostile guest against the live switch: in-order 1-byte TCP segments
into an LRO receiver, frames from thousands of random source MACs, TSO
frames with a gso_size of 16. The daemon's memory stays under its
documented bound (buffer caps per port, FDB limits), the switch keeps
forwarding for the other VMs, and every frame is accounted for."""

import json
import os
from pathlib import Path

import pytest

import hvlab
from test_switch_e2e import assert_accounted, vm

pytestmark = pytest.mark.root

HOSTILE = Path(__file__).resolve().parents[2] / "lab" / "hostile_traffic.py"


def test_hostile_guest_cannot_grow_the_daemon_or_stop_the_others(tmp_path):
    vms = [vm("a", "10.72.0.1", queues=1), vm("b", "10.72.0.2", queues=1), vm("c", "10.72.0.3", queues=1)]
    with hvlab.Topology(tmp_path, vms) as t:
        pid = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]
        ports = {p["client"]: p for p in json.loads(t.hv("ports", "--json").stdout)}
        a_mac, b_mac = ports["a"]["mac"], ports["b"]["mac"]
        t.sh("c", "ping -c 1 -W 2 10.72.0.2")
        t.hv("port", "a", "set", "allow_forged_transmits=on")
        py = os.sys.executable
        t.sh("a", f"{py} {HOSTILE} tiny-segments {a_mac} {b_mac} 10.72.0.1 10.72.0.2 100000", timeout=300)
        t.sh("a", f"{py} {HOSTILE} random-macs {b_mac} 5000", timeout=300)
        sent = int(t.sh("a", f"{py} {HOSTILE} tiny-gso {a_mac} {b_mac} 10.72.0.1 10.72.0.2 200", timeout=300).stdout)
        # The others still reach each other.
        t.sh("c", "ping -c 3 -i 0.2 -W 2 10.72.0.2")
        tx = hvlab.eventually(lambda: (lambda s: s if s["drop_gso_segments"] >= sent else None)(t.stats("/ports/a/tx_summary")))
        assert tx and tx["drop_gso_segments"] >= sent > 0, (tx, sent)
        assert tx["fdb_learn_refused"] > 0, tx
        learned = [r for r in json.loads(t.hv("fdb", "--json").stdout) if r["kind"] == "learned"]
        assert len(learned) <= 1024, "the FDB's per-port limit holds"
        b = json.loads(t.hv("port", "b", "--json").stdout)
        assert b["buffers"]["bytes"] <= b["buffers"]["cap_bytes"]
        a = json.loads(t.hv("port", "a", "--json").stdout)
        assert a["buffers"]["bytes"] <= a["buffers"]["cap_bytes"], a["buffers"]
        # The whole daemon: three ports' buffer caps, their lanes, and the
        # program itself (documented in docs/design/switch.md).
        bound = 3 * a["buffers"]["cap_bytes"] + (64 << 20)
        assert hvlab.rss_bytes(pid) < bound, (hvlab.rss_bytes(pid), bound)
        rx = t.stats("/ports/b/rx_summary")
        assert rx["lro_frames"] > 0, "the tiny segments were coalesced, 64 at most per frame"
        assert_accounted(t, ["a", "b", "c"])
