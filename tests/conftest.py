"""Shared test configuration: the simulated-cluster fixtures and markers (tests/simfixtures.py), and
the bundled 128-node recording unpacked once a session."""
import tarfile
from pathlib import Path

import pytest

pytest_plugins = ["tests.simfixtures"]

ASCEND128 = Path(__file__).resolve().parent / "fixtures" / "replay" / "ascend128"
"""The 128-node Ascend recording: inventory.yaml and outputs.tar.xz (tests/fixtures/replay/make_ascend128.py)."""


@pytest.fixture(scope="session")
def ascend128_recording(tmp_path_factory) -> Path:
    """The --record directory of ASCEND128, unpacked once (tests only read it)."""
    d = tmp_path_factory.mktemp("ascend128")
    with tarfile.open(ASCEND128 / "outputs.tar.xz") as t:
        t.extractall(d, filter="data")
    return d / "rec128b"
