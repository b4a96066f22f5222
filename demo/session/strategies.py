"""Every drafting strategy the preset offers, on this prompt: after a greedy race, in its accelerator
call, the race's answer replayed at its gamma with each drafter (`compare`), one record per
strategy (its columns: docs/modules.md)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from demo.engine import metrics
from demo.models import presets
from demo.session import failures, gamma_sweep

if TYPE_CHECKING:
    from demo.engine.events import Trace
    from demo.engine.metrics import SweepPoint
    from demo.session.lane_runs import Prompts

log = logging.getLogger(__name__)

OVER_BUDGET = "this busy machine had no room for its replay beside the race within the budget a request"
NUMBERS = ("tau", "alpha", "mbsu", "predicted_speedup", "c", "draft_ms")  # None where left out


def compare(
    request,
    prompts,
    spd: Trace,
    ar: Trace,
    show: Callable[[str], object],
    swept: Iterable[SweepPoint] = (),
    tokens: int | None = None,
) -> Iterator:
    """Replay the finished greedy race (spd, ar) of `request` with every strategy of the preset,
    yielding show(name) after each; returns the records (none for a sampling race). `swept`: the
    γ sweep's points of the race's drafter, whose point at the race's gamma is its row's replay;
    `tokens`: the answer's first tokens replayed (None: all; 0: no room, every row left out)."""
    if gamma_sweep.unsweepable(request) or not (spd.done and ar.done):
        return []
    answer = list(spd.summary.token_ids)[:tokens]
    request = replace(request, max_new_tokens=min(request.max_new_tokens, tokens or request.max_new_tokens))
    step_costs = metrics.costs(spd, ar)
    loaded = prompts.loaded
    own = next((p for p in swept if p.gamma == request.gamma), None)
    rows = []
    for name in loaded.preset.drafter_names():
        if tokens == 0:
            rows.append(_left_out(request, name, OVER_BUDGET))
            continue
        rows.append(_row(request, loaded, prompts, answer, name, step_costs, own if name == request.drafter else None))
        yield show(name)
    return rows


def _left_out(request, name: str, why: str) -> dict:
    return (
        {"strategy": name, "raced": name in request.drafters, "gamma": request.gamma}
        | dict.fromkeys(NUMBERS)
        | {"left_out": why}
    )


def _row(request, loaded, prompts: Prompts, answer: list[int], name: str, step_costs, point=None) -> dict:
    """The record of strategy `name`: its replay's numbers (`point`: that replay, already made), or
    why it has none."""
    record = {"strategy": name, "raced": name in request.drafters, "gamma": request.gamma}
    why = loaded.preset.refusal(name, request.gamma, request.min_confidence) or _not_here(loaded, name)
    if why:
        return _left_out(request, name, why)
    try:
        drafter = loaded.drafter(name)
        if point is None:
            point = gamma_sweep.replay(request, prompts, name, answer, request.gamma)
    except Exception as error:  # one strategy's failure leaves the others' rows
        log.warning("the strategy table could not replay %r", name, exc_info=error)
        return _left_out(request, name, f"its replay failed ({failures.first_line(error)})")
    c = drafter.n_params / loaded.target.n_params
    step = point.step_seconds  # nan where it drafted nothing: then its drafting costs nothing
    measured = replace(step_costs, t_draft=0.0 if math.isnan(step) else step) if step_costs else None
    [row] = metrics.sweep_rows([point], c, measured)
    draft_ms = None if math.isnan(step) else step * 1e3
    return record | row | {"c": c, "draft_ms": draft_ms, "left_out": None}


def _not_here(loaded, name: str) -> str | None:
    """Why the model of strategy `name` cannot be loaded for the table (None: it is loaded, has
    no model, or its files are here): the table never downloads."""
    from demo.models import hub

    spec = next((s for s in loaded.preset.drafters if s.name == presets.base_name(name)), None)
    if spec is None or spec.name in loaded.drafters or hub.local(spec.path) is not None:
        return None
    return "its model's files are not on this machine (race it once to fetch them)"
