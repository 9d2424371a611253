#!/usr/bin/env python3
"""hvnet against the Linux bridge and Open vSwitch's userspace datapath,
same workload, same run.

Two VMs (network namespaces) are joined by each fabric in turn:
- hvnet: `hvnet up`, TAP ports with virtio-net headers;
- bridge: veth pairs into a Linux bridge (in a namespace of its own);
- ovs: Open vSwitch's userspace datapath (datapath_type=netdev) with
  userspace TSO on, its own ovsdb-server and ovs-vswitchd in a private run
  directory, TAP ports moved into the namespaces.
iperf3 runs VM a -> VM b for each combination of streams, write size and
MTU. Reported: Gbit/s, CPU cores busy machine-wide (from /proc/stat during
the run), Gbit/s per busy core, and hvnet's ratios to the others.

Run as root: `scripts/bench.py [--quick] [--out results.json]`. Not a test:
nothing here asserts a speed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "py"))

import hvlab  # noqa: E402

A_IP, B_IP = "10.98.0.1", "10.98.0.2"


def cpu_times():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f))
    idle = v[3] + v[4]
    return sum(v), idle


def busy_cores(t0, t1):
    total, idle = t1[0] - t0[0], t1[1] - t0[1]
    return (total - idle) / max(total, 1) * os.cpu_count()


class Fabric:
    name = "?"

    def ns(self, vm):
        raise NotImplementedError

    def sh(self, vm, cmd, **kw):
        return hvlab.run(["ip", "netns", "exec", self.ns(vm), "sh", "-c", cmd], **kw)

    def popen(self, vm, cmd):
        return subprocess.Popen(["ip", "netns", "exec", self.ns(vm), "sh", "-c", f"exec {cmd}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Hvnet(Fabric):
    name = "hvnet"
    env = {}

    def __init__(self, tmp, mtu):
        vms = [dict(name="a", ipv4=A_IP + "/24", mtu=mtu), dict(name="b", ipv4=B_IP + "/24", mtu=mtu)]
        self.t = hvlab.Topology(Path(tmp), vms, prefix="bh")

    def __enter__(self):
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            self.t.__enter__()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return self

    def __exit__(self, *e):
        return self.t.__exit__(*e)

    def ns(self, vm):
        return self.t.ns(vm)


class HvnetUring(Hvnet):
    """hvnet with io_uring for TAP reads and writes (HVNET_IO_READ/WRITE)."""

    name = "hvnet-uring"
    env = {"HVNET_IO_READ": "uring", "HVNET_IO_WRITE": "uring"}


class Bridge(Fabric):
    name = "bridge"

    def __init__(self, tmp, mtu):
        self.mtu = mtu
        self.nss = {k: hvlab.Netns("bb") for k in ("a", "b", "sw")}

    def __enter__(self):
        for n in self.nss.values():
            n.__enter__()
        sw = self.nss["sw"]
        sw.sh("ip link add br0 type bridge && ip link set br0 up")
        for vm, ip in (("a", A_IP), ("b", B_IP)):
            hvlab.run(["ip", "link", "add", "eth0", "netns", self.nss[vm].name, "type", "veth",
                       "peer", "name", f"p{vm}", "netns", sw.name])
            sw.sh(f"ip link set p{vm} mtu {self.mtu} master br0 up")
            self.nss[vm].sh(f"ip link set eth0 mtu {self.mtu} up && ip addr add {ip}/24 dev eth0")
        return self

    def __exit__(self, *e):
        for n in self.nss.values():
            n.__exit__(*e)

    def ns(self, vm):
        return self.nss[vm].name


class Ovs(Fabric):
    """Open vSwitch userspace datapath with userspace TSO, in a private run
    directory; its daemons are stopped by their pidfiles."""

    name = "ovs"

    def __init__(self, tmp, mtu):
        self.mtu = mtu
        self.dir = Path(tempfile.mkdtemp(prefix="hvnet-ovs-"))
        self.env = dict(os.environ, OVS_RUNDIR=str(self.dir), OVS_LOGDIR=str(self.dir), OVS_DBDIR=str(self.dir))
        self.db = f"unix:{self.dir}/db.sock"
        self.nss = {k: hvlab.Netns("bo") for k in ("a", "b")}
        self.br = hvlab.unique("obr")[:12]

    def ovs(self, *args):
        return subprocess.run(list(args), check=True, capture_output=True, text=True, env=self.env)

    def vsctl(self, *args):
        return self.ovs("ovs-vsctl", f"--db={self.db}", "--timeout=10", *args)

    def __enter__(self):
        for n in self.nss.values():
            n.__enter__()
        d = self.dir
        self.ovs("ovsdb-tool", "create", f"{d}/conf.db", "/usr/share/openvswitch/vswitch.ovsschema")
        self.ovs("ovsdb-server", f"--remote=punix:{d}/db.sock", f"--pidfile={d}/ovsdb.pid", "--detach",
                 f"--log-file={d}/ovsdb.log", f"{d}/conf.db")
        self.vsctl("--no-wait", "init")
        self.vsctl("--no-wait", "set", "Open_vSwitch", ".", "other_config:userspace-tso-enable=true")
        self.ovs("ovs-vswitchd", self.db, f"--pidfile={d}/vswitchd.pid", "--detach", f"--log-file={d}/vswitchd.log")
        self.vsctl("add-br", self.br, "--", "set", "bridge", self.br, "datapath_type=netdev")
        for vm, ip in (("a", A_IP), ("b", B_IP)):
            tap = hvlab.unique(f"ot{vm}")[:12]
            self.vsctl("add-port", self.br, tap, "--", "set", "Interface", tap, "type=tap", f"mtu_request={self.mtu}")
            for _ in range(50):
                if hvlab.run(["ip", "link", "show", tap], check=False).returncode == 0:
                    break
                time.sleep(0.1)
            hvlab.run(["ip", "link", "set", tap, "netns", self.nss[vm].name])
            self.nss[vm].sh(f"ip link set {tap} name eth0 && ip link set eth0 mtu {self.mtu} up && ip addr add {ip}/24 dev eth0")
        return self

    def __exit__(self, *e):
        for n in self.nss.values():
            n.__exit__(*e)
        for pidfile in ("vswitchd.pid", "ovsdb.pid"):
            p = self.dir / pidfile
            if p.exists():
                try:
                    os.kill(int(p.read_text().strip()), 15)
                except (ProcessLookupError, ValueError):
                    pass
        time.sleep(0.3)
        shutil.rmtree(self.dir, ignore_errors=True)

    def ns(self, vm):
        return self.nss[vm].name


def run_one(f, streams, size, seconds):
    server = f.popen("b", f"iperf3 -s -B {B_IP}")
    time.sleep(0.4)
    try:
        f.sh("a", f"ping -c 1 -W 2 {B_IP} >/dev/null", check=False)
        t0 = cpu_times()
        out = f.sh("a", f"iperf3 -c {B_IP} -t {seconds} -P {streams} -l {size} -J", timeout=seconds + 60).stdout
        t1 = cpu_times()
    finally:
        server.terminate()
        server.wait()
    r = json.loads(out)
    gbps = r["end"]["sum_received"]["bits_per_second"] / 1e9
    cores = busy_cores(t0, t1)
    return {"gbps": gbps, "busy_cores": cores, "gbps_per_core": gbps / max(cores, 1e-9),
            "retransmits": r["end"]["sum_sent"].get("retransmits", 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 and 4 streams at 64K only, MTU 1500, 3 s runs")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1, help="runs per point; the median is kept")
    ap.add_argument("--fabrics", default="hvnet,bridge,ovs",
                    help="comma-separated, from hvnet, hvnet-uring (io_uring TAP I/O), bridge, ovs")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if not hvlab.is_root():
        sys.exit("bench: run as root")
    if "ovs" in a.fabrics and not shutil.which("ovs-vswitchd"):
        sys.exit("bench: Open vSwitch is not installed (apt-get install openvswitch-switch), or leave it out with --fabrics hvnet,bridge")
    seconds = 3 if a.quick else a.seconds
    mtus = [1500] if a.quick else [1500, 9000]
    sizes = ["64K"] if a.quick else ["256", "16K", "64K"]
    streams = [1, 4]
    fabrics = {"hvnet": Hvnet, "hvnet-uring": HvnetUring, "bridge": Bridge, "ovs": Ovs}
    chosen = [fabrics[n] for n in a.fabrics.split(",")]
    results = []
    total = len(mtus) * len(chosen) * len(sizes) * len(streams)
    done = 0
    with tempfile.TemporaryDirectory() as tmp:
        for mtu in mtus:
            for F in chosen:
                with F(tmp, mtu) as f:
                    for size in sizes:
                        for s in streams:
                            done += 1
                            print(f"[{done}/{total}] {f.name:<6} mtu {mtu} streams {s} writes {size} ...", flush=True)
                            runs = sorted((run_one(f, s, size, seconds) for _ in range(a.repeat)), key=lambda r: r["gbps"])
                            r = runs[len(runs) // 2]
                            results.append({"fabric": f.name, "mtu": mtu, "streams": s, "write": size, **r})
    print()
    print(f"{'mtu':>5} {'str':>3} {'write':>5} | " + " | ".join(f"{F.name:^24}" for F in chosen) + " | hvnet/bridge  hvnet/ovs (Gbit/s; per core)")
    print(f"{'':>17}| " + " | ".join(f"{'Gbit/s':>7} {'cores':>5} {'/core':>8}" for _ in chosen) + " |")
    for mtu in mtus:
        for size in sizes:
            for s in streams:
                row = {r["fabric"]: r for r in results if (r["mtu"], r["write"], r["streams"]) == (mtu, size, s)}
                cells = " | ".join(f"{row[F.name]['gbps']:>7.2f} {row[F.name]['busy_cores']:>5.2f} {row[F.name]['gbps_per_core']:>8.2f}" for F in chosen)
                ratios = []
                for other in ("bridge", "ovs"):
                    if "hvnet" in row and other in row:
                        h, o = row["hvnet"], row[other]
                        ratios.append(f"{h['gbps'] / o['gbps']:.2f}; {h['gbps_per_core'] / o['gbps_per_core']:.2f}")
                print(f"{mtu:>5} {s:>3} {size:>5} | {cells} | " + "   ".join(ratios))
    if a.out:
        meta = {"kernel": os.uname().release, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "iperf3": hvlab.run(["iperf3", "--version"]).stdout.splitlines()[0]}
        a.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
        print(f"results written to {a.out}")


if __name__ == "__main__":
    main()
