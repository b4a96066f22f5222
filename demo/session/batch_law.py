"""The sampling law checked over a batch (issue 56): the Analysis tab's "Check the sampling law",
the live check of `demo.session.exactness` run on each of a batch's held-out examples in turn.

Each example gets its own check (its own prompt, image and exact law of the k tokens after the
first), with the drafter chosen, at temperature 1; each example's lanes draw for SECONDS /
MAX_EXAMPLES seconds, so a full batch draws for SECONDS and a smaller one for less, and the whole
check is counted by the work budget (`budget.law_check`) like an analysis. The
pooled verdict combines the examples' p-values by Fisher's method: X = -2 sum(log p_i) follows
chi-square with 2m degrees of freedom under the law, so each way passes or fails the batch as a
whole at the same ALPHA as one check.

    LawBatch(preset, drafter, items, gamma, k=, n=, seed=)
                           refused (InvalidInput) over the work budget (`budget.law_check`);
                           `.results()` yields each example's check, `.ending` then says how it
                           ended ("finished", "stopped", or "over budget": its limit ran out)
    check_examples(preset, drafter, items, gamma, k=, n=, seed=) -> [LawCheck.to_dict(), ...]
    pooled(results) -> {way: {"p_value", "passed", "failed", "examples"}}
    fisher(p_values) -> float
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import closing

from demo.models import zerogpu
from demo.session import budget, lane_runs, offers

SECONDS = 24.0  # seconds of the lanes' draws for a batch of MAX_EXAMPLES, shared evenly by its examples
MAX_EXAMPLES = 4  # examples a batch check takes (the first of the batch)
SHARE = SECONDS / MAX_EXAMPLES  # seconds of draws an example gets
K = 2  # tokens after the first, as the page's default
N = 200  # draws per way and example, at most (fewer where an example's share of SECONDS runs out)
ALPHA = 1e-3  # `exactness.ALPHA`, read here without importing torch (the page imports this module)
WAYS = ("target", "speculative", "broken")


def fisher(p_values: list[float]) -> float:
    """Fisher's combined p-value: P(chi-square with 2m degrees of freedom >= -2 sum(log p_i)), in
    closed form for even degrees of freedom: exp(-x/2) sum_{j<m} (x/2)^j / j!."""
    m = len(p_values)
    if not m:
        return math.nan
    half = -sum(math.log(max(p, 1e-300)) for p in p_values)  # x / 2
    term, total = 1.0, 1.0
    for j in range(1, m):
        term *= half / j
        total += term
    return min(1.0, math.exp(-half) * total)


def pooled(results: list[dict]) -> dict[str, dict]:
    """Each way's verdict over the batch: Fisher's p-value, whether it passes, and how many
    examples failed on their own."""
    out = {}
    for way in WAYS:
        ps = [r["p_value"][way] for r in results if way in r["p_value"]]
        p = fisher(ps)
        out[way] = {"p_value": p, "passed": p > ALPHA, "failed": sum(q <= ALPHA for q in ps), "examples": len(ps)}
    return out


def _duration(preset, drafter, items, gamma, k=K, n=N, seed=0) -> int:
    return zerogpu.clamp((SHARE + 10) * len(items))  # the draws, and each example's law and prefill


@zerogpu.GPU(duration=_duration)
def check_examples(preset: str, drafter: str, items: list, gamma: int, k: int = K, n: int = N, seed: int = 0):
    """`exactness.check` on each example (`.image`, `.question`) with `drafter` at temperature 1;
    each example's draws take at most SHARE seconds. Yields each check's dict, in
    order (plain data: on ZeroGPU it runs in another process)."""
    from demo.engine.sampling import Sampling
    from demo.models import loader, preloading
    from demo.session import exactness

    preloading.check_served(preset)
    loaded = loader.load(preset)
    lane = loaded.drafter(drafter)
    for i, item in enumerate(items):
        prompt = lane_runs.Prompts(loaded, item.question, item.image).checked(drafter, k + 3)
        sampling = Sampling(greedy=False, seed=seed + i)
        result = exactness.check(
            loaded, prompt, lane, gamma=gamma, sampling=sampling, k=k, n=n, seed=seed + i, budget_s=SHARE
        )
        yield result.to_dict()


class LawBatch:
    """The check over a batch, under the work budget like an analysis: its estimate refused before
    any work, then a limit armed as it starts, checked after each example (the example at hand
    finishes and is kept), and a Stop (`stop()`)."""

    def __init__(self, preset: str, drafter: str, items: list, gamma: int, k: int = K, n: int = N, seed: int = 0):
        offers.check_available(preset)
        estimate = budget.law_check(preset, drafter, len(items), k, n, SHARE)
        self.estimate, self.shortened = budget.fit(estimate)  # the first examples that fit (refused: not one)
        self.call = (preset, drafter, items[: self.estimate.units], gamma, k, n, seed)
        self.deadline = budget.Deadline()
        self.ending: str | None = None

    def stop(self) -> None:
        self.deadline.stop()

    def results(self) -> Iterator[dict]:
        self.deadline.arm(budget.limit(self.estimate))
        preset, drafter, items, gamma, k, n, seed = self.call
        done = 0
        with closing(check_examples(preset, drafter, items, gamma, k=k, n=n, seed=seed)) as checks:
            for result in checks:
                done += 1
                yield result
                if self.deadline.ended and done < len(items):
                    break
        ended = "over budget" if self.deadline.over else "stopped"
        self.ending = "finished" if done == len(items) else ended
