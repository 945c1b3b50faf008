"""An ssh_config's `Include` lines followed as OpenSSH follows them, for paramiko to read the result.

paramiko's SSHConfig does not follow `Include` (it skips the keyword), so an alias defined in an
included file would silently resolve to the bare name, the operator's user and no key, where
`ssh` itself resolves it. OpenSSH's rules (ssh_config(5) `Include`; readconf.c):

- each argument is a path or a glob(3) pattern, `~` expanded; one without an absolute path is
  under `~/.ssh` (preflight reads the config as a user configuration, as `ssh -F` does); the
  matches are read in sorted order, and a pattern that matches nothing is not an error;
- nesting stops at 16 levels ("Too many recursive configuration includes");
- an included file starts as the enclosing context is (active at the top level), and when it
  ends the enclosing context is restored: at the top level that is what `Host *` says, so the
  included text is followed by `Host *` when it opened blocks of its own;
- inside a `Host` or `Match` block the inclusion is conditional on that block. Lines without a
  block of their own are that block's lines; an included file that opens its own blocks there
  cannot be written as plain text without changing its meaning, so it is refused with file:line.
"""
from __future__ import annotations

import glob
import os
import re
import shlex

from .errors import InventoryError

MAX_DEPTH = 16  # OpenSSH's READCONF_MAX_DEPTH
_INCLUDE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(?P<args>.*)$", re.IGNORECASE)
_BLOCK = re.compile(r"^\s*(host|match)(?:\s*=\s*|\s+)", re.IGNORECASE)


def _paths(arg: str) -> list[str]:
    path = os.path.expanduser(arg)
    if not os.path.isabs(path):
        path = os.path.join(os.path.expanduser("~/.ssh"), path)
    return sorted(glob.glob(path)) if glob.has_magic(path) else [path] if os.path.isfile(path) else []


def _opens_blocks(text: str) -> bool:
    return any(_BLOCK.match(line) for line in text.splitlines())


def expanded(path: str, depth: int = 0) -> str:
    """The text of the ssh_config at `path` with every Include replaced by what it includes."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read ssh config: {exc.strerror}") from None
    out: list[str] = []
    in_block = False
    for number, line in enumerate(lines, 1):
        if _BLOCK.match(line):
            in_block = True
        m = _INCLUDE.match(line)
        if not m:
            out.append(line)
            continue
        if depth + 1 > MAX_DEPTH:
            raise InventoryError(f"{path}:{number}: Include nested more than {MAX_DEPTH} deep "
                                 f"(OpenSSH refuses it: too many recursive configuration includes)")
        try:
            args = shlex.split(m["args"], comments=True)
        except ValueError as exc:
            raise InventoryError(f"{path}:{number}: Include: {exc}") from None
        for arg in args:
            for included in _paths(arg):
                text = expanded(included, depth + 1)
                if _opens_blocks(text):
                    if in_block:
                        raise InventoryError(
                            f"{path}:{number}: Include of {included} inside a Host or Match block, and it "
                            f"opens blocks of its own: preflight cannot follow that; include it before "
                            f"the first Host line")
                    out.extend([text, "Host *"])
                else:
                    out.append(text)
    return "\n".join(out) + "\n"
