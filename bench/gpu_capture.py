#!/usr/bin/env python3
"""Capture a real NVIDIA node's tool output and run preflight's GPU parsers on it (issue 14, item 9).

For the few minutes a real GPU machine is at hand: one command, run in the repository root, that
leaves everything under OUT for the next session to turn into fixtures and to compare with the
simulator. Nothing here needs SSH, root or a network: it runs the very probe commands the checks
send (their `probes()` text, through `sh -c`), then the checks' own pure parse() and evaluate().

  python3 bench/gpu_capture.py all --out OUT       capture + evaluate + smoke
  python3 bench/gpu_capture.py capture --out OUT   OUT/captures/<probe>.{cmd,out,err,rc}
  python3 bench/gpu_capture.py evaluate --out OUT  OUT/results.json from OUT/captures (no tool runs)
  python3 bench/gpu_capture.py smoke --out OUT     OUT/smoke_nccl.json: smoke.allreduce's worker,
                                                   one rank, nccl, when torch sees CUDA

What it writes: captures/ (one set of files per probe of gpu.health, gpu.idle, gpu.topology, ib.link,
cuda.env and cuda.torch (the python is `python3` of the login PATH),
plus `query_gpu_csv`: the `--query-gpu` fields the simulator serves, csv,noheader,nounits, and
`query_gpu_csv_header` with the header line the simulator has no sample of), fixtures/ (the same
outputs as fixture files with a `# source:` header naming this capture, ready for
tests/fixtures/nvidia/), results.json (every check's findings or its parse error), meta.json
(host, date, driver). bench/gpu_capture.sh is the one-line wrapper for a device run.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from preflight.checkapi import CommandOutput, ParseError  # noqa: E402
from preflight.checks import cuda_env, cuda_torch, gpu_health, gpu_idle, gpu_topology, ib_link  # noqa: E402
from preflight.node import Node  # noqa: E402
from preflight.nvidia import nvidia_smi, smi_xml  # noqa: E402
from preflight.transport.clean import clean  # noqa: E402

CHECKS = (gpu_health, gpu_idle, gpu_topology, ib_link, cuda_env, cuda_torch)
CSV_FIELDS = ("index", "name", "pci.bus_id", "driver_version", "uuid", "memory.total", "memory.used")
EXTRA = {
    "query_gpu_csv": f"nvidia-smi --query-gpu={','.join(CSV_FIELDS)} --format=csv,noheader,nounits",
    "query_gpu_csv_header": f"nvidia-smi --query-gpu={','.join(CSV_FIELDS)} --format=csv",
    "nvidia_smi_q_text": "nvidia-smi -q",  # the checks' -q probe asks for XML first: the text form too, a pair
}
# probe name -> fixture file stem (tests/fixtures/nvidia naming: <command>__<hardware>__<source>.txt)
FIXTURE_STEMS = {"nvidia_smi": "nvidia-smi", "nvidia_smi_q": "nvidia-smi_-q_-x", "nvidia_smi_q_text": "nvidia-smi_-q", "nvidia_smi_topo": "nvidia-smi_topo_-m",
                 "nvidia_smi_nvlink": "nvidia-smi_nvlink_-s", "query_gpu_csv": "nvidia-smi_query-gpu_csv_noheader_nounits",
                 "query_gpu_csv_header": "nvidia-smi_query-gpu_csv"}
TIMEOUT_S = 90


def _probe_node(devices: int = 8) -> Node:
    return Node("capture", "127.0.0.1", devices=devices, backend="nvidia")


def commands() -> dict[str, str]:
    """probe name -> the exact shell text the checks send (shared commands appear once)."""
    out: dict[str, str] = {}
    node = _probe_node()
    for check in CHECKS:
        for name, probe in check.probes(node, dict(check.DEFAULTS)).items():
            out[name] = probe.cmd
    out.update(EXTRA)
    return out


def capture(out: Path) -> None:
    cap = out / "captures"
    cap.mkdir(parents=True, exist_ok=True)
    for name, command in commands().items():
        (cap / f"{name}.cmd").write_text(command + "\n")
        try:
            p = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=TIMEOUT_S)
            rc, stdout, stderr = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stdout, stderr = 124, exc.stdout or "", f"timed out after {TIMEOUT_S}s"
            stdout = stdout.decode(errors="replace") if isinstance(stdout, bytes) else stdout
        (cap / f"{name}.out").write_text(stdout)
        (cap / f"{name}.err").write_text(stderr)
        (cap / f"{name}.rc").write_text(f"{rc}\n")
    meta = {"host": socket.gethostname(), "captured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "uname": os.uname().release}
    q = cap / "nvidia_smi_q.out"
    try:
        report = smi_xml.read_query(q.read_text())
        meta.update(driver=report.driver_version, cuda=report.cuda_version, gpus=len(report.gpus),
                    model=report.gpus[0].name if report.gpus else None)
    except (OSError, ParseError) as exc:
        meta["query_error"] = str(exc).splitlines()[0]
    (out / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    _fixtures(out, meta)


def _fixtures(out: Path, meta: dict) -> None:
    """Each nvidia-smi output that came back as a fixture file with the header the project's fixtures carry."""
    fx = out / "fixtures"
    fx.mkdir(exist_ok=True)
    model = str(meta.get("model") or "unknown").replace("NVIDIA ", "").replace(" ", "-")
    day = meta["captured_at"][:10]
    for name, stem in FIXTURE_STEMS.items():
        src = out / "captures" / f"{name}.out"
        if not src.exists() or (out / "captures" / f"{name}.rc").read_text().strip() != "0":
            continue
        command = (out / "captures" / f"{name}.cmd").read_text().strip()
        head = (f"# source: real capture by bench/gpu_capture.py on {meta['host']}, {meta['captured_at']}\n"
                f"# hardware/version: {meta.get('gpus')}x {meta.get('model')}, driver {meta.get('driver')}, "
                f"CUDA {meta.get('cuda')}, kernel {meta['uname']}\n# command: {command}\n# ---\n")
        (fx / f"{stem}__{model}_{meta.get('gpus')}gpu__capture-{day}.txt").write_text(head + src.read_text())


def _output(cap: Path, name: str) -> CommandOutput | None:
    if not (cap / f"{name}.rc").exists():
        return None
    rc = int((cap / f"{name}.rc").read_text().strip() or 1)
    # captures/ keeps the raw bytes (fixtures); the checks read them as the transport delivers them
    return CommandOutput(stdout=clean((cap / f"{name}.out").read_text()), rc=rc,
                         stderr=clean((cap / f"{name}.err").read_text()), timed_out=rc == 124)


def evaluate(out: Path, devices: int | None = None) -> list[dict]:
    """Every check's findings from OUT/captures (pure: parse + evaluate); written to OUT/results.json."""
    cap = out / "captures"
    outputs = {p.stem: o for p in sorted(cap.glob("*.rc")) if (o := _output(cap, p.stem)) is not None}
    if devices is None:
        try:
            devices = len(smi_xml.read_query(outputs["nvidia_smi_q"].stdout).gpus)
        except (KeyError, ParseError):
            devices = 8
    node = _probe_node(devices)
    results = []
    for check in CHECKS:
        mine = {name: outputs[name] for name in check.probes(node, dict(check.DEFAULTS)) if name in outputs}
        try:
            findings = check.evaluate(check.parse(mine), dict(check.DEFAULTS), node)
            results += [{"check": check.ID, "status": f.status.value, "summary": f.summary,
                         "remediation": f.remediation, "details": f.details} for f in findings]
        except ParseError as exc:
            results.append({"check": check.ID, "status": "error", "summary": str(exc).splitlines()[0]})
    csv = outputs.get("query_gpu_csv")
    if csv is not None and csv.rc == 0:
        try:
            rows = nvidia_smi.parse_csv(csv.stdout, CSV_FIELDS)
            results.append({"check": "query-gpu csv", "status": "pass", "summary": f"{len(rows)} GPU row(s)", "details": rows})
        except ParseError as exc:
            results.append({"check": "query-gpu csv", "status": "error", "summary": str(exc).splitlines()[0]})
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True, default=str) + "\n")
    return results


def smoke(out: Path, python: str = sys.executable) -> dict:
    """smoke.allreduce's own worker, one rank, backend nccl, when this python's torch sees CUDA."""
    probe = subprocess.run([python, "-c", "import torch; print(torch.cuda.is_available(), torch.cuda.device_count())"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0 or not probe.stdout.startswith("True"):
        record = {"skipped": "torch with CUDA not importable here", "detail": (probe.stdout + probe.stderr).strip()[-500:]}
    else:
        from preflight.smoke import worker_source
        cfg = {"rank": 0, "world": 1, "addr": "127.0.0.1", "port": 29533, "node": "capture", "backend": "nccl",
               "size_mib": 64.0, "warmup": 2, "iters": 5, "timeout_s": 60.0, "run_timeout_s": 120.0, "device": 0}
        with tempfile.TemporaryDirectory() as d:
            worker = Path(d) / "worker.py"
            worker.write_text(worker_source())
            p = subprocess.run([python, str(worker), json.dumps(cfg)], capture_output=True, text=True, timeout=180)
        line = next((ln for ln in reversed(p.stdout.splitlines()) if ln.startswith("{")), "")
        record = {"rc": p.returncode, "result": json.loads(line) if line else None, "stderr_tail": p.stderr[-2000:]}
    (out / "smoke_nccl.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("all", "capture", "evaluate", "smoke"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--devices", type=int, help="GPUs expected (default: as many as nvidia-smi -q lists)")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.step in ("all", "capture"):
        capture(a.out)
    if a.step in ("all", "evaluate"):
        for r in evaluate(a.out, a.devices):
            print(f"{r['check']:<14} {r['status']:<5} {r['summary']}")
    if a.step in ("all", "smoke"):
        print("smoke (nccl, 1 rank):", json.dumps(smoke(a.out))[:300])
    return 0


if __name__ == "__main__":
    sys.exit(main())
