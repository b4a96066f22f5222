"""Loaders of the drafters that read the target's hidden state, and of the staged drafter
(`demo.models.drafter_kinds` registers them as "feature", "medusa" and "staged").

A hidden-state drafter is trained for one target (`python -m demo.lab.training.train_heads`): its
checkpoint sits beside the target's directory, `drafter-feature.safetensors` or
`drafter-medusa.safetensors`. A preset whose target has none (every hub preset) does not offer
it, and says why in one line (`unusable`). A checkpoint made for a target of another hidden size
is refused at load with a sentence (`demo.engine.heads.load`).
"""

from __future__ import annotations

from demo.engine.feature import FeatureDrafter
from demo.engine.staged import StagedDrafter
from demo.models.feature_assets import checkpoint, no_checkpoint


def _heads(loaded, name: str, which: str, progress):
    progress(0.2, f"loading the {which} drafter on the target's hidden states")
    path = checkpoint(loaded.preset, which)
    if path is None:
        raise ValueError(no_checkpoint(which)(loaded.preset))
    return FeatureDrafter.load(path, loaded.target, name=name, blocked_ids=loaded.placeholder_ids())


def feature(loaded, name: str, spec, progress):
    return _heads(loaded, name, "feature", progress)


def medusa(loaded, name: str, spec, progress):
    return _heads(loaded, name, "medusa", progress)


def staged(loaded, name: str, spec, progress):
    """The preset's first text-only drafter, drafting through the lookup stage."""
    base = next(s.name for s in loaded.preset.drafters if s.kind == "text-only")
    # `Loaded.drafter` holds its lock while it calls this loader: its lock-free inner call, as the
    # loader's own "+tree" does (the public one would wait on itself).
    return StagedDrafter(loaded._drafter(base, progress), name=name)
