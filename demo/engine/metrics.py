"""Metrics: pure functions over a run's trace. Every number the app shows comes from here.

    tau    block efficiency: answer tokens produced in decoding per target forward in decoding,
           the bonus included (vLLM calls it "mean acceptance length"). The prefill's token is
           excluded from both counts, so an autoregressive run has tau = 1 exactly.
    alpha  acceptance rate: accepted drafts / drafted tokens.
    MBSU   memory-bound speedup (Gagrani et al. 2024): tau / (1 + gamma * c), with
           c = drafter parameters / target parameters. It is the speedup when every forward
           costs the time to read the model's weights. `mbsu` uses the nominal gamma;
           `mbsu_made` the drafts actually made per round (they differ with adaptive drafting,
           and in the last rounds, cut by the token budget).

gamma and the parameter counts come from the trace's first event (`RunStart`): a trace is
measured on its own, with nothing passed beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from demo.engine.events import Trace


def decode_tokens(trace: Trace) -> int:
    """Tokens produced after the prefill."""
    return sum(r.n_emitted for r in trace.rounds)


def tau(trace: Trace) -> float:
    return decode_tokens(trace) / len(trace.rounds) if trace.rounds else math.nan


def drafted(trace: Trace) -> int:
    return sum(len(r.drafted_ids) for r in trace.rounds)


def accepted(trace: Trace) -> int:
    return sum(r.n_accepted for r in trace.rounds)


def alpha(trace: Trace) -> float:
    n = drafted(trace)
    return accepted(trace) / n if n else math.nan


def acceptance_by_position(trace: Trace) -> list[float]:
    """For draft positions 1..gamma: the fraction of drafts at that position the target accepted."""
    rates = []
    for i in range(1, trace.gamma + 1):
        proposed = [r for r in trace.rounds if len(r.drafted_ids) >= i]
        rates.append(sum(r.n_accepted >= i for r in proposed) / len(proposed) if proposed else math.nan)
    return rates


def accept_length_histogram(trace: Trace) -> list[int]:
    """counts[k] = rounds in which exactly k drafts were accepted, k = 0..gamma."""
    counts = [0] * (trace.gamma + 1)
    for r in trace.rounds:
        counts[r.n_accepted] += 1
    return counts


def param_ratio(trace: Trace) -> float:
    """c = drafter parameters / target parameters (nan before the first event)."""
    start = trace.start
    if start is None or start.drafter is None:
        return math.nan
    return start.drafter.params / start.target_params


def mbsu(trace: Trace) -> float:
    """tau / (1 + gamma * c)."""
    return tau(trace) / (1 + trace.gamma * param_ratio(trace))


def drafts_per_round(trace: Trace) -> float:
    """Drafts actually made per round (gamma at most; fewer with adaptive drafting)."""
    return drafted(trace) / len(trace.rounds) if trace.rounds else math.nan


def mbsu_made(trace: Trace) -> float:
    """tau / (1 + d * c), d = drafts actually made per round: MBSU of the drafting that ran."""
    return tau(trace) / (1 + drafts_per_round(trace) * param_ratio(trace))


def decode_seconds(trace: Trace) -> float:
    return trace.t - (trace.prefill.t if trace.prefill else 0.0)


def tokens_per_second(trace: Trace) -> float:
    """Decoding throughput: tokens after the prefill over the time after the prefill."""
    seconds = decode_seconds(trace)
    return decode_tokens(trace) / seconds if seconds > 0 else math.nan


def speedup(spd: Trace, ar: Trace) -> float:
    """Wall-clock decoding speedup of one run over another, as a throughput ratio (nan until both have one)."""
    baseline = tokens_per_second(ar)
    return tokens_per_second(spd) / baseline if baseline > 0 else math.nan


def predicted_speedup(tau_value: float, gamma: int, t1: float, t_verify: float, t_draft: float) -> float:
    """Cost model: tau target steps' worth of tokens for gamma draft steps plus one verify.

    t1: one target step of 1 token; t_verify: one target forward of gamma+1 tokens;
    t_draft: one drafter step.
    """
    return tau_value * t1 / (gamma * t_draft + t_verify)


def pooled(traces: list[Trace]) -> Trace:
    """One trace holding the rounds and tokens of several runs of one setting, for pooled rates;
    it starts as the first of them does."""
    out = Trace(start=traces[0].start if traces else None)
    for t in traces:
        out.tokens += t.tokens
        out.rounds += t.rounds
    return out


def running_tau(trace: Trace) -> list[float]:
    """tau after each round, for the live chart."""
    out, tokens = [], 0
    for i, r in enumerate(trace.rounds, start=1):
        tokens += r.n_emitted
        out.append(tokens / i)
    return out


def summary(trace: Trace, speculative: bool | None = None) -> dict:
    """The headline numbers of one run; the speculative ones too for a speculative run (its
    first event says which)."""
    if speculative is None:
        speculative = trace.gamma > 0
    result = {
        "tokens": len(trace.tokens),
        "target_forwards": len(trace.rounds),
        "tau": tau(trace),
        "tok_s": tokens_per_second(trace),
        "prefill_s": trace.prefill.t if trace.prefill else math.nan,
        "decode_s": decode_seconds(trace),
    }
    if speculative:
        c = param_ratio(trace) if trace.summary else math.nan
        result.update(
            alpha=alpha(trace),
            drafted=drafted(trace),
            accepted=accepted(trace),
            resampled=sum(t.kind == "resampled" for t in trace.tokens),
            bonus=sum(t.kind == "bonus" for t in trace.tokens),
            c=c,
            mbsu=tau(trace) / (1 + trace.gamma * c),
            drafts_per_round=drafts_per_round(trace),
            mbsu_made=tau(trace) / (1 + drafts_per_round(trace) * c),
            acceptance_by_position=acceptance_by_position(trace),
            accept_length_histogram=accept_length_histogram(trace),
        )
    return result


# --- the cost model, fed by this race's own measured step costs -----------------------------------


def _quantile(values: list[float], q: float) -> float:
    """The q-quantile of values by linear interpolation (nan for none)."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def spread(values: list[float]) -> float:
    """Interquartile range over the median: how much a step's cost varied within the run."""
    median = _quantile(values, 0.5)
    return (_quantile(values, 0.75) - _quantile(values, 0.25)) / median if median > 0 else math.nan


NOISY_SPREAD = 0.3  # a run whose step costs vary more than this (IQR / median) is timed on a busy machine


@dataclass(frozen=True)
class Costs:
    """A race's measured step costs in seconds, each a median over the rounds that measure it."""

    t1: float  # one target step over one token (the autoregressive run's rounds)
    t_verify: float  # one target forward over gamma + 1 tokens (the speculative run's full rounds)
    t_draft: float  # one drafter step (a round's draft seconds over its drafts)
    gamma: int  # the race's gamma: t_verify's width is gamma + 1
    t1_spread: float  # `spread` of the autoregressive steps
    verify_spread: float  # `spread` of the speculative verifies

    @property
    def noisy(self) -> bool:
        return self.t1_spread > NOISY_SPREAD or self.verify_spread > NOISY_SPREAD

    def verify(self, n_tokens: float) -> float:
        """A target forward over n_tokens tokens, interpolated linearly between the two measured
        widths (1 and gamma + 1 tokens)."""
        if self.gamma == 0:
            return self.t1
        return self.t1 + (n_tokens - 1) * (self.t_verify - self.t1) / self.gamma


def costs(spd: Trace, ar: Trace) -> Costs | None:
    """The step costs of a finished race (None until both runs have decoding rounds)."""
    steps = [r.verify_seconds for r in ar.rounds]
    gamma = spd.gamma
    full = [r.verify_seconds for r in spd.rounds if len(r.drafted_ids) == gamma] or [
        r.verify_seconds for r in spd.rounds if r.drafted_ids
    ]
    per_draft = [r.draft_seconds / len(r.drafted_ids) for r in spd.rounds if r.drafted_ids]
    if not steps or not full or not per_draft:
        return None
    return Costs(
        t1=_quantile(steps, 0.5),
        t_verify=_quantile(full, 0.5),
        t_draft=_quantile(per_draft, 0.5),
        gamma=gamma,
        t1_spread=spread(steps),
        verify_spread=spread(full),
    )


def predicted(tau_value: float, drafts: float, c: Costs) -> float:
    """The cost model's speedup for a round of `drafts` drafts (on average) yielding tau tokens:
    tau target steps' worth of tokens for `drafts` drafter steps plus one verify of drafts + 1."""
    return predicted_speedup(tau_value, drafts, c.t1, c.verify(drafts + 1), c.t_draft)


def round_speedups(spd: Trace, ar: Trace) -> tuple[float, float, float]:
    """The speedup from per-round medians, and its low and high ends from the quartiles: tau
    tokens per speculative round (draft + verify) against tau single target steps."""
    rounds = [r.draft_seconds + r.verify_seconds for r in spd.rounds]
    steps = [r.verify_seconds for r in ar.rounds]
    t = tau(spd)
    if not rounds or not steps:
        return math.nan, math.nan, math.nan
    mid = t * _quantile(steps, 0.5) / _quantile(rounds, 0.5)
    low = t * _quantile(steps, 0.25) / _quantile(rounds, 0.75)
    high = t * _quantile(steps, 0.75) / _quantile(rounds, 0.25)
    return mid, low, high


# --- the gamma sweep's numbers ---------------------------------------------------------------------


@dataclass(frozen=True)
class SweepPoint:
    """One gamma of a replayed race (`demo.engine.sweep`): what each of its rounds did."""

    gamma: int
    rounds: tuple[tuple[int, int, int], ...]  # per round: (drafts made, drafts accepted, tokens emitted)

    @property
    def tau(self) -> float:
        return sum(e for _, _, e in self.rounds) / len(self.rounds) if self.rounds else math.nan

    @property
    def alpha(self) -> float:
        made = sum(d for d, _, _ in self.rounds)
        return sum(a for _, a, _ in self.rounds) / made if made else math.nan

    @property
    def drafts_per_round(self) -> float:
        return sum(d for d, _, _ in self.rounds) / len(self.rounds) if self.rounds else math.nan

    @property
    def histogram(self) -> list[int]:
        counts = [0] * (self.gamma + 1)
        for _, a, _ in self.rounds:
            counts[a] += 1
        return counts


def sweep_rows(points: list[SweepPoint], c: float, step_costs: Costs | None) -> list[dict]:
    """The sweep as records: gamma, tau, alpha, MBSU (from the drafts made) and the cost model's
    predicted speedup (None without the race's measured costs)."""
    return [
        {
            "gamma": pt.gamma,
            "tau": pt.tau,
            "alpha": pt.alpha,
            "mbsu": pt.tau / (1 + pt.drafts_per_round * c),
            "predicted_speedup": predicted(pt.tau, pt.drafts_per_round, step_costs) if step_costs else None,
        }
        for pt in points
    ]
