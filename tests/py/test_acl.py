"""Security groups against real stacks: namespace VMs' Linux TCP, UDP and
ICMP through hvnet with `[[security_group]]` rules — connections allowed
and refused, the replies of allowed ones, ICMP errors about tracked flows,
FTP-like related connections (not tracked: refused without a rule of
their own), a rule change under traffic, and bad rules refused with their
line, nothing applied."""

import json
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import tomli_w

import hvlab
import helpers

pytestmark = pytest.mark.root

PROBE = Path(__file__).with_name("acl_probe.py")
PY = sys.executable

# a: a client that may open anything; b: a server taking TCP 8080, UDP
# 9998-9999 and pings, opening nothing itself; c: no groups at all.
GROUPS = [
    {"name": "client", "rules": [{"direction": "out"}]},
    {
        "name": "web",
        "rules": [
            {"direction": "in", "protocol": "tcp", "ports": "8080", "remote": "198.18.41.0/24"},
            {"direction": "in", "protocol": "tcp", "ports": 8080, "remote": "fd41::/64"},
            {"direction": "in", "protocol": "udp", "ports": "9998-9999"},
            {"direction": "in", "protocol": "icmp", "icmp_type": 8},
            {"direction": "in", "protocol": "icmpv6", "icmp_type": 128},
        ],
    },
]


def vm(name, n, groups=None):
    return helpers.vm(name, f"198.18.41.{n}", f"fd41::{n}", security_groups=groups)


VMS = [vm("a", 1, ["client"]), vm("b", 2, ["web"]), vm("c", 3)]


def with_tables(t, groups=GROUPS, **tables):
    """Writes `[[security_group]]` (and other top-level tables) into the
    topology file `t` was made with."""
    doc = tomllib.loads(t.file.read_text())
    doc["security_group"] = groups
    doc.update(tables)
    t.file.write_text(tomli_w.dumps(doc))
    return t


def topology(tmp_path, vms=VMS, groups=GROUPS):
    return with_tables(hvlab.Topology(tmp_path, vms, prefix="acl"), groups)


def probe(t, vm, *args, timeout=30):
    return t.sh(vm, f"{PY} {PROBE} " + " ".join(map(str, args)), timeout=timeout).stdout.strip()


def serve(t, vm, what, ip, port):
    p = t.popen(vm, f"{PY} {PROBE} {what} {ip} {port}")
    if what == "serve-tcp":
        t.wait_listening(vm, port)
    return p


def acl(t, *args):
    return json.loads(t.hv("acl", *args, "--json").stdout)


def port_view(t, name, *args):
    return next(p for p in acl(t, name, *args)["ports"] if p["port"] == name)


def drops(t, vm, way, reason):
    node = "tx_summary" if way == "from" else "rx_summary"
    return t.stats(f"/ports/{vm}/{node}")[f"drop_{reason}"]


def stream(t, tmp_path):
    """a's connection to b's echo server on 8080, a line echoed every 20
    ms, once it runs: the client and the count of echoes so far."""
    serve(t, "b", "serve-tcp", "0.0.0.0", 8080)
    progress = tmp_path / "progress"
    client = t.popen("a", f"{PY} {PROBE} stream 198.18.41.2 8080 {progress}", stdout=subprocess.PIPE, text=True)
    count = lambda: int(progress.read_text()) if progress.exists() else 0  # noqa: E731
    hvlab.eventually(lambda: count() > 10, timeout=20)
    return client, count


def test_tcp_connects_allowed_and_refused_and_replies_of_allowed_ones(tmp_path):
    with topology(tmp_path) as t:
        serve(t, "b", "serve-tcp", "::", 8080)
        serve(t, "b", "serve-tcp", "::", 8081)
        serve(t, "a", "serve-tcp", "::", 7000)
        # Allowed in at b; its answers go out though b has no out rule.
        assert probe(t, "a", "connect", "198.18.41.2", 8080) == "ok"
        assert probe(t, "a", "connect", "fd41::2", 8080) == "ok"
        assert probe(t, "c", "connect", "198.18.41.2", 8080) == "ok", "c has no groups: its frames go out as ever"
        # No rule lets 8081 in: the SYN is dropped at b (no RST either).
        before = drops(t, "b", "to", "acl_in")
        assert probe(t, "a", "connect", "198.18.41.2", 8081) == "timeout"
        assert drops(t, "b", "to", "acl_in") > before
        # b may open nothing: its SYN is dropped as it leaves b.
        before = drops(t, "b", "from", "acl_out")
        assert probe(t, "b", "connect", "198.18.41.1", 7000) == "timeout"
        assert drops(t, "b", "from", "acl_out") > before
        # a lets nothing in but replies: c's connection to a is refused.
        assert probe(t, "c", "connect", "198.18.41.1", 7000) == "timeout"
        # Pings: a echo request is allowed into b, the reply back to a.
        t.sh("a", "ping -c 2 -i 0.2 -W 2 198.18.41.2")
        t.sh("a", "ping -6 -c 2 -i 0.2 -W 2 fd41::2")
        assert t.sh("b", "ping -c 1 -W 1 198.18.41.1", check=False).returncode != 0
        # c and a without groups between them are as before: c to c's
        # own neighbours (a only answers what a opened).
        v = port_view(t, "b")
        hits = {r["label"]: r["hits"] for r in v["rules"]}
        assert hits["web#0"] >= 2 and hits["web#1"] >= 1 and hits["web#3"] >= 1, v
        assert v["counters"]["denied_default"] > 0 and v["counters"]["established"] > 0, v
        assert acl(t)["limits"]["max_per_port"] == 65536
        # The connection table as conntrack -L: a's ping and TCP flows.
        conns = port_view(t, "a", "--conntrack")["conntrack"]
        tcp = [c for c in conns if c["protocol"] == "tcp" and c["dport"] == 8080 and c["family"] == "ipv4"]
        assert tcp and tcp[0]["opened"] == "out" and tcp[0]["replied"], conns
        assert any(c["protocol"] == "icmp" and c["replied"] for c in conns), conns
        text = t.hv("acl", "--conntrack").stdout
        assert "dport=8080" in text and "src=198.18.41.1" in text, text
        table = t.hv("acl", "b").stdout
        assert "web#0" in table and "in allow IPv4 tcp port 8080 from 198.18.41.0/24" in table, table


def test_udp_replies_and_icmp_errors_of_tracked_flows(tmp_path):
    with topology(tmp_path) as t:
        serve(t, "b", "udp-echo", "198.18.41.2", 9998)
        hvlab.eventually(lambda: ":9998 " in t.sh("b", "ss -Hlun").stdout)
        assert probe(t, "a", "udp-ask", "198.18.41.2", 9998) == "reply"
        # Nothing listens on 9999: b's kernel answers port unreachable,
        # which goes out of b and into a as related to the tracked flow.
        assert probe(t, "a", "udp-ask", "198.18.41.2", 9999) == "refused"
        assert port_view(t, "a")["counters"]["related"] >= 1
        assert port_view(t, "b")["counters"]["related"] >= 1
        # Not allowed in at all: no answer, no error.
        assert probe(t, "a", "udp-ask", "198.18.41.2", 9997) == "timeout"
        conns = port_view(t, "b", "--conntrack")["conntrack"]
        assert any(c["protocol"] == "udp" and c["dport"] == 9998 and c["opened"] == "in" for c in conns), conns


def test_ftp_like_related_connections_are_not_tracked(tmp_path):
    """FTP's active data connection (the server connects back to the
    client) is a new connection to security groups, as to OVN's without
    helpers: refused unless rules allow it."""
    with topology(tmp_path) as t:
        serve(t, "b", "serve-tcp", "0.0.0.0", 8080)
        assert probe(t, "a", "connect-back", "198.18.41.2", 8080, 2020) == "data-timeout"
        # With b allowed to open it, and a to take it, it works.
        groups = [
            {"name": "client", "rules": [{"direction": "out"}, {"direction": "in", "protocol": "tcp", "ports": 2020}]},
            {"name": "web", "rules": GROUPS[1]["rules"] + [{"direction": "out", "protocol": "tcp", "ports": 2020}]},
        ]
        with_tables(t, groups)
        hvlab.hvnet("up", t.file)
        assert probe(t, "a", "connect-back", "198.18.41.2", 8080, 2020) == "data-ok"


def test_a_rule_change_applies_to_new_connections_at_once_and_to_established_ones_on_request(tmp_path):
    with topology(tmp_path) as t:
        client, count = stream(t, tmp_path)
        # 8080 no longer allowed in.
        groups = [GROUPS[0], {"name": "web", "rules": GROUPS[1]["rules"][2:]}]
        with_tables(t, groups)
        said = hvlab.hvnet("up", t.file).stdout
        assert "; security groups changed web;" in said, said
        assert probe(t, "a", "connect", "198.18.41.2", 8080) == "timeout", "a new connection is refused at once"
        seen = count()
        hvlab.eventually(lambda: count() > seen + 10, timeout=20)  # the established one goes on
        assert client.poll() is None
        removed = json.loads(t.hv("acl", "--reapply", "--json").stdout)["removed"]
        assert removed["b"] >= 1 and "c" not in removed, removed
        out, _ = client.communicate(timeout=30)
        assert out.strip() == "stalled"
        assert port_view(t, "b")["counters"]["denied_default"] > 0
        # Allowed again: new connections at once.
        with_tables(t, GROUPS)
        hvlab.hvnet("up", t.file)
        assert probe(t, "a", "connect", "198.18.41.2", 8080) == "ok"


def test_a_segment_outside_its_connections_windows_is_dropped_as_invalid(tmp_path):
    """Window tracking, as Linux's conntrack does it by default: a segment
    with the 4-tuple of a running connection but a sequence number far
    outside its windows (spoofed) is dropped as invalid where it enters,
    and the connection goes on; with `[conntrack] tcp_be_liberal = true`
    the same segment passes."""
    with topology(tmp_path) as t:
        client, count = stream(t, tmp_path)
        conns = t.sh("a", "ss -Htn state established dst 198.18.41.2:8080").stdout.split()
        sport = int(next(w for w in conns if w.startswith("198.18.41.1:")).rsplit(":", 1)[1])
        before = drops(t, "a", "from", "acl_out_invalid")
        assert probe(t, "a", "spoof", "198.18.41.2", 8080, sport) == "sent"
        assert hvlab.eventually(lambda: port_view(t, "a")["counters"]["out_of_window"] == 1, timeout=10)
        assert drops(t, "a", "from", "acl_out_invalid") == before + 1
        seen = count()
        hvlab.eventually(lambda: count() > seen + 10, timeout=20)  # the connection goes on
        assert client.poll() is None
        # Liberal: the same segment reaches b (the connection closed
        # first, so that b receives nothing else).
        with_tables(t, conntrack={"tcp_be_liberal": True})
        hvlab.hvnet("up", t.file)
        assert acl(t)["limits"]["tcp_be_liberal"] is True
        hvlab.stop_procs([client])
        received = lambda: t.stats("/ports/b/client_stats")["bytes_rx_ok"]  # noqa: E731

        def quiet():
            was = received()
            time.sleep(0.5)
            return received() == was

        assert hvlab.eventually(quiet, timeout=20)
        got = received()
        assert probe(t, "a", "spoof", "198.18.41.2", 8080, sport) == "sent"
        assert hvlab.eventually(lambda: received() >= got + 100, timeout=10)
        assert port_view(t, "a")["counters"]["out_of_window"] == 1
        assert drops(t, "a", "from", "acl_out_invalid") == before + 1


BAD = [
    ({"direction": "in", "protocol": "tcp", "ports": "90-80"}, "runs backwards"),
    ({"direction": "in", "ports": 80}, "ports needs protocol"),
    ({"direction": "in", "protocol": "icmp", "remote": "fd00::/8"}, "is IPv6"),
    ({"direction": "in", "remote_group": "nobody"}, "remote_group \"nobody\""),
    ({"direction": "up"}, "is not \"in\" or \"out\""),
]


@pytest.mark.parametrize("rule,why", BAD, ids=[b[1].split()[0] for b in BAD])
def test_rules_that_cannot_apply_are_refused_with_line_and_reason_nothing_applied(tmp_path, rule, why):
    groups = [GROUPS[0], {"name": "web", "rules": GROUPS[1]["rules"] + [rule]}]
    t = topology(tmp_path, groups=groups)
    try:
        r = hvlab.hvnet("up", t.file, check=False)
        assert r.returncode != 0, r.stdout
    finally:
        t.__exit__(None, None, None)
    # PATH:LINE: reason, LINE within the bad rule (the last of web's).
    m = re.search(r"\.toml:(\d+): (.*)", r.stderr)
    assert m and why in m.group(2), r.stderr
    lines = t.file.read_text().splitlines()
    last = max(i for i, text in enumerate(lines, 1) if "direction = " in text)
    assert int(m.group(1)) == last, (m.group(1), lines[last - 1], r.stderr)
    assert "rule 5" in m.group(2), r.stderr
    assert not any(ns.startswith(t.name) for ns in hvlab.run("ip netns list").stdout.split()), "nothing created"
    # On a running topology: the edited file refused with the line, the
    # rules in force kept whole.
    with topology(tmp_path) as t:
        before = [(p["port"], p["rules"]) for p in acl(t)["ports"]]
        with_tables(t, groups)
        r = hvlab.hvnet("up", t.file, check=False)
        assert r.returncode != 0 and why in r.stderr and f".toml:{last}: " in r.stderr, r.stderr
        after = [(p["port"], p["rules"]) for p in acl(t)["ports"]]
        assert after == before
        serve(t, "b", "serve-tcp", "0.0.0.0", 8080)
        assert probe(t, "a", "connect", "198.18.41.2", 8080) == "ok"


# A million SYNs from a (source ports and addresses varied, checksums left
# wrong so that no stack answers: every one stays half-open), written
# straight to a's NIC.
SYN_FLOOD = r"""
import socket, struct, sys
dst_mac, n = bytes.fromhex(sys.argv[1].replace(':', '')), int(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(('eth0', 0))
src_mac = s.getsockname()[4]
eth = dst_mac + src_mac + b'\x08\x00'
for i in range(n):
    src = bytes([198, 18, 41, 100 + i // 60000])
    ip = struct.pack('>BBHHHBBH4s4s', 0x45, 0, 40, 1, 0, 64, 6, 0, src, bytes([198, 18, 41, 2]))
    tcp = struct.pack('>HHIIBBHHH', 1024 + i % 60000, 8080, i, 0, 0x50, 0x02, 65535, 0, 0)
    s.send(eth + ip + tcp)
"""


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_a_million_half_open_connections_from_one_vm_are_bounded_and_others_keep_theirs(tmp_path):
    limits = {"max": 40000, "max_per_port": 10000}
    # The flood comes from many source addresses (a million connections
    # need more than one address's ports): a's IP source guard is off, as
    # for a VM that routes for others, so that the tables see it all.
    vms = [dict(VMS[0], source_guard=False), *VMS[1:]]
    with with_tables(hvlab.Topology(tmp_path, vms, prefix="acl"), GROUPS, conntrack=limits) as t:
        serve(t, "b", "serve-tcp", "0.0.0.0", 8080)
        progress = tmp_path / "progress"
        client = t.popen("c", f"{PY} {PROBE} stream 198.18.41.2 8080 {progress}", stdout=subprocess.PIPE, text=True)
        count = lambda: int(progress.read_text()) if progress.exists() else 0  # noqa: E731
        hvlab.eventually(lambda: count() > 10, timeout=20)
        pid = json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]
        rss0 = rss_kib(pid)
        b_mac = next(p["mac"] for p in json.loads(t.hv("ports", "--json").stdout) if p["name"] == "b")
        t.sh("a", f"{PY} -c \"{SYN_FLOOD}\" {b_mac} 1000000", timeout=600)
        a, b = port_view(t, "a"), port_view(t, "b")
        assert a["connections"] <= 10000 and b["connections"] <= 10000, (a, b)
        assert acl(t)["connections"] <= 40000
        assert a["counters"]["new"] > 10000, "the flood went through a's stage"
        # The table's memory is bounded, and so is the daemon's growth.
        assert a["memory"] < 8 << 20, a["memory"]
        assert rss_kib(pid) - rss0 < 64 << 10, (rss0, rss_kib(pid))
        # c's connection to b went on, and a new one is taken.
        seen = count()
        hvlab.eventually(lambda: count() > seen + 10, timeout=20)
        assert client.poll() is None
        assert probe(t, "c", "connect", "198.18.41.2", 8080) == "ok"
        assert drops(t, "c", "from", "conntrack_full_out") == 0


def test_a_vm_added_at_run_time_takes_groups_and_joins_remote_groups(tmp_path):
    groups = [GROUPS[0], {"name": "web", "rules": [{"direction": "in", "protocol": "tcp", "ports": 8080,
                                                    "remote_group": "client"}]}]
    with topology(tmp_path, groups=groups) as t:
        serve(t, "b", "serve-tcp", "0.0.0.0", 8080)
        assert probe(t, "c", "connect", "198.18.41.2", 8080) == "timeout", "c is no client"
        r = t.hv("vm", "add", "d", "ipv4=198.18.41.4/24", 'security_groups=["client"]', check=False)
        assert r.returncode == 0, r.stderr
        assert port_view(t, "d")["groups"] == ["client"]
        # d's address joined group client: b's rule lets it in.
        assert probe(t, "d", "connect", "198.18.41.2", 8080) == "ok"
        r = t.hv("vm", "add", "e", "ipv4=198.18.41.5/24", 'security_groups=["nobody"]', check=False)
        assert r.returncode != 0 and "nobody" in r.stderr, r.stderr
        t.hv("vm", "del", "d")
        assert probe(t, "a", "connect", "198.18.41.2", 8080) == "ok"
