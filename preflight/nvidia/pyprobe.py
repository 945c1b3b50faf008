"""The python probe cuda.env and cuda.torch share: a script run by the node's python in its launch
environment, after a line saying CUDA_VISIBLE_DEVICES; its answer read back; the fail of a python
that did not run or has no torch."""
from __future__ import annotations

import json
import re
from typing import Any

from .. import launchenv
from ..checkapi import CommandOutput, ParseError, Status, require_ok, sh
from ..checkhelpers import first_line


def python_probe(node, script: str):
    """`script` run by the node's python in its launch environment, after the line
    `@@visible <CUDA_VISIBLE_DEVICES or @unset>`."""
    # ${CUDA_VISIBLE_DEVICES-@unset}: braces doubled, sh() fills {fields}
    return launchenv.command(node, sh("echo \"@@visible ${{CUDA_VISIBLE_DEVICES-@unset}}\"; {py} -c {src}",
                                      py=node.python, src=script))


def read_python(out: CommandOutput | None, mark: str) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(the script's JSON answer or None, why python gave none, CUDA_VISIBLE_DEVICES or None when unset)."""
    py = require_ok(out, "python in the launch environment")
    m = re.search(r"^@@visible (.*)$", py.stdout, re.M)
    visible = None if not m or m.group(1) == "@unset" else m.group(1)
    line = next((ln for ln in py.stdout.splitlines() if ln.startswith(mark)), None)
    if line is None:
        return None, first_line(py.stderr) or f"exit code {py.rc}", visible
    try:
        return json.loads(line[len(mark):]), None, visible
    except ValueError:
        raise ParseError(f"{mark.strip('@ ')}: the python probe printed an unreadable line", line) from None


def python_problems(facts: Any, node) -> list[tuple[Status, str, str]]:
    """The opening of cuda.env's and cuda.torch's evaluate: [the fail of a python that did not run
    (`facts.python` None, `facts.python_error` why) or has no torch], or [] when its answer
    (`facts.python`) can be judged."""
    py = facts.python
    if py is None:
        return [(Status.FAIL, f"{node.python} did not run in the launch environment: {facts.python_error}",
                 "Set `python:` for this node to the interpreter that has torch (e.g. /opt/conda/bin/python3)")]
    if py.get("error"):
        return [(Status.FAIL, f"torch not importable by {node.python}: {py['error']}",
                 f"Install torch with CUDA for this python: `{node.python} -m pip install torch`")]
    return []
