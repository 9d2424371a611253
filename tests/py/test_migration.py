"""Live migration of a real guest between two hvnet switches: on one
machine, two topologies whose uplinks are the two ends of one veth pair
(the wire between two hosts). QEMU (TCG here) runs the guest on a
vhost-user port of the first switch; a second QEMU waits for it
(`-incoming`) on a port of the second; `migrate` over QMP moves it while a
namespace VM on the first switch sends it a file over TCP. QEMU refuses to
migrate unless the back end logs the pages it writes (LOG_SHMFD,
LOG_ALL); after the move it asks the destination's back end to announce
the guest (SEND_RARP), and the first switch must learn that the guest's
address now lies behind its uplink."""

import hashlib
import json
import os
import shutil
import subprocess

import pytest

import hvlab
from test_switch_e2e import XFER

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not shutil.which("qemu-system-x86_64"),
                       reason="needs qemu-system-x86 (scripts/install-deps.sh)"),
]

MAC = "02:00:00:00:25:01"
GUEST, PEER = "198.18.25.1", "198.18.25.3"
SIZE = 12 << 20
RATE = 1 << 20


def uptimes(text: str) -> list:
    """The guest's /proc/uptime readings its command printed."""
    import re

    return [float(m) for m in re.findall(r"^UPTIME (\d+\.\d+)", text, re.M)]


@pytest.fixture
def two_switches(tmp_path):
    """Switch a (the guest's port q, namespace VM c) and switch b (port q),
    their uplinks the two ends of one veth pair."""
    from hvnet_lab.migration import two_switches

    with two_switches(tmp_path, MAC, PEER, prefix="mg") as (a, b):
        yield a, b


@pytest.fixture
def guests():
    """QEMU processes started by a test, ended after it."""
    procs = []
    yield procs
    for q in procs:
        q.stop()


def vu(t):
    return json.loads(t.hv("port", "q", "--json").stdout)["vhost_user"]


def source_and_destination(tmp_path, a, b, guests, cmd, packed=False):
    """The guest running `cmd` on switch a's port, and a QEMU waiting for
    it on switch b's; the migration socket. `packed`: on packed
    virtqueues."""
    import qemu_guest  # lab/qemu_guest.py

    initrd = qemu_guest.initramfs(tmp_path, MAC, GUEST + "/24", cmd)
    mig = tmp_path / "migrate.sock"
    src = qemu_guest.Qemu(tmp_path, "src", qemu_guest.argv(f"/run/hvnet/{a.name}/q.sock", MAC, initrd,
                                                           packed=packed))
    guests.append(src)
    dst = qemu_guest.Qemu(tmp_path, "dst", qemu_guest.argv(f"/run/hvnet/{b.name}/q.sock", MAC, initrd,
                                                           packed=packed)
               + ["-incoming", f"unix:{mig}"])
    guests.append(dst)
    return src, dst, mig


def migration_status(src):
    return src.migration().get("status")


@pytest.mark.parametrize("layout", ["split", "packed"])
def test_a_guest_migrates_between_switches_under_a_transfer_and_the_wire_learns_where_it_went(
        tmp_path, two_switches, guests, layout):
    import qemu_guest  # lab/qemu_guest.py

    a, b = two_switches
    data = tmp_path / "data"
    data.write_bytes(os.urandom(SIZE))
    want = hashlib.sha256(data.read_bytes()).hexdigest()
    cmd = ("echo UPTIME $(cut -d\" \" -f1 /proc/uptime); nc -l -p 5555 | sha256sum; "
           "echo UPTIME $(cut -d\" \" -f1 /proc/uptime)")
    src, dst, mig = source_and_destination(tmp_path, a, b, guests, cmd, packed=layout == "packed")
    sender = a.popen("c", f"python3 {XFER} paced {GUEST} 5555 {data} {RATE}",
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # The transfer is under way: the guest acknowledges.
    guest_sent = lambda: a.stats("/ports/q/tx_summary")["frames"]  # noqa: E731
    assert hvlab.eventually(lambda: guest_sent() >= 100, timeout=240, every=0.2), src.text()[-2000:]
    assert vu(a)["ring_layout"] == layout, vu(a)
    src.qmp(("migrate", {"uri": f"unix:{mig}"}))
    assert hvlab.eventually(lambda: migration_status(src) in ("completed", "failed", "cancelled"), timeout=180,
                            every=0.2), migration_status(src)
    assert migration_status(src) == "completed", src.qmp(("query-migrate", {}))
    # The guest runs on at the destination, on the same kind of rings.
    assert vu(b)["ring_layout"] == layout, vu(b)
    out, _ = sender.communicate(timeout=240)
    assert sender.returncode == 0, out
    dst.proc.wait(timeout=120)
    rc, text = qemu_guest.output(src.text() + dst.text())
    assert rc == 0, text
    assert f"{want}  -" in text, (want, text)
    # One boot: the guest began on the source and ended on the
    # destination, its clock running on.
    assert "HVNET-BEGIN" not in dst.text(), dst.text()
    before, after = uptimes(text)
    assert after > before, (before, after)
    # The destination announced the guest; the source's switch learned it
    # behind its uplink (its port's own, pinned entry gave way).
    assert vu(b)["announcements"] >= 1
    assert vu(a)["guest_present"] is False, vu(a)
    uplink = next(p for p in json.loads(a.hv("ports", "--json").stdout) if p["name"] == "up0")
    rows = [r for r in json.loads(a.hv("fdb", "--json").stdout) if r["mac"] == MAC]
    assert rows and rows[0]["port"] == uplink["port"] and rows[0]["kind"] == "learned", (rows, uplink)


def test_a_migration_whose_destination_dies_leaves_the_guest_running_on_the_source(tmp_path, two_switches, guests):
    a, b = two_switches
    src, dst, mig = source_and_destination(tmp_path, a, b, guests, "sleep 600")
    reaches = lambda: a.sh("c", f"ping -c 1 -W 1 {GUEST}", check=False).returncode == 0  # noqa: E731
    assert hvlab.eventually(reaches, timeout=240, every=0.2), src.text()[-2000:]
    # Slowly, so that the destination dies mid-way.
    src.qmp(("migrate-set-parameters", {"max-bandwidth": 4 << 20}), ("migrate", {"uri": f"unix:{mig}"}))
    assert hvlab.eventually(lambda: vu(a)["dirty_logging"], timeout=30, every=0.05), "the source logs"
    dst.stop()
    assert hvlab.eventually(lambda: migration_status(src) == "failed", timeout=60, every=0.1), \
        src.qmp(("query-migrate", {}))
    assert src.qmp(("query-status", {}))[0]["status"] == "running"
    # The guest goes on forwarding where it was; logging is off again.
    a.sh("c", f"ping -c 3 -i 0.2 -W 5 {GUEST}")
    assert hvlab.eventually(lambda: not vu(a)["dirty_logging"], timeout=10), vu(a)
    assert vu(a)["guest_present"] is True
    rows = [r for r in json.loads(a.hv("fdb", "--json").stdout) if r["mac"] == MAC]
    assert rows and rows[0]["kind"] == "static", rows
