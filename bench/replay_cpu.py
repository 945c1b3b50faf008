#!/usr/bin/env python3
"""Client CPU after the bytes arrive (docs/PERFORMANCE.md §3): a replay of 1,000 recorded nodes.

Why a replay: parsing, evaluation, the cluster checks and the reporters are what a run costs once
every node's output is in; a recording lets that be measured at 1,000 nodes without a thousand
sshd on a 2-core machine.

1. A recording: `--from-sim N` brings up N simulated nodes (real sshd in network namespaces) and
   records `preflight run --record` of every check, or `--recording DIR --inventory INV` takes one
   made before.
2. A synthetic cluster of `--nodes` nodes from it: the master node once, then the other recorded
   nodes in turn, each clone an exact copy of its template's inventory entry and recording under a
   new name, so every command finds its recorded output (addresses: see clone()). Checks whose commands name
   other nodes (the ping meshes) and the all-reduce rendezvous are skipped: their recordings
   cannot be cloned.
3. `preflight run --replay` at `--small` and `--nodes` nodes in every report format, `--repeat`
   times; the slope between the two sizes is the per-node cost (start-up cancels out).

4. With `--instructions N`: the instructions of the JSON run at `--small` and N nodes, counted by
   valgrind (callgrind), and their slope: a figure the machine's load and clock do not move.
5. With `--breakdown` as well: the slope of a replay's second run in process (bench/replay_served.py),
   with nothing served, then with the checks' parsing, then parsing and node evaluation, served
   (their answers recorded by the first run), so that what they cost inside a whole run is read
   off by difference; and the second run with everything before the bytes arrive served (the
   recording's reading, the probes and follow-ups, the batches): what the target counts, on its
   own. Each second run is its mode's count less the count of the same mode stopped after the
   first run.
6. With `--served-times R`: that last run timed, R rounds at `--small` and `--nodes` nodes, with
   its report rendered in each of `--formats`: the target's figure in milliseconds a node.

Usage: sudo python3 bench/replay_cpu.py --from-sim 32 --nodes 1000 --small 100 --repeat 3 \\
           [--served-times 3] [--instructions 300 [--breakdown]]
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from fanout import bench_env, sim  # noqa: E402
from preflight.registry import discover  # noqa: E402

FORMATS = ("json", "table", "jsonl", "junit", "markdown", "prometheus", "html")
UNCLONABLE = ("net.ping_mesh", "hccn.ping_mesh", "smoke.allreduce")  # commands name peers / a rendezvous


def cpu_of(cmd: list[str]) -> tuple[float, float, int]:
    """Client CPU (user+sys, self and children), peak RSS in MB, exit code."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=bench_env())
    _, status, ru = os.wait4(proc.pid, 0)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


INSTRUCTIONS = re.compile(r"Collected : (\d+)")


def instructions_of(cmd: list[str]) -> int:
    """Instructions the command executes, counted by valgrind's callgrind: a figure that does not
    drift with the machine's load or clock, as CPU time here does by up to a fifth."""
    if shutil.which("valgrind") is None:
        sys.exit("replay_cpu.py: --instructions needs valgrind (apt-get install valgrind)")
    real = [os.path.realpath(sys.executable)] + cmd[1:]  # the interpreter itself, not a shim script
    # one hash seed for every count: under random ones, dict and set work moved a slope by 0.5 M
    env = {**bench_env(), "PYTHONHASHSEED": "0"}
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *real],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    m = INSTRUCTIONS.search(done.stderr)
    if not m:
        sys.exit(f"replay_cpu.py: no instruction count from valgrind: {done.stderr[-300:]}")
    return int(m.group(1))


SERVED = ("again", "parse", "evaluate", "bytes")  # bench/replay_served.py's modes with a second run


def node_range(n: int, total: int) -> str:
    """The clones' first `n` nodes as --limit takes them (their names are zero-padded to `total`'s width)."""
    width = len(str(total))
    return f"n[{1:0{width}d}-{n:0{width}d}]"


def breakdown(inv: Path, rec: Path, skip: str, small: int, large: int, total: int) -> dict[str, float]:
    """Instructions per added node of a replay's second run in process: with nothing served
    (`again`), with the checks' parse (`parse`), then parse and node evaluate (`evaluate`), or
    everything before the bytes arrive (`bytes`) answered from the first run. A second run's
    slope is the mode's slope less the slope of the same mode stopped after its first run
    (`--first-only`), which records as the mode does."""
    from concurrent.futures import ThreadPoolExecutor

    def count(mode: str, n: int, *flags: str) -> int:
        return instructions_of([sys.executable, str(HERE / "replay_served.py"), mode, str(inv), str(rec),
                                node_range(n, total), skip, *flags])

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # valgrind runs one core each
        counts = {(m, n, f): pool.submit(count, m, n, *f) for m in SERVED for n in (small, large)
                  for f in ((), ("--first-only",))}
    slope = {m: ((counts[m, large, ()].result() - counts[m, small, ()].result())
                 - (counts[m, large, ("--first-only",)].result() - counts[m, small, ("--first-only",)].result()))
             / (large - small) for m in SERVED}
    return {"run": slope["again"], "parse_served": slope["parse"], "parse_and_evaluate_served": slope["evaluate"],
            "after_bytes": slope["bytes"]}


def served_times(inv: Path, rec: Path, skip: str, small: int, large: int, formats: list[str],
                 rounds: int) -> dict[str, list[float]]:
    """Per added node (ms), each round: the replay's second run with everything before the bytes
    served (bench/replay_served.py bytes) and its report rendered in one format: what the target
    counts, timed (CPU of this process alone, in process: the run, then each rendering alone)."""
    def one(n: int) -> dict[str, float]:
        out = subprocess.run([sys.executable, str(HERE / "replay_served.py"), "bytes", str(inv), str(rec),
                              node_range(n, large), skip, "--times=" + ",".join(formats)],
                             capture_output=True, text=True, env=bench_env(), check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    per: dict[str, list[float]] = {f: [] for f in formats}
    for _ in range(rounds):
        a, b = one(small), one(large)
        for f in formats:
            per[f].append(((b["run"] + b[f]) - (a["run"] + a[f])) / (large - small) * 1000)
    return per


def served_lines(per: dict[str, list[float]] | None, small: int, large: int) -> list[str]:
    if not per:
        return []
    return [f"after the bytes arrive, timed ({small} -> {large} nodes, ms a node, best of "
            f"{len(next(iter(per.values())))} rounds; all rounds): "
            + "; ".join(f"{f} {min(v):.2f} ({' '.join(f'{x:.2f}' for x in v)})" for f, v in per.items())]


def breakdown_lines(b: dict[str, float] | None) -> list[str]:
    if not b:
        return []
    run, p, e = b["run"], b["parse_served"], b["parse_and_evaluate_served"]
    return [f"breakdown (instructions per added node, a second run in process, JSON rendered): the run {run / 1e6:.1f} M; "
            f"with parsing served {p / 1e6:.1f} M (parsing {(run - p) / 1e6:.1f} M, {(run - p) / run:.0%}); "
            f"with node evaluation served too {e / 1e6:.1f} M (node evaluation {(p - e) / 1e6:.1f} M, "
            f"{(p - e) / run:.0%}); the rest {e / run:.0%}",
            f"after the bytes arrive (parse, evaluate, cluster checks, report; before them served): "
            f"{b['after_bytes'] / 1e6:.1f} M ({b['after_bytes'] / run:.0%} of the run; before them "
            f"{(run - b['after_bytes']) / 1e6:.1f} M)"]


def preflight(*args: str) -> list[str]:
    return [sys.executable, "-c", "from preflight.cli import entry; entry()", *args]


def record_from_sim(n: int, folder: Path) -> tuple[Path, Path]:
    sim_dir = folder / "sim"
    spec = folder / "spec.yaml"
    spec.write_text(f"cluster: rec{n}\nnodes: {n}\n")
    sim("up", str(spec), sim_dir=str(sim_dir))
    try:
        inv = folder / "recorded.yaml"
        shutil.copy(sim_dir / "inventory.yaml", inv)
        rec = folder / "recording"
        subprocess.run(preflight("run", str(inv), "--skip", ",".join(UNCLONABLE), "--record", str(rec),
                                 "--format", "json", "--output", os.devnull, "--quiet"), env=bench_env(), check=False)
    finally:
        sim("down", sim_dir=str(sim_dir), check=False)
    return rec, inv


IPV4 = re.compile(r"(?<![\d.])(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})(?![\d.])")
NARROW_MASKS = ("255.255.252.0", "255.255.254.0", "255.255.255.0")  # the sim's rails: widened to /16
NARROW_PREFIX = re.compile(r'(\\"prefixlen\\":)(?:2[2-4])\b')


def shifted(text: str, seconds: float) -> str:
    """A recording whose outputs arrived `seconds` later, as a real node's do: no two nodes of a
    live run have outputs equal in every field (their timings differ), so neither may a clone and
    its template here, or a cache keyed on whole outputs would measure the copying, not the work."""
    doc = json.loads(text)
    for out in doc.values():
        if isinstance(out, dict):
            for k in ("received_at", "node_started_at"):
                if isinstance(out.get(k), (int, float)):
                    out[k] += seconds
    return json.dumps(doc)


NPU_POWER = re.compile(r"^(\| \d+ +\S+ +\| [^|]*\| *\d+\.)(\d)", re.M)  # `npu-smi info`: a chip's Power(W)
# `hccn_tool -optical -g`: a lane's power reading, its last three digits (`Tx Power0 : 1.4035 mW`)
OPTICAL_POWER = re.compile(r"^((?:Tx|Rx) Power\d*\s*:\s*\d+\.\d)(\d{3})( mW)$", re.M)


def varied(text: str, index: int) -> str:
    """A recording whose readings differ from its template's, as two real nodes' do: the tenths
    of each NPU's Power(W) in `npu-smi info` spell the clone's index, and each optical lane's
    power (`hccn_tool -optical -g`, 64 a node) gets its own last three digits. Without it every
    clone of a template prints the same texts, and a parser cached on its text (npu_smi.parse_info,
    cached for the readers of one node's table) would parse once per template, not once per node:
    on a real cluster each node and each module prints its own."""
    doc = json.loads(text)
    out = next((o for c, o in doc.items() if c.endswith("npu-smi info")), None)  # `LC_ALL=C npu-smi info`
    if isinstance(out, dict) and isinstance(out.get("stdout"), str):
        digits = iter(f"{index:08d}"[::-1])
        out["stdout"] = NPU_POWER.sub(lambda m: m.group(1) + next(digits, m.group(2)), out["stdout"])
    for cmd, out in doc.items():
        if "-optical" in cmd and isinstance(out, dict) and isinstance(out.get("stdout"), str):
            lanes = iter(range(10**6))  # every lane of every clone its own reading, as modules print
            out["stdout"] = OPTICAL_POWER.sub(
                lambda m: f"{m.group(1)}{(index * 7919 + next(lanes) * 104729) % 1000:03d}{m.group(3)}", out["stdout"])
    return json.dumps(doc)


def clone(rec: Path, inv: Path, n: int, folder: Path) -> tuple[Path, Path]:
    """`n` nodes from the recorded ones. A clone gets fresh addresses for the addresses only its
    template has (host, NPU devices), in the same /16, its own arrival times (shifted()) and NPU
    power readings (varied()), and every node's rail netmask is widened to
    /16 so that 8 devices x 1,000 nodes fit one subnet per rail: the cluster is healthy, as the
    recording was, and no check meets thousands of false duplicates."""
    doc = yaml.safe_load(inv.read_text())
    master = str(doc.get("defaults", {}).get("env", {}).get("MASTER_ADDR", ""))
    texts = {e["name"]: (rec / f"{e['name']}.json").read_text() for e in doc["nodes"]
             if (rec / f"{e['name']}.json").is_file()}
    seen: dict[str, int] = {}
    for t in texts.values():
        for ip in set(IPV4.findall(t)):
            seen[ip] = seen.get(ip, 0) + 1
    usable = [e for e in doc["nodes"] if e["name"] in texts and '"timed_out": true' not in texts[e["name"]]]
    first = [e for e in usable if e.get("host") == master] or usable[:1]
    others = [e for e in usable if e is not first[0]] or first
    counters: dict[str, int] = {}

    def fresh(ip: str) -> str:
        a, b = ip.split(".")[:2]
        while True:
            k = counters.get(a + b, 4 * 256)
            counters[a + b] = k + 1
            new = f"{a}.{b}.{k // 256}.{k % 256}"
            if new not in seen:
                return new

    def widen(text: str) -> str:
        for m in NARROW_MASKS:
            text = text.replace(m, "255.255.0.0")
        return NARROW_PREFIX.sub(r"\g<1>16", text)  # `ip -j addr` (JSON inside the recording's JSON)

    out_rec = folder / f"rec{n}"
    out_rec.mkdir(mode=0o700)
    entries = []
    width = len(str(n))
    for i in range(n):
        template = first[0] if i == 0 else others[(i - 1) % len(others)]
        name = f"n{i + 1:0{width}d}"
        text, entry = texts[template["name"]], yaml.safe_dump(dict(template, name=name))
        if i > 0 and (i - 1) >= len(others):  # the first pass keeps the recorded nodes' own addresses
            own = {ip for ip in IPV4.findall(text) if seen[ip] == 1 and ip != master}
            mapping = {ip: fresh(ip) for ip in sorted(own)}
            swap = (lambda m: mapping.get(m.group(1), m.group(1)))
            text, entry = IPV4.sub(swap, text), IPV4.sub(swap, entry)
        if i > 0 and (i - 1) >= len(others):
            text = varied(shifted(text, i * 0.001), i)
        (out_rec / f"{name}.json").write_text(widen(text))
        entries.append(yaml.safe_load(entry))
    doc["nodes"] = entries
    out_inv = folder / f"inv{n}.yaml"
    out_inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out_rec, out_inv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-sim", type=int, metavar="N")
    src.add_argument("--recording")
    ap.add_argument("--inventory", help="the inventory the --recording was made with")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--small", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--json")
    ap.add_argument("--instructions", type=int, metavar="N",
                    help="also count instructions (valgrind) of the JSON report at --small and N nodes: "
                         "about 20 s a 100 nodes here")
    ap.add_argument("--breakdown", action="store_true",
                    help="with --instructions: also the instructions of parsing and of node evaluation "
                         "inside the run (16 more valgrind runs, about 12 minutes here)")
    ap.add_argument("--served-times", type=int, metavar="R", default=0,
                    help="also time the target's own part at --small and --nodes nodes, R rounds: a replay's "
                         "second run with everything before the bytes served, then each format's rendering")
    args = ap.parse_args()
    if args.breakdown and not args.instructions:
        ap.error("--breakdown needs --instructions N")
    compileall.compile_dir(str(ROOT / "preflight"), quiet=1)
    compileall.compile_dir(str(ROOT / "checks"), quiet=1)
    folder = Path(tempfile.mkdtemp(prefix="preflight-replay-"))
    try:
        if args.from_sim:
            rec, inv = record_from_sim(args.from_sim, folder)
        else:
            if not args.inventory:
                ap.error("--recording needs --inventory")
            rec, inv = Path(args.recording), Path(args.inventory)
        rec_n, inv_n = clone(rec, inv, args.nodes, folder)
        skip = ",".join(c for c in UNCLONABLE if c in discover())
        small = node_range(args.small, args.nodes)
        rows, instr = {}, None
        for fmt in args.formats.split(","):
            base = preflight("run", str(inv_n), "--replay", str(rec_n), "--skip", skip, "--format", fmt,
                             "--output", str(folder / f"out.{fmt}"), "--quiet")
            runs = {"small": [], "large": []}
            for _ in range(args.repeat):
                runs["small"].append(cpu_of(base + ["--limit", small]))
                runs["large"].append(cpu_of(base))
            med = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
            rss = max(r[1] for r in runs["large"])
            per = (med["large"] - med["small"]) / (args.nodes - args.small) * 1000
            rows[fmt] = {"small_cpu": med["small"], "large_cpu": med["large"], "rss_mb": rss, "per_node_ms": per,
                         "rc": sorted({r[2] for r in runs["large"]})}
        served = served_times(inv_n, rec_n, skip, args.small, args.nodes, args.formats.split(","),
                              args.served_times) if args.served_times else None
        if args.instructions:
            base = preflight("run", str(inv_n), "--replay", str(rec_n), "--skip", skip, "--format", "json",
                             "--output", str(folder / "out.instr.json"), "--quiet")
            counts = {n: instructions_of(base + ["--limit", node_range(n, args.nodes)])
                      for n in (args.small, args.instructions)}
            instr = {"counts": counts, "per_node": (counts[args.instructions] - counts[args.small])
                     / (args.instructions - args.small)}
            if args.breakdown:
                instr["breakdown"] = breakdown(inv_n, rec_n, skip, args.small, args.instructions, args.nodes)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"| format | CPU at {args.small} nodes (s) | CPU at {args.nodes} nodes (s) | per node (ms) | peak RSS (MB) |")
    print("|---|---:|---:|---:|---:|")
    for fmt, r in rows.items():
        print(f"| {fmt} | {r['small_cpu']:.2f} | {r['large_cpu']:.2f} | {r['per_node_ms']:.2f} | {r['rss_mb']:.0f} |")
    print(f"exit codes {[r['rc'] for r in rows.values()]}, load {os.getloadavg()[0]:.1f}, {time.strftime('%F %T')}")
    for line in served_lines(served, args.small, args.nodes):
        print(line)
    if instr:
        sizes = " -> ".join(f"{n} nodes {c / 1e9:.2f} G" for n, c in instr["counts"].items())
        print(f"instructions (JSON report): {sizes}; {instr['per_node'] / 1e6:.1f} M per added node")
        for line in breakdown_lines(instr.get("breakdown")):
            print(line)
    if args.json:
        Path(args.json).write_text(json.dumps({**rows, **({"instructions": instr} if instr else {}),
                                               **({"served_times": served} if served else {})}, indent=1))


if __name__ == "__main__":
    main()
