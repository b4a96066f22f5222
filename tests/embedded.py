"""Greedy exactness on the embedded world's own models: every task family, many gammas and budgets.

The slow tier's long sweep for every new drafter: for one held-out example of each task family,
the target's greedy answer at the largest budget is computed once; the speculative run at any
budget b must then write its first b tokens (fewer where the answer ended), token for token.
The runs are a covering design, not the full product of tasks, gammas and budgets (two fifths of
the runs; the full product's cost was the description's long answer at every gamma): each
(task, gamma) runs at two budgets, rotated so that every (task, budget) and (gamma, budget) pair
runs too, on one task or more.
"""

from __future__ import annotations

from functools import cache

import races
import torch

from demo.engine.events import Trace
from demo.engine.speculative import speculative_generate
from demo.models import loader
from demo.world.tasks import TASKS, heldout_examples


@cache
def embedded():
    return loader.load("embedded")


@cache
def examples(seed: int = 3):
    """One held-out example per task family."""
    return tuple(heldout_examples(task, 1, seed=seed)[0] for task in TASKS)


@cache
def reference(task_index: int, budget: int) -> tuple[int, ...]:
    """The target's own greedy answer to the task family's example."""
    ex = examples()[task_index]
    return races.ar(embedded(), ex.image, ex.question, max_new=budget).summary.token_ids


def design(tasks: int, gammas, budgets, per_pair: int = 2) -> list[tuple[int, int, int]]:
    """(task index, gamma, budget) runs: each (task, gamma) at `per_pair` of the budgets, the
    k-th at budgets[(task + gamma + 2k) % len(budgets)], so that the budgets rotate over the
    tasks and the gammas (every pair of two factors' levels is run; see the fast test)."""
    budgets = list(budgets)
    return [
        (task, gamma, budgets[(task + gamma + 2 * k) % len(budgets)])
        for task in range(tasks)
        for gamma in gammas
        for k in range(per_pair)
    ]


def mismatches(drafter: str, gammas, budgets) -> list[tuple[str, int, int]]:
    """(task, gamma, budget) of every speculative run of the covering `design` with `drafter`
    whose answer is not the target's own (cut to the budget)."""
    loaded = embedded()
    top = max(budgets)
    runs = design(len(examples()), gammas, budgets)
    wrong = []
    for i, ex in enumerate(examples()):
        ref = reference(i, top)
        prompt = loaded.prompt(ex.image, ex.question, drafter)
        for gamma, budget in [(g, b) for task, g, b in runs if task == i]:
            events = speculative_generate(
                loaded.target,
                loaded.drafter(drafter),
                prompt,
                gamma=gamma,
                sampling=races.GREEDY,
                max_new_tokens=budget,
                generator=torch.Generator().manual_seed(0),
            )
            if Trace.of(events).summary.token_ids != ref[:budget]:
                wrong.append((ex.task, gamma, budget))
    return wrong
