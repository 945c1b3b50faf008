#!/usr/bin/env python3
"""What `preflight gate --local` (the gate's fast set, as a Slurm prolog runs it) costs on a
simulated Ascend node and a simulated NVIDIA node: CPU, peak RSS and wall (issue 28 item 6:
at most 1 s of CPU and 100 MB on a node).

How: one simulated cluster (`preflight sim`, netns mode: each node a network, mount and UTS
namespace with its own npu-smi or nvidia-smi) with one 910B node and one H100 node; inside each
node, for each source tree given, `python3 bench/measure.py -- python3 -m preflight.cli gate
--local <the sim's inventory> --quiet` (the node finds its own entry by host name), `--repeat`
times, interleaved, so load hits every tree alike; medians reported. The NVIDIA node's python is
this machine's (CPU-only torch): importing it is what a tree whose cuda.env imports torch pays.

Usage: sudo python3 bench/gate_cost.py [--tree after=.] [--tree before=/tmp/pf-before] [--repeat 3] [--json out.json]
(a tree: a directory holding a preflight/ source tree, e.g. `git archive <rev> | tar -x -C DIR`)
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from preflight.sim.cluster import Cluster  # noqa: E402

SPEC = {"nodes": ["asc01", {"name": "gpu01", "backend": "nvidia"}]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", action="append", default=[], help="LABEL=DIR (default: after=<this tree>)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in a.tree) or {"after": str(ROOT)}
    runs: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="pf-gatecost-") as d, Cluster.up(SPEC, dir=d, mode="netns") as c:
        inv = c.inventory_path
        for _ in range(a.repeat):
            for node in ("asc01", "gpu01"):
                for label, tree in trees.items():
                    tree = str(Path(tree).resolve())
                    cmd = (f"cd {shlex.quote(tree)} && PYTHONPATH={shlex.quote(tree)} {shlex.quote(sys.executable)} "
                           f"{shlex.quote(str(ROOT / 'bench' / 'measure.py'))} -- {shlex.quote(sys.executable)} -m "
                           f"preflight.cli gate --local {shlex.quote(str(inv))} --quiet")
                    done = c.exec(node, cmd, timeout=300)
                    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
                    runs.setdefault((node, label), []).append(json.loads(line))
    rows = []
    for (node, label), got in runs.items():
        med = {k: statistics.median(r[k] for r in got) for k in ("cpu_s", "maxrss_mb", "wall_s")}
        rows.append({"node": node, "tree": label, **med, "rc": [r["rc"] for r in got], "runs": len(got)})
        print(f"{node:6} {label:8} CPU {med['cpu_s']:.2f} s  peak RSS {med['maxrss_mb']:.0f} MB  wall {med['wall_s']:.2f} s"
              f"  (median of {len(got)}, rc {sorted(set(r['rc'] for r in got))})")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
