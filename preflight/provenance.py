"""What produced a report: the effective configuration of the run, so that two reports can be
compared and a run repeated (docs/SPEC.md §5, `config`).

Why a digest per check: a check's verdict is its code's, and the package version does not move
when a check module is patched in place; the first 16 hex digits of the sha256 of each selected
check's source tell two reports apart that the version would not. Settings from config files and
PREFLIGHT_* variables are listed with where they came from, after redaction by name (the rule of
preflight/redact.py), so a report never carries a secret a setting held.
"""
from __future__ import annotations

import hashlib
import importlib.util
from typing import Any, Iterable, Mapping

from . import redact
from .registry import module_name


def check_digest(check_id: str) -> str | None:
    """sha256 of the check module's source (16 hex digits); None where it cannot be read."""
    try:
        spec = importlib.util.find_spec(f"preflight.checks.{module_name(check_id)}")
        if spec is None or not spec.origin:
            return None
        with open(spec.origin, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except (ImportError, OSError, ValueError):
        return None


def settings() -> dict[str, dict[str, Any]]:
    """Settings that did not come from the built-in defaults: key -> {value, source}."""
    from .config import ConfigError, resolve

    try:
        resolved = resolve()
    except ConfigError:  # the command already refused a bad config file before running
        return {}
    return {s.key: {"value": redact.value(s.key, s.value), "source": s.source}
            for s in resolved.values() if s.source != "default"}


def effective(command: str, checks: Iterable[str], options: Mapping[str, Any]) -> dict[str, Any]:
    """The `config` object of a report: the command, its options as given (None: not given), the
    checks that ran with their digests, and the settings in force with their sources."""
    ran = sorted(set(checks))
    return {"command": command,
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in sorted(options.items())},
            "checks": {cid: check_digest(cid) for cid in ran},
            "settings": settings()}
