"""Errors shared by modules that load user files (the inventory, the config files), and the one
way such a file is read (read_text).

Why a module of its own: config.ConfigError is an InventoryError (both are refused the same way),
and every command reads its config at start; defining the base here lets config.py leave
inventory.py, and with it YAML and ClusterShell, unimported until a file is really there."""
from __future__ import annotations

from pathlib import Path


class InventoryError(ValueError):
    """One line for the user: file, line, key, what is wrong and how to fix it."""


def read_text(path: Path, what: str, error: type[Exception]) -> str:
    """The file's text as UTF-8, or `error` with one line naming the file: `cannot read <what>`
    (with the system's reason) or `not UTF-8 text (byte N)` (the first byte that is not)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start})") from None
