"""The lab run as root: --quick experiments end to end with their reports
checked, leaving nothing behind. Its pure statistics, parsers and report
are tested without root in lab/tests (`python3 -m pytest -q lab/tests`)."""

import json
import math
import shutil
from pathlib import Path

import pytest

import hvlab
import libvirt_host
from hvnet_lab import report
from hvnet_lab.figures import cites_study

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lab") / "lab"
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", "lro-rate", "--quick", "--out", str(out)], check=False, timeout=600)
    return out, r


@pytest.mark.root
def test_quick_experiment_end_to_end_and_its_report(quick_run):
    out, r = quick_run
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "results.json").read_text())
    for k in ("date", "host", "kernel", "cpu_model", "git_revision", "iperf3"):
        assert res["meta"][k], k
    exp = res["experiments"][0]
    # results.json is the summary; each run's command and numbers are in raw.json.
    assert "samples" not in exp and "raw" not in exp
    samples = json.loads((out / "raw.json").read_text())[exp["name"]]["samples"]
    assert samples and all("command" in s for s in samples)
    assert report.check(res) == []
    assert res["meta"]["repeat"] == 1, "--quick runs once per point"
    for fig in exp["figures"]:
        assert fig["verdict"] in ("reproduced", "not reproduced", "inconclusive")
        assert fig["verdict"] == "reproduced" or fig["why_not"], "a verdict other than reproduced says why"
        assert fig["source"].startswith("LRO in a Virtualized System (Hatori & Oi")
        assert all(math.isfinite(y) for pts in fig["series"].values() for _, y in pts)
        assert (out / f"fig-{fig['id']}.png").exists() and (out / f"fig-{fig['id']}.svg").exists()
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert "Published effect" in md and "Source: LRO in a Virtualized System" in md and "<img" in html
    assert md.index("## At a glance") < md.index("## lro-rate"), "the verdict table comes first"
    assert "LRO rate" in md
    # Every figure judged on per-run effects keeps them, for `stability`.
    from hvnet_lab import stability
    judged = [f for f in exp["figures"] if f["judged_by"]]
    assert judged and all(s for f in judged for c in f["judged_by"] for _, s in c["points"])
    assert {fid for fid, _, _ in stability.predict([res], draws=20)} == {f["id"] for f in judged}
    # The run's own effects, in order, through the rule give what it said.
    assert {fid: v for fid, (v, _) in stability.replay(res).items()} == {f["id"]: f["verdict"] for f in judged}


CHROMIUM = next((b for b in ("chromium", "chromium-browser") if hvlab.have(b)), None)


@pytest.mark.root
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/install-deps.sh installs it)")
def test_report_loads_in_a_real_browser(quick_run, tmp_path):
    """Headless Chromium opens report.html: the page loads, every image
    loads, and the console shows no error."""
    out, r = quick_run
    assert r.returncode == 0, r.stdout + r.stderr
    probe = out / "probe.html"
    probe.write_text(
        "<!doctype html><title>waiting</title><iframe id=r src='report.html' width=1200 height=800></iframe><script>"
        "document.getElementById('r').onload = () => {"
        " const d = document.getElementById('r').contentDocument;"
        " const imgs = Array.from(d.images);"
        " const bad = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length;"
        " document.title = 'loaded ' + d.title + ' images ' + imgs.length + ' broken ' + bad; };"
        "</script>")
    p = hvlab.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                   "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
                  check=False, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    m = __import__("re").search(r"<title>loaded (.*) images (\d+) broken (\d+)</title>", p.stdout)
    assert m, p.stdout[:2000]
    assert m.group(1) == "hvnet lab report"
    assert int(m.group(2)) >= 3 and int(m.group(3)) == 0, m.group(0)
    console = [line for line in p.stderr.splitlines() if "CONSOLE" in line or "Failed to load resource" in line]
    assert not [c for c in console if "rror" in c or "Failed to load" in c], console


def links():
    """The root namespace's network devices."""
    return sorted(line.split()[0] for line in hvlab.run(["ip", "-br", "link"]).stdout.splitlines())


def netns():
    """The named network namespaces."""
    return sorted(line.split()[0] for line in hvlab.run(["ip", "netns", "list"]).stdout.splitlines())

@pytest.mark.root
def test_a_lab_run_with_open_vswitch_leaves_nothing_behind(tmp_path):
    """lro-local brings up hvnet, a Linux bridge and Open vSwitch's
    userspace datapath; afterwards the root namespace has the same devices
    and the same namespaces as before."""
    if not hvlab.have("ovs-vswitchd"):
        pytest.skip("Open vSwitch is not installed (scripts/install-deps.sh installs it)")
    before = (links(), netns())
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", "lro-local", "--quick", "--out", str(tmp_path / "lab")],
                  check=False, timeout=600)
    assert r.returncode in (0, 2), r.stdout + r.stderr
    res = json.loads((tmp_path / "lab" / "results.json").read_text())
    refs = json.loads((tmp_path / "lab" / "raw.json").read_text())[res["experiments"][0]["name"]]["raw"]["references"]
    assert isinstance(refs["ovs"], list), f"the OVS reference ran: {refs['ovs']}"
    assert (links(), netns()) == before


PHYSICAL = ["uplink-rss", "vxlan-rss", "splitrx", "tso-offload", "rx-csum", "port-batch", "netqueue", "lro-rate-wire"]


@pytest.mark.root
def test_the_physical_side_experiments_run_and_leave_nothing_behind(tmp_path):
    """The figures of NIC Technology in vSphere on uplinks (and the LRO
    rates of LRO in a Virtualized System from a real wire), each --quick:
    every figure has our values for each configuration, a verdict and its
    published source; the root namespace is as before."""
    before = (links(), netns())
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", *PHYSICAL, "--quick", "--out", str(tmp_path / "lab")],
                  check=False, timeout=900)
    assert r.returncode in (0, 2), r.stdout + r.stderr
    res = json.loads((tmp_path / "lab" / "results.json").read_text())
    assert [e["name"] for e in res["experiments"]] == PHYSICAL
    for e in res["experiments"]:
        assert e["figures"], e["name"]
        for fig in e["figures"]:
            assert fig["verdict"] in ("reproduced", "not reproduced", "inconclusive"), fig
            assert cites_study(fig["source"]), fig
            values = [v for series in fig["series"].values() for _, v in series]
            assert values and all(isinstance(v, (int, float)) and v > 0 for v in values), (fig["id"], fig["series"])
    figs = {f["id"]: f for e in res["experiments"] for f in e["figures"]}
    # Every configuration compared has its point.
    assert [x for x, _ in figs["uplink-rss-throughput"]["series"]["hvnet RSS on"]] == ["large", "small"]
    assert {x for x, _ in figs["tso-offload-cpu"]["series"]["hvnet"]} == {"hardware", "software", "vxlan"}
    # Queues in use come from the uplink's filters: Dynamic NetQueue starts
    # packed, so at low load it uses fewer than static's one per VM.
    spread = figs["netqueue-dynamic-spread"]["series"]
    assert [x for x, _ in spread["static"]] == ["low", "high"] and spread["static"][0][1] == 4, spread
    assert spread["dynamic"][0][1] < 4, spread
    # rx-csum's two switches ran at the same moment, round by round.
    csum = json.loads((tmp_path / "lab" / "raw.json").read_text())["rx-csum"]["samples"]
    assert sorted((s["csum"], s["at_once_with"]) for s in csum) == [("hardware", ["software"]),
                                                                    ("software", ["hardware"])], csum
    assert (links(), netns()) == before


MEASUREMENTS = ["fabrics", "per-frame", "hostile-neighbour", "uplinks"]


@pytest.mark.root
def test_the_measurements_run_beside_the_references_and_leave_nothing_behind(tmp_path):
    """The measurements, each --quick: every figure is "measured" (no
    verdict, no published source), has a positive value for every
    configuration it compares (hvnet and each reference that could run),
    and every run's command is kept; the root namespace is as before."""
    before = (links(), netns())
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", *MEASUREMENTS, "--quick", "--out", str(tmp_path / "lab")],
                  check=False, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((tmp_path / "lab" / "results.json").read_text())
    assert [e["name"] for e in res["experiments"]] == MEASUREMENTS
    assert report.check(res) == []
    raw = json.loads((tmp_path / "lab" / "raw.json").read_text())
    figs = {}
    for e in res["experiments"]:
        samples = raw[e["name"]]["samples"]
        assert samples and all("command" in s for s in samples), e["name"]
        for fig in e["figures"]:
            assert fig["verdict"] == "measured" and fig["why_not"], fig
            values = [v for series in fig["series"].values() for _, v in series]
            assert values and all(v > 0 for v in values), (fig["id"], fig["series"])
            figs[fig["id"]] = fig
    assert {"hvnet", "hvnet-uring", "bridge"} <= set(figs["fabrics-throughput"]["series"])
    assert {"hvnet-uplink", "bridge-uplink", "hvnet-vxlan", "linux-vxlan"} <= set(figs["uplinks-throughput"]["series"])
    assert [x for x, _ in figs["hostile-neighbour-throughput"]["series"]["VM c to VM b"]] == \
        ["neighbour idle", "neighbour hostile", "neighbour hostile, policed", "neighbour hostile, policed, cpu_limit",
         "neighbour hostile, policed, cpu_limit, CPU held"]
    assert set(figs["hostile-neighbour-worker-time"]["series"]) == {"VM a's port", "VM c's port"}
    # A few system calls per frame at most (a TAP port reads and writes a
    # frame per call; other ports batch).
    calls = dict(figs["per-frame-calls"]["series"]["hvnet"])
    assert 0 < calls["system calls"] < 10, calls
    assert (links(), netns()) == before


@pytest.mark.root
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupted_lab_run_leaves_nothing_behind(tmp_path, how):
    """Ctrl-C (SIGINT to the terminal's whole process group), or SIGTERM to
    the lab alone, while a run has its VMs up and traffic flowing: the run
    removes everything it made, says so and ends with status 130."""
    import os
    import signal
    import subprocess

    before = (links(), netns())
    p = subprocess.Popen([hvlab.hvnet_bin(), "lab", "run", "lro-rate", "--quick", "--out", str(tmp_path / "lab")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # Interrupt once the experiment's VMs exist and traffic is running.
        assert hvlab.eventually(lambda: len(netns()) >= len(before[1]) + 2 or p.poll() is not None, timeout=120)
        assert p.poll() is None, "the run ended before it could be interrupted"
        assert hvlab.eventually(lambda: hvlab.run(["pgrep", "-g", str(p.pid), "-f", "iperf3 .*-c"], check=False).returncode == 0,
                              timeout=60)
        if how == "ctrl-c":
            os.killpg(p.pid, signal.SIGINT)
        else:
            p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, out + err
    assert "interrupted during lro-rate" in err and "Traceback" not in err, err
    assert (links(), netns()) == before


@pytest.mark.root
@pytest.mark.skipif(not Path("/usr/bin/linux.uml").exists(), reason="needs user-mode-linux")
def test_a_quick_experiment_with_real_guests(tmp_path):
    out = tmp_path / "lab"
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", "lro-local", "jumbo", "multiqueue", "--quick", "--vms", "uml",
                   "--out", str(out)], check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["vms"] == "uml"
    raw = json.loads((out / "raw.json").read_text())
    e = res["experiments"][0]
    assert {f["id"] for f in e["figures"]} >= {"lro-local-throughput", "lro-local-frames"}
    hvnet = raw[e["name"]]["raw"]["hvnet"]
    assert all(x["gbps"] > 0 for x in hvnet["on"]), hvnet
    for e in res["experiments"]:
        assert "User-Mode Linux" in e["figures"][0]["note"], e["name"]
        # The guests went through hvnet exec: no namespace of theirs existed.
        samples = raw[e["name"]]["samples"]
        assert all(s["command"].startswith("hvnet exec") for s in samples), (e["name"], samples[0])
    # Experiments that cannot run with these guests say so, and which can.
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", "ring-exhaustion", "--vms", "uml", "--out", str(out)], check=False)
    assert r.returncode == 1 and "does not run with --vms uml" in r.stderr and "lro-local" in r.stderr, r.stderr


@pytest.mark.root
@pytest.mark.skipif(not shutil.which("qemu-system-x86_64"), reason="needs qemu-system-x86")
def test_ring_exhaustion_on_a_qemu_guests_receive_virtqueue(tmp_path):
    """QEMU guests hvnet starts: the receiving guest's virtqueue, set up
    with the sizes compared, is the ring that fills."""
    before = (links(), netns())
    out = tmp_path / "lab"
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", "ring-exhaustion", "--quick", "--vms", "qemu", "--out", str(out)],
                  check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["vms"] == "qemu"
    (e,) = res["experiments"]
    assert {f["id"] for f in e["figures"]} == {"ring-exhaustion-drops", "ring-exhaustion-retransmits"}
    # The guest's driver set up the virtqueue each switch asked for.
    samples = json.loads((out / "raw.json").read_text())[e["name"]]["samples"]
    assert sorted((x["rings"], x["virtqueue"]) for x in samples) == [(256, 256), (1024, 1024)], samples
    assert all(x["gbps"] > 0 and x["command"].startswith("hvnet exec") for x in samples), samples
    assert "QEMU" in e["figures"][0]["note"]
    assert (links(), netns()) == before


@pytest.mark.root
def test_a_host_day_quick_leaves_nothing_over_and_loses_nothing(tmp_path):
    """`host-day --quick`: 45 s of VMs added and removed, settings, VLANs,
    policy, mirrors and captures changed, an uplink team's member pulled,
    a libvirt guest started, hot-plugged and destroyed and libvirtd
    restarted, and the switch stopped, upgraded in place and killed and brought up
    again, while two untouched VMs carry
    SHA-256-checked transfers: every transfer intact, nothing of the
    topology's left over against the start, every port balanced, no
    queue's turn failed, the root namespace as before."""
    before = (links(), netns())
    ours = not libvirt_host.alive(libvirt_host.SYSTEM_SOCKET)
    r = hvlab.run([hvlab.hvnet_bin(), "lab", "run", "host-day", "--quick", "--out", str(tmp_path / "lab")],
                  check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    raw = json.loads((tmp_path / "lab" / "raw.json").read_text())
    day = raw["host-day"]["samples"][0]
    assert day["transfers"] >= 1 and day["transfers_bad"] == 0, day
    assert set(day["left_over"].values()) == {0}, day["left_over"]
    assert day["unbalanced_ports"] == [], day
    assert day["queue_failures"] == {}, day
    assert all(day["per_hour"][k] > 0 for k in ("restart", "upgrade", "kill")), day
    assert all(day["per_hour"][k] > 0 for k in ("vm", "settings", "policy", "capture", "team")), day
    if libvirt_host.available():
        assert day["per_hour"]["libvirt"] > 0, day
        # libvirtd is restarted where the day started it, not a system one.
        assert (day["per_hour"]["libvirtd"] > 0) == ours, day
    assert (links(), netns()) == before
