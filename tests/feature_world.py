"""The target-feature drafters on the embedded world, built once and shared by their tests.

`feature`, `feature+tree`, `medusa`, `medusa+tree` and `staged` from the shipped checkpoints in assets/world
(`python -m demo.lab.training.train_heads`) on the embedded target, and one prompt per task family and
language. Until the drafter registry names them, the tests build them here, from the engine.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch
from embedded import embedded

from demo.engine.events import Trace
from demo.engine.feature import FeatureDrafter
from demo.engine.sampling import Sampling
from demo.engine.speculative import autoregressive_generate, speculative_generate
from demo.engine.staged import StagedDrafter
from demo.engine.trees import TreeDrafter
from demo.world.tasks import LANGUAGES, TASKS, heldout_examples

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "world"
NAMES = ("feature", "feature+tree", "medusa", "medusa+tree", "staged")
GREEDY = Sampling()


@cache
def drafters() -> dict:
    loaded = embedded()
    blocked = loaded.placeholder_ids()
    feature = FeatureDrafter.load(
        ASSETS / "drafter-feature.safetensors", loaded.target, name="feature", blocked_ids=blocked
    )
    medusa = FeatureDrafter.load(
        ASSETS / "drafter-medusa.safetensors", loaded.target, name="medusa", blocked_ids=blocked
    )
    return {
        "feature": feature,
        "feature+tree": TreeDrafter(feature, name="feature+tree"),
        "medusa": medusa,
        "medusa+tree": TreeDrafter(medusa, name="medusa+tree"),
        "staged": StagedDrafter(loaded.drafter("text-only"), name="staged"),
    }


@cache
def example(task: str, language: str = "en"):
    return heldout_examples(task, 1, seed=3, language=language)[0]


@cache
def prompt(task: str, language: str = "en"):
    ex = example(task, language)
    return embedded().prompt(ex.image, ex.question, "text-only")  # the text drafter's inputs: staged reads them


@cache
def reference(task: str, language: str, budget: int) -> tuple[int, ...]:
    loaded = embedded()
    events = autoregressive_generate(
        loaded.target, prompt(task, language), sampling=GREEDY, max_new_tokens=budget, generator=torch.Generator()
    )
    return Trace.of(events).summary.token_ids


def run(name: str, task: str, language: str, gamma: int, budget: int, sampling: Sampling = GREEDY, seed: int = 0):
    events = speculative_generate(
        embedded().target,
        drafters()[name],
        prompt(task, language),
        gamma=gamma,
        sampling=sampling,
        max_new_tokens=budget,
        generator=torch.Generator().manual_seed(seed),
    )
    return Trace.of(events)


def mismatches(names, tasks=TASKS, languages=LANGUAGES, gammas=range(1, 9), budget: int = 48) -> list[tuple]:
    """(drafter, task, language, gamma) of every greedy run whose answer is not the target's own."""
    return [
        (name, task, language, gamma)
        for name in names
        for task in tasks
        for language in languages
        for gamma in gammas
        if run(name, task, language, gamma, budget).summary.token_ids != reference(task, language, budget)
    ]
