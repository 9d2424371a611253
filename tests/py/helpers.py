"""What the system tests share about a running topology: a VM's table for
a topology file, the switch's ports as its view lists them, the daemon's
process. Host helpers (namespaces, topologies, readiness) are the lab's
(`hvlab`), which these tests import as the lab does."""

import json
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
