"""HCCL's error texts, classified by a data table (preflight/data/hccl_errors.yaml).

Why a table: HCCL words the same failure differently across CANN releases (EJ0003 "Bind_Failed" in 8.x,
EI0019/EI0020 "Communication_Error_Bind_IP_Port" in 9.0; "is being used" in the guide, "is been using"
in real logs), and the rules need their sources next to them. classify() is pure: text in, rule out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class HcclRule:
    id: str
    codes: tuple[str, ...]
    kind: str
    local: bool
    patterns: tuple[re.Pattern[str], ...]
    remediation: str
    sources: tuple[str, ...]

    def matches(self, text: str) -> bool:
        return any(p.search(text) for p in self.patterns)


def _rule(raw: dict) -> HcclRule:
    return HcclRule(id=str(raw["id"]), codes=tuple(str(c) for c in raw.get("codes") or ()), kind=str(raw["kind"]),
                    local=bool(raw["local"]), patterns=tuple(re.compile(p, re.I) for p in raw["patterns"]),
                    remediation=" ".join(str(raw["remediation"]).split()),
                    sources=tuple(str(s) for s in raw["sources"]))


@lru_cache(maxsize=1)
def rules() -> tuple[HcclRule, ...]:
    """The table, in its order (first match wins)."""
    from importlib import resources  # here: smoke.allreduce imports this module at every discovery

    import yaml

    text = resources.files("preflight").joinpath("data", "hccl_errors.yaml").read_text(encoding="utf-8")
    return tuple(_rule(r) for r in (yaml.safe_load(text) or {}).get("rules") or ())


def classify(text: str) -> HcclRule | None:
    """The first rule whose pattern appears in an error text, or None."""
    return next((r for r in rules() if r.matches(text)), None)
