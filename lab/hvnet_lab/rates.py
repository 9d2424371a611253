"""Rates: a measurement (no study publishes these figures; the policy
issue asks how a port limited to 1 Gbit/s carries TCP, beside the
references that limit the same way).

One TCP stream from VM a to VM b (iperf3, 64 KiB writes), each limit at
`RATE` with its default burst, all fabrics up at once, runs interleaved:

- hvnet, a's policer (`tx_rate`): frames over the rate dropped as they
  enter the switch (Open vSwitch's `ingress_policing_rate`, libvirt's
  `<outbound>`);
- hvnet, b's shaper (`rx_rate`): frames over the rate wait in b's receive
  ring (libvirt's `<inbound>`);
- the Linux bridge with `tc` TBF on the bridge's port toward b (this
  kernel has no `police` action: TBF and HTB shape), and with HTB there
  (libvirt's own `<inbound>` on a TAP);
- Open vSwitch userspace with an OpenFlow meter on a's port (drop band:
  a policer, as OVS's own ingress policing is on this datapath).

Goodput (Gbit/s, and its ratio to the rate) and TCP retransmits (the
policers' cost: a shaper holds frames where a policer drops them)."""

import subprocess

import hvlab

from . import measure
from .fabrics import B_IP, Bridge, Hvnet, Ovs
from .figures import measured
from .runners import interleaved
from .verdict import median

RATE_MBIT = 1000
HV_POLICE, HV_SHAPE, TBF, HTB, OVS_METER = ("hvnet policer (tx_rate)", "hvnet shaper (rx_rate)",
                                             "Linux bridge + tc TBF", "Linux bridge + tc HTB",
                                             "Open vSwitch meter")
CASES = [HV_POLICE, HV_SHAPE, TBF, HTB, OVS_METER]
NOTE = (f"A measurement, not a study's reproduction: no verdict. Each limit is {RATE_MBIT / 1000:g} Gbit/s with its "
        "default burst (hvnet: 10 ms of the rate; TBF: burst 1.25 MB, latency 50 ms; HTB: its default; the OVS "
        "meter: burst 10 ms of the rate); one TCP stream, namespace VMs, all on this machine's 2 cores.")


class Rated:
    """The five fabrics, each limiting a → b at RATE_MBIT, up at once."""

    def __init__(self, tmp):
        rate = f"{RATE_MBIT}mbit"
        for d in ("police", "shape"):
            (tmp / d).mkdir(parents=True, exist_ok=True)
        self.fabrics = {
            HV_POLICE: Hvnet(tmp / "police", 1500, a={"tx_rate": rate}),
            HV_SHAPE: Hvnet(tmp / "shape", 1500, b={"rx_rate": rate}),
            TBF: Bridge(tmp, 1500),
            HTB: Bridge(tmp, 1500),
            OVS_METER: Ovs(tmp, 1500),
        }

    def __enter__(self):
        up = []
        try:
            for f in self.fabrics.values():
                f.__enter__()
                up.append(f)
            sw = self.fabrics[TBF].nss["sw"]
            sw.sh(f"tc qdisc add dev pb root tbf rate {RATE_MBIT}mbit burst 1250000 latency 50ms")
            sw = self.fabrics[HTB].nss["sw"]
            sw.sh(f"tc qdisc add dev pb root handle 1: htb default 1 && "
                  f"tc class add dev pb parent 1: classid 1:1 htb rate {RATE_MBIT}mbit")
            ovs = self.fabrics[OVS_METER]
            self.meter(ovs)
        except BaseException:
            for f in reversed(up):
                f.__exit__(None, None, None)
            raise
        return self

    @staticmethod
    def meter(ovs):
        """An OpenFlow 1.3 meter (kbit/s, drop band) on everything a sends."""
        d = ovs.daemons
        d.vsctl("set", "bridge", ovs.br, "protocols=OpenFlow10,OpenFlow13")
        a_port = d.vsctl("get", "Interface", ovs.taps["a"], "ofport").stdout.strip()
        burst_kbit = RATE_MBIT * 1000 // 100
        d.run("ovs-ofctl", "-O", "OpenFlow13", "add-meter", ovs.br,
              f"meter=1,kbps,burst,band=type=drop,rate={RATE_MBIT * 1000},burst_size={burst_kbit}")
        d.run("ovs-ofctl", "-O", "OpenFlow13", "add-flow", ovs.br,
              f"priority=10,in_port={a_port},actions=meter:1,NORMAL")

    def __exit__(self, *e):
        for f in reversed(list(self.fabrics.values())):
            f.__exit__(*e)


def stream(lab, case, secs, log):
    """One TCP stream a → b: {gbps, ratio, retransmits}."""
    f = lab.fabrics[case]
    server = None
    try:
        server = f.popen("b", "iperf3 -s -1")
        f.wait_listening("b", 5201)
        cmd = f"iperf3 -c {B_IP} -t {secs} -l 64K -J"
        out = f.sh("a", cmd, timeout=secs + 60).stdout
    finally:
        hvlab.stop_procs([p for p in [server] if p])
    r = measure.iperf3(out)
    s = {"gbps": r["bps"] / 1e9, "ratio": r["bps"] / (RATE_MBIT * 1e6), "retransmits": r["retransmits"]}
    log.append({"command": f"{case}: {f.command('a', cmd)}", **s})
    return s


def rates(tmp, quick, reps, log):
    secs = 3 if quick else 5
    with Rated(tmp) as lab:
        runs = interleaved(CASES, reps, lambda c: stream(lab, c, secs, log))
    said = "; ".join(f"{c}: {median([r['gbps'] for r in rs]):.2f} Gbit/s "
                     f"({median([r['ratio'] for r in rs]):.2f}× the rate), "
                     f"{median([r['retransmits'] for r in rs]):g} retransmits" for c, rs in runs.items())
    place = lambda c: (c, "1 stream")  # noqa: E731
    figs = [
        measured("rates-goodput", f"One TCP stream through a {RATE_MBIT / 1000:g} Gbit/s limit", "",
                 "Gbit/s", runs, "gbps", place,
                 "does a policed or shaped port carry TCP at 0.9-1.0 of its rate, as the references do?", said, NOTE),
        measured("rates-retransmits", "TCP retransmits through the limit", "", "retransmits", runs,
                 "retransmits", place, "is the shaper smoother than the policer?", said, NOTE),
    ]
    return figs, {c: rs for c, rs in runs.items()}
