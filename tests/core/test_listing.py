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

    monkeypatch.setattr(pkgutil, "iter_modules", with_odd)
    calls = []
    monkeypatch.setattr(registry, "discover", lambda: calls.append(1) or real_discover())
    real_discover = discover
    assert listing() == _imported() and calls == [1]


def test_list_checks_gate_lists_the_gate_set():
    from click.testing import CliRunner

    from preflight.cli import main

    res = CliRunner().invoke(main, ["list-checks", "--gate"])
    assert res.exit_code == 0, res.output
    assert [ln.split()[0] for ln in res.output.splitlines()] == registry.gate_set()
