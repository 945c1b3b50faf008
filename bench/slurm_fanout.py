#!/usr/bin/env python3
"""srun versus SSH (issue 16, item 5): `preflight run --via slurm` beside `preflight run` (SSH).

For each size a simulated cluster with real Slurm (slurmctld + one slurmd per node, netns mode)
is brought up once; then, as the median of `--repeat` runs, every node-scope check is run through
each transport (JSON to /dev/null). Client CPU is user+sys of preflight and its children (for
--via slurm that is the one srun step for every node, and sinfo), from wait4; wall is reported knowing
the nodes share this machine's cores, with the load average (1 min) before each row. Also
`srun -N<n> hostname`, Slurm's own fan-out floor.
Usage: sudo python3 bench/slurm_fanout.py --sizes 32,128 --repeat 3 [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from fanout import CLUSTER_CHECKS, timed  # same directory: the SSH benchmark's helpers

from preflight.sim import Cluster


def measure(c: Cluster, n: int, repeat: int) -> list[dict]:
    env = c.slurm_env()
    base = [sys.executable, "-m", "preflight.cli", "run", str(c.inventory_path), "--skip", CLUSTER_CHECKS,
            "--format", "json", "--output", "/dev/null", "--quiet", "--forks", "128"]
    rows = []
    for tool, cmd in (("preflight via ssh", base), ("preflight via srun", base + ["--via", "slurm"]),
                      ("srun hostname", ["srun", f"-N{n}", "--ntasks-per-node=1", "hostname"])):
        load = os.getloadavg()[0]
        runs = [timed(cmd, env) for _ in range(repeat)]
        bad = [r for r in runs if r["rc"] not in (0, 1)]
        rows.append({"nodes": n, "tool": tool, "wall": statistics.median(r["wall"] for r in runs),
                     "cpu": statistics.median(r["cpu"] for r in runs),
                     "rss_mb": statistics.median(r["rss_mb"] for r in runs),
                     "load": load, "exit_codes": sorted({r["rc"] for r in runs}),
                     "failed_runs": len(bad), "stderr": bad[0]["stderr"] if bad else ""})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="32")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="pf-slurm-bench-") as d:
            c = Cluster.up({"nodes": n, "slurm": True}, dir=Path(d) / "c", mode="netns", ready_timeout=300)
            try:
                rows += measure(c, n, args.repeat)
            finally:
                c.down(purge=True)
    print(f"{'nodes':>5}  {'tool':<20} {'wall (s)':>9} {'client CPU (s)':>15} {'peak RSS (MB)':>14} {'load':>6} exit")
    for r in rows:
        print(f"{r['nodes']:>5}  {r['tool']:<20} {r['wall']:>9.2f} {r['cpu']:>15.2f} {r['rss_mb']:>14.0f}"
              f" {r['load']:>6.0f} {','.join(map(str, r['exit_codes']))}"
              + (f"  ({r['failed_runs']} failed: {r['stderr'][:120]})" if r["failed_runs"] else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
