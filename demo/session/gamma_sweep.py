"""The gamma sweep of a finished greedy race, for the page and /trace (session layer, no Gradio).

    rows(request, loaded, image, spd, ar) -> list[dict]

is called by `demo.session.gpu_race` right after the race, in the same accelerator call, with
the models and image the race used; it replays the race's own greedy answer with the drafter at
gamma = 1..10 (`demo.engine.sweep`: drafter forwards only, no target forward) and returns one record per gamma: tau, alpha, MBSU
from the drafts made, and the cost model's predicted speedup from this race's measured step
costs (`demo.engine.metrics.costs`). Sampling races have no sweep (an empty list): their
verdicts are random draws, not read off one answer (`unsweepable(request)` says so). Every
drafter replays, trees, prompt lookup and layer-skip included; a race with two speculative lanes
sweeps its first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo.engine import metrics

if TYPE_CHECKING:
    from PIL import Image

    from demo.engine.events import Trace


def unsweepable(request) -> str | None:
    """Why the race of `request` (a `demo.session.Request`) has no γ sweep (None: it has one)."""
    if not request.sampling.greedy:
        return "The γ sweep is computed after greedy races only (a sampling race's verdicts are random draws)."
    return None


def rows(request, loaded, image: Image.Image, spd: Trace, ar: Trace) -> list[dict]:
    """The sweep of the finished greedy race (spd, ar) of `request`, as records by gamma, from the
    models (`loaded`) and the image the race used (`demo.session.gpu_race` calls it in the race's
    own accelerator call)."""
    from demo.engine import sweep  # torch: imported on first use

    if unsweepable(request) or not (spd.done and ar.done):
        return []
    prompt = loaded.prompt(image, request.question, request.drafter)
    points = sweep.sweep(
        loaded.drafter(request.drafter),
        prompt.drafter_inputs,
        list(spd.summary.token_ids),
        max_new_tokens=request.max_new_tokens,
        min_confidence=request.min_confidence,
    )
    return metrics.sweep_rows(points, metrics.param_ratio(spd), metrics.costs(spd, ar))
