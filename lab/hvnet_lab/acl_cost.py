"""What security groups cost per frame (issue 41's goal: with 100 rules
and 10,000 tracked connections at most 1.2x the CPU per frame without),
beside the Linux bridge with nftables doing the same in the same run:
VM a sends TCP to VM b (a's TSO and b's LRO off: one wire-sized frame in,
one out), both VMs in a group of 100 rules, 10,000 UDP connections
tracked between them; and the same without groups. The bridge's rules
are an `inet` forward chain the bridged frames pass through (br_netfilter, as
OpenStack's Linux bridge agent uses it): `ct state
established,related accept`, 98 rules that never match, `ct state new
accept`, with its own 10,000 connections. CPU is the machine's, from
/proc/stat, over the iperf3 run, per frame b received."""

import contextlib
import json
import os
import shutil
import tomllib

import tomli_w
from pathlib import Path

import hvlab

from .fabrics import A_IP, B_IP, Bridge, Hvnet
from .figures import measured, vm_note
from .runners import interleaved, iperf
from .verdict import median

RULES = 100
CONNS = 10_000
# UDP from a's ports 30000.. to b's echo port: replied, so tracked 120 s.
ECHO_PORT = 9
TRACK = ("import socket,sys\n"
         "ip, n = sys.argv[1], int(sys.argv[2])\n"
         "for p in range(30000, 30000 + n):\n"
         "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
         "    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         "    s.bind(('', p)); s.sendto(b'x', (ip, %d)); s.close()\n" % ECHO_PORT)
ECHO = ("import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', %d))\n"
        "while True:\n"
        "    d, a = s.recvfrom(64); s.sendto(d, a)\n" % ECHO_PORT)


def filler(i):
    """A rule no frame of the run matches (both directions, so each stage
    walks past its half of them on a new connection)."""
    return {"direction": "in" if i % 2 else "out", "protocol": "udp", "ports": 20000 + i,
            "remote": "198.18.250.0/24"}


def track(f):
    """Opens CONNS UDP connections a -> b (answered by b's echo)."""
    f.sh("a", f"python3 -c \"{TRACK}\" {B_IP} {CONNS}", timeout=120)


class HvnetAcl(Hvnet):
    name = "hvnet-acl"

    def __init__(self, tmp, mtu, **kw):
        super().__init__(tmp, mtu, **kw)
        doc = tomllib.loads(self.t.file.read_text())
        rules = [filler(i) for i in range(RULES - 2)] + [{"direction": "in"}, {"direction": "out"}]
        doc["security_group"] = [{"name": "bench", "rules": rules}]
        doc["conntrack"] = {"max": 4 * CONNS, "max_per_port": 2 * CONNS}
        for v in doc["vm"]:
            v["security_groups"] = ["bench"]
        self.t.file.write_text(tomli_w.dumps(doc))

    def __enter__(self):
        super().__enter__()
        self.popen("b", f"python3 -c \"{ECHO}\"")
        hvlab.eventually(lambda: f":{ECHO_PORT} " in self.sh("b", "ss -Hlun").stdout)
        return self

    def tracked(self):
        import json

        v = json.loads(self.t.hv("acl", "b", "--json").stdout)
        return v["ports"][0]["connections"]


class HvnetAclLiberal(HvnetAcl):
    """The same groups with TCP's windows not checked (`[conntrack]
    tcp_be_liberal = true`, Linux's `nf_conntrack_tcp_be_liberal = 1`):
    what window tracking, on by default, costs."""
    name = "hvnet-acl-liberal"

    def __init__(self, tmp, mtu, **kw):
        super().__init__(tmp, mtu, **kw)
        doc = tomllib.loads(self.t.file.read_text())
        doc["conntrack"]["tcp_be_liberal"] = True
        self.t.file.write_text(tomli_w.dumps(doc))


class BridgeNft(Bridge):
    name = "bridge-nft"

    def _up(self):
        super()._up()
        fill = "\n".join(f"    ip saddr 198.18.250.0/24 udp dport {20000 + i} accept" for i in range(RULES - 2))
        # The bridge's frames through the IP hooks and conntrack (br_netfilter,
        # as OpenStack's Linux bridge agent filters its ports): this
        # kernel's bridge family has no conntrack of its own.
        self.nss["sw"].sh("sysctl -qw net.bridge.bridge-nf-call-iptables=1")
        rules = ("table inet hvlab {\n  chain filter_forward {\n"
                 "    type filter hook forward priority 0; policy drop;\n"
                 "    ct state established,related accept\n"
                 f"{fill}\n    ct state new accept\n  }}\n}}\n")
        self.nss["sw"].sh(f"nft -f - <<'EOF'\n{rules}EOF")
        self.popen("b", f"python3 -c \"{ECHO}\"")
        hvlab.eventually(lambda: f":{ECHO_PORT} " in self.sh("b", "ss -Hlun").stdout)
        return self

    def tracked(self):
        out = self.nss["sw"].sh("cat /proc/sys/net/netfilter/nf_conntrack_count", check=False).stdout.strip()
        return int(out) if out.isdigit() else None


def daemon_ticks(f):
    """CPU clock ticks of hvnet's daemon so far (user and system), or None
    for a fabric without one."""
    if not isinstance(f, Hvnet):
        return None
    pid = json.loads(Path(f"/run/hvnet/{f.t.name}/state.json").read_text())["pid"]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def once(f, secs, log):
    if isinstance(f, (HvnetAcl, BridgeNft)):  # (HvnetAclLiberal too)
        track(f)
    t0 = daemon_ticks(f)
    r = iperf(f, 1, "64K", secs, None, log)
    r["cpu_ns"] = r["busy_cores"] * secs * 1e9 / max(r["rx_frames"], 1)
    if t0 is not None:
        ticks = daemon_ticks(f) - t0
        r["daemon_ns"] = ticks / os.sysconf("SC_CLK_TCK") * 1e9 / max(r["rx_frames"], 1)
    if hasattr(f, "tracked"):
        r["tracked"] = f.tracked()
    return r


def acl_cost(tmp, quick, reps, log):
    if not shutil.which("nft"):
        raise RuntimeError("acl-cost needs nft (Debian's nftables: scripts/install-deps.sh)")
    secs = 2 if quick else 4
    settings = dict(a={"tso": False, "queues": 1}, b={"lro": False, "queues": 1})
    chosen = [Hvnet, HvnetAcl, HvnetAclLiberal, Bridge, BridgeNft]
    with contextlib.ExitStack() as stack:
        up = {}
        for F in chosen:
            f = stack.enter_context(F(tmp, 1500, **settings))
            if F in (Bridge, BridgeNft):
                # Wire-sized frames through the bridge too (a's stack
                # segments, as hvnet's port without TSO makes it).
                f.sh("a", "ethtool -K eth0 tso off gso off")
                f.sh("b", "ethtool -K eth0 gro off")
            up[F.name] = f
        runs = interleaved(list(up), reps, lambda name: once(up[name], secs, log))
    cost = {name: [{"v": r["cpu_ns"]} for r in rs] for name, rs in runs.items()}
    m = {name: median([r["cpu_ns"] for r in rs]) for name, rs in runs.items()}
    d = {name: median([r["daemon_ns"] for r in rs]) for name, rs in runs.items() if "daemon_ns" in rs[0]}
    said = (f"hvnet's daemon with groups / without: {d['hvnet-acl'] / d['hvnet']:.2f}x its CPU per frame "
            f"({d['hvnet-acl']:,.0f} vs {d['hvnet']:,.0f} ns), TCP windows checked / not "
            f"(tcp_be_liberal): {d['hvnet-acl'] / d['hvnet-acl-liberal']:.2f}x "
            f"({d['hvnet-acl']:,.0f} vs {d['hvnet-acl-liberal']:,.0f} ns); machine-wide, hvnet with groups / without: "
            f"{m['hvnet-acl'] / m['hvnet']:.2f}x CPU per frame "
            f"({m['hvnet-acl']:,.0f} vs {m['hvnet']:,.0f} ns); bridge with nftables / without: "
            f"{m['bridge-nft'] / m['bridge']:.2f}x ({m['bridge-nft']:,.0f} vs {m['bridge']:,.0f} ns); "
            f"connections tracked at b: hvnet {runs['hvnet-acl'][-1].get('tracked')}, "
            f"bridge {runs['bridge-nft'][-1].get('tracked')}")
    note = (vm_note() + f" {RULES} rules per VM (or in the bridge's forward chain), {CONNS:,} UDP connections "
            "opened a -> b before each run and answered (tracked 120 s); one TCP stream, 64 KiB writes, the "
            "sender's TSO off and the receiver's LRO (GRO) off. CPU: the machine's busy cores over the run "
            "(/proc/stat, every process and the kernel), per frame the receiver took.")
    figs = [measured("acl-cost", "Security groups: CPU per frame with 100 rules and 10,000 tracked connections",
                     "", "CPU ns per frame", cost, "v", lambda c: (c, "1 stream"),
                     "what do stateful security groups cost per frame, beside nftables on the Linux bridge?",
                     said, note),
            measured("acl-cost-daemon", "Security groups: hvnet's daemon CPU per frame, with and without groups",
                     "", "CPU ns per frame", {n: [{"v": r["daemon_ns"]} for r in rs] for n, rs in runs.items()
                                                if "daemon_ns" in rs[0]}, "v", lambda c: (c, "1 stream"),
                     "what do security groups add to the switch's own work per frame?", said, note)]
    return figs, runs
