"""Configuration files: the defaults people set once, so the command line stays short.

Precedence, lowest first: built-in defaults < /etc/preflight/config.yaml <
$XDG_CONFIG_HOME/preflight/config.yaml (default ~/.config) < PREFLIGHT_* environment variables <
command-line options. The keys (KEYS) are few on purpose: what an operator sets once for a site
(forks, deadlines, the history database, the report format, the inventory). They reach click as
its `default_map`, so an option given on the command line always wins and `--help` stays honest.

Bad configuration is refused the way a bad inventory is (preflight/inventory.py's YAML loader):
one line naming the file and line (or the variable), exit 2, before anything runs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import InventoryError

SYSTEM_PATH = Path("/etc/preflight/config.yaml")
ENV_PREFIX = "PREFLIGHT_"


class ConfigError(InventoryError):
    """One line: file:line (or the variable), the key, what is wrong."""


def _int(lo: int, hi: int) -> Callable[[Any], int]:
    def conv(v: Any) -> int:
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, str) and v.strip().lstrip("-").isdigit())):
            raise ValueError(f"expected a whole number {lo}-{hi}, got {v!r}")
        n = int(v)
        if not lo <= n <= hi:
            raise ValueError(f"expected {lo}-{hi}, got {n}")
        return n
    return conv


def _seconds(v: Any) -> float:
    try:
        x = float(v) if not isinstance(v, bool) else None
    except (TypeError, ValueError):
        x = None
    if x is None or not x > 0:
        raise ValueError(f"expected seconds above 0, got {v!r}")
    return x


def _path(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"expected a file path, got {v!r}")
    return os.path.expanduser(v)


def _format(v: Any) -> str:
    from .report import FORMATS
    if v not in FORMATS:
        raise ValueError(f"expected one of {', '.join(FORMATS)}, got {v!r}")
    return v


@dataclass(frozen=True)
class Key:
    convert: Callable[[Any], Any]
    help: str
    targets: tuple[tuple[str, str], ...]  # (command, click parameter name) it defaults
    builtin: str = ""  # what applies when nothing sets it, in words (`config show`)


KEYS: dict[str, Key] = {
    "forks": Key(_int(1, 1024), "nodes at a time (run, gate)", (("run", "forks"), ("gate", "forks")), "64"),
    "deadline": Key(_seconds, "seconds for a whole run (run)", (("run", "deadline"),), "3600"),
    "gate_deadline": Key(_seconds, "seconds for the whole gate (gate)", (("gate", "deadline"),), "30"),
    "history": Key(_path, "the history database (run --history, sweep, history, diff, trend, ack, gate's acks)",
                   (), "$XDG_STATE_HOME/preflight/history.sqlite"),
    "format": Key(_format, "report format of run", (("run", "fmt"),), "table"),
    "inventory": Key(_path, "INVENTORY when none is given (run, gate, nagios)",
                     (("run", "inventory"), ("nagios", "inventory"), ("gate", "inventory")), "none"),
}


@dataclass(frozen=True)
class Setting:
    key: str
    value: Any
    source: str  # "default", "/etc/preflight/config.yaml:3", "PREFLIGHT_FORKS"


def _read_file(path: Path) -> dict[str, Setting]:
    from .safefile import UnsafePath, trusted_read
    try:
        text = trusted_read(path, "config file")  # it names the database whose acks decide READY
    except UnsafePath as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    if text is None:
        return {}
    from .inventory import _load_yaml, _Map  # only with a config file: YAML is ~0.05 s of start-up
    try:
        doc = _load_yaml(path, text)
    except InventoryError as exc:
        raise ConfigError(str(exc)) from None
    if doc is None:
        return {}
    if not isinstance(doc, _Map):
        raise ConfigError(f"{path}:1: expected a mapping of settings ({', '.join(KEYS)})")
    out = {}
    for key, raw in doc.items():
        where = f"{path}:{doc.lines.get(key, doc.line)}"
        if key not in KEYS:
            import difflib
            close = difflib.get_close_matches(key, list(KEYS), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(KEYS)}"
            raise ConfigError(f"{where}: unknown setting {key!r} ({hint})")
        if key in doc.traps:
            raise ConfigError(f"{where}: {key}: {doc.traps[key]}")
        try:
            out[key] = Setting(key, KEYS[key].convert(raw), where)
        except ValueError as exc:
            raise ConfigError(f"{where}: {key}: {exc}") from None
    return out


def _read_env(environ: dict[str, str]) -> dict[str, Setting]:
    out = {}
    for key, spec in KEYS.items():
        name = ENV_PREFIX + key.upper()
        if name in environ:
            try:
                out[key] = Setting(key, spec.convert(environ[name]), name)
            except ValueError as exc:
                raise ConfigError(f"{name}={environ[name]!r}: {exc}") from None
    return out


def resolve(environ: dict[str, str] | None = None, system: Path | None = None) -> dict[str, Setting]:
    """Every key with its value and where it came from (later sources win)."""
    env = dict(os.environ if environ is None else environ)
    system = SYSTEM_PATH if system is None else system
    settings = {k: Setting(k, None, "default") for k in KEYS}
    for layer in (_read_file(system), _read_file(user_path(env)), _read_env(env)):
        settings.update(layer)
    return settings


def user_path(environ: dict[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "preflight" / "config.yaml"


def default_map(settings: dict[str, Setting]) -> dict[str, dict[str, Any]]:
    """click's default_map: command -> parameter -> value, for the keys that are set."""
    out: dict[str, dict[str, Any]] = {}
    for s in settings.values():
        if s.source != "default":
            for command, param in KEYS[s.key].targets:
                out.setdefault(command, {})[param] = s.value
    return out


def history_path() -> str | None:
    """The configured history database, or None for the XDG default (ops/history.default_path)."""
    try:
        return resolve()["history"].value
    except ConfigError:
        return None  # the CLI has already refused a bad config before anything reads it


def history_file() -> Path:
    """The configured `history`, else $XDG_STATE_HOME/preflight/history.sqlite (XDG base dirs;
    fallback ~/.local/state). Here and not in ops/history.py so that the gate can see there is
    no database without importing sqlite3 and the history's tables (~0.01 s)."""
    configured = history_path()
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "preflight" / "history.sqlite"
