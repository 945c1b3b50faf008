"""`list-checks` reads the checks' literals from their source (registry.listing) instead of
importing them; the listing must be exactly what importing them (registry.discover) says."""
from __future__ import annotations

import pkgutil

from preflight import registry
from preflight.registry import discover, listing


def _imported() -> list[tuple[str, str, str, bool]]:
    return [(c.id, c.scope, c.title, c.gate) for c in discover().values()]


def test_listing_is_what_discovery_says():
    assert listing() == _imported()


def test_a_module_it_cannot_read_falls_back_to_discovery(monkeypatch, tmp_path):
    """A value that is not a plain literal: the scan cannot know it, so discover() answers."""
    (tmp_path / "odd.py").write_text('"""odd: computed id."""\nID = "od" + "d"\n')
    real = pkgutil.iter_modules

    def with_odd(path=None, prefix=""):
        yield from real(path, prefix)
        yield from real([str(tmp_path)], prefix)

    expected = _imported()
    monkeypatch.setattr(pkgutil, "iter_modules", with_odd)
    calls = []
    monkeypatch.setattr(registry, "discover", lambda: calls.append(1) or real_discover())
    real_discover = discover
    registry._scan.cache_clear()
    try:
        assert registry._scan() is None
        assert listing() == expected and calls == [1]
    finally:
        registry._scan.cache_clear()


def test_discovery_imports_a_check_only_when_it_is_used():
    """The gate's set and the scopes come from the source; a check's module is imported when its
    CheckInfo is first asked for (a fresh interpreter: this one has imported them all)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from preflight.registry import discover, gate_set, scopes; d = discover(); "
            "gate_set(); scopes(); list(d); 'npu.health' in d; d['npu.health'].policy_text(); "
            "print(sorted(m for m in sys.modules if m.startswith('preflight.checks.')))")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['preflight.checks.npu_health']"]


def test_the_mapping_answers_as_the_dict_did():
    every = discover()
    assert list(every) == [i for i, *_ in listing()] and len(every) == len(list(every))
    assert every.get("no.such") is None and "no.such" not in every and "npu.health" in every
    assert every["npu.health"] is every["npu.health"]
    assert dict(every.items()) == {c.id: c for c in every.values()}


def test_list_checks_gate_lists_the_gate_set():
    from click.testing import CliRunner

    from preflight.cli import main

    res = CliRunner().invoke(main, ["list-checks", "--gate"])
    assert res.exit_code == 0, res.output
    assert [ln.split()[0] for ln in res.output.splitlines()] == registry.gate_set()
