"""What the system tests share about a running topology: a VM's table for
a topology file, the switch's ports as its view lists them, the daemon's
process. Host helpers (namespaces, topologies, readiness) are the lab's
(`hvlab`), which these tests import as the lab does."""

import json
import subprocess
import sys
from pathlib import Path


def vm(name, ipv4=None, ipv6=None, **settings):
    """A `[[vm]]` table: its name, its addresses (a bare IPv4 address gets
    /24, a bare IPv6 one /64) and any other key of the topology's words
    (`queues`, `security_groups`, guards, ...; `None` leaves a key out)."""
    v = dict(name=name)
    if ipv4:
        v["ipv4"] = ipv4 if "/" in ipv4 else f"{ipv4}/24"
    if ipv6:
        v["ipv6"] = ipv6 if "/" in ipv6 else f"{ipv6}/64"
    v.update({k: x for k, x in settings.items() if x is not None})
    return v


def ports(t, key="name"):
    """The switch's ports (`hvnet ports --json`), by `key` (`name`, or
    `client` for the VM a port belongs to)."""
    return {p[key]: p for p in json.loads(t.hv("ports", "--json").stdout)}


def daemon_pid(t):
    """The process id of topology `t`'s daemon, from its state file."""
    return json.loads(Path(f"/run/hvnet/{t.name}/state.json").read_text())["pid"]


def ns_transfer(src_ns, dst_ns, dst_ip, data, port=5555):
    """SHA-256 and length of file `data` as received after a TCP transfer
    from namespace `src_ns` to a server at `dst_ip` in `dst_ns`."""
    import hvlab

    xfer = Path(__file__).with_name("xfer.py")
    server = subprocess.Popen(["ip", "netns", "exec", dst_ns, sys.executable, str(xfer), "serve", dst_ip, str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        hvlab.wait_listening(dst_ns, port)
        hvlab.run(["ip", "netns", "exec", src_ns, sys.executable, str(xfer), "send", dst_ip, str(port), str(data)],
                  timeout=90)
        out, _ = server.communicate(timeout=30)
    finally:
        hvlab.stop_procs([server])
    digest, n = out.split()
    return digest, int(n)


def tcp_connect(ns, ip, port):
    """What a TCP connect from namespace `ns` to ip:port meets: "open" or
    "refused" (a timeout raises)."""
    code = ("import socket\ns=socket.socket();s.settimeout(10)\n"
            f"try:\n s.connect(('{ip}',{port}));print('open')\nexcept ConnectionRefusedError:\n print('refused')")
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=30)
    return out.stdout.strip()
