#!/usr/bin/env python3
"""One replay in process, twice, the second with some steps' answers served from the first
(`replay_cpu.py --breakdown` counts its instructions; see there).

Why: what parsing and evaluation cost inside a whole run is the run's cost less the cost of the
same run where they cost nothing. The first run records every check's facts (its `parse`) and
every node check's findings (its `evaluate`) per node; the second, on fresh outputs read again
from the recording and with every cache of preflight emptied (as in a new process), gets them
back from that record instead of calling the check:

    replay_served.py MODE INVENTORY RECORDING LIMIT SKIP [--check] [--first-only]

MODE `none` runs only the first run; `again` runs the second with nothing served (the run itself,
measured as the others are); `parse` serves the facts in the second; `evaluate` serves the facts
and the findings; `bytes` serves everything before a node's bytes arrive: the inventory as
loaded, each node's connection (the recording's file), its probes and follow-ups as the checks
build them, and each batch's outputs (the specs, the transport's reading and decoding), so that
the second run is exactly what issue 18's third target counts: parse, evaluate, cluster checks,
report. Its outputs are fresh copies of the recorded texts, never hashed before, as a network's
would be. Both runs render the JSON report (not written).

`--check` compares the two runs' results and exits 1 when they differ. `--times=json,html,...`
prints the second run's CPU seconds and each format's rendering's, as JSON, instead. `--first-only` stops after
the first run, recording as the mode does: a mode's count less its first-only count is its second
run alone (the recording costs the first run about 1 M instructions a node in `bytes` mode, which
a baseline without it would have charged to the second).
"""
from __future__ import annotations

import functools
import gc
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from preflight import runner as runner_module  # noqa: E402
from preflight.engine import batches  # noqa: E402
from preflight.gcwindow import for_this_process  # noqa: E402
from preflight.engine.node_phase import NodePhase  # noqa: E402
from preflight.inventory import Inventory, load  # noqa: E402
from preflight.registry import discover  # noqa: E402
from preflight.report import render  # noqa: E402
from preflight.transport.replay import ReplayTransport  # noqa: E402

MODES = ("none", "again", "parse", "evaluate", "bytes")


def serve(mode: str, record: dict, serving: threading.Event) -> None:
    """Wrap each check's parse (and each node check's evaluate): record while `serving` is clear,
    answer from the record once it is set."""
    here = threading.local()
    gather = NodePhase.gather

    def named_gather(self, run, checks):  # parse() is not told its node: the runner is
        here.node = run.node.name
        return gather(self, run, checks)

    NodePhase.gather = named_gather
    for cid, info in discover().items():
        module = info.module
        if hasattr(module, "parse"):
            module.parse = _served(module.parse, lambda *a, _c=cid: ("parse", _c, here.node),
                                   record, serving, mode in ("parse", "evaluate"))
        if info.scope == "node" and hasattr(module, "evaluate"):
            module.evaluate = _served(module.evaluate, lambda f, p, node, _c=cid: ("evaluate", _c, node.name),
                                      record, serving, mode == "evaluate", listed=True)


def serve_bytes(record: dict, serving: threading.Event) -> None:
    """Wrap what comes before the bytes: record each node's probes (both rounds) and batch
    outputs while `serving` is clear; once it is set, hand them back and open no recording."""
    from dataclasses import replace

    # A node's batches are counted in order, per run (their check ids do not name them: a check
    # with several plan rounds sends the same ids each round). Not per connection: a cluster
    # check's plan round reconnects to the nodes it asks once their node phase has closed them,
    # and a count restarted there overwrote the node's first batch with the plan's (the served run
    # then failed those nodes: the first 32 of a 100-node replay).
    calls: dict[bool, dict[str, int]] = {False: {}, True: {}}  # serving? -> node -> batches so far
    ask, batch, connect = NodePhase.ask, batches.run_batch, ReplayTransport.connect

    def served_connect(self, node, cancel):
        return _NoSession() if serving.is_set() else connect(self, node, cancel)

    def served_ask(run, checks, call):
        key = ("ask", run.node.name, tuple(c.id for c in checks))
        if serving.is_set():
            wanted, facts = record[key]
            run.facts.update(facts)
            return wanted
        before = dict(run.facts)
        wanted = ask(run, checks, call)
        record[key] = (wanted, {k: v for k, v in run.facts.items() if k not in before})
        return wanted

    def served_batch(session, node, wanted, cancel, recorder=None, checks=None):
        counts = calls[serving.is_set()]  # one thread works on a node at a time
        counts[node.name] = n = counts.get(node.name, 0) + 1
        key = ("batch", node.name, n)
        if serving.is_set():
            return {cid: dict(outs) for cid, outs in record.pop(key).items()}
        got = batch(session, node, wanted, cancel, recorder, checks)
        # fresh texts for the second run: a str keeps its hash once taken, a network's never has one
        record[key] = {cid: {name: replace(o, stdout=_fresh(o.stdout), stderr=_fresh(o.stderr))
                             for name, o in outs.items()} for cid, outs in got.items()}
        return got

    ReplayTransport.connect = served_connect
    NodePhase.ask = staticmethod(served_ask)
    batches.run_batch = served_batch


class _NoSession:
    def close(self) -> None:
        pass


def _fresh(text: str) -> str:
    return text[:1] + text[1:] if len(text) > 1 else text


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


def replay(inv: Inventory, recording: str, skip: list[str]):
    return runner_module.Runner(inv, ReplayTransport(recording), runner_module.Options(skip=skip)).run()


def once(inv: Inventory, recording: str, skip: list[str]) -> str:
    return render(replay(inv, recording, skip), "json")


def timed(inv: Inventory, recording: str, skip: list[str], formats: list[str]) -> dict[str, float]:
    """CPU seconds of the run and of each format's rendering of its report, each alone."""
    t0 = time.process_time()
    report = replay(inv, recording, skip)
    seconds = {"run": time.process_time() - t0}
    for fmt in formats:
        t0 = time.process_time()
        render(report, fmt)
        seconds[fmt] = time.process_time() - t0
    return seconds


def main() -> None:
    mode, inventory, recording, limit, skip = sys.argv[1:6]
    flags = sys.argv[6:]
    check = "--check" in flags  # say whether the served run's results are the first run's
    first_only = "--first-only" in flags  # the mode's first run alone: what its count is read against
    times = [f.split("=", 1)[1].split(",") for f in flags if f.startswith("--times=")]
    if mode not in MODES:
        sys.exit(f"replay_served.py: MODE is one of {', '.join(MODES)}, not {mode!r}")
    if not all(f in ("--check", "--first-only") or f.startswith("--times=") for f in flags):
        sys.exit(f"replay_served.py: the flags are --check, --first-only and --times=FMT,..., not {' '.join(flags)}")
    record: dict = {}
    serving = threading.Event()
    if mode == "bytes":
        serve_bytes(record, serving)
    elif mode != "again":
        serve(mode, record, serving)
    inv = load(inventory, limit=limit)
    first = once(inv, recording, skip.split(","))
    if mode != "none" and not first_only:
        serving.set()
        for_this_process()  # the collector as the console entry leaves it for the whole process
        empty_caches()
        gc.collect()
        gc.freeze()  # the first run's objects (and the record) are not the second run's garbage to scan
        if mode != "bytes":  # reading the inventory comes before the bytes too
            inv = load(inventory, limit=limit)
        if times:  # the second run's CPU and each format's, as JSON (replay_cpu.py --served-times)
            print(json.dumps(timed(inv, recording, skip.split(","), times[0])))
            return
        second = once(inv, recording, skip.split(","))
        if check:
            a, b = _results(first), _results(second)
            print(f"{mode}: {len(a)} results, {'identical' if a == b else 'DIFFERENT'}")
            sys.exit(0 if a == b else 1)


def _results(report: str) -> list:
    """The report's results without what differs between two runs of the same cluster (times)."""
    return [{k: v for k, v in r.items() if k != "duration_s"} for r in json.loads(report)["results"]]


if __name__ == "__main__":
    main()
