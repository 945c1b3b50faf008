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


def test_the_lower_pass_imports_the_version_it_installed():
    """.ci/run's lower-bound pass sets PREFLIGHT_EXPECT_PARAMIKO to the version it installed into
    /tmp/paramiko-lower: the paramiko imported here is that one, not the newer one of the
    environment shadowing the PYTHONPATH (then the pass would test nothing)."""
    want = os.environ.get("PREFLIGHT_EXPECT_PARAMIKO")
    if not want:
        import pytest
        pytest.skip("not the lower-bound pass (.ci/run sets PREFLIGHT_EXPECT_PARAMIKO there)")
    assert paramiko.__version__ == want, (paramiko.__version__, paramiko.__file__)
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'PREFLIGHT_EXPECT_PARAMIKO="${lower}.0" PYTHONPATH=/tmp/paramiko-lower' in ci


def test_ci_sets_the_expected_version_in_the_lower_pass():
    ci = (ROOT / ".ci" / "run").read_text()
    [line] = [ln for ln in ci.splitlines() if "PYTHONPATH=/tmp/paramiko-lower" in ln]
    assert 'PREFLIGHT_EXPECT_PARAMIKO="${lower}.0"' in line and "test_paramiko_lower_bound.py" in line
    assert 'pip install -q --no-deps --target /tmp/paramiko-lower "paramiko==${lower}.0"' in ci


def test_importing_the_transport_prints_nothing():
    """Under paramiko 3.4 and cryptography 43+, `import paramiko` warns about TripleDES on stderr."""
    p = subprocess.run([sys.executable, "-c", "import preflight.transport.ssh, preflight.transport.hostkeys"],
                       capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert p.returncode == 0 and p.stderr == "", p.stderr
