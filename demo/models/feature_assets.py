"""Where the hidden-state drafters' checkpoints are, and why a preset cannot offer them: plain
paths, no torch (`demo.models.drafter_kinds` reads them before any model is loaded).

A hidden-state drafter is trained for one target (`python -m demo.lab.training.train_heads`): its
checkpoint sits beside the target's directory. Hub presets have none.
"""

from __future__ import annotations

from pathlib import Path

FILES = {"feature": "drafter-feature.safetensors", "medusa": "drafter-medusa.safetensors"}


def checkpoint(preset, which: str) -> Path | None:
    """The preset target's trained `which` ("feature" or "medusa"), or None."""
    target = Path(preset.target)
    path = target.parent / FILES[which]
    return path if target.is_dir() and path.is_file() else None


def no_checkpoint(which: str):
    """unusable(preset) for the kind `which`: why a preset cannot offer it, or None."""

    def why(preset) -> str | None:
        if checkpoint(preset, which) is None:
            return f"no {which} drafter has been trained on this preset's target's hidden states"
        return None

    return why


def no_text_drafter(preset) -> str | None:
    if not any(spec.kind == "text-only" for spec in preset.drafters):
        return "this preset has no text-only drafter to stage"
    return None
