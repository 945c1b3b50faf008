"""npu-smi fault codes -> actions, read from preflight/data/npu_fault_codes.yaml (the vendor's own
grading of each code; the file cites it). Used by npu.health's ACTIONS: one problem `code:<CODE>`
a code, graded by this table, never by the wording around it."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

TABLE_PATH = Path(__file__).resolve().parent.parent / "data" / "npu_fault_codes.yaml"
CODE = re.compile(r"[0-9A-F]{8}")


@lru_cache(maxsize=1)
def table() -> dict[str, str]:
    """code -> action; a code listed under two levels keeps the worse action."""
    import yaml

    from ..actions import RANK

    # libyaml's parser when PyYAML has it (as inventory.py's loader): npu.health builds its ACTIONS
    # from this table when it is imported, so every discovery of the checks reads it (~0.015 s in
    # pure Python, ~0.002 s in C; the same safe constructor either way)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(TABLE_PATH.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 - a safe loader
    out: dict[str, str] = {}
    for level, row in data["levels"].items():
        for code in row["codes"]:
            code = str(code).upper()
            if not CODE.fullmatch(code):
                raise ValueError(f"{TABLE_PATH}: {level}: {code!r} is not an 8-digit hex fault code")
            if code not in out or RANK[row["action"]] > RANK[out[code]]:
                out[code] = row["action"]
    return out


SOURCE = "preflight/data/npu_fault_codes.yaml (MindCluster faultCode.json)"
_WORD = re.compile(r"\b[0-9A-Fa-f]{8}\b")


def problems(source: str = SOURCE) -> dict[str, tuple[str, str]]:
    """ACTIONS rows {"code:<CODE>": (action, source)}, one a code of the table."""
    return {f"code:{code}": (action, source) for code, action in sorted(table().items())}


def codes_in(text: str) -> list[str]:
    """The `code:<CODE>` problems of the graded codes in a text npu-smi printed (an 8-digit hex word;
    one inside a longer hex word is not that code)."""
    graded = table()
    return [f"code:{w.upper()}" for w in _WORD.findall(text) if w.upper() in graded]
