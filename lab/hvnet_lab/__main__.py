"""`hvnet lab list | run NAME...|all [--quick] | report | compare A B |
stability RUN...`: reproduce the published studies (docs/references.md) on
this machine, side by side with their figures; say what changed between
two runs, and which verdicts can differ from one run to the next."""

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import hvlab

from . import experiments, report, stability
from .runners import most_runs
from .verdict import INTERVAL

ROOT = Path(__file__).resolve().parents[2]


def meta(quick):
    def cmd(*a):
        try:
            return subprocess.run(list(a), capture_output=True, text=True, cwd=ROOT).stdout.strip()
        except OSError:
            return ""
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": platform.node(), "kernel": platform.release(),
            "cpu_model": cpu, "cpus": os.cpu_count(), "git_revision": cmd("git", "rev-parse", "--short", "HEAD") or "unknown",
            "iperf3": cmd("iperf3", "--version").split("\n")[0], "quick": quick,
            "hvnet": cmd(os.environ.get("HVNET_BIN", "hvnet"), "--version"),
            "openvswitch": cmd("ovs-vswitchd", "--version").split("\n")[0]}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="hvnet lab", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the experiments")
    r = sub.add_parser("run", help="run experiments (NAME... or all), then write the report")
    r.add_argument("names", nargs="+", metavar="NAME", help="experiments to run (`hvnet lab list`), or all")
    r.add_argument("--quick", action="store_true",
                   help="fewer points, shorter runs and one run per point: indicative verdicts only")
    r.add_argument("--out", type=Path, default=Path("lab-results"), help="results directory (default ./lab-results)")
    r.add_argument("--repeat", type=int, default=None, metavar="N",
                   help="runs per point, the configurations compared interleaved; the median is drawn, its "
                        "confidence interval decides the verdict, and an undecided point gets more runs, up to "
                        "5N (default 3, 1 with --quick)")
    r.add_argument("--vms", choices=("netns", "uml", "qemu"), default="netns",
                   help="what hvnet's VMs are: network namespaces (default) or real guests on vhost-user ports, "
                        "User-Mode Linux (lro-local, jumbo, cpu-limit and multiqueue) or QEMU (those and "
                        "ring-exhaustion)")
    cmp = sub.add_parser("compare", help="what changed, figure by figure, between two runs' results.json, "
                                          "and for a changed verdict whether the effect moved or sits at an edge")
    cmp.add_argument("before", type=Path, help="results.json of the earlier run")
    cmp.add_argument("after", type=Path, help="results.json of the later run")
    stab = sub.add_parser("stability", help="which verdicts can flip from one run to the next: the per-run effects "
                                            "of the given runs pooled and drawn again through the rule, and what "
                                            "today's rule says of each run's own effects")
    stab.add_argument("results", type=Path, nargs="+", help="results.json of one or more runs (more: a better pool)")
    stab.add_argument("--draws", type=int, default=1000, help="simulated runs per figure (default 1000)")
    rep = sub.add_parser("report", help="write the report again from results.json")
    rep.add_argument("--out", type=Path, default=Path("lab-results"),
                     help="results directory holding results.json, where the report is written (default ./lab-results)")
    a = ap.parse_args(argv)
    if a.cmd == "list":
        whats = [(e, "a measurement" if e["reproduces"] == "measurement" else f"reproduces {e['reproduces']}")
                 for e in experiments.EXPERIMENTS]
        wide = min(max(len(what) for _, what in whats), 64)  # a longer one pushes its workload on
        for e, what in whats:
            print(f"{e['name']:<18} {what:<{wide}} {e['workload']}")
        return 0
    if a.cmd == "compare":
        # A run's directory stands for the results.json in it.
        before, after = (p / "results.json" if p.is_dir() else p for p in (a.before, a.after))
        for path in (before, after):
            if not path.exists():
                print(f"hvnet lab compare: {path} does not exist (give two results.json files a run wrote, "
                      "or the directories it wrote them in)", file=sys.stderr)
                return 1
        print(report.compare(report.load(before), report.load(after)))
        return 0
    if a.cmd == "stability":
        missing = [str(p) for p in a.results if not p.exists()]
        if missing:
            print(f"hvnet lab stability: {', '.join(missing)} does not exist (give results.json files runs wrote)",
                  file=sys.stderr)
            return 1
        print(stability.table([report.load(p) for p in a.results], max(1, a.draws)))
        return 0
    if a.cmd == "report":
        path = a.out / "results.json"
        if not path.exists():
            print(f"hvnet lab report: no results in {a.out} ({path} is missing); make them with "
                  f"`hvnet lab run all --out {a.out}` (or name the directory a run wrote with --out)", file=sys.stderr)
            return 1
        res = report.load(path)
        report.render(res, a.out)
        print(f"report: {a.out / 'report.md'} and {a.out / 'report.html'}")
        return 0
    # Ctrl-C, `kill` and a closed terminal all end a run the same way: the
    # experiment's context managers remove what it made (a run started in
    # the background inherits SIGINT ignored; it is wanted here).
    def interrupted(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    if not hvlab.is_root():
        print("hvnet lab: run as root (experiments create network namespaces)", file=sys.stderr)
        return 1
    known = {e["name"]: e for e in experiments.EXPERIMENTS}
    names = list(known) if a.names == ["all"] else list(dict.fromkeys(a.names))
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"hvnet lab: no experiment named {', '.join(unknown)}; `hvnet lab list` shows them", file=sys.stderr)
        return 1
    if a.vms != "netns":
        cannot = [n for n in names if a.vms not in known[n].get("vms", ("netns",))]
        if a.names == ["all"]:
            names = [n for n in names if n not in cannot]
        elif cannot:
            runs = ", ".join(n for n in known if a.vms in known[n].get("vms", ("netns",)))
            print(f"hvnet lab: {', '.join(cannot)} does not run with --vms {a.vms}; with --vms {a.vms}: {runs}",
                  file=sys.stderr)
            return 1
        need = {"uml": ("linux.uml", "User-Mode Linux"), "qemu": ("qemu-system-x86_64", "QEMU")}[a.vms]
        if not shutil.which(need[0]):
            print(f"hvnet lab: --vms {a.vms} needs {need[1]} (scripts/install-deps.sh installs it)", file=sys.stderr)
            return 1
    a.out.mkdir(parents=True, exist_ok=True)
    if not shutil.which("ovs-vswitchd") and any(n in ("lro-local", "jumbo", "fabrics", "uplinks") for n in names):
        # The reference switch: installed here, its packaged service not started.
        print("lab: installing Open vSwitch for the reference runs ...", flush=True)
        subprocess.run([str(ROOT / "scripts" / "install-deps.sh")], check=False)
    reps = max(1, a.repeat if a.repeat is not None else (1 if a.quick else 3))
    results = {"meta": dict(meta(a.quick), repeat=reps, most=most_runs(reps), interval=INTERVAL, vms=a.vms),
               "experiments": []}
    # Each experiment's runs by its name: every command with its parsed
    # numbers (`samples`) and the per-configuration points (`raw`), in
    # raw.json beside results.json, the summary (all that report, compare
    # and stability read).
    per_run = {}

    def write():
        (a.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
        (a.out / "raw.json").write_text(json.dumps(per_run, indent=1, default=str))
    t_all = time.monotonic()
    for i, n in enumerate(names, 1):
        e = known[n]
        print(f"[{i}/{len(names)}] {n}: {e['workload']} ...", flush=True)
        t0 = time.monotonic()
        log = []
        entry = {"name": n, "reproduces": e["reproduces"], "workload": e["workload"]}
        per_run[n] = {"samples": log}
        try:
            with tempfile.TemporaryDirectory() as tmp:
                # Only the experiments that can run with real guests take them.
                kinds = {"vms": a.vms} if "vms" in e else {}
                figs, raw = e["run"](Path(tmp), a.quick, reps, log, **kinds)
            entry.update(figures=figs)
            per_run[n]["raw"] = raw
            verdicts = ", ".join(f"{f['id']}: {f['verdict']}" for f in figs)
            print(f"      done in {time.monotonic() - t0:.0f} s — {verdicts}", flush=True)
        except KeyboardInterrupt:
            # The experiment's context managers have removed what it made
            # by the time the interrupt reaches here.
            entry.update(figures=[], error="interrupted")
            results["experiments"].append(entry)
            write()
            print(f"lab: interrupted during {n}; every namespace, device, CPU group and daemon it made was removed; "
                  f"results so far in {a.out / 'results.json'}", file=sys.stderr)
            return 130
        except Exception as ex:  # one experiment failing does not lose the others
            entry.update(figures=[], error=f"{type(ex).__name__}: {ex}")
            print(f"      failed: {entry['error']}", file=sys.stderr)
            traceback.print_exc()
        results["experiments"].append(entry)
        write()
    odds = report.render(results, a.out)
    counts = {}
    for e in results["experiments"]:
        for f in e.get("figures", []):
            counts[f["verdict"]] = counts.get(f["verdict"], 0) + 1
    print("lab: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + f" ({reps} run{'s' if reps > 1 else ''} per point)")
    fragile = report.fragile(odds)
    if fragile:
        print(f"lab: could differ in another run (drawn from this run's own spread, {report.FRAGILE:.0%} or more): "
              + ", ".join(f"{fid} {c:.0%}" for c, fid in fragile))
    print(f"lab: {len(names)} experiment{'s' if len(names) != 1 else ''} in {time.monotonic() - t_all:.0f} s; results {a.out / 'results.json'} "
          f"(each run's commands and numbers in {a.out / 'raw.json'}), report {a.out / 'report.md'} and {a.out / 'report.html'}")
    return 0 if not report.check(results) else 2


if __name__ == "__main__":
    sys.exit(main())
