"""Fewer cyclic-GC passes while a run builds its per-node data (docs/PERFORMANCE.md §3).

Why: a run keeps every node's outputs, facts and results alive until the report is written, so
the live heap only grows (about 330,000 tracked objects at 1,000 nodes). CPython's collector
re-walks the oldest generation each time it has grown by a quarter, and its young generations
every 700 allocations, and none of those passes frees anything here (a run makes almost no
cyclic garbage: 68 objects in a 1,000-node replay). On that replay the passes were about a
fifth of the client CPU after the bytes arrive.

The window spaces the passes out, and settle() (called as each node finishes) freezes what the
process holds then (gc.freeze, O(1)): a finished node's data lives to the report, so the young
passes that would walk it once each (26 of them at 1,000 replayed nodes, 0.10-0.17 s, freeing 20
objects) have nothing of it left to walk. Collection is never turned off: what is frozen is
unfrozen when the outermost window closes and collected by the passes after it; in the console
entry's window, which never closes, the process's exit frees it. The cyclic garbage a run leaves
so is small: after a 32-node run over SSH 3,711 collectable objects, where the same run without
freezing left 3,744 (its passes in the run had collected none); at 128 nodes over SSH the peak
RSS is 85 MB either way. A process that froze objects itself before the window opened keeps its
own frozen set: settle() then freezes nothing and the close unfreezes nothing.
Middle passes are the costliest of those that happen in a run (each walks every object that
outlived a young pass since the last one): at 1,000 replayed nodes 2 of them were about half of
the collector's time, and spacing them ten times wider took a tenth off the run's CPU after the
bytes arrive (docs/PERFORMANCE_HISTORY.md, seventh pass).
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

YOUNG_THRESHOLD = 20_000  # allocations between young passes (CPython's default: 700)
MIDDLE_THRESHOLD = 100  # young passes between middle passes (CPython's default: 10)
OLD_THRESHOLD = 1_000  # middle passes between full passes (default: 10)

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, int, int] | None = None
_freezing = False  # settle() may freeze: the outermost window opened on a process that had frozen nothing


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the collector's thresholds for the block; nested and concurrent windows restore the
    thresholds found before the outermost one opened, when the last one closes."""
    _open()
    try:
        yield
    finally:
        _close()


def for_this_process() -> None:
    """Open a window that never closes: the console entry's, where one command is the whole process
    and its run's data lives until the interpreter exits. Closing the run's window there only
    bought the middle pass it had put off, over all of that data and freeing none of it, just
    before the interpreter's own full pass at exit: 0.19 s at 1,000 replayed nodes, about a tenth
    of the CPU after the bytes arrive (docs/PERFORMANCE.md §3)."""
    _open()


def settle() -> None:
    """Inside a window: what the process holds now is left out of the collector's passes until
    the outermost window closes (the module's docstring says why; the runner calls it as each
    node finishes). Outside one, or in a process that froze objects itself, nothing."""
    with _lock:
        if _depth and _freezing:
            gc.freeze()


def _open() -> None:
    global _depth, _saved, _freezing
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            young, middle, old = _saved
            _freezing = bool(young) and gc.get_freeze_count() == 0
            if young:  # 0: collection disabled by the embedding program; leave it as it is
                gc.set_threshold(max(young, YOUNG_THRESHOLD), max(middle, MIDDLE_THRESHOLD), max(old, OLD_THRESHOLD))
        _depth += 1


def _close() -> None:
    global _depth, _saved, _freezing
    with _lock:
        _depth -= 1
        if _depth == 0 and _saved is not None:
            if _freezing:
                gc.unfreeze()
                _freezing = False
            gc.set_threshold(*_saved)
            _saved = None
