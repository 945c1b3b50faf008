#!/usr/bin/env python3
"""Client CPU per added node (docs/PERFORMANCE.md §2): the slope of the node-scope sweep.

One simulated cluster of the largest of `--sizes` nodes (real sshd in network namespaces) is
brought up once; `preflight run` of every node-scope check then runs `--repeat` times against the
first N nodes (`--limit`) for each N of `--sizes`, in turn. Reported per size, as medians: client
CPU (user+sys of the preflight process and its children, from wait4), wall, peak RSS and voluntary
context switches; then the slope between the first two sizes: the CPU one more node costs.

Compiled bytecode is used (PYTHONDONTWRITEBYTECODE is dropped and the tree is compiled first): a
run that compiles its modules would measure the compiler. `--profile FILE` adds one py-spy
recording (`--gil`, raw folded stacks) of the large run, for the breakdown.

Usage: sudo python3 bench/client_cpu.py --sizes 16,64,128 --repeat 5 [--json out.json]
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
sys.path.insert(0, str(HERE))

from preflight import nodeset  # noqa: E402
from preflight.inventory import load  # noqa: E402
from fanout import bench_env, cluster_checks, sim, timed  # noqa: E402


def median(rows: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in rows) for k in ("wall", "cpu", "user", "sys", "rss_mb", "nvcsw")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16,64", help="node counts; the slope is between the first two")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", help="write a py-spy profile (raw folded stacks) of one run of the largest size")
    ap.add_argument("--json")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    compileall.compile_dir(str(ROOT / "preflight"), quiet=1)
    compileall.compile_dir(str(ROOT / "checks"), quiet=1)
    folder = tempfile.mkdtemp(prefix="preflight-cpu-")
    sim_dir = str(Path(folder) / "sim")
    spec = Path(folder) / "spec.yaml"
    spec.write_text(f"cluster: cpu{max(sizes)}\nnodes: {max(sizes)}\n")
    t0 = time.monotonic()
    sim("up", str(spec), sim_dir=sim_dir)
    up_s = time.monotonic() - t0
    try:
        inv = str(Path(sim_dir) / "inventory.yaml")
        names = [n.name for n in load(inv).nodes]
        base = [sys.executable, "-c", "from preflight.cli import entry; entry()", "run", inv,
                "--skip", cluster_checks(), "--format", "json", "--output", os.devnull, "--quiet"]
        timed(base)  # warm-up: ARP entries, page cache, host keys
        res: dict[int, list[dict]] = {n: [] for n in sizes}
        for _ in range(args.repeat):
            for n in sizes:
                res[n].append(timed(base + ["--limit", nodeset.fold(names[:n])]))
        if args.profile:
            subprocess.run(["py-spy", "record", "--gil", "--nonblocking", "-r", "250", "-f", "raw",
                            "-o", args.profile, "--"] + base, env=bench_env(), stdout=subprocess.DEVNULL, check=False)
    finally:
        sim("down", sim_dir=sim_dir)
        shutil.rmtree(folder, ignore_errors=True)
    med = {n: median(v) for n, v in res.items()}
    print("| nodes | client CPU (s) | user | sys | wall (s) | peak RSS (MB) | vol. ctx switches |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        m = med[n]
        print(f"| {n} | {m['cpu']:.2f} | {m['user']:.2f} | {m['sys']:.2f} | {m['wall']:.2f} | "
              f"{m['rss_mb']:.0f} | {m['nvcsw']:.0f} |")
    a, b = sizes[0], sizes[1] if len(sizes) > 1 else sizes[0]
    if b != a:
        slope = (med[b]["cpu"] - med[a]["cpu"]) / (b - a) * 1000
        csw = (med[b]["nvcsw"] - med[a]["nvcsw"]) / (b - a)
        print(f"per added node ({a} -> {b}): {slope:.1f} ms client CPU, {csw:.0f} voluntary context switches")
    print(f"sim up {up_s:.0f} s, exit codes {sorted({r['rc'] for v in res.values() for r in v})}, "
          f"load {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"median": med, "runs": res}, indent=1))


if __name__ == "__main__":
    main()
