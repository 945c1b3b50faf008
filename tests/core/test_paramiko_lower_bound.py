"""The pin's lower bound is tested, not assumed: .ci/run runs the paramiko tests a second time
with the oldest paramiko pyproject.toml allows on PYTHONPATH. This test runs in both passes and
says which paramiko it met; under the lower bound it also holds preflight's stderr clean of the
warnings that paramiko version raises against a newer cryptography."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import paramiko

ROOT = Path(__file__).resolve().parents[2]


def pinned_lower() -> tuple[int, ...]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if d.startswith("paramiko"))
    return tuple(int(x) for x in re.fullmatch(r"paramiko>=([\d.]+)", spec).group(1).split("."))


def test_the_paramiko_in_use_satisfies_the_pin():
    have = tuple(int(x) for x in paramiko.__version__.split(".")[:2])
    assert have >= pinned_lower()[:2], paramiko.__version__


def test_importing_the_transport_prints_nothing():
    """Under paramiko 3.4 and cryptography 43+, `import paramiko` warns about TripleDES on stderr."""
    p = subprocess.run([sys.executable, "-c", "import preflight.transport.ssh, preflight.transport.hostkeys"],
                       capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert p.returncode == 0 and p.stderr == "", p.stderr
