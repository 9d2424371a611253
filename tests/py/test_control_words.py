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
