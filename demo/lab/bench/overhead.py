"""Where the time goes outside the models: the host time a run spends inside model forwards.

`ForwardTime` counts, while it is active, the host seconds spent inside the engine's forward
calls: the target's decode forwards (`Target.forward`, `Target.forward_tree`, and the overrides of
any subclass) and every drafting state's step (`DraftState._forward` and its subclasses': the
transformers, lean and layer-skip paths). Prefills are not counted (the engine's prefill calls
neither). A run's decode wall time minus that, per round, is its overhead: the loop around the
models (drafting bookkeeping, the acceptance rule, the transfer, detokenising, events).

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from demo.engine.decoding import Target
from demo.engine.drafters import DraftState


def _classes(base: type) -> list[type]:
    """base and every subclass of it, recursively."""
    out = [base]
    for sub in base.__subclasses__():
        out += _classes(sub)
    return out


class ForwardTime:
    """Seconds spent inside forward calls while `active()` (nested calls counted once)."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0
        self._depth = 0

    def _wrap(self, method):
        def timed(*args, **kwargs):
            if self._depth:
                return method(*args, **kwargs)
            self._depth += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
                self._depth -= 1

        return timed

    @contextmanager
    def active(self):
        """Count forwards inside this block (the class methods are wrapped, then restored)."""
        patched = [
            (cls, name, cls.__dict__[name])
            for base, names in ((Target, ("forward", "forward_tree")), (DraftState, ("_forward",)))
            for cls in _classes(base)
            for name in names
            if name in cls.__dict__
        ]
        for cls, name, method in patched:
            setattr(cls, name, self._wrap(method))
        try:
            yield self
        finally:
            for cls, name, method in patched:
                setattr(cls, name, method)
