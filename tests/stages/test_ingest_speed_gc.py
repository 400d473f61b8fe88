"""Ingest's read task raises the collector's young threshold while it runs, and always puts it back."""

from __future__ import annotations

import gc
import threading

import pytest

from tokenmill.stages import ingest
from tokenmill.stages.ingest import GC_YOUNG_THRESHOLD, _fewer_collections


@pytest.fixture(autouse=True)
def _thresholds():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_raised_inside_restored_after():
    with _fewer_collections():
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_restored_when_the_task_fails():
    with pytest.raises(RuntimeError), _fewer_collections():
        raise RuntimeError("a reader broke")
    assert gc.get_threshold() == (700, 10, 10) and ingest._gc_users == 0


def test_a_higher_threshold_is_kept_and_restored():
    gc.set_threshold(100_000, 5, 5)
    with _fewer_collections():
        assert gc.get_threshold() == (100_000, 5, 5)
    assert gc.get_threshold() == (100_000, 5, 5)


def test_overlapping_tasks_restore_once_the_last_is_done():
    first_in, second_done, seen = threading.Event(), threading.Event(), []

    def first():
        with _fewer_collections():
            first_in.set()
            second_done.wait(10)
            seen.append(gc.get_threshold())

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with _fewer_collections():
        seen.append(gc.get_threshold())
    second_done.set()
    thread.join(10)
    # The second task ended first: the first still ran with the raised threshold; the original is back after both.
    assert seen == [(GC_YOUNG_THRESHOLD, 10, 10)] * 2
    assert gc.get_threshold() == (700, 10, 10) and ingest._gc_users == 0
