#!/usr/bin/env python3
"""One replay in process, twice, the second with some steps' answers served from the first
(`replay_cpu.py --breakdown` counts its instructions; see there).

Why: what parsing and evaluation cost inside a whole run is the run's cost less the cost of the
same run where they cost nothing. The first run records every check's facts (its `parse`) and
every node check's findings (its `evaluate`) per node; the second, on fresh outputs read again
from the recording and with every cache of preflight emptied (as in a new process), gets them
back from that record instead of calling the check:

    replay_served.py MODE INVENTORY RECORDING LIMIT SKIP

MODE `none` runs only the first run; `parse` serves the facts in the second; `evaluate` serves the
facts and the findings. Both runs render the JSON report (not written).
"""
from __future__ import annotations

import functools
import gc
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from preflight import runner as runner_module  # noqa: E402
from preflight.inventory import load  # noqa: E402
from preflight.registry import discover  # noqa: E402
from preflight.report import render  # noqa: E402
from preflight.transport.replay import ReplayTransport  # noqa: E402

MODES = ("none", "parse", "evaluate")


def serve(mode: str, record: dict, serving: threading.Event) -> None:
    """Wrap each check's parse (and each node check's evaluate): record while `serving` is clear,
    answer from the record once it is set."""
    here = threading.local()
    gather = runner_module.Runner._gather

    def named_gather(self, run, checks):  # parse() is not told its node: the runner is
        here.node = run.node.name
        return gather(self, run, checks)

    runner_module.Runner._gather = named_gather
    for cid, info in discover().items():
        module = info.module
        if hasattr(module, "parse"):
            module.parse = _served(module.parse, lambda *a, _c=cid: ("parse", _c, here.node),
                                   record, serving, mode in ("parse", "evaluate"))
        if info.scope == "node" and hasattr(module, "evaluate"):
            module.evaluate = _served(module.evaluate, lambda f, p, node, _c=cid: ("evaluate", _c, node.name),
                                      record, serving, mode == "evaluate", listed=True)


def _served(call, key, record: dict, serving: threading.Event, serves: bool, listed: bool = False):
    @functools.wraps(call)
    def wrapper(*args):
        k = key(*args)
        if serves and serving.is_set() and k in record:
            return record[k]
        answer = call(*args)
        answer = list(answer) if listed else answer
        if not serving.is_set():
            record[k] = answer
        return answer
    return wrapper


def empty_caches() -> None:
    """Every functools cache of preflight emptied (but the check registry's, which holds the
    wrapped modules): the second run starts as cold as the first, as in a new process."""
    for obj in gc.get_objects():
        module = getattr(obj, "__module__", "") or "" if isinstance(obj, functools._lru_cache_wrapper) else ""
        if module.startswith("preflight.") and module != "preflight.registry":
            obj.cache_clear()


def once(inventory: str, recording: str, limit: str, skip: list[str]) -> None:
    inv = load(inventory, limit=limit)
    report = runner_module.Runner(inv, ReplayTransport(recording), runner_module.Options(skip=skip)).run()
    render(report, "json")


def main() -> None:
    mode, inventory, recording, limit, skip = sys.argv[1:6]
    if mode not in MODES:
        sys.exit(f"replay_served.py: MODE is one of {', '.join(MODES)}, not {mode!r}")
    record: dict = {}
    serving = threading.Event()
    serve(mode, record, serving)
    once(inventory, recording, limit, skip.split(","))
    if mode != "none":
        serving.set()
        empty_caches()
        once(inventory, recording, limit, skip.split(","))


if __name__ == "__main__":
    main()
