"""Errors shared by modules that load user files (the inventory, the config files).

Why a module of its own: config.ConfigError is an InventoryError (both are refused the same way),
and every command reads its config at start; defining the base here lets config.py leave
inventory.py, and with it YAML and ClusterShell, unimported until a file is really there."""
from __future__ import annotations


class InventoryError(ValueError):
    """One line for the user: file, line, key, what is wrong and how to fix it."""
