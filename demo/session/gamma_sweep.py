"""The γ sweep of a finished greedy race: its answer replayed with the drafter at gamma = 1..10
(drafter forwards only, `demo.engine.sweep`), one record per gamma: tau, alpha, MBSU and the
predicted speedup at this race's measured step costs. Sampling races have none (`unsweepable`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
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
    replay ends (so that a caller can stop between them), over the answer's first `tokens` (None:
    all; `budget.fit_race`: what fits beside a shortened race)."""
    from demo.engine import sweep  # torch: imported on first use

    if unsweepable(request) or not (spd.done and ar.done) or tokens == 0:
        return
    answer = list(spd.summary.token_ids)[:tokens]
    request = replace(request, max_new_tokens=min(request.max_new_tokens, tokens or request.max_new_tokens))
    for gamma in sweep.GAMMAS:
        yield replay(request, prompts, request.drafter, answer, gamma)


def replay(request, prompts, drafter: str, answer: list[int], gamma: int) -> SweepPoint:
    """The race's `answer` replayed with `drafter` at `gamma`, from the race's own `prompts`
    (`lane_runs.Prompts`): drafter forwards only, the target's verdicts read off the answer."""
    from demo.engine import sweep  # torch: imported on first use

    return sweep.replay(
        prompts.loaded.drafter(drafter),
        prompts(drafter).drafter_inputs,
        answer,
        gamma=gamma,
        max_new_tokens=request.max_new_tokens,
        min_confidence=request.min_confidence,
        features=prompts.features(drafter, answer),
    )


def rows(points: list[SweepPoint], spd: Trace, ar: Trace) -> list[dict]:
    """The sweep's records by gamma: tau, alpha, MBSU, the speedup at the paper's fixed ratios and
    the predicted speedup from this race's measured step costs."""
    if not points:
        return []
    kind = spd.start.drafter.kind if spd.start and spd.start.drafter else None
    return metrics.sweep_rows(points, metrics.param_ratio(spd), metrics.costs(spd, ar), kind=kind)
