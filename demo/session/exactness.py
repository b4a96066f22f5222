"""The sampling law, checked live: do a speculative lane's first k answer tokens (k = 1 to 3) come
out as often as the target's own law p says? N draws three ways from one prefilled state (the
target alone, the lane's own rounds, a broken rule that accepts every draft), each histogram set
against p by its total-variation distance, with a Monte Carlo p-value (docs/modules.md)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import torch

from demo.engine.sampling import Sampling

ALPHA = 1e-3  # a way fails when its p-value is below this: one seeded check in a thousand would by chance
MC_DRAWS = 4000  # Monte Carlo draws of the TV's null law (the smallest p-value is 1 / 4001)
BUDGET_S = 10.0  # seconds of the lane's and the broken rule's draws at most (the embedded world: ~25 ms a draw)
FLOOR = 1e-3  # sequences less likely than this are pooled into "other"
PREFIXES = 100  # the law extends at most this many prefixes a token (the likeliest); the rest pool into "other"
SURE = 0.9  # the check starts where the target's most likely next token is below this
WALK = 24  # answer tokens the check walks at most to find such a position
WAYS = ("target", "speculative", "broken")
OTHER = "other"


@dataclass(frozen=True)
class LawCheck:
    """One check: the outcome table, the exact law, and each way's counts, TV and p-value."""

    k: int  # tokens after the first one
    n: int  # draws per way
    gamma: int
    drafter: str
    context: str  # the first answer token, shared by every draw (its text)
    outcomes: tuple[tuple[int, ...], ...]  # token sequences (the last entry () stands for "other")
    labels: tuple[str, ...]  # each outcome as text
    law: tuple[float, ...]  # the target's exact probability of each outcome
    counts: dict[str, tuple[int, ...]]  # way -> draws per outcome
    tv: dict[str, float]
    p_value: dict[str, float]
    tv_bound: float  # the TV a draw of n from the law stays under with probability 1 - ALPHA
    seconds: dict[str, float] = field(default_factory=dict)  # wall time of each way, and of the law
    note: str = ""  # why it could not show a departure, where it could not (`_note`)

    def passed(self, way: str) -> bool:
        return self.p_value[way] > ALPHA

    def to_dict(self) -> dict:
        return {
            "k": self.k,
            "n": self.n,
            "gamma": self.gamma,
            "drafter": self.drafter,
            "context": self.context,
            "outcomes": [list(o) for o in self.outcomes],
            "labels": list(self.labels),
            "law": list(self.law),
            "counts": {w: list(c) for w, c in self.counts.items()},
            "tv": self.tv,
            "p_value": self.p_value,
            "alpha": ALPHA,
            "tv_bound": self.tv_bound,
            "passed": {w: self.passed(w) for w in self.counts},
            "seconds": self.seconds,
            "note": self.note,
        }


# --- statistics ----------------------------------------------------------------------------------


def tv_distance(counts, law) -> float:
    n = sum(counts)
    return sum(abs(c / n - p) for c, p in zip(counts, law, strict=True)) / 2


def tv_bound(law, n: int, delta: float = ALPHA) -> float:
    """With probability 1 - delta, the TV of n draws from `law` is under this (tests/law.py)."""
    spread = sum(math.sqrt(p * (1 - p)) for p in law)
    return (spread + math.sqrt(2 * math.log(1 / delta))) / (2 * math.sqrt(n))


def p_value(tv: float, law, n: int, draws: int = MC_DRAWS, seed: int = 0) -> float:
    """P(TV >= tv) for n draws from `law`, by Monte Carlo: (1 + hits) / (1 + draws)."""
    probs = torch.tensor(law, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    samples = torch.multinomial(probs.expand(draws, -1), n, replacement=True, generator=g)  # [draws, n]
    counts = torch.zeros(draws, len(law), dtype=torch.float64).scatter_add_(
        1, samples, torch.ones_like(samples, dtype=torch.float64)
    )
    null = (counts / n - probs).abs().sum(-1) / 2
    return (1 + int((null >= tv - 1e-12).sum())) / (1 + draws)


# --- the three ways, on one prefilled state --------------------------------------------------------


class _Bench:
    """One prefill, and every draw run on it and rolled back."""

    def __init__(self, target, drafter, prompt, gamma: int, sampling, k: int, seed: int):
        from demo.engine import speculative, trees
        from demo.engine.detokenize import Detokenizer

        self.target, self.drafter, self.k = target, drafter, k
        self.generator = torch.Generator(device=target.device).manual_seed(seed)
        # A budget of k + 2 tokens: a round then drafts min(gamma, k) tokens. Drafts past the k-th
        # never touch the first k tokens' law (draft i is drawn from q given drafts < i, and decided
        # by its own uniform draw), so the law checked is the raced lane's, at a fraction of its cost.
        start = speculative.run_start(target, drafter, gamma=gamma, sampling=sampling, max_new_tokens=k + 2)
        greedy = replace(start, sampling=Sampling())  # the first token too is the greedy race's (`_walk`)
        self.state, self.drafting, _, _ = speculative._prefill(target, prompt, greedy, self.generator, drafter)
        self.play = trees.tree_round if drafter.tree is not None else speculative.speculative_round
        self._walk(start)
        self.first = list(self.state.answer)  # the prefill's token and the walk's: the target's, in every lane
        self.prompt_len = self.state.cache.get_seq_length()
        self._detok = lambda: Detokenizer(target.tokenizer)
        # A drafter reading the target's features keeps the newest (`observe`), and the run the rows
        # it has not seen yet, which no rollback restores: each draw starts from the state the walk
        # left, as the raced lane was there.
        self._kept = {a: v for a, v in vars(self.drafting).items() if a in ("feature", "base", "rows")}
        self._features = self.state.features

    def _walk(self, start) -> None:
        """Down the target's greedy answer, one token a round (the lane's own rounds, drafting
        nothing), to the first position whose next token the target is unsure of at these settings
        (its most likely below SURE), at most WALK tokens: a law of several outcomes to check."""
        from demo.engine.drafters import ids_on
        from demo.engine.sampling import warp
        from demo.engine.speculative import speculative_round

        state = self.state
        while len(state.answer) < WALK and state.stop is None:
            logits = self.target.forward(ids_on(self.target.device, [state.answer[-1]]), state.cache)[-1]
            state.cache.crop(-1)
            if float(warp(logits, start.sampling).max()) < SURE:
                break
            state.start = replace(start, sampling=Sampling(), max_new_tokens=len(state.answer) + 1)
            speculative_round(state, self.drafting, 0)
            state.stop = None if state.stop == "max_new_tokens" else state.stop
        state.start = replace(start, max_new_tokens=len(state.answer) + self.k + 1)

    def reset(self) -> None:
        state = self.state
        extra = state.cache.get_seq_length() - self.prompt_len
        if extra:
            state.cache.crop(-extra)
        self.drafting.rollback(len(self.first))
        for name, value in self._kept.items():
            setattr(self.drafting, name, value)
        state.features = self._features
        state.answer[:] = self.first
        state.stop = None
        state.detok = self._detok()

    def _taken(self) -> tuple[int, ...]:
        return tuple(self.state.answer[len(self.first) : len(self.first) + self.k])

    def _done(self) -> bool:
        return self.state.stop is not None or len(self.state.answer) >= len(self.first) + self.k

    def speculative(self) -> tuple[int, ...]:
        """The lane's own rounds until k tokens follow the first."""
        self.reset()
        n_round = 0
        while not self._done():
            n_round += 1
            self.play(self.state, self.drafting, n_round)
        return self._taken()

    def target_alone(self, n: int) -> list[tuple[int, ...]]:
        """n draws of the target alone, position by position: the draws that share a prefix share
        its forward (one per distinct prefix), and each draws its next token from p, warped."""
        from demo.engine.drafters import ids_on
        from demo.engine.sampling import warp

        self.reset()
        sampling, stops = self.state.start.sampling, self.target.stop_ids
        done: list[tuple[int, ...]] = []
        groups = {(): n}
        for _ in range(self.k):
            grown: dict[tuple[int, ...], int] = {}
            for prefix, count in groups.items():
                fed = ids_on(self.target.device, [self.first[-1], *prefix])
                logits = self.target.forward(fed, self.state.cache)[-1]
                self.state.cache.crop(-len(fed))
                p = warp(logits, sampling)
                for token in torch.multinomial(p, count, replacement=True, generator=self.generator).tolist():
                    seq = (*prefix, token)
                    if token in stops:
                        done.append(seq)
                    else:
                        grown[seq] = grown.get(seq, 0) + 1
            groups = grown
        return done + [seq for seq, count in groups.items() for _ in range(count)]

    def broken(self) -> tuple[int, ...]:
        """The wrong rule: every draft accepted (cut after a stop), then the target's bonus token."""
        from demo.engine.drafters import cut_after_stop, ids_on
        from demo.engine.sampling import sample, warp

        self.reset()
        state, sampling = self.state, self.state.start.sampling
        while not self._done():
            answer = state.answer
            n = min(state.start.gamma, state.start.max_new_tokens - len(answer) - 1)
            drafts, _ = self.drafting.propose(answer, n, sampling, self.generator, 0.0, state.features)
            state.features = None  # seen: the broken rule reads no features of its verify
            ids = drafts.tolist()
            ids = ids[: cut_after_stop(ids, self.target.stop_ids)]
            logits = self.target.forward(torch.cat([ids_on(self.target.device, [answer[-1]]), drafts]), state.cache)
            bonus = int(sample(warp(logits[len(ids)], sampling), self.generator))
            if len(ids) < drafts.shape[0]:  # forget the drafts past a stop
                state.cache.crop(-(drafts.shape[0] - len(ids)))
            self.drafting.rollback(len(answer) + len(ids))
            for token in ids + [bonus]:
                state.append(token)
                if state.stop:
                    break
        return self._taken()

    def law(self, floor: float) -> dict[tuple[int, ...], float]:
        """The target's exact law of the next k tokens (sequences ending at a stop end there), with
        every sequence under `floor` left out: their mass is "other"'s."""
        from demo.engine.drafters import ids_on
        from demo.engine.sampling import warp

        self.reset()
        sampling, stops = self.state.start.sampling, self.target.stop_ids
        law: dict[tuple[int, ...], float] = {}
        frontier = [((), 1.0)]
        for depth in range(self.k):
            grown = []
            for prefix, mass in frontier:
                fed = ids_on(self.target.device, [self.first[-1], *prefix])
                logits = self.target.forward(fed, self.state.cache)[-1]
                self.state.cache.crop(-len(fed))
                p = warp(logits, sampling).double()
                ids = torch.nonzero(p * mass >= floor).flatten().tolist()
                for token in ids:
                    seq, prob = (*prefix, token), mass * float(p[token])
                    if token in stops or depth == self.k - 1:
                        law[seq] = prob
                    else:
                        grown.append((seq, prob))
            frontier = sorted(grown, key=lambda entry: -entry[1])[:PREFIXES]  # the likeliest: bounded work
        return law


def check(
    loaded,
    prompt,
    drafter,
    *,
    gamma: int,
    sampling,
    k: int = 2,
    n: int = 200,
    seed: int = 0,
    budget_s: float | None = BUDGET_S,
    ends: float | None = None,
    progress=None,
) -> LawCheck:
    """Draw the k tokens after the first n times each way (fewer where `budget_s` seconds of draws
    ran out first, or where `ends`, a time.monotonic(), is closer than the law took: every way then
    draws as many), and test each histogram against the target's exact law. `sampling` must
    sample (greedy=False); `drafter` is a loaded `Drafter`. `progress(fraction, sentence)`, if
    given, hears after each draw how many are done and the time left at the rate measured."""
    assert not sampling.greedy, "the law of a sampled answer is checked; greedy is checked token for token"
    assert 1 <= k <= 3 and n >= 1
    target, seconds = loaded.target, {}
    if progress is not None:
        progress(0.0, f"the target's exact law of {k} tokens")
    with torch.inference_mode():
        bench = _Bench(target, drafter, prompt, gamma, sampling, k, seed)
        began = time.perf_counter()
        exact = bench.law(FLOOR)
        seconds["law"] = time.perf_counter() - began
        outcomes = sorted(exact, key=lambda s: -exact[s])
        index = {seq: i for i, seq in enumerate(outcomes)}
        total = sum(exact.values())  # p is float32: the listed sequences may sum past 1 by ~1e-7
        law = [exact[s] / max(total, 1.0) for s in outcomes] + [max(0.0, 1.0 - total)]
        counts: dict[str, list[int]] = {}
        # The lane's and the broken rule's draws in turn, until n of each or the time budget.
        drawn: dict[str, list] = {"speculative": [], "broken": []}
        seconds.update(speculative=0.0, broken=0.0)
        began = time.perf_counter()
        while (
            len(drawn["broken"]) < n
            and (budget_s is None or time.perf_counter() - began < budget_s)
            and (ends is None or time.monotonic() + seconds["law"] + seconds["broken"] / max(1, n) < ends)
        ):
            for way, draw in (("speculative", bench.speculative), ("broken", bench.broken)):
                lap = time.perf_counter()
                drawn[way].append(draw())
                seconds[way] += time.perf_counter() - lap
            if progress is not None:
                done, now = len(drawn["broken"]), time.perf_counter()
                left = (now - began) / done * (n - done)
                left = left if ends is None else min(left, ends - time.monotonic())
                progress(done / n, f"{done} of {n} draws a way, about {max(0, left):.0f} s left")
        n = len(drawn["broken"])
        lap = time.perf_counter()
        drawn = {"target": bench.target_alone(n), **drawn}
        seconds["target"] = time.perf_counter() - lap
        for way, seqs in drawn.items():
            tally = [0] * len(law)
            for seq in seqs:
                tally[index.get(seq, len(outcomes))] += 1
            counts[way] = tally
        bench.reset()
    tokenizer = target.tokenizer
    labels = tuple(repr(tokenizer.decode(list(s)))[1:-1] or "∅" for s in outcomes) + (OTHER,)
    tv = {w: tv_distance(c, law) for w, c in counts.items()}
    p = {w: p_value(tv[w], law, n, seed=seed + 1) for w in counts}
    return LawCheck(
        k=k,
        n=n,
        gamma=gamma,
        drafter=drafter.name,
        context=tokenizer.decode(bench.first),
        outcomes=tuple(outcomes) + ((),),
        labels=labels,
        law=tuple(law),
        counts={w: tuple(c) for w, c in counts.items()},
        tv=tv,
        p_value=p,
        tv_bound=tv_bound(law, n),
        seconds=seconds,
        note=_note(law, n, k, sampling, p["broken"] > ALPHA),
    )


def _note(law, n: int, k: int, sampling, broken_passed: bool) -> str:
    """Why the check could not show a departure, where it could not (empty: it could)."""
    if len(law) == 1:
        return (
            f"At temperature {sampling.temperature:g} the target spreads these {k} tokens over so many sequences "
            f"that none has probability {FLOOR:g} or more: every draw falls in one outcome, so nothing can differ. "
            "Lower the temperature or k."
        )
    if max(law) > 1 - FLOOR:
        return "The target is sure of these tokens: every way writes them, so no rule can fail here. Raise the temperature."
    if broken_passed:
        return (
            f"The broken rule passed: {n} draws a way were too few to tell its law from the target's here (a departure "
            f"under TV {tv_bound(law, n):.2f} goes unseen at this count). Check again with more time, or more tokens (k)."
        )
    return ""
