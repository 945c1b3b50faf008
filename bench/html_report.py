"""The HTML report of the 128-node recording (tests/fixtures/replay/ascend128): its size, the time
to build it in Python, and the time headless chromium takes to load it and run its script.

    PYTHONPATH=. python3 bench/html_report.py [--out report.html]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from preflight import inventory, runner
from preflight.report import render
from preflight.transport.replay import ReplayTransport

FIX = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "replay" / "ascend128"
CHECKS = ["npu.health", "npu.idle", "hccn.link", "hccn.ip", "net.ping_mesh", "hccn.ping_mesh"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="keep the page here")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        with tarfile.open(FIX / "outputs.tar.xz") as t:
            t.extractall(d, filter="data")
        inv = inventory.load(str(FIX / "inventory.yaml"))
        report = runner.run(inv, ReplayTransport(str(Path(d) / "rec128b")), runner.Options(checks=CHECKS))
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            page = render(report, "html")
            times.append(time.perf_counter() - t0)
        path = Path(args.out or Path(d) / "report.html")
        path.write_text(page, encoding="utf-8")
        print(f"nodes {len(report.nodes)}, results {len(report.results)}, page {len(page.encode()) / 1024:.0f} KB, "
              f"render (python) median {sorted(times)[len(times) // 2] * 1000:.0f} ms")
        chromium = shutil.which("chromium")
        if chromium:
            loads = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={d}/p",
                                "--dump-dom", path.as_uri()], capture_output=True, timeout=180, check=True)
                loads.append(time.perf_counter() - t0)
            print(f"chromium --dump-dom (start, load, script, exit) median {sorted(loads)[len(loads) // 2]:.2f} s")


if __name__ == "__main__":
    main()
