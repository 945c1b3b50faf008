"""The GC window of a run: thresholds raised inside, restored after (also when nested or raising)."""
import gc

import pytest

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
