"""What the control plane says to a user who gets it wrong: names that are
not names, topologies that are not up, and a user who is not root."""

from pathlib import Path

import pytest

import hvlab

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[2]


def hv(*args):
    return hvlab.run([hvlab.hvnet_bin(), *map(str, args)], check=False)


def test_hostile_names_are_refused_before_any_path_is_read():
    for bad in ("../../tmp/x", "/etc", "a/b", "UPPER", "x_y", "x" * 17):
        r = hv("down", bad)
        assert r.returncode == 1 and "is not a topology name" in r.stderr, (bad, r.stderr)
        r = hv("ports", "-t", bad)
        assert r.returncode == 1 and "is not a topology name" in r.stderr, (bad, r.stderr)


def test_down_of_what_is_not_up_succeeds_and_says_so():
    r = hv("down", "hvnosuchtopo")
    assert r.returncode == 0 and "nothing to take down" in r.stdout, r.stdout + r.stderr
    r = hv("down", "-t", "hvnosuchtopo")
    assert r.returncode == 0, r.stderr
    r = hv("ports", "-t", "hvnosuchtopo")
    assert r.returncode == 1 and "no topology named hvnosuchtopo is up" in r.stderr, r.stderr


def test_a_user_who_is_not_root_is_told_so(tmp_path):
    if not hvlab.have("setpriv"):
        pytest.skip("setpriv is not installed")
    topo = tmp_path / "t.toml"
    topo.write_text('name = "hvnotroot"\n[[vm]]\nname = "a"\nipv4 = "10.80.0.1/24"\n')
    tmp_path.chmod(0o755)
    topo.chmod(0o644)
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", hvlab.hvnet_bin()]
    r = hvlab.run(as_nobody + ["up", str(topo)], check=False)
    assert r.returncode == 1 and "run as root" in r.stderr, r.stderr
    assert not Path("/run/netns/hvnotroot-a").exists()


def test_one_vocabulary_for_ports_and_switches(tmp_path):
    vms = [dict(name="a", ipv4="198.18.77.1/24", lro="off"), dict(name="b", ipv4="198.18.77.2/24", tso="on")]
    t = hvlab.Topology(tmp_path, vms)
    with t:
        up_out = hvlab.run(["cat", str(t.file)]).stdout
        assert 'lro = "off"' in up_out  # the topology file takes the CLI's words
        import json
        a = json.loads(t.hv("port", "a", "--json").stdout)
        assert a["lro"] is False
        # Ports by number wherever they are taken by name.
        assert json.loads(t.hv("port", "1", "--json").stdout) == json.loads(t.hv("port", "b", "--json").stdout)
        assert t.stats("/ports/0/accounting") == t.stats("/ports/a/accounting")
        fdb = t.hv("fdb").stdout
        assert "NAME" in fdb and "AGE(s)" in fdb and " a " in fdb, fdb
        assert {r["port_name"] for r in json.loads(t.hv("fdb", "--json").stdout)} == {"a", "b"}
        for change, said in [("lro=yes", "lro=yes: lro takes on or off"),
                             ("lro=5", "lro=5: lro takes on or off"),
                             ("ring1=on", "ring1=on: ring1 takes a number (32..4096)"),
                             ("mtu=99999", "mtu=99999: mtu takes a number (68..9000)"),
                             ("delivery=fast", "delivery=fast: delivery takes a word (auto or thread)")]:
            r = t.hv("port", "a", "set", change, check=False)
            assert r.returncode == 1 and said in r.stderr, (change, r.stderr)
        # The same refusals typed, for scripts (--json): kind, field, value, what it takes.
        r = t.hv("port", "a", "set", "ring2=8", "--json", check=False)
        assert r.returncode == 1
        assert json.loads(r.stdout) == {"error": {"kind": "bad_value", "setting": "ring2", "value": "8",
                                                  "allowed": "a number (32..4096)"}}, r.stdout
        r = t.hv("port", "a", "set", "colour=blue", "--json", check=False)
        e = json.loads(r.stdout)["error"]
        assert e["kind"] == "unknown_setting" and "ring1" in e["allowed"] and "buffers" not in e["allowed"], e
        r = t.hv("stats", "/ports/c/rx_summary", "--json", check=False)
        assert json.loads(r.stdout)["error"] == {"kind": "not_found", "what": "port", "name": "c",
                                                 "choices": ["a", "b"]}, r.stdout
        assert "there are: a, b" in r.stderr, r.stderr
        # One key style: every key of every stats node is snake case; vsish's
        # node names find the same nodes.
        def walk(path):
            node = t.stats(path)
            if isinstance(node, list):
                for child in node:
                    yield from walk(path.rstrip("/") + "/" + child.rstrip("/"))
            else:
                yield path, node
        import re
        def keys(v):
            if isinstance(v, dict):
                for k, x in v.items():
                    yield k
                    yield from keys(x)
            elif isinstance(v, list):
                for x in v:
                    yield from keys(x)
        seen = 0
        for path, node in walk("/"):
            for k in keys(node):
                assert re.fullmatch(r"[a-z0-9_]+", k), (path, k)
                seen += 1
        assert seen > 100, seen
        for vsish, ours in (("clientStats", "client_stats"), ("txSummary", "tx_summary")):
            assert set(t.stats(f"/ports/a/{vsish}")) == set(t.stats(f"/ports/a/{ours}"))
        # One bad value among good ones changes nothing.
        before = t.hv("port", "a", "--json").stdout
        r = t.hv("port", "a", "set", "ring1=512", "mtu=99999", check=False)
        assert r.returncode == 1 and t.hv("port", "a", "--json").stdout == before


def test_two_vms_with_one_address_are_warned_about(tmp_path):
    vms = [dict(name="a", ipv4="198.18.78.1/24"), dict(name="b", ipv4="198.18.78.1/24")]
    t = hvlab.Topology(tmp_path, vms)
    try:
        r = hvlab.hvnet("up", t.file)
        assert "VMs a and b have the same address 198.18.78.1" in r.stdout, r.stdout
    finally:
        t.__exit__(None, None, None)
