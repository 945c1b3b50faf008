"""A typo in the inventory's `checks:` must not silently leave a default threshold in force."""
from __future__ import annotations

import pytest

from preflight.inventory import load
from preflight.registry import SelectionError
from preflight.runner import Runner
from preflight.transport.local import LocalTransport


def inv(tmp_path, text: str):
    p = tmp_path / "inv.yaml"
    p.write_text(text + "nodes:\n  - {name: a, host: localhost}\n")
    return load(p, ssh_config=str(tmp_path / "none"))


def test_unknown_parameter_is_refused_with_a_suggestion(tmp_path):
    with pytest.raises(SelectionError, match=r"storage.disk: unknown parameter 'min_free_gb' \(did you mean 'min_free_gib'\?\)"):
        Runner(inv(tmp_path, "checks:\n  storage.disk: {min_free_gb: 100}\n"), LocalTransport())


def test_unknown_check_id_is_refused(tmp_path):
    with pytest.raises(SelectionError, match=r"unknown check 'storage.dsk' \(did you mean 'storage.disk'\?\)"):
        Runner(inv(tmp_path, "checks:\n  storage.dsk: {min_free_gib: 1}\n"), LocalTransport())


def test_known_parameters_pass(tmp_path):
    Runner(inv(tmp_path, "checks:\n  storage.disk: {min_free_gib: 1}\n  npu.idle: {max_hbm_used_pct: 5}\n"), LocalTransport())
