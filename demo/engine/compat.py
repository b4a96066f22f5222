"""The differences between transformers 5.x releases that the engine has to bridge.

The engine is developed on transformers 5.24; GPU machines have been seen with 5.17. Between the
two, the forward keyword that takes the KV cache was renamed from `past_key_values` to `cache`.
Older releases accept an unknown `cache=` silently into `**kwargs` and then decode without any
cache at all, so the keyword is looked up on each model's own signature rather than guessed.
"""

from __future__ import annotations

import inspect


def cache_keyword(model) -> str:
    """The keyword `model.forward` takes its KV cache by: "cache" (5.2x) or "past_key_values" (older)."""
    parameters = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"
