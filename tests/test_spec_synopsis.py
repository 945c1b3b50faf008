"""docs/SPEC.md §1's synopsis says what click accepts: for run, gate and nagios every option's long
name and every --format choice is in that command's synopsis lines, and nothing there is an option
the command lacks; SPEC's headings are each numbered once, in order (a "§1.7" names one section)."""
from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = (ROOT / "docs/SPEC.md").read_text()


def synopsis() -> dict[str, str]:
    """command -> its synopsis text (its `preflight CMD` line and the indented lines after it)."""
    block = SPEC.split("## 1. Command line", 1)[1].split("```", 2)[1]
    out: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        m = re.match(r"preflight (\S+)", line)
        if m:
            current = m.group(1)
            out.setdefault(current, "")
        if current:
            out[current] += line + "\n"
    return out


def command(name: str) -> click.Command:
    from preflight.cli import main

    ctx = click.Context(main)
    return main.get_command(ctx, name)


@pytest.mark.parametrize("name", ["run", "gate", "nagios"])
def test_the_synopsis_names_every_option_and_format(name):
    text = synopsis()[name]
    cmd = command(name)
    given = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", text))
    have: set[str] = set()
    for p in cmd.params:
        if not isinstance(p, click.Option):
            continue
        longs = [o for o in p.opts + p.secondary_opts if o.startswith("--")]
        have.update(longs)
        if "--help" in longs:
            continue
        assert any(o in given for o in longs), f"{name}: {longs} missing from SPEC §1's synopsis"
        if p.name == "fmt":
            m = re.search(r"--format ([\w|]+)", text)
            assert m and m.group(1).split("|") == list(p.type.choices), (name, m and m.group(1), p.type.choices)
    assert given <= have | {"--help"}, f"{name}: the synopsis names options it lacks: {sorted(given - have)}"


def test_every_heading_is_numbered_once_and_in_order():
    numbers = re.findall(r"^#{2,3} (\d+(?:\.\d+)?)[. ]", SPEC, re.M)
    assert len(numbers) == len(set(numbers)), sorted(n for n in numbers if numbers.count(n) > 1)
    key = [tuple(int(x) for x in n.split(".")) for n in numbers]
    assert key == sorted(key), numbers
