#!/usr/bin/env python3
"""Start-up cost of the commands a prolog or a person runs often (issue 18, target 2: at most
0.3 s of CPU for `list-checks`, `gate --local` and `run --help`).

Why CPU and not wall: on a shared 2-core login node or in a Slurm prolog the wall time depends on
the load; the CPU a command burns before doing anything is what preflight controls. Each command
runs `--repeat` times as `python3 -m preflight.cli ...` (interleaved, so a burst of load hits every
command alike); for each we report the medians of the preflight process's own CPU (user+sys from
/proc/PID/stat of the exited child: the process alone, in clock ticks), the CPU including its
children (wait4's rusage: `gate --local` runs its probes as subprocesses), wall, and peak RSS
(wait4's: the largest of the process and its children). `python3 -c pass` is the floor: the interpreter and site-packages' .pth files, which no
change to preflight removes.

Compiled bytecode is used: PYTHONDONTWRITEBYTECODE is dropped and the tree is compiled first (a
run that compiles its modules would measure the compiler). Exit codes are not checked: `gate
--local` exits 1 on a host without NPUs, which is still the start-up it is meant to measure.

Usage: python3 bench/startup_cpu.py [--repeat 15] [--json out.json] [--importtime]
  --importtime  also print the top cumulative entries of `python -X importtime -c "from
                preflight.cli import entry"` (the best of 5 per module, since one run is noisy)
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")

COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "list-checks": [sys.executable, "-m", "preflight.cli", "list-checks"],
    "run --help": [sys.executable, "-m", "preflight.cli", "run", "--help"],
    "gate --help": [sys.executable, "-m", "preflight.cli", "gate", "--help"],
    "gate --local": [sys.executable, "-m", "preflight.cli", "gate", "--local"],  # the table, into a pipe
    "gate --local --quiet": [sys.executable, "-m", "preflight.cli", "gate", "--local", "--quiet"],  # a prolog's
}


def bench_env() -> dict[str, str]:
    """The environment every run gets: bytecode reused, no config file of this user's in the way."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("PREFLIGHT_")}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def once(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    """One run: the child's own CPU, its CPU with its children, wall, peak RSS.

    wait4's rusage of a child already includes the grandchildren it waited for, so the process
    alone is read from /proc/PID/stat while it is a zombie (waitid with WNOWAIT keeps it there):
    utime+stime are its own (every thread's), in clock ticks."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # not a terminal: no colour
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    wall = time.perf_counter() - t0
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime = (int(fields[i]) / TICKS for i in (11, 12))  # fields 14 and 15 of proc(5)
    _, _, ru = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped by wait4: keep Popen from waiting again
    return {"cpu": utime + stime, "user": utime, "sys": stime, "cpu_children": ru.ru_utime + ru.ru_stime,
            "wall": wall, "rss_mb": ru.ru_maxrss / 1024}


def importtime(env: dict[str, str], runs: int = 5, top: int = 20) -> list[tuple[str, int, int]]:
    """(module, self µs, cumulative µs), best of `runs` per module, largest cumulative first."""
    best: dict[str, tuple[int, int]] = {}
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-X", "importtime", "-c", "from preflight.cli import entry"],
                             cwd=ROOT, env=env, capture_output=True, text=True, check=True).stderr
        for line in out.splitlines():
            if not line.startswith("import time:") or "cumulative" in line:
                continue
            self_us, cum_us, name = (p.strip() for p in line[len("import time:"):].split("|"))
            mod = name.strip()
            row = (int(self_us), int(cum_us))
            if mod not in best or row[1] < best[mod][1]:
                best[mod] = row
    rows = sorted(((m, s, c) for m, (s, c) in best.items()), key=lambda r: -r[2])
    return rows[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--json", help="also write the medians here")
    ap.add_argument("--importtime", action="store_true", help="print the top of -X importtime too")
    args = ap.parse_args()

    compileall.compile_dir(str(ROOT / "preflight"), quiet=1)
    compileall.compile_dir(str(ROOT / "checks"), quiet=1)
    env = bench_env()
    for argv in COMMANDS.values():  # warm the page cache and the bytecode once
        once(argv, env)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeat):
        for name, argv in COMMANDS.items():
            runs[name].append(once(argv, env))
    keys = ("cpu", "user", "sys", "cpu_children", "wall", "rss_mb")
    medians = {name: {k: statistics.median(r[k] for r in rows) for k in keys} for name, rows in runs.items()}

    print(f"medians of {args.repeat} runs, {Path(sys.executable).name} {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores\n")
    print("| command | CPU (s) | user | sys | CPU with children (s) | wall (s) | peak RSS (MB) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, m in medians.items():
        print(f"| `{name}` | {m['cpu']:.3f} | {m['user']:.3f} | {m['sys']:.3f} | {m['cpu_children']:.3f} "
              f"| {m['wall']:.3f} | {m['rss_mb']:.0f} |")
    if args.importtime:
        print("\n`python -X importtime -c \"from preflight.cli import entry\"`, best of 5 per module:\n")
        print("| module | self (ms) | cumulative (ms) |")
        print("|---|---:|---:|")
        for mod, self_us, cum_us in importtime(env):
            print(f"| `{mod}` | {self_us / 1000:.1f} | {cum_us / 1000:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(medians, indent=2) + "\n")


if __name__ == "__main__":
    main()
