"""VMs behind an hvnet uplink and an external host on its wire, plainly
or through a VXLAN tunnel whose far end is the external host's own Linux
vxlan device: the set-up of the figures of NIC Technology in vSphere
(RSS and SplitRxMode at the uplink, VXLAN TSO and receive checksum
offload, Dynamic NetQueue, the per-packet API), and the TCP streams that
load it, with what each run cost, and the runners the wire experiments
share (fleets up at once, their runs interleaved). Used by the lab's
experiments on that white paper."""

import contextlib
import json
import threading
import time
from pathlib import Path

import hvlab

from . import measure
from .runners import interleaved
from .verdict import median, summarize

VNI = 42
# The overlay (VMs and the external host's vxlan device) and the underlay
# (the wire) in the benchmarking range.
UNDERLAY_SW, UNDERLAY_EXT = "198.18.32.1", "198.18.32.2"
BASE_PORT = 5301


class Fleet:
    """`vms` VMs (`v0`, `v1`, ...) behind uplink `up0` and external host
    `ext` on its wire. `uplink`: settings of the uplink (queues, rss, tso,
    csum, batch, netqueue, lro, ...); `vm`: settings of every VM; `vxlan`:
    the uplink is a tunnel endpoint and `ext` reaches the VMs through its
    vxlan device."""

    def __init__(self, tmp, label, vms, vxlan=False, uplink=None, vm=None, prefix="fl"):
        d = Path(tmp) / label
        d.mkdir(parents=True, exist_ok=True)
        self.vms, self.vxlan = vms, vxlan
        self.net = "10.32.0" if vxlan else "198.18.33"
        up = dict(name="up0", device="", queues=1, lro="hardware", mtu=1550 if vxlan else 1500)
        if vxlan:
            up["vxlan"] = dict(vni=VNI, local=UNDERLAY_SW + "/24", remotes=[UNDERLAY_EXT])
        up.update(uplink or {})
        self.t = hvlab.Topology(
            d, [dict(name=f"v{i}", ipv4=f"{self.vm_ip(i)}/24", **(vm or {})) for i in range(vms)], prefix=prefix,
            uplinks=[up], hosts=[dict(name="ext", uplink="up0", ipv4=(UNDERLAY_EXT if vxlan else self.ext_ip) + "/24")])

    @property
    def ext_ip(self):
        return f"{self.net}.200"

    def vm_ip(self, i):
        return f"{self.net}.{i + 1}"

    def __enter__(self):
        self.t.__enter__()
        try:
            if self.vxlan:
                self.t.sh("ext", f"ip link add vx{VNI} type vxlan id {VNI} local {UNDERLAY_EXT} remote {UNDERLAY_SW} "
                                 f"dstport 4789 dev eth0 noudpcsum && ip addr add {self.ext_ip}/24 dev vx{VNI} "
                                 f"&& ip link set vx{VNI} up")
            for i in range(self.vms):
                if not hvlab.eventually(lambda: self.t.sh("ext", f"ping -c 1 -W 1 {self.vm_ip(i)}",
                                                          check=False).returncode == 0, timeout=20):
                    raise RuntimeError(f"v{i} ({self.vm_ip(i)}) does not answer the external host")
        except BaseException:
            self.t.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        return self.t.__exit__(*exc)

    def daemon_seconds(self):
        """CPU seconds the daemon has used, all its threads (schedstat run
        time, ns: finer than the clock-tick counters)."""
        pid = json.loads(Path(f"/run/hvnet/{self.t.name}/state.json").read_text())["pid"]
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += measure.schedstat((task / "schedstat").read_text())["run_ns"]
            except (OSError, ValueError):
                pass
        return total / 1e9

    def wire_frames(self):
        """(frames from the wire, frames to the wire) at the uplink so far,
        from hvnet's own counters."""
        return (self.t.stats("/uplinks/up0/tx_summary")["frames"],
                self.t.stats("/uplinks/up0/rx_summary")["delivered_frames"])

    def rtt_ms(self, count, vm=0):
        """Median ping round trip from the external host to a VM (ms): a
        few probes that wait on a descheduled thread move the mean of 200
        by tens of percent on 2 shared cores, the median hardly."""
        out = self.t.sh("ext", f"ping -c {count} -i 0.01 -W 2 {self.vm_ip(vm)}", check=False).stdout
        rtts = measure.ping_rtts(out)
        return median(rtts) if rtts else float("nan")

    def streams(self, seconds, to_vms=True, parallel=1, write=None, rate=None, nodelay=False, during=None):
        """One iperf3 client per VM, all at once: from the external host to
        each VM (`to_vms`) or from each VM to the external host. `during`,
        if given, is called once the streams run and its result kept.
        Returns Gbit/s (all streams), busy cores (machine), the daemon's
        cores, frames per second from and to the wire, and `during`'s
        result."""
        opts = f"-t {seconds} -P {parallel} -J" + (f" -l {write}" if write else "") \
            + (f" -b {rate}" if rate else "") + (" -N" if nodelay else "")
        if to_vms:
            servers = [self.t.popen(f"v{i}", f"iperf3 -s -1 -p {BASE_PORT + i}", stdout=hvlab.subprocess.DEVNULL)
                       for i in range(self.vms)]
            for i in range(self.vms):
                self.t.wait_listening(f"v{i}", BASE_PORT + i)
            cmds = [("ext", f"iperf3 -c {self.vm_ip(i)} -p {BASE_PORT + i} {opts}") for i in range(self.vms)]
        else:
            servers = [self.t.popen("ext", f"iperf3 -s -1 -p {BASE_PORT + i}", stdout=hvlab.subprocess.DEVNULL)
                       for i in range(self.vms)]
            for i in range(self.vms):
                self.t.wait_listening("ext", BASE_PORT + i)
            cmds = [(f"v{i}", f"iperf3 -c {self.ext_ip} -p {BASE_PORT + i} {opts}") for i in range(self.vms)]
        w0, d0, t0 = self.wire_frames(), self.daemon_seconds(), time.monotonic()
        extra = None
        with measure.Cpu() as cpu:
            clients = [self.t.popen(where, cmd, stdout=hvlab.subprocess.PIPE, text=True) for where, cmd in cmds]
            if during:
                extra = during()
            outs = finish(clients)
        d1, t1, w1 = self.daemon_seconds(), time.monotonic(), self.wire_frames()
        finish(servers)
        got = [measure.iperf3(o) for o in outs]
        gbps = sum(r["bps"] for r in got) / 1e9
        nbytes = sum(r["bytes"] for r in got)
        gbits = nbytes * 8 / 1e9
        wall = t1 - t0
        # Per Gbit delivered: CPU-seconds and bits over the same span
        # (measure.Cpu says why).
        return {"gbps": gbps, "busy_cores": cpu.cores, "gbps_per_core": cpu.gbit_per_core_second(nbytes),
                "hvnet_cores": (d1 - d0) / wall, "hvnet_cores_per_gbps": (d1 - d0) / max(gbits, 1e-9),
                "wire_in_per_s": (w1[0] - w0[0]) / wall, "wire_out_per_s": (w1[1] - w0[1]) / wall, "during": extra,
                "command": f"{len(cmds)} x iperf3 -c VM {opts}" if to_vms else f"{len(cmds)} x iperf3 -c EXT {opts}"}


def finish(procs):
    """Waits for each process and returns what each wrote (killing one
    that hangs)."""
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=120)[0])
        except Exception:
            p.kill()
            outs.append(p.communicate()[0])
    return outs


def at_once(calls):
    """Runs every call of {key: call} at the same moment, each in its own
    thread, and returns {key: result}; the first exception raised is
    raised again once all have ended. For fleets measured side by side
    under a light load, so that the machine's moment-to-moment noise hits
    them alike (a run that saturates a core must not share the machine)."""
    out, errors = {}, []

    def one(key, call):
        try:
            out[key] = call()
        except BaseException as e:  # raised again in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=one, args=kc, daemon=True) for kc in calls.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


WIRE_NOTE = ("VMs are network namespaces behind hvnet's TAP ports; the external host is a namespace on a veth wire "
             "(its NIC's TSO off: wire-sized frames), the uplink's receive queues AF_PACKET sockets with a thread "
             "each; hosts, VMs and the switch share this machine's 2 cores.")


VXLAN_NOTE = " The external host reaches the VMs through its own Linux vxlan device (VNI 42) to hvnet's tunnel endpoint."


def up_at_once(stack, tmp, fleets):
    """{config: Fleet(**kwargs)} for {config: kwargs}, all up at once."""
    return {c: stack.enter_context(Fleet(tmp, f"{c}", **kw)) for c, kw in fleets.items()}


def fleets_compared(tmp, reps, log, label, fleets, writes=None, derive=None, settle=None, **streams):
    """Brings every fleet up at once and runs the same streams on each,
    interleaved: {config: [run, ...]}; each run logged with its config
    under `label`. With `writes` ({size: (write size, TCP_NODELAY)}) every
    fleet runs at every size, the configs being (fleet, size) pairs;
    `derive(run)` adds what is computed from a run before it is logged;
    `settle` as for `interleaved`."""
    with contextlib.ExitStack() as stack:
        up = up_at_once(stack, tmp, fleets)

        def run(c):
            if writes:
                fleet, size = c
                write, nodelay = writes[size]
                r, tags = up[fleet].streams(write=write, nodelay=nodelay, **streams), {label: fleet, "size": size}
            else:
                r, tags = up[c].streams(**streams), {label: c}
            if derive:
                derive(r)
            log.append({**tags, **r})
            return r

        configs = [(c, size) for size in writes for c in up] if writes else tuple(up)
        # A point per size, labelled with it.
        feeds = (lambda c, label: c[1] == label) if writes else None
        return interleaved(configs, reps, run, settle, feeds)


def fleets_together(tmp, reps, log, label, fleets, settle=None, **streams):
    """As `fleets_compared`, for light loads only: each repetition is one
    round in which every fleet runs its streams at the same moment
    (`at_once` says why); the rounds' runs are returned per fleet, paired
    by repetition."""
    def per_fleet(rounds):
        return {c: [r[c] for r in rounds["together"]] for c in fleets}

    with contextlib.ExitStack() as stack:
        up = up_at_once(stack, tmp, fleets)

        def round_(_):
            out = at_once({c: lambda c=c: up[c].streams(**streams) for c in up})
            for c, r in out.items():
                log.append({label: c, "at_once_with": [o for o in up if o != c], **r})
            return out

        rounds = interleaved(("together",), reps, round_, settle and (lambda rounds: settle(per_fleet(rounds))))
    return per_fleet(rounds)


def each(runs, configs, key):
    """{config: summarized point} and the series of `key` over configs."""
    res = {c: summarize(runs[c]) for c in configs}
    return res, [(str(c), res[c][key]) for c in configs], [(str(c), *res[c]["spread"][key]) for c in configs]


def sizes_text(gains, pub):
    return "; ".join(f"{s}: hvnet {median(g):.2f}" + (f", published {pub[s]:.2f}" if s in pub else "")
                     for s, g in gains.items())
