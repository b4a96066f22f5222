"""The gamma sweep of a finished greedy race, for the page and /trace (session layer, no Gradio).

    replays(request, prompts, spd, ar) -> Iterator[SweepPoint]   one per gamma
    rows(points, spd, ar) -> list[dict]

are called by `demo.session.race.gpu_race` right after the race, in the same accelerator call, with
the race's own prompts (`lane_runs.Prompts`: its models, and its image processed once); it replays the race's own greedy answer with the drafter at
gamma = 1..10 (`demo.engine.sweep`: drafter forwards only, no target forward) and returns one record per gamma: tau, alpha, MBSU
from the drafts made, and the cost model's predicted speedup from this race's measured step
costs (`demo.engine.metrics.costs`). Sampling races have no sweep (an empty list): their
verdicts are random draws, not read off one answer (`unsweepable(request)` says so). Every
drafter replays, trees, prompt lookup and layer-skip included; a race with two speculative lanes
sweeps its first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from demo.engine import metrics

if TYPE_CHECKING:
    from demo.engine.events import Trace
    from demo.engine.metrics import SweepPoint


def unsweepable(request) -> str | None:
    """Why the race of `request` (a `demo.session.Request`) has no γ sweep (None: it has one)."""
    if not request.sampling.greedy:
        return "The γ sweep is computed after greedy races only (a sampling race's verdicts are random draws)."
    return None


def replays(request, prompts, spd: Trace, ar: Trace, tokens: int | None = None) -> Iterator[SweepPoint]:
    """The sweep of the finished greedy race (spd, ar) of `request`, one point per gamma as each
    replay ends (so that a caller can stop between them), from the race's own prompts
    (`lane_runs.Prompts`: `gpu_race` calls it in the race's own accelerator call), over the
    answer's first `tokens` (None: all; `budget.fit_race`: what fits beside a shortened race)."""
    from demo.engine import sweep  # torch: imported on first use

    if unsweepable(request) or not (spd.done and ar.done) or tokens == 0:
        return
    prompt = prompts(request.drafter)
    answer = list(spd.summary.token_ids)[:tokens]
    for gamma in sweep.GAMMAS:
        yield sweep.replay(
            prompts.loaded.drafter(request.drafter),
            prompt.drafter_inputs,
            answer,
            gamma=gamma,
            max_new_tokens=min(request.max_new_tokens, tokens or request.max_new_tokens),
            min_confidence=request.min_confidence,
            features=prompts.features(request.drafter, answer),
        )


def rows(points: list[SweepPoint], spd: Trace, ar: Trace) -> list[dict]:
    """The sweep's records by gamma: tau, alpha, MBSU, the speedup at the paper's fixed ratios and
    the predicted speedup from this race's measured step costs."""
    if not points:
        return []
    kind = spd.start.drafter.kind if spd.start and spd.start.drafter else None
    return metrics.sweep_rows(points, metrics.param_ratio(spd), metrics.costs(spd, ar), kind=kind)
