"""Watching a running switch: `hvnet top -b` parsed while traffic runs,
the Prometheus endpoint checked against `hvnet stats`, and the daemon's
log saying what changed once."""

import csv
import io
import json
import re
import socket
import urllib.request
from pathlib import Path

import pytest

import hvlab
from helpers import vm

pytestmark = pytest.mark.root


def test_a_ports_arcs_hold_the_stages_of_what_is_on_at_it(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "198.18.82.1"), vm("b", "198.18.82.2")]) as t:
        arcs = lambda: json.loads(t.hv("port", "a", "--json").stdout)["arcs"]  # noqa: E731
        # The engine's stages on every arc, a VM's default guards, no policer.
        assert hvlab.eventually(lambda: "forward" in arcs()["ingress"], timeout=10), arcs()
        assert {"vlan", "fdb", "guard"} <= set(arcs()["ingress"]), arcs()
        assert "police" not in arcs()["ingress"] and arcs()["egress"][0] == "queue", arcs()
        # A policer set at run time is on the arc from the next burst on,
        # and gone with it; frames pass all along.
        t.hv("port", "a", "set", "tx_rate=500mbit")
        t.sh("a", "ping -c 2 -i 0.2 -W 1 198.18.82.2")
        assert hvlab.eventually(lambda: "police" in arcs()["ingress"], timeout=10), arcs()
        t.hv("port", "a", "set", "tx_rate=off")
        t.sh("a", "ping -c 2 -i 0.2 -W 1 198.18.82.2")
        assert hvlab.eventually(lambda: "police" not in arcs()["ingress"], timeout=10), arcs()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_top_batch_shows_the_traffic_and_the_vms_cpu(tmp_path):
    with hvlab.Topology(tmp_path, [vm("a", "198.18.81.1"), vm("b", "198.18.81.2")]) as t:
        t.popen("b", "iperf3 -s -1")
        t.wait_listening("b", 5201)
        client = t.popen("a", "iperf3 -c 198.18.81.2 -t 30")
        hvlab.eventually(lambda: t.stats("/ports/a/tx_summary")["bytes"] > 1 << 20, timeout=30)
        out = t.hv("top", "-b", "-d", "1", "-n", "2").stdout
        client.kill()
        rows = list(csv.DictReader(io.StringIO(out)))
        assert len(rows) == 4, out  # 2 samples x 2 ports
        last = {r["port"]: r for r in rows[2:]}
        # a sends, b receives: the bulk of the bytes go one way.
        assert float(last["a"]["tx_mbps"]) > 10 * float(last["a"]["rx_mbps"]) > 0, last
        assert float(last["b"]["rx_mbps"]) > 10 * float(last["b"]["tx_mbps"]), last
        # iperf3 runs in the VMs' namespaces: their threads are counted.
        assert int(last["a"]["threads"]) >= 1 and float(last["a"]["used_pct"]) > 0, last
        for k in ("run_pct", "rdy_pct"):
            assert 0 <= float(last["a"][k]) <= 100 * 2 * int(last["a"]["threads"]), last

        j = [json.loads(line) for line in t.hv("top", "-b", "-d", "0.5", "-n", "2", "--json").stdout.splitlines()]
        assert len(j) == 2 and {p["port"] for p in j[1]["ports"]} == {"a", "b"}
        r = t.hv("top", "-b", "-d", "0", check=False)
        assert r.returncode == 1 and "at least 0.1 seconds" in r.stderr


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r'^(\w+)\{([^}]*)\} (\S+)$', line)
        assert m, line
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        samples[(m.group(1), tuple(sorted(labels.items())))] = float(m.group(3))
    return text, samples


def test_metrics_endpoint_matches_hvnet_stats(tmp_path):
    port = free_port()
    with hvlab.Topology(tmp_path, [vm("a", "198.18.82.1"), vm("b", "198.18.82.2")],
                        up_args=[f"--metrics=127.0.0.1:{port}"]) as t:
        t.sh("a", "ping -c 5 -i 0.1 -W 2 198.18.82.2")
        # An oversized frame makes a drop with a reason to look for.
        t.hv("port", "b", "set", "mtu=1280")
        t.sh("a", "ping -c 2 -i 0.1 -W 1 -M do -s 1400 198.18.82.2", check=False)
        hvlab.eventually(lambda: t.stats("/ports/b/rx_summary")["drop_mtu_exceeded"] >= 2)
        text, m = scrape(port)
        assert "# TYPE hvnet_tx_summary_frames counter" in text
        assert "# TYPE hvnet_rx_summary_in_flight gauge" in text
        checked = 0
        for p in ("a", "b"):
            base = (("kind", "vm"), ("port", p))
            for family in ("tx_summary", "rx_summary"):
                stats = t.stats(f"/ports/{p}/{family}")
                for key, value in stats.items():
                    if key.startswith("drop_"):
                        name, labels = f"hvnet_{family}_drops_total", tuple(sorted(base + (("reason", key[5:]),)))
                    elif key in ("in_flight", "avg_frame_bytes", "ring_memory_bytes"):
                        name, labels = f"hvnet_{family}_{key}", base
                    else:
                        name, labels = f"hvnet_{family}_{key}_total", base
                    assert (name, labels) in m, (name, labels)
                    assert m[(name, labels)] == value, (name, value, m[(name, labels)])
                    checked += 1
            q = t.stats(f"/ports/{p}/rxqueues/0/status")
            labels = tuple(sorted(base + (("queue", "0"),)))
            assert m[("hvnet_rxqueue_rings_ring1_size", labels)] == q["rings"]["ring1_size"]
            assert m[("hvnet_rxqueue_delivered_frames_total", labels)] == q["counters"]["delivered_frames"]
        assert checked > 60
        assert m[("hvnet_rx_summary_drops_total", (("kind", "vm"), ("port", "b"), ("reason", "mtu_exceeded")))] >= 2
        # Every series the Grafana dashboard in the repository draws exists.
        dash = (Path(__file__).resolve().parents[2] / "packaging/grafana/hvnet-dashboard.json").read_text()
        names = {n for n, _ in m}
        queried = set(re.findall(r"hvnet_\w+", dash)) - {"hvnet_ports"}
        assert queried and queried <= names, queried - names
        # Only /metrics is served.
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        log = Path(f"/run/hvnet/{t.name}/daemon.log").read_text()
        assert f"metrics endpoint: GET /metrics addr=127.0.0.1:{port}" in log, log
        # The drop is logged once, with its port and reason; the settings
        # change once, with its port.
        assert log.count("first drop port=b reason=mtu_exceeded") == 1, log
        assert re.search(r"settings changed port=b .*\"mtu\":1280", log), log


def test_metrics_address_in_use_is_refused_before_anything_is_made(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        t = hvlab.Topology(tmp_path, [vm("a", "198.18.83.1")], up_args=[f"--metrics=127.0.0.1:{port}"])
        r = hvlab.hvnet("up", f"--metrics=127.0.0.1:{port}", t.file, check=False)
        assert r.returncode == 1 and f"metrics endpoint 127.0.0.1:{port}" in r.stderr, r.stderr
        assert t.ns("a") not in hvlab.run(["ip", "netns", "list"]).stdout
        assert not Path(f"/run/hvnet/{t.name}").exists()
