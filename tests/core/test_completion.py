"""Shell completion as a user's bash runs it: the script `_PREFLIGHT_COMPLETE=bash_source preflight`
prints (README) is sourced into a real bash, COMP_WORDS/COMP_CWORD are set as readline sets them,
and the registered function's COMPREPLY is read back: commands, options, format names and check
ids (the last item of a comma list) complete."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash not installed")


def complete(*words: str) -> list[str]:
    line = " ".join(f"'{w}'" for w in words)
    script = (f'eval "$(_PREFLIGHT_COMPLETE=bash_source preflight)"\n'
              f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}\n"
              "_preflight_completion preflight\n"
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    p = subprocess.run([BASH, "--norc", "--noprofile", "-c", script], capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if not k.startswith("_PREFLIGHT")})
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return [ln for ln in p.stdout.splitlines() if ln]


def test_commands_and_options_complete():
    assert complete("preflight", "ga") == ["gate"]
    assert set(complete("preflight", "gate", "--fo")) == {"--format", "--forks"}
    assert "npd" in complete("preflight", "gate", "--format", "")


def test_check_ids_complete_the_last_item_of_a_comma_list():
    assert complete("preflight", "run", "inv.yaml", "--checks", "hccn.l") == ["hccn.link"]
    assert complete("preflight", "run", "inv.yaml", "--skip", "npu.health,smo") == ["npu.health,smoke",
                                                                                  "npu.health,smoke.allreduce"]
    assert "hccn" in complete("preflight", "gate", "--checks", "hcc")  # a prefix selects every hccn.*
