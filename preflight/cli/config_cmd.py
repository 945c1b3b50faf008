"""`preflight config show`: every setting, its value, and where it came from (preflight/config.py)."""
from __future__ import annotations

import json

import click

from .common import fail_usage, safe_echo


@click.group("config")
def config_group() -> None:
    """Show the settings in force and where each comes from."""


@config_group.command("show")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: key -> {value, source}.")
def show(as_json: bool) -> None:
    """Each setting with its value and source: default, a config file and line, or a PREFLIGHT_* variable.
    Files read: /etc/preflight/config.yaml, then $XDG_CONFIG_HOME/preflight/config.yaml."""
    from ..config import KEYS, SYSTEM_PATH, ConfigError, resolve, user_path
    try:
        settings = resolve()
    except ConfigError as exc:
        fail_usage(str(exc))
    if as_json:
        safe_echo(json.dumps({k: {"value": s.value, "source": s.source} for k, s in settings.items()}) + "\n")
        return
    lines = [f"# files: {SYSTEM_PATH} < {user_path()} < PREFLIGHT_* < command line"]
    for key, s in settings.items():
        shown = f"{KEYS[key].builtin} (built-in)" if s.value is None else str(s.value)
        lines.append(f"{key:<14} {shown:<40} {s.source:<44} # {KEYS[key].help}")
    safe_echo("\n".join(lines) + "\n")
