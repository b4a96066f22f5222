"""Serving from a Hugging Face Space with ZeroGPU: what to preload, and the `@spaces.GPU` decoration.

On ZeroGPU (hub docs, `docs/hub/spaces-zerogpu.md`) a real GPU exists only inside a function
decorated with `@spaces.GPU`, which runs in a separate process with pickled arguments and
returns. Models must therefore be loaded, and placed on `cuda`, in the main process at start-up
(outside the decorated functions PyTorch runs in a CUDA emulation mode); a model loaded inside a
decorated call is gone when it returns. So the app has two ways of loading.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable

PRELOAD_ENV = "DEMO_PRELOAD"
MAX_DURATION = 120  # seconds: the longest a decorated call asks ZeroGPU for
MIN_DURATION = 10


def on_space() -> bool:
    """Running on a Hugging Face Space (the hub sets SPACE_ID there)."""
    return bool(os.environ.get("SPACE_ID"))


def zero_gpu() -> bool:
    """Running on ZeroGPU hardware (the hub sets SPACES_ZERO_GPU=true there)."""
    return os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in {"1", "t", "true"}


def preload_names(default: str) -> tuple[str, ...] | None:
    """The presets to load at start-up, in order, or None for lazy loading: DEMO_PRELOAD=name,name
    (empty: lazy, even on a Space); on a Space without it, the default preset."""
    value = os.environ.get(PRELOAD_ENV)
    if value is None:
        return (default,) if on_space() else None
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    return names or None


def clamp(seconds: float) -> int:
    """Seconds a decorated call asks for, from an estimate of its work (`demo.session.budget`), capped to
    [MIN_DURATION, MAX_DURATION]."""
    return int(min(MAX_DURATION, max(MIN_DURATION, seconds)))


try:
    import spaces  # preinstalled on Spaces; not a requirement anywhere

    def GPU(duration: Callable[..., int]) -> Callable:
        return spaces.GPU(duration=duration)

except ImportError:

    def GPU(duration: Callable[..., int]) -> Callable:
        """No GPU to ask for: the function runs as it is."""

        def decorate(fn: Callable) -> Callable:
            return fn

        return decorate
