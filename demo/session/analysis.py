"""An analysis as one object, what the Analysis tab consumes: `Analysis(request, items)` refuses what
cannot run here or fit the budget even at one example and shortens the rest to the examples that
fit; `events()` yields Running / Decoded items, `stop()` ends it before the next run, `ending`
says how it ended. `decode_examples` is its accelerator call."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace

from demo.models import zerogpu
from demo.session import budget, image_attention, lane_runs, offers
from demo.session.race_events import Decoded, Running
from demo.session.request import Request


def _examples_duration(preset: str, drafters: list[str], items: list, gamma: int, max_new_tokens: int, sampling=None):
    """Seconds an analysis asks ZeroGPU for: the work budget's estimate of it (`budget.analysis`), capped."""
    answers = [item.answer for item in items]
    estimate = budget.analysis(preset, drafters, len(items), len(items), gamma, max_new_tokens, answers)
    return zerogpu.clamp(estimate.seconds)


@zerogpu.GPU(duration=_examples_duration)
def decode_examples(preset: str, drafters: list[str], items: list, gamma: int, max_new_tokens: int, sampling=None):
    """Speculative decoding of each example (`.image`, `.question`, `.language`, and what
    `demo.world.scoring.score` reads, or no `.scene`: not scored) with each drafter, greedy or with
    `sampling` (example i seeded `sampling.seed + i`), yielding plain data only (on ZeroGPU it runs
    in another process): Running(i, drafter) before each run, then Decoded(i, drafter, trace,
    observations, correct)."""
    from demo.engine.sampling import Sampling
    from demo.models import loader, preloading
    from demo.session import rejections
    from demo.world.scoring import score

    preloading.check_served(preset)  # preloaded deployments (a Space) never load in a request
    loaded = loader.load(preset)
    for i, item in enumerate(items):
        prompts = lane_runs.Prompts(loaded, item.question, item.image)  # one per example, for every drafter
        dependence: dict[tuple[int, ...], tuple[bool, ...] | None] = {}  # answer -> its ablation, once
        for d in drafters:
            yield Running(i, d)
            request = Request(
                question=item.question,
                preset=preset,
                drafter=d,
                gamma=gamma,
                sampling=replace(sampling, seed=sampling.seed + i) if sampling else Sampling(),
                max_new_tokens=max_new_tokens,
            )
            trace = lane_runs.run(loaded, request, item.image, prompts=prompts)
            image_attention.attach(prompts, {d: trace})  # after the run, off its clock
            observations = rejections.observations(trace, i, loaded.target.stop_ids, item.language)
            ids = tuple(trace.summary.token_ids)  # greedy: every drafter's answer is the target's, read once
            if ids not in dependence:  # off the run's clock, as the attention
                dependence[ids] = image_attention.dependence(prompts, item.question, list(ids))
            observations = _with_dependence(observations, dependence[ids])
            correct = score(item.task, item, trace.summary.text) if getattr(item, "scene", None) else None
            yield Decoded(i, d, trace, observations, correct)


def _with_dependence(observations: list, dependent: tuple[bool, ...] | None) -> list:
    """The observations with each position's image dependence (unchanged where it was not read)."""
    if dependent is None:
        return observations
    return [replace(o, image_dependent=dependent[o.index]) if o.index < len(dependent) else o for o in observations]


class Analysis:
    """One analysis (`demo.session.batches.AnalysisRequest` over `items`, the examples it runs):
    its budget, its stop, its events."""

    def __init__(self, request, items: list):
        offers.check_available(request.preset)  # not served here, or cannot load: said before any work
        self.request, self.items = request, items
        r, answers = request, [item.answer for item in items]
        asked = budget.analysis(r.preset, list(r.drafters), r.n, len(items), r.gamma, r.max_new_tokens, answers)
        # the largest that fits: the first N examples, every drafter on each (refused: not even one)
        self.estimate, self.shortened = budget.fit(asked)
        if self.shortened:
            per = max(1, len(items) // max(request.n, 1))  # one example a language asked
            self.request, self.items = replace(request, n=self.estimate.units), items[: self.estimate.units * per]
        self.deadline = budget.Deadline()
        self.ending: str | None = None

    def stop(self) -> None:
        """End the analysis before its next run (the run at hand finishes and is kept)."""
        self.deadline.stop()

    def events(self) -> Iterator[Running | Decoded]:
        r = self.request
        ended = None  # how it ended before its last run, if it did
        with closing(decode_examples(r.preset, list(r.drafters), self.items, r.gamma, r.max_new_tokens)) as steps:
            for step in steps:
                if self.deadline.ends is None:  # its models loaded: from now on, it may end over budget
                    self.deadline.arm(budget.limit(self.estimate))
                if isinstance(step, Running) and self.deadline.ended:
                    ended = "over budget" if self.deadline.over else "stopped"
                    break
                yield step
        self.ending = ended or "finished"
