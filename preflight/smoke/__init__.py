"""Scripts preflight ships to nodes inline in a probe (the runner has no file-copy step).

`allreduce_worker.py` is one rank of the smoke.allreduce check; `worker_source()` returns its text
so the check can embed it, base64-encoded, in the probe's shell command.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

WORKER = Path(__file__).with_name("allreduce_worker.py")


@lru_cache(maxsize=1)
def worker_source() -> str:
    return WORKER.read_text(encoding="utf-8")
