"""The gamma sweep of a finished greedy race, for the page and /trace (session layer, no Gradio).

    gamma_sweep(request, image_payload, uploads, spd, ar) -> list[dict]

replays the race's own greedy answer with the drafter at gamma = 1..10 (`demo.engine.sweep`:
drafter forwards only, no target forward) and returns one record per gamma: tau, alpha, MBSU
from the drafts made, and the cost model's predicted speedup from this race's measured step
costs (`demo.engine.metrics.costs`). Sampling races have no sweep (an empty list): their
verdicts are random draws, not read off one answer (`unsweepable(request)` says so). Every
drafter replays, trees, prompt lookup and layer-skip included; a race with two speculative lanes
sweeps its first.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from demo import session
from demo.engine import metrics
from demo.models import presets, zerogpu
from demo.session import validate

if TYPE_CHECKING:
    from demo.engine.events import Trace


def _duration(request, image_payload, uploads, spd, ar) -> int:
    """Seconds a sweep asks ZeroGPU for: drafter steps only, about a race's worth."""
    return zerogpu.duration(request.max_new_tokens, 2, presets.seconds_per_token(request.preset))


def unsweepable(request: session.Request) -> str | None:
    """Why the race of `request` has no γ sweep (None: it has one)."""
    if not request.sampling.greedy:
        return "The γ sweep is computed after greedy races only (a sampling race's verdicts are random draws)."
    return None


@zerogpu.GPU(duration=_duration)
def gamma_sweep(request: session.Request, image_payload, uploads: str | Path, spd: Trace, ar: Trace) -> list[dict]:
    """The sweep of the finished greedy race (spd, ar) of `request`, as records by gamma."""
    from demo.engine import sweep  # torch: imported on first use

    if unsweepable(request) or not (spd.done and ar.done):
        return []
    image, _ = validate.open_image(validate.image_path(image_payload, uploads))
    loaded = session.load(request)  # loaded by the race already: returns at once
    prompt = loaded.prompt(image, request.question, request.drafter)
    points = sweep.sweep(
        loaded.drafter(request.drafter),
        prompt.drafter_inputs,
        list(spd.summary.token_ids),
        max_new_tokens=request.max_new_tokens,
        min_confidence=request.min_confidence,
    )
    return metrics.sweep_rows(points, metrics.param_ratio(spd), metrics.costs(spd, ar))
