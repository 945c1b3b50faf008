"""The launch environment: what the training launcher will see on a node (docs/SPEC.md §2.3).

`launch_shell: exec` is the environment of a command started over SSH (our batch already runs
that way), `login` is `bash -lc`; then the inventory's env_files are sourced in order, then its
env applied. Several checks read it; they all ask for the same probe, which runs once.
"""
from __future__ import annotations

import re

from .checkapi import CommandOutput, ParseError, q
from .node import Node

PROBE_NAME = "launch_env"
SECRET_NAME = re.compile(r"PASS|SECRET|TOKEN|CREDENTIAL|PRIVATE|_KEY$|^KEY$|AUTH", re.I)
REDACTED = "********"


def script(node: Node) -> str:
    """Bash text that builds the launch environment (sourcing env_files, applying env)."""
    steps = [f". {q(f)} >/dev/null 2>&1 || echo {q('preflight: cannot source ' + f)} >&2" for f in node.env_files]
    steps += [f"export {k}={q(v)}" for k, v in node.env.items() if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
    return "; ".join(steps) or ":"


def command(node: Node, then: str = "env -0") -> str:
    """A probe that runs `then` inside the node's launch environment."""
    flags = "-lc" if node.launch_shell == "login" else "-c"
    return f"bash {flags} {q(script(node) + '; ' + then)}"


def probe(node: Node) -> dict[str, str]:
    return {PROBE_NAME: command(node)}


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


def redacted(env: dict[str, str]) -> dict[str, str]:
    """Safe to put in a report: values of secret-looking names replaced."""
    return {k: (REDACTED if SECRET_NAME.search(k) else v) for k, v in sorted(env.items())}
