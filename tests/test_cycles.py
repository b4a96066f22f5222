"""`cycles.left_in_cycles`, the measure behind the tests that a race or a drawing leaves nothing to
the cyclic collector: it counts the garbage of the work it is given, not that of the process's
other threads (a test server's), which once failed a drawing's test in a whole-suite run."""

import threading
import time

import pytest
from cycles import left_in_cycles

pytestmark = pytest.mark.fast


class Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector frees it


class Response(Node):
    def __del__(self):  # as an HTTP response's socket does when it is closed: the GIL let go
        time.sleep(0)


def busy_work() -> int:
    """Pure Python for a few switch intervals (it never lets go of the GIL by itself), no cycles."""
    return sum(i * i for i in range(100_000))


def left_beside_a_thread_that_makes_cycles(measure) -> list:
    stop, started = threading.Event(), threading.Event()

    def churn():
        started.set()
        while not stop.is_set():  # as a server's thread does: some work, then a wait on I/O
            Node()
            time.sleep(0.0002)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    started.wait()
    for _ in range(10):  # garbage an earlier test left, which the measure's first collection finalizes
        Response()
    try:
        return measure()
    finally:
        stop.set()
        thread.join()


def test_the_garbage_of_other_threads_is_not_counted_as_the_works():
    assert left_beside_a_thread_that_makes_cycles(lambda: left_in_cycles(busy_work)) == []


def test_without_holding_the_other_threads_back_their_garbage_would_be_counted():
    # The control: the same measure, the other threads free to run, finds the churn's nodes.
    left = left_beside_a_thread_that_makes_cycles(lambda: left_in_cycles(busy_work, alone=False))
    assert any(type(o) is Node for o in left)


def test_the_works_own_cycles_are_counted():
    kept = []
    assert any(type(o) is Node for o in left_in_cycles(lambda: kept.append(id(Node()))))
