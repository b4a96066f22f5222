"""What a piece of work leaves in reference cycles, for the tests that a race leaves none holding memory.

CPython frees an object in a reference cycle only in a collection of the generation it has reached,
and a long-lived one only in a full collection, which runs once the objects that survived the
younger collections number a quarter of those already in the oldest generation. A served app holds
over two million objects, so that is rare: a race that left its drafter's KV cache in a cycle kept
about 6 MB alive until then, and the server's memory grew in steps (docs/soak.md).
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable

import torch

HOLD_S = 30.0  # the switch interval while `work` runs: how long another thread waits for the GIL


def left_in_cycles(work: Callable[[], object], *, alone: bool = True) -> list:
    """Every object that `work()` leaves only to the cyclic collector (gc.DEBUG_SAVEALL keeps what
    a collection finds, instead of freeing it).

    The process's other threads (a test server's, a client's left by an earlier test) make garbage of
    their own, which a collection finds too: 49 HTTP responses failed a drawing's test in a
    whole-suite run. So, `alone`, they wait meanwhile: each takes the turn it is owed (a short
    sleep), then none gets the GIL back before `work` lets go of it (I/O, a sleep, a native call that
    releases it) or HOLD_S pass; the collections before `work` go on until one finds nothing. Those
    threads wait on sockets; a thread that computes without pause would hold this one up to HOLD_S."""
    interval = sys.getswitchinterval()
    try:
        if alone:
            sys.setswitchinterval(HOLD_S)
            time.sleep(0.01)
        for _ in range(10 if alone else 1):  # a collection's finalizers (a socket's close) let others in
            if not gc.collect():  # nothing found, no finalizer run: nobody else had a turn
                break
        gc.set_debug(gc.DEBUG_SAVEALL)
        work()
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        sys.setswitchinterval(interval)


def tensors(objects: list) -> list[torch.Tensor]:
    return [o for o in objects if isinstance(o, torch.Tensor)]
