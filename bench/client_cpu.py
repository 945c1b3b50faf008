#!/usr/bin/env python3
"""Client CPU per added node (docs/PERFORMANCE.md §2): the slope of the node-scope sweep.

One simulated cluster of `--nodes` nodes (real sshd in network namespaces) is brought up once;
`preflight run` of every node-scope check then runs `--repeat` times against the first `--small`
nodes (`--limit`) and against all of them, alternating. Reported per size, as medians: client CPU
(user+sys of the preflight process and its children, from wait4), wall, peak RSS and voluntary
context switches; then the slope between the two sizes: the CPU one more node costs.

Compiled bytecode is used (PYTHONDONTWRITEBYTECODE is dropped and the tree is compiled first): a
run that compiles its modules would measure the compiler. `--profile FILE` adds one py-spy
recording (`--gil`, raw folded stacks) of the large run, for the breakdown.

Usage: sudo python3 bench/client_cpu.py --nodes 64 --small 16 --repeat 5 [--json out.json]
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from preflight import nodeset  # noqa: E402
from preflight.inventory import load  # noqa: E402
from preflight.registry import discover  # noqa: E402


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    return e


def cluster_checks() -> str:
    return ",".join(c.id for c in discover().values() if c.scope == "cluster")


def timed(cmd: list[str]) -> dict:
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env())
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "user": ru.ru_utime, "sys": ru.ru_stime,
            "rss_mb": ru.ru_maxrss / 1024, "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw,
            "rc": os.waitstatus_to_exitcode(status), "stderr": err[-300:]}


def sim(*args: str, sim_dir: str) -> None:
    subprocess.run([sys.executable, "-m", "preflight.sim.cli", *args, "--dir", sim_dir], check=True,
                   stdout=subprocess.DEVNULL, env=env())


def median(rows: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in rows) for k in ("wall", "cpu", "user", "sys", "rss_mb", "nvcsw")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--small", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", help="write a py-spy folded profile of one large run here")
    ap.add_argument("--json")
    args = ap.parse_args()
    compileall.compile_dir(str(ROOT / "preflight"), quiet=1)
    compileall.compile_dir(str(ROOT / "checks"), quiet=1)
    folder = tempfile.mkdtemp(prefix="preflight-cpu-")
    sim_dir = str(Path(folder) / "sim")
    spec = Path(folder) / "spec.yaml"
    spec.write_text(f"cluster: cpu{args.nodes}\nnodes: {args.nodes}\n")
    t0 = time.monotonic()
    sim("up", str(spec), sim_dir=sim_dir)
    up_s = time.monotonic() - t0
    try:
        inv = str(Path(sim_dir) / "inventory.yaml")
        names = [n.name for n in load(inv).nodes]
        small = nodeset.fold(names[:args.small])
        base = [sys.executable, "-c", "from preflight.cli import entry; entry()", "run", inv,
                "--skip", cluster_checks(), "--format", "json", "--output", os.devnull, "--quiet"]
        timed(base)  # warm-up: ARP entries, page cache, host keys
        res: dict[str, list[dict]] = {"small": [], "large": []}
        for _ in range(args.repeat):
            res["small"].append(timed(base + ["--limit", small]))
            res["large"].append(timed(base))
        if args.profile:
            subprocess.run(["py-spy", "record", "--gil", "--nonblocking", "-r", "250", "-f", "raw",
                            "-o", args.profile, "--"] + base, env=env(), stdout=subprocess.DEVNULL, check=False)
    finally:
        sim("down", sim_dir=sim_dir)
        shutil.rmtree(folder, ignore_errors=True)
    med = {k: median(v) for k, v in res.items()}
    sizes = {"small": args.small, "large": args.nodes}
    print("| nodes | client CPU (s) | user | sys | wall (s) | peak RSS (MB) | vol. ctx switches |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for k in ("small", "large"):
        m = med[k]
        print(f"| {sizes[k]} | {m['cpu']:.2f} | {m['user']:.2f} | {m['sys']:.2f} | {m['wall']:.2f} | "
              f"{m['rss_mb']:.0f} | {m['nvcsw']:.0f} |")
    dn = args.nodes - args.small
    slope = (med["large"]["cpu"] - med["small"]["cpu"]) / dn * 1000
    csw = (med["large"]["nvcsw"] - med["small"]["nvcsw"]) / dn
    print(f"per added node: {slope:.1f} ms client CPU, {csw:.0f} voluntary context switches "
          f"(sim up {up_s:.0f} s, exit codes {[r['rc'] for r in res['large']]}, load {os.getloadavg()[0]:.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"median": med, "runs": res, "slope_ms": slope}, indent=1))


if __name__ == "__main__":
    main()
