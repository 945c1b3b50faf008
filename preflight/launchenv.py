"""The launch environment: what the training launcher will see on a node (docs/SPEC.md §2.3).

`launch_shell: exec` is the environment of a command started over SSH (our batch already runs
that way), `login` is `bash -lc`; then the inventory's env_files are sourced in order, then its
env applied. Several checks read it; they all ask for the same probe, which runs once.
"""
from __future__ import annotations

import functools
import re

from .checkapi import CommandOutput, ParseError, Probe, Shell, cmd, sh
from .checkhelpers import seq
from .node import Node

PROBE_NAME = "launch_env"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def script(node: Node) -> Shell:
    """Shell text that builds the launch environment (sourcing env_files, applying env)."""
    return _script(tuple(node.env_files), tuple(node.env.items()))  # env values are strings (inventory)


@functools.lru_cache(maxsize=4096)
def _script(env_files: tuple[str, ...], env: tuple[tuple[str, str], ...]) -> Shell:
    """Cached by the node's env_files and env: several checks ask for it on every node, and most
    nodes of a cluster share everything but an address or two."""
    steps = [sh(". {f} >/dev/null 2>&1 || echo {msg} >&2", f=f, msg="preflight: cannot source " + f)
             for f in env_files]
    # the name is literal template text only after it matched ENV_NAME (no quote, brace or space)
    steps += [sh(f"export {k}={{v}}", v=v) for k, v in env if ENV_NAME.fullmatch(k)]
    return seq(steps) if steps else sh(":")


def command(node: Node, then: Shell | str = "env -0") -> Shell:
    """Shell text running `then` (shell text built by sh(), or a literal constant) inside the node's
    launch environment."""
    flags = "-lc" if node.launch_shell == "login" else "-c"
    then = then if isinstance(then, Shell) else sh(then)
    return _command(flags, script(node), then)


SCRIPT_VAR = "PF_LAUNCH_SCRIPT"


@functools.lru_cache(maxsize=4096)
def _command(flags: str, env_script: Shell, then: Shell) -> Shell:
    """Cached as _script is (five checks a node ask it; the quoted script is the long part).
    The script (it holds the inventory's env values: tokens) reaches bash through a variable of
    its environment (the shell's own assignment: no argument, and /proc/PID/environ is readable by
    its owner only), never as an argument: /proc/PID/cmdline is readable by every user of the node."""
    return sh(f"{SCRIPT_VAR}={{script}} bash {{flags}} {{run}}", flags=flags, run=f'eval "${SCRIPT_VAR}"',
              script=seq([sh(f"unset {SCRIPT_VAR}"), env_script, then]))


def probe(node: Node) -> dict[str, Probe]:
    return {PROBE_NAME: cmd(command(node))}


def parse(out: CommandOutput | None) -> dict[str, str]:
    """`env -0` output -> mapping. NUL-separated, so values with newlines survive."""
    if out is None or out.rc != 0 or out.error or out.timed_out:
        raise ParseError("launch environment could not be read", (out.stderr if out else "") or "")
    env: dict[str, str] = {}
    for item in out.stdout.split("\0"):
        key, sep, value = item.partition("=")
        if sep and key:
            env[key] = value
    return env
