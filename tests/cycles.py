"""What a piece of work leaves in reference cycles, for the tests that a race leaves none holding memory.

CPython frees an object in a reference cycle only in a collection of the generation it has reached,
and a long-lived one only in a full collection, which runs once the objects that survived the
younger collections number a quarter of those already in the oldest generation. A served app holds
over two million objects, so that is rare: a race that left its drafter's KV cache in a cycle kept
about 6 MB alive until then, and the server's memory grew in steps (docs/soak.md).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch


def left_in_cycles(work: Callable[[], object]) -> list:
    """Every object that `work()` leaves only to the cyclic collector (gc.DEBUG_SAVEALL keeps what
    a collection finds, instead of freeing it)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        work()
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def tensors(objects: list) -> list[torch.Tensor]:
    return [o for o in objects if isinstance(o, torch.Tensor)]
