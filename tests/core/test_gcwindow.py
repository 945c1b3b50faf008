"""The GC window of a run: thresholds raised inside, restored after (also when nested or raising)."""
import gc
import subprocess
import sys

import pytest

from preflight import gcwindow
from preflight.gcwindow import MIDDLE_THRESHOLD, OLD_THRESHOLD, YOUNG_THRESHOLD, fewer_collections


def test_raised_inside_and_restored_after():
    before = gc.get_threshold()
    with fewer_collections():
        young, middle, old = gc.get_threshold()
        assert young >= YOUNG_THRESHOLD and middle >= MIDDLE_THRESHOLD and old >= OLD_THRESHOLD
        with fewer_collections():  # a render inside a run: still raised, restored only by the outer one
            pass
        assert gc.get_threshold()[0] >= YOUNG_THRESHOLD
    assert gc.get_threshold() == before


def test_restored_when_the_block_raises():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError):
        with fewer_collections():
            raise RuntimeError("boom")
    assert gc.get_threshold() == before


def test_disabled_collection_left_alone():
    before = gc.get_threshold()
    gc.set_threshold(0)
    try:
        with fewer_collections():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)


def test_the_process_window_outlasts_a_run_s_window():
    """The console entry's window (for_this_process) is open when the run's closes: that close
    must not bring back the default thresholds, whose next young pass would walk the whole run."""
    before = gc.get_threshold()
    try:
        gcwindow.for_this_process()
        with fewer_collections():  # the runner's window inside it
            pass
        assert gc.get_threshold()[0] >= YOUNG_THRESHOLD
    finally:
        gcwindow._close()
    assert gc.get_threshold() == before


def test_the_console_entry_keeps_the_window_to_the_end():
    script = ("import atexit, gc, sys; atexit.register(lambda: print('thresholds', gc.get_threshold()[0])); "
              "sys.argv = ['preflight', '--version']; from preflight.cli import entry; entry()")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"thresholds {YOUNG_THRESHOLD}" in out.stdout


# settle(): the runner calls it as each node finishes (engine/node_phase.py).

class _Cycle:
    pass


def test_a_cycle_dropped_inside_the_window_is_collected_after_it():
    """What settle() froze is out of the collector's reach only while the window is open."""
    import weakref
    assert gc.get_freeze_count() == 0
    with fewer_collections():
        a = _Cycle()
        a.me = a
        ref = weakref.ref(a)
        gcwindow.settle()
        del a
        gc.collect()
        assert ref() is not None  # frozen: no pass walks it
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None


def test_settle_outside_a_window_freezes_nothing():
    gcwindow.settle()
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_keeps_its_own_frozen_set():
    """A pre-fork server freezes its heap itself: the window neither adds to it nor thaws it."""
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with fewer_collections():
            kept = [[]]
            gcwindow.settle()
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen and kept
    finally:
        gc.unfreeze()


def test_a_run_freezes_each_finished_node_and_leaves_nothing_frozen(ascend128_recording):
    from pathlib import Path

    from preflight import inventory, runner
    from preflight.transport.replay import ReplayTransport
    fix = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "ascend128"
    inv = inventory.load(str(fix / "inventory.yaml"), limit="node[001-003]")
    assert gc.get_freeze_count() == 0
    seen: list[int] = []  # the frozen count as each node is counted finished
    report = runner.Runner(inv, ReplayTransport(str(ascend128_recording)), runner.Options(checks=["npu.health"]),
                           progress=lambda done, total, failed: seen.append(gc.get_freeze_count())).run()
    assert len(seen) == 3 and min(seen) > 0
    assert gc.get_freeze_count() == 0
    assert {r.node for r in report.results if r.check == "npu.health"} == {"node001", "node002", "node003"}
