"""A host's day, compressed: what a host does at once for months, for
`HVNET_LAB_HOST_DAY_MINUTES` minutes (60 by default, 0.75 with --quick),
with nothing leaked or lost. A measurement with no reference beside it.

Two VMs that nothing touches (`keep-a` to `keep-b`) carry SHA-256-checked
transfers back to back, paced, the whole time. Meanwhile the host's work
goes round in cycles, each one of the first five kinds in turn; a
libvirt guest's life every few minutes; and the last four once each (at
half, two thirds, three quarters and five sixths of the day):

- `vm`: namespace VMs added (`hvnet vm add`), pinged, and removed;
- `settings`: a port's rate set and cleared at run time (`hvnet port P
  set`), a VM's access VLAN moved and moved back;
- `policy`: a security group given to a VM and taken away again, and a
  mirror made and removed, through `hvnet up FILE` of the edited file;
- `capture`: a capture of the untouched ports' frames started and
  stopped (`hvnet capture -c`);
- `team`: the active member of the switch's uplink team (active-backup,
  two veth members to a Linux bridge with a host behind it) loses its
  carrier, a VM reaches the host through the other, the member comes
  back and the team settles;
- `restart`: the switch stopped with SIGTERM and brought up again (it
  re-attaches to the VMs);
- `libvirt` (every four minutes, once in `--quick`, where libvirt is
  installed): a QEMU guest
  started by libvirt (`virsh create`) on a port the switch makes for it,
  pinging a VM; a second NIC hot-plugged (`virsh attach-device --live`),
  pinging through it, and unplugged; the guest migrated live (`virsh
  migrate --live`) to a second libvirt host whose own switch's uplink
  reaches the first's team through the wire's bridge, and reached there;
  the guest destroyed;
- `frr` (every four minutes, two minutes after the guests, where FRR is
  installed; not in `--quick`: the system tests kill FRR under a fabric
  themselves): a second switch in a BGP EVPN fabric with a Linux VTEP
  (FRR on both) has its FRR killed; the switch's daemon starts it again,
  the sessions come back and its VM reaches the Linux VTEP's again;
- `libvirtd` (once, at half the day, where the day started libvirtd):
  libvirtd restarted, its guests running on;
- `upgrade`: a second build installed over the binary the day runs (a
  new file renamed into its path, as a package manager does), the switch
  stopped with SIGTERM and brought up by the new binary;
- `kill`: the switch killed with SIGKILL and brought up again.

The second build is `HVNET_LAB_NEXT_BIN` if set, else a copy of the
binary under test (a new file, the same bytes).

At the end, against the start (after the host's work has settled): the
daemon's descriptors and threads, the namespaces and the host's network
devices, the switch's ports and its FDB, MDB and connection entries; the
first daemon's memory just before its stop against its memory a sixth of
the way in (40 and 10 minutes into an hour); every
transfer's digest; every port's counters balanced (frames in = forwarded
+ named drops) in the daemon that runs at the end."""

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import evpn_fabric as ef
import hvlab
import libvirt_host
import qemu_guest

from .fabrics import running
from .figures import measured

XFER = Path(__file__).resolve().parents[2] / "tests" / "py" / "xfer.py"
KINDS = ["vm", "settings", "policy", "capture", "team", "libvirt", "frr", "libvirtd", "restart", "upgrade", "kill"]
EVERY_CYCLE = KINDS[:5]
RARE_EVERY = 240  # seconds between a libvirt guest's lives, and between FRR's restarts
SIDE = "198.18.98"  # the hot-plugged NIC's subnet, and the VM it pings
NET = "198.18.96"
KEEP_A, KEEP_B = f"{NET}.1", f"{NET}.2"
WIRE_HOST = f"{NET}.250"
GROUP = {"name": "day", "rules": [{"direction": "in", "protocol": "icmp"}, {"direction": "out"}]}


def every_cycle():
    """The kinds each cycle goes round: all five, or those named in
    `HVNET_LAB_HOST_DAY_KINDS` (comma-separated; to find which one keeps
    memory, each alone in its own day)."""
    named = os.environ.get("HVNET_LAB_HOST_DAY_KINDS")
    if not named:
        return EVERY_CYCLE
    kinds = [k.strip() for k in named.split(",") if k.strip()]
    bad = [k for k in kinds if k not in EVERY_CYCLE]
    if bad or not kinds:
        raise ValueError(f"HVNET_LAB_HOST_DAY_KINDS: unknown kind {bad}; allowed: {', '.join(EVERY_CYCLE)}")
    return kinds


def minutes(quick):
    m = os.environ.get("HVNET_LAB_HOST_DAY_MINUTES")
    return float(m) if m else (0.75 if quick else 60.0)


class Transfers:
    """keep-a sends `data` to keep-b again and again, paced, until told to
    stop; each transfer's digest and size kept."""

    def __init__(self, t, data):
        self.t, self.data = t, data
        self.want = hashlib.sha256(data.read_bytes()).hexdigest()
        self.done, self.bad = 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        size = self.data.stat().st_size
        while not self.stop.is_set():
            server = self.t.popen("keep-b", f"{sys.executable} {XFER} serve {KEEP_B} 5555",
                                  stdout=subprocess.PIPE, text=True)
            try:
                self.t.wait_listening("keep-b", 5555)
                sender = self.t.popen("keep-a", f"{sys.executable} {XFER} paced {KEEP_B} 5555 {self.data} {size // 4}")
                sender.wait(timeout=600)
                digest, n = server.communicate(timeout=120)[0].split()
                if digest == self.want and int(n) == size:
                    self.done += 1
                else:
                    self.bad.append((digest, n))
            except Exception as e:  # a transfer that could not finish is a loss, said
                self.bad.append(("error", str(e)))
            finally:
                hvlab.stop_procs([server])

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=900)


def daemon_pid(t):
    return json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]


def is_uplink(port):
    """A row of `hvnet ports --json` that is an uplink (a team's too)."""
    return port.get("type", "").startswith(("uplink", "team"))


def footprint(t):
    """What the host holds for the topology now. The FDB's part: every
    port's own address, and what it learned on a VM's port or keeps for a
    port that is gone (what the wire's hosts' addresses learned on the
    uplink come to depends on who spoke last, not on what was kept)."""
    pid = daemon_pid(t)
    netns = [n.split()[0] for n in hvlab.run(["ip", "netns", "list"]).stdout.splitlines()]
    acl = json.loads(t.hv("acl", "--json").stdout)
    ports = {p["name"]: p for p in json.loads(t.hv("ports", "--json").stdout)}
    uplink = lambda name: is_uplink(ports[name])  # noqa: E731
    fdb = [r for r in json.loads(t.hv("fdb", "--json").stdout)
           if r["port_name"] not in ports or not uplink(r["port_name"])]
    return {
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": len(os.listdir(f"/proc/{pid}/task")),
        "namespaces": len([n for n in netns if n.startswith(t.name)]),
        "host_devices": len(os.listdir("/sys/class/net")),
        "ports": len(ports),
        "fdb": len(fdb),
        "mdb": len(json.loads(t.hv("mdb", "--json").stdout).get("groups", [])),
        "conntrack": sum(p.get("connections", 0) for p in acl.get("ports", [])),
    }


def rss_kib(t):
    for line in Path(f"/proc/{daemon_pid(t)}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def balanced(t):
    """Ports whose counters do not balance in the daemon running now."""
    off = []
    for p in json.loads(t.hv("ports", "--json").stdout):
        kind = "uplinks" if is_uplink(p) else "ports"
        acc = t.stats(f"/{kind}/{p['name']}/accounting")
        if not (acc["ingress"]["balanced"] and acc["egress"]["balanced"]):
            off.append(p["name"])
    return off


def queue_failures(t):
    """Queue turns that panicked in the daemon running now (each one
    restarts its queue, and a port's fifth marks it failed), by port."""
    out = {}
    for p in json.loads(t.hv("ports", "--json").stdout):
        n = json.loads(t.hv("port", p["name"], "--json").stdout).get("thread_failures", 0)
        if n:
            out[p["name"]] = n
    return out


class Wire:
    """The uplink team's far side: two veth pairs, their near ends the
    team's members, their far ends on a Linux bridge in a namespace of
    its own with the host's address. Removed on exit, even on failure."""

    def __init__(self):
        self.ns = hvlab.Netns("dayw")
        self.members = []  # (near, far)

    def __enter__(self):
        self.ns.__enter__()
        try:
            self.ns.sh(f"ip link add br0 type bridge && ip addr add {WIRE_HOST}/24 dev br0 && ip link set br0 up")
            for _ in range(2):
                self.pair()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for near, _ in self.members:
            hvlab.run(["ip", "link", "del", near], check=False)
        self.ns.__exit__(None, None, None)
        return False

    def uplink(self):
        return dict(name="up0", devices=[n for n, _ in self.members[:2]], teaming="active-backup", queues=1)

    def pair(self):
        """A veth pair, its far end on the bridge, its near end here and
        up: the near end's name."""
        near, far = hvlab.unique("dwn"), hvlab.unique("dwf")
        hvlab.run(["ip", "link", "add", near, "type", "veth", "peer", "name", far, "netns", self.ns.name])
        self.members.append((near, far))
        hvlab.run(["sysctl", "-qw", f"net.ipv6.conf.{near}.disable_ipv6=1"])
        hvlab.run(["ip", "link", "set", near, "up"])
        self.ns.sh(f"ip link set {far} master br0 && ip link set {far} up")
        return near

    def second_uplink(self):
        """One more pair on the bridge, its near end a second switch's
        uplink (the second host's, for migrations)."""
        return dict(name="up0", device=self.pair(), queues=1)

    def far(self, near):
        return next(f for n, f in self.members if n == near)

    def fdb(self, mac):
        """The bridge's entries for `mac` (what a failure says)."""
        return self.ns.sh(f"bridge fdb show br br0 | grep -i {mac} || true").stdout.strip()


class Libvirt:
    """libvirt's daemons (started here where none runs, and stopped), a
    second libvirt host to migrate guests to (`libvirt_host.SecondHost`),
    and a directory their QEMU reads the guests' kernel and initramfs
    from. Each `life` is one guest's, always destroyed."""

    def __init__(self, tmp):
        self.tmp = Path(tmp)
        (self.tmp / "libvirt").mkdir(exist_ok=True)
        self.daemons = libvirt_host.Daemons(self.tmp / "libvirt")
        self.dir = None
        self.second = None
        self.lives = 0

    def __enter__(self):
        import pwd

        try:
            self.dir = Path(hvlab.run(["mktemp", "-d", "/var/tmp/hvnet-day-XXXXXX"]).stdout.strip())
            os.chown(self.dir, pwd.getpwnam("libvirt-qemu").pw_uid, -1)
            self.dir.chmod(0o755)
            self.kernel = self.dir / "vmlinuz"
            shutil.copy(next((qemu_guest.kernel() / "boot").glob("vmlinuz-*")), self.kernel)
            self.kernel.chmod(0o644)
            self.daemons.start()
            (self.tmp / "host2").mkdir(exist_ok=True)
            self.second = libvirt_host.SecondHost(self.tmp / "host2")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        try:
            if self.second:
                self.second.stop()
        finally:
            self.daemons.stop()
            if self.dir:
                shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def life(self, t, t2, wire):
        """A guest started on a port the switch makes for it, pinging
        keep-b; a NIC hot-plugged and pinging `side` through it, then
        unplugged; the guest migrated live to the second host (switch
        `t2`, whose uplink reaches the first's team through the wire's
        bridge), keep-b reaching it there; the guest destroyed and its
        ports gone from both switches."""
        self.lives += 1
        n = self.lives
        name = hvlab.unique("hvnet-day")
        mac, mac2 = f"52:54:00:96:{n >> 8 & 255:02x}:{n & 255:02x}", f"52:54:00:98:{n >> 8 & 255:02x}:{n & 255:02x}"
        cmd = (f"until ping -c 1 -W 1 {KEEP_B} >/dev/null; do :; done; echo NET0-OK; "
               "while [ ! -e /sys/class/net/eth1 ]; do sleep 0.1; done; "
               f"ip link set eth1 address {mac2} up; ip addr add {SIDE}.2/24 dev eth1; "
               f"until ping -c 1 -W 1 {SIDE}.1 >/dev/null; do :; done; echo NET1-OK; sleep 3600")
        work = self.tmp / name
        work.mkdir()
        initrd = self.dir / f"{name}.cpio"
        shutil.copy(qemu_guest.initramfs(work, mac, f"{NET}.4/24", cmd), initrd)
        initrd.chmod(0o644)
        console = self.dir / f"{name}.log"
        socks = Path(f"/run/hvnet-libvirt/{t.name}")
        xml = work / "domain.xml"
        # pci=nomsi: libvirt's vectors=0 override reaches the command
        # line only, not a hot-plugged NIC (QEMU 7.2 under TCG and MSI-X).
        xml.write_text(libvirt_host.domain(name, self.kernel, initrd, console,
                                           libvirt_host.interface(mac, socks / "lg.sock", target="lg-eth0"),
                                           cmdline="pci=nomsi"))
        text = lambda: console.read_text(errors="replace") if console.exists() else ""  # noqa: E731
        ports = lambda sw: {p["name"] for p in json.loads(sw.hv("ports", "--json").stdout)}  # noqa: E731
        try:
            r = libvirt_host.virsh("create", str(xml), check=False)
            if r.returncode != 0:
                raise RuntimeError(f"virsh create {name}: {r.stderr.strip()}")
            if not hvlab.eventually(lambda: "NET0-OK" in text(), timeout=300, every=0.5):
                raise RuntimeError(f"libvirt's guest {name} never reached keep-b:\n{text()[-2000:]}")
            hot = work / "nic.xml"
            hot.write_text(libvirt_host.interface(mac2, socks / "lg-1.sock", alias="ua-net1"))
            r = libvirt_host.virsh("attach-device", name, str(hot), "--live", check=False)
            if r.returncode != 0:
                raise RuntimeError(f"virsh attach-device {name}: {r.stderr.strip()}")
            if not hvlab.eventually(lambda: "NET1-OK" in text(), timeout=120, every=0.5):
                raise RuntimeError(f"libvirt's guest {name} never reached {SIDE}.1 by its hot-plugged NIC:\n"
                                   f"{text()[-2000:]}")
            r = libvirt_host.virsh("detach-device", name, str(hot), "--live", check=False)
            if r.returncode != 0:
                raise RuntimeError(f"virsh detach-device {name}: {r.stderr.strip()}")
            if not hvlab.eventually(lambda: "lg-1" not in ports(t), timeout=60, every=0.2):
                raise RuntimeError("the hot-plugged NIC's port stayed after it was unplugged")
            there = work / "destination.xml"
            there.write_text(libvirt_host.virsh("dumpxml", "--migratable", name).stdout
                             .replace(str(socks), f"/run/hvnet-libvirt/{t2.name}"))
            r = libvirt_host.migrate(name, self.second, there)
            if r.returncode != 0:
                raise RuntimeError(f"virsh migrate {name}: {r.stderr.strip()}")
            if not hvlab.eventually(lambda: t.sh("keep-b", f"ping -c 1 -W 1 {NET}.4", check=False).returncode == 0,
                                    timeout=60):
                seen = {sw.name: [e for e in json.loads(sw.hv("fdb", "--json").stdout) if e.get("mac") == mac]
                        for sw in (t, t2)}
                raise RuntimeError(f"keep-b does not reach libvirt's guest {name} on the second host; the "
                                   f"switches' FDB entries for it: {seen}; the wire's bridge's: "
                                   f"{wire.fdb(mac)}; its ports there: {ports(t2)}")
        finally:
            self.second.virsh("destroy", name, check=False)
            libvirt_host.virsh("destroy", name, check=False)
            initrd.unlink(missing_ok=True)
            console.unlink(missing_ok=True)
        for sw in (t, t2):
            # The destination names the port by its socket (`lg`): a
            # migrated domain's XML has no `<target dev>`.
            if not hvlab.eventually(lambda: not ports(sw) & {"lg-eth0", "lg-1", "lg"}, timeout=60, every=0.2):
                raise RuntimeError(f"libvirt's guest's port stayed on {sw.name} after it was destroyed")


def frr_restart(fabric):
    """The hvnet host's zebra and bgpd killed; its daemon starts them
    again, the sessions come back, and its VM and the Linux VTEP's reach
    each other again."""
    h, lin = fabric.hvnet[0], fabric.linux[0]
    old = h.frr_pids()
    for pid in old:
        os.kill(pid, signal.SIGKILL)

    def again():
        try:
            return set(h.frr_pids()).isdisjoint(old)
        except (OSError, ValueError):
            return False
    if not hvlab.eventually(again, timeout=60, every=0.1):
        raise RuntimeError("the switch's daemon did not start FRR again")
    fabric.wait_established(timeout=120)
    vm = h.topo.ns("ea")
    if not hvlab.eventually(lambda: ef.sh(vm, f"ping -c 1 -W 1 {lin.vm_ip}", check=False).returncode == 0,
                            timeout=120, every=0.2):
        raise RuntimeError("the EVPN fabric's VMs do not reach each other after FRR came back")


def team_view(t):
    return json.loads(t.hv("team", "--json").stdout)["teams"][0]


def settled(t):
    return all(m["state"] != "down" for m in team_view(t)["members"])


def pull_member(t, wire):
    """The team's active member loses its carrier (its far end down); a
    VM reaches the host through the other; the member comes back and the
    team settles."""
    if not hvlab.eventually(lambda: settled(t) and team_view(t)["active"], timeout=30, every=0.05):
        raise RuntimeError(f"the team is not settled: {team_view(t)}")
    active = team_view(t)["active"]
    wire.ns.sh(f"ip link set {wire.far(active)} down")
    try:
        if not hvlab.eventually(lambda: t.sh("moved", f"ping -c 1 -W 1 {WIRE_HOST}", check=False).returncode == 0,
                                timeout=30):
            raise RuntimeError(f"the host was not reached with team member {active} pulled")
    finally:
        wire.ns.sh(f"ip link set {wire.far(active)} up")
    if not hvlab.eventually(lambda: settled(t), timeout=30, every=0.05):
        raise RuntimeError(f"the team did not settle: {team_view(t)}")


def install_over(path, build):
    """A second build installed at `path` as a package manager installs
    one: written beside it, then renamed over it (the running daemon
    keeps its old file)."""
    new = Path(f"{path}.new")
    shutil.copyfile(build, new)
    new.chmod(0o755)
    os.replace(new, path)


def wait_down(pid):
    if not hvlab.eventually(lambda: not running(pid), timeout=60, every=0.05):
        raise RuntimeError("the daemon did not stop")


@dataclasses.dataclass
class Day:
    """What the day's events act on: the switch `t`, the wire behind its
    team, the binary it runs, libvirt and the second switch (or None),
    the EVPN fabric (or None); and the queue failures counted so far."""

    t: hvlab.Topology
    wire: Wire
    binary: Path
    lv: object
    t2: object
    fabric: object
    failed: dict = dataclasses.field(default_factory=dict)

    def count_failures(self):
        """The running daemon's queue failures added to the day's."""
        for p, f in queue_failures(self.t).items():
            self.failed[p] = self.failed.get(p, 0) + f


def cycle(day, kind, n):
    """One lifecycle event of `kind` (the `n`th cycle); a daemon's queue
    failures counted before it is stopped."""
    t = day.t
    if kind == "vm":
        ip = f"{NET}.{100 + n % 100}"
        t.hv("vm", "add", f"x{n}", f"ipv4={ip}/24", "queues=1")
        if not hvlab.eventually(lambda: t.sh("keep-a", f"ping -c 1 -W 1 {ip}", check=False).returncode == 0,
                                timeout=20):
            raise RuntimeError(f"vm x{n} never answered")
        t.hv("vm", "del", f"x{n}")
    elif kind == "settings":
        t.hv("port", "moved", "set", "tx_rate=500mbit")
        t.hv("port", "moved", "set", "vlan=7")
        t.hv("port", "moved", "set", "tx_rate=off", "vlan=0")
    elif kind == "policy":
        vms = [dict(v, security_groups=["day"]) if v["name"] == "moved" else v for v in t.vms]
        t.apply(vm=vms, security_group=[GROUP],
                mirror=[{"name": "day", "select_src_port": ["moved"], "output_port": "watch"}])
        t.apply(vm=t.vms, security_group=None, mirror=None)
    elif kind == "capture":
        t.hv("capture", "keep-a", "-c", "20", "-w", f"/tmp/{t.name}-day.pcapng")
        Path(f"/tmp/{t.name}-day.pcapng").unlink(missing_ok=True)
    elif kind == "team":
        pull_member(t, day.wire)
    elif kind == "libvirt":
        day.lv.life(t, day.t2, day.wire)
    elif kind == "frr":
        frr_restart(day.fabric)
    elif kind == "libvirtd":
        day.lv.daemons.restart_libvirtd()
    elif kind in ("restart", "upgrade", "kill"):
        day.count_failures()
        binary = day.binary
        if kind == "upgrade":
            install_over(binary, os.environ.get("HVNET_LAB_NEXT_BIN") or hvlab.hvnet_bin())
        pid = daemon_pid(t)
        os.kill(pid, signal.SIGKILL if kind == "kill" else signal.SIGTERM)
        wait_down(pid)
        hvlab.run([str(binary), "up", str(t.file)])
        if kind == "upgrade" and Path(f"/proc/{daemon_pid(t)}/exe").resolve() != Path(binary).resolve():
            raise RuntimeError("the switch brought up is not the binary installed")


def host_day(tmp, quick, reps, log):
    secs = minutes(quick) * 60
    data = Path(tmp) / "day-data"
    data.write_bytes(os.urandom(16 << 20))
    vms = [dict(name="keep-a", ipv4=f"{KEEP_A}/24", queues=1), dict(name="keep-b", ipv4=f"{KEEP_B}/24", queues=1),
           dict(name="moved", ipv4=f"{NET}.3/24", queues=1), dict(name="watch", queues=1),
           dict(name="side", ipv4=f"{SIDE}.1/24", queues=1)]
    with_libvirt = libvirt_host.available()
    with_frr = not quick and ef.have_frr()
    evpn_dir = Path(tmp) / "evpn"
    evpn_dir.mkdir(exist_ok=True)
    kinds = every_cycle()
    counts = {k: 0 for k in KINDS}
    took = {k: [] for k in KINDS}
    # The binary the day runs, at a path of its own: the upgrade installs
    # over it.
    binary = Path(tmp) / "bin" / "hvnet"
    binary.parent.mkdir(exist_ok=True)
    install_over(binary, hvlab.hvnet_bin())
    with hvlab.hvnet_binary(str(binary)), Wire() as wire, \
            (Libvirt(tmp) if with_libvirt else contextlib.nullcontext()) as lv, \
            hvlab.Topology(Path(tmp), vms, prefix="day", uplinks=[wire.uplink()],
                           libvirt={} if with_libvirt else None) as t, \
            (hvlab.Topology(Path(tmp), [], prefix="dayb", uplinks=[wire.second_uplink()],
                            libvirt={"uri": lv.second.uri}) if lv else contextlib.nullcontext()) as t2, \
            (ef.EvpnFabric(evpn_dir, [[dict(name="ea", ipv4=f"{ef.OVERLAY}.1/24")]])
             if with_frr else contextlib.nullcontext()) as fabric:
        if fabric:
            fabric.wait_established(timeout=120)
        if not hvlab.eventually(lambda: settled(t), timeout=30):
            raise RuntimeError(f"the uplink team never had both members up: {team_view(t)}")
        x = Transfers(t, data).__enter__()
        # The start: the transfers running (their addresses learned).
        hvlab.eventually(lambda: len(json.loads(t.hv("fdb", "--json").stdout)) >= 2 + len(vms), timeout=30)
        before = footprint(t)
        day = Day(t, wire, binary, lv, t2, fabric)
        start = time.monotonic()
        early_rss, late_rss = None, None
        rss = []  # (minutes, KiB) of the first daemon, every half minute
        n = 0

        def run(kind):
            nonlocal late_rss
            if kind == "restart":
                late_rss = rss_kib(t)  # the first daemon's, just before its stop
            s = time.monotonic()
            cycle(day, kind, n)
            took[kind].append(time.monotonic() - s)
            counts[kind] += 1

        # The switch is stopped at two thirds of the day, upgraded at three
        # quarters and killed at five sixths; the first daemon's memory is
        # read at a sixth of the day and just before its stop (10 and 40
        # minutes of an hour).
        restarts = [(2 / 3, "restart"), (3 / 4, "upgrade"), (5 / 6, "kill")]
        if lv and lv.daemons.ours:
            restarts.insert(0, (1 / 2, "libvirtd"))
        # The first guest at a third of a short day (--quick has one).
        next_guest = min(RARE_EVERY / 2, secs / 3)
        next_frr = RARE_EVERY
        try:
            while time.monotonic() - start < secs:
                at = (time.monotonic() - start) / secs
                if restarts and at >= restarts[0][0]:
                    kind = restarts.pop(0)[1]
                elif lv and time.monotonic() - start >= next_guest:
                    kind = "libvirt"
                    next_guest += RARE_EVERY
                elif fabric and time.monotonic() - start >= next_frr:
                    kind = "frr"
                    next_frr += RARE_EVERY
                else:
                    kind = kinds[n % len(kinds)]
                run(kind)
                n += 1
                if early_rss is None and at >= 1 / 6:
                    early_rss = rss_kib(t)
                if late_rss is None and (not rss or time.monotonic() - start >= rss[-1][0] * 60 + 30):
                    rss.append((round((time.monotonic() - start) / 60, 2), rss_kib(t)))
            # A day whose last cycle ran past its end (a guest's life is
            # long in a short day) still has its restarts.
            for _, kind in restarts:
                run(kind)
        finally:
            # The last transfer finishes: nothing is in flight when the
            # ports' counters are read.
            x.__exit__(None, None, None)
        hvlab.eventually(lambda: footprint(t) == before, timeout=60, every=1)
        after = footprint(t)
        end_rss = rss_kib(t)
        off = balanced(t)
        day.count_failures()
    failed = day.failed
    left = {k: after[k] - before[k] for k in before}
    hours = secs / 3600
    per_hour = {k: round(v / hours) for k, v in counts.items()}
    r = {"minutes": round(secs / 60, 1), "cycles": n, "transfers": x.done, "transfers_bad": len(x.bad),
         "left_over": left, "unbalanced_ports": off, "queue_failures": failed, "per_hour": per_hour,
         "rss_early_kib": early_rss, "rss_late_kib": late_rss, "rss_end_kib": end_rss,
         "rss_ratio": round(late_rss / early_rss, 3) if early_rss and late_rss else None,
         "kinds": kinds, "rss_series_kib": rss,
         **{f"{k}_s": round(sum(v) / len(v), 2) for k, v in took.items() if v}}
    log.append({"command": f"{r['minutes']} min: {n} cycles of {', '.join(KINDS)} while keep-a sends 16 MiB to "
                           "keep-b again and again (SHA-256 checked)", **r})
    print(f"      {n} cycles ({per_hour} per hour); transfers {x.done} intact, {len(x.bad)} not; left over {left}; "
          f"unbalanced {off}; queues failed {failed or 'none'}; the first daemon's memory {early_rss} -> {late_rss} KiB", flush=True)
    runs = {"host day": [r]}
    said = (f"{r['minutes']} min, {n} cycles; per hour: " + ", ".join(f"{k} {v}" for k, v in per_hour.items())
            + f"; transfers intact {x.done} of {x.done + len(x.bad)}; left over against the start: {left}; ports "
            f"unbalanced: {off or 'none'}; queue turns that panicked: {failed or 'none'}; the first daemon's memory at two thirds of the day "
            f"{r['rss_ratio']}x its memory at a sixth ({early_rss} and {late_rss} KiB)")
    note = ("Namespace VMs behind TAPs on this machine's 2 cores. The switch restarts (SIGTERM and SIGKILL) are part "
            "of the day: counters start again with each daemon, so balance is judged in the last one.")
    figs = [measured("host-day", "A host's day: lifecycle events per hour with nothing left over", "", "cycles",
                     runs, "cycles", lambda c: ("hvnet", c),
                     "does a host that does everything at once leak or lose anything?", said, note)]
    return figs, runs
