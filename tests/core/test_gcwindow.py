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
