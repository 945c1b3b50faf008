#!/usr/bin/env python3
"""Fan-out benchmark (issue 3, item 10): preflight vs a minimal raw paramiko batch vs Ansible ad hoc.

For each cluster size the simulated cluster (netns mode, real sshd per node) is brought up once;
then, in the same run and as the median of `--repeat` runs, it measures:

  preflight   `preflight run INV` of every node-scope check (JSON to /dev/null)
  raw         the very probes preflight sent (taken from `--record`), as one exec per node over
              paramiko with 64 threads: the floor any paramiko tool can reach
  ansible     `ansible all -m raw -f 64` running the same batch (if ansible is installed)

Client CPU (user+sys of the client process and its children, from wait4) is the figure that
matters on a real cluster; wall is reported too, knowing the simulated nodes share this
machine's cores. Usage: sudo python3 bench/fanout.py --sizes 8,32,128 --repeat 3 [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def cluster_checks() -> str:
    """Every cluster-scope check (from the registry): the node-scope sweep skips them."""
    from preflight.registry import discover
    return ",".join(c.id for c in discover().values() if c.scope == "cluster")


CLUSTER_CHECKS = cluster_checks()


def bench_env() -> dict[str, str]:
    """This environment without PYTHONDONTWRITEBYTECODE: a run that compiles its modules every time
    measures the compiler, not preflight (the benchmarks compile the tree once instead)."""
    e = dict(os.environ)
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    return e


def timed(cmd: list[str], env: dict | None = None) -> dict:
    """Run a command; wall seconds, client CPU seconds (self + children, user and sys), peak RSS in
    MB, voluntary and involuntary context switches, exit code."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or bench_env())
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "user": ru.ru_utime, "sys": ru.ru_stime,
            "rss_mb": ru.ru_maxrss / 1024, "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw,
            "rc": proc.returncode, "stderr": err[-500:]}


def sim(*args: str, sim_dir: str, check: bool = True) -> None:
    subprocess.run([sys.executable, "-m", "preflight.sim.cli", *args, "--dir", sim_dir], check=check,
                   stdout=subprocess.DEVNULL, env=bench_env())


def spec_file(n: int, folder: str) -> str:
    path = Path(folder) / f"bench-{n}.yaml"
    path.write_text(f"cluster: bench{n}\nnodes: {n}\n")
    return str(path)


def recorded_commands(record_dir: str) -> dict[str, list[str]]:
    out = {}
    for f in Path(record_dir).glob("*.json"):
        rec = json.loads(f.read_text())
        out[f.stem] = [cmd for cmd in rec if not cmd.startswith("__")]
    return out


def batch_text(cmds: list[str]) -> str:
    """The same probes as one shell script, each under a remote timeout, separated by markers."""
    return "; ".join(f"echo @@{i}; timeout 60 sh -c {shlex.quote(c)}; echo @@rc $?" for i, c in enumerate(cmds))


def ansible_inventory(inv_path: str, folder: str) -> str:
    sys.path.insert(0, str(HERE.parent))
    from preflight.inventory import load

    inv = load(inv_path)
    lines = ["[all]"]
    for n in inv.nodes:
        lines.append(f"{n.name} ansible_host={n.host} ansible_port={n.port} ansible_user={n.user or 'root'} "
                     f"ansible_ssh_private_key_file={n.identity_file} "
                     f"ansible_ssh_common_args='-o UserKnownHostsFile={n.known_hosts} -o StrictHostKeyChecking=yes'")
    path = Path(folder) / "ansible.ini"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def run_size(n: int, repeat: int, folder: str, with_ansible: bool) -> dict:
    sim_dir = str(Path(folder) / f"sim{n}")
    t0 = time.monotonic()
    sim("up", spec_file(n, folder), sim_dir=sim_dir)
    up_s = time.monotonic() - t0
    inv = str(Path(sim_dir) / "inventory.yaml")
    try:
        rec = str(Path(folder) / f"rec{n}")
        subprocess.run(["preflight", "run", inv, "--skip", CLUSTER_CHECKS, "--record", rec, "--format", "json",
                        "--output", os.devnull, "--quiet"], check=False)
        cmds = recorded_commands(rec)
        batches = Path(folder) / f"batches{n}.json"
        batches.write_text(json.dumps({node: batch_text(c) for node, c in cmds.items()}))
        probes_per_node = statistics.median(len(c) for c in cmds.values())
        results: dict[str, list[dict]] = {"preflight": [], "raw": [], "ansible": []}
        ans_inv = ansible_inventory(inv, folder) if with_ansible else None
        one_batch = next(iter(json.loads(batches.read_text()).values()))
        for _ in range(repeat):
            results["preflight"].append(timed(["preflight", "run", inv, "--skip", CLUSTER_CHECKS,
                                               "--format", "json", "--output", os.devnull, "--quiet"]))
            results["raw"].append(timed([sys.executable, str(HERE / "raw_paramiko.py"), inv, str(batches)]))
            if ans_inv:
                # No ControlPersist: its daemonized ssh masters would escape wait4's CPU accounting
                # and be reused by the next repeat.
                env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_STDOUT_CALLBACK="minimal",
                           ANSIBLE_SSH_ARGS="-o ControlMaster=no")
                results["ansible"].append(timed(["ansible", "all", "-i", ans_inv, "-m", "raw", "-a", one_batch,
                                                 "-f", "64"], env=env))
        t1 = time.monotonic()
        sim("down", sim_dir=sim_dir)
        down_s = time.monotonic() - t1
    except BaseException:
        sim("down", sim_dir=sim_dir)
        raise
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall", "cpu", "rss_mb")}
           for k, v in results.items() if v}
    rcs = {k: [r["rc"] for r in v] for k, v in results.items() if v}
    return {"nodes": n, "probes_per_node": probes_per_node, "sim_up_s": up_s, "sim_down_s": down_s,
            "median": med, "rcs": rcs}


def table(rows: list[dict]) -> str:
    out = ["| nodes | tool | wall (s) | client CPU (s) | peak RSS (MB) |", "|---:|---|---:|---:|---:|"]
    for r in rows:
        for tool, m in r["median"].items():
            out.append(f"| {r['nodes']} | {tool} | {m['wall']:.2f} | {m['cpu']:.2f} | {m['rss_mb']:.0f} |")
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        for tool in a["median"]:
            if tool in b["median"]:
                per = (b["median"][tool]["cpu"] - a["median"][tool]["cpu"]) / (b["nodes"] - a["nodes"]) * 1000
                out.append(f"| +1 node | {tool} | | {per:.1f} ms | |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,32,128")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--no-ansible", action="store_true")
    args = ap.parse_args()
    with_ansible = not args.no_ansible and shutil.which("ansible") is not None
    folder = tempfile.mkdtemp(prefix="preflight-bench-")
    try:
        rows = [run_size(int(n), args.repeat, folder, with_ansible) for n in args.sizes.split(",")]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(table(rows))
    for r in rows:
        print(f"{r['nodes']} nodes: {r['probes_per_node']} probes/node, sim up {r['sim_up_s']:.1f}s, "
              f"down {r['sim_down_s']:.1f}s, exit codes {r['rcs']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
