"""What a failed request becomes: one sentence for the person or caller (`message`), the rest for the
log. Messages written for people pass through; running out of memory frees it and says so;
anything else is logged under a reference the sentence gives."""

from __future__ import annotations

import gc
import logging
import traceback
import uuid

from demo.session.validate import InvalidInput

log = logging.getLogger(__name__)


class LoadFailed(RuntimeError):
    """A preset whose files are here but would not load (damaged weights, a bad config...)."""


def first_line(error: BaseException) -> str:
    line = (str(error).strip().splitlines() or [""])[0]
    return line if len(line) <= 160 else line[:159] + "…"


def _out_of_memory(error: BaseException) -> bool:
    import torch

    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(error).lower()  # other backends, and the CPU allocator, raise a RuntimeError
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _release_memory() -> None:
    """Give freed tensors back to the accelerator, so the next request finds the memory free."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def message(error: Exception) -> str:
    """What the person or API caller is told about a failed request; the server log gets the rest."""
    from demo.models import loader  # torch and transformers: imported on first use

    if isinstance(error, (InvalidInput, loader.Unavailable, loader.NotEnoughMemory, LoadFailed)):
        return str(error)  # written for the person
    if _out_of_memory(error):
        log.warning("out of memory during a request: %s", error)
        traceback.clear_frames(error.__traceback__)  # the failed run's frames hold its KV caches
        _release_memory()
        return (
            "The models ran out of memory for this request; it was stopped and its memory freed. "
            "Ask for fewer new tokens, shorten the question, or pick a smaller preset."
        )
    reference = uuid.uuid4().hex[:8]
    log.error("request failed (reference %s)", reference, exc_info=error)
    return f"Something went wrong on the server (reference {reference}; the details are in its log). Try again."


def load_failed(preset: str, error: Exception) -> Exception:
    """The error a failed load becomes: messages written for the person pass through."""
    from demo.models import loader

    if isinstance(error, (loader.Unavailable, loader.NotEnoughMemory)) or _out_of_memory(error):
        return error
    log.error("loading preset %r failed", preset, exc_info=error)
    return LoadFailed(
        f"The models of preset {preset!r} could not be loaded ({type(error).__name__}: {first_line(error)}). "
        "Its files may be missing or damaged; the other presets still work."
    )
