"""Preloading (a Space, or DEMO_PRELOAD): presets loaded at start-up, and then only they are served.

`demo.models.zerogpu` says which presets to preload and why a Space must; loading itself is
`demo.models.loader.load`.
"""

from __future__ import annotations

import logging

from demo.models.devices import NotEnoughMemory
from demo.models.hub import Unavailable
from demo.models.loader import load

log = logging.getLogger(__name__)


_PRELOADED: dict[str, str | None] | None = None  # preload mode: preset -> None (loaded) or why it failed


def preload(names: tuple[str, ...]) -> dict[str, str | None]:
    """Load the named presets and every drafter of each, now, in this process (on ZeroGPU: at
    start-up, in the main process); from then on only those that loaded are served. Returns
    preset -> None (loaded) or why it failed, in order: a failure does not stop the others."""
    global _PRELOADED
    outcome: dict[str, str | None] = {}
    for name in names:
        try:
            loaded = load(name)
            for spec in loaded.preset.drafters:
                loaded.drafter(spec.name)
            outcome[name] = None
            log.info("preloaded preset %r on %s", name, loaded.plan.summary if loaded.plan else loaded.device)
        except Exception as error:  # reported on the page; the other presets still load
            log.error("preloading preset %r failed", name, exc_info=error)
            outcome[name] = _reason(error)
    _PRELOADED = outcome
    return dict(outcome)


def _reason(error: Exception) -> str:
    if isinstance(error, (Unavailable, NotEnoughMemory)):
        return str(error).rstrip(".")
    if isinstance(error, KeyError):  # an unknown name in DEMO_PRELOAD
        return str(error.args[0]) if error.args else "unknown preset"
    line = (str(error).strip().splitlines() or [""])[0][:160]
    return f"{type(error).__name__}: {line}"


def preloaded() -> dict[str, str | None] | None:
    """What `preload` did (preset -> None or why it failed), or None in lazy mode."""
    return None if _PRELOADED is None else dict(_PRELOADED)


def served() -> tuple[str, ...] | None:
    """The presets this deployment serves in preload mode, or None (lazy: any that can load)."""
    if _PRELOADED is None:
        return None
    return tuple(name for name, why in _PRELOADED.items() if why is None)


def check_served(name: str) -> None:
    """In preload mode, refuse (Unavailable) a preset that did not load at start-up; never loads."""
    if _PRELOADED is None or (name in _PRELOADED and _PRELOADED[name] is None):
        return
    serving = ", ".join(served() or ()) or "none"
    why = _PRELOADED.get(name)
    reason = f"it failed to load at start-up ({why})" if why else "it was not loaded at start-up"
    raise Unavailable(f"This deployment does not serve preset {name!r}: {reason}. It serves: {serving}.")
