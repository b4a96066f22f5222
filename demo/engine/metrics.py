"""Metrics: pure functions over a run's trace. Every number the app shows comes from here.

tau (answer tokens per target forward in decoding, bonus included), alpha (accepted drafts over
drafts), MBSU (Gagrani et al. 2024: tau / (1 + gamma * c), c the drafter's parameters over the
target's), the cost model's predicted speedup from a race's own step costs, and the speedup at
the paper's fixed ratios (`scaled_speedup`, `demo.engine.scale`).

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from demo.engine import scale
from demo.engine.events import RoundEvent, Trace


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
# The cost model reads each step cost as the lower quartile of the race's steps: what a step costs
# when the race has the cores. Other processes make a step slower, never faster, so the fast
# quarter holds where the median moves: five default races beside 2 CPU-bound processes read
# ×2.44-2.53 on lower quartiles and ×1.17-2.31 on medians (idle, both ×2.25-2.34; docs/benchmark.md).
# The minimum holds less well (×1.86-2.31 there): one lucky step sets it.
STEP_QUANTILE = 0.25


@dataclass(frozen=True)
class Costs:
    """A race's measured step costs in seconds, each the lower quartile (STEP_QUANTILE) of the rounds
    that measure it."""

    t1: float  # one target step over one token (the autoregressive run's rounds)
    t_verify: float  # one target forward over gamma + 1 tokens (the speculative run's full rounds)
    t_draft: float  # one drafter step (a round's draft seconds over its drafts)
    gamma: int  # the race's gamma
    t1_spread: float  # `spread` of the autoregressive steps
    verify_spread: float  # `spread` of the speculative verifies
    width: int = 0  # tokens in the verifies t_verify measures: gamma + 1 (0 says so), or a tree's nodes + 1

    @property
    def noisy(self) -> bool:
        return self.t1_spread > NOISY_SPREAD or self.verify_spread > NOISY_SPREAD

    def verify(self, n_tokens: float) -> float:
        """A target forward over n_tokens tokens, interpolated linearly between the two measured
        widths (1 token, and `width`), and never below the cheaper of the two: where a busy
        machine measured the wide forward cheaper than the one-token step, the line falls with
        width, and is held at the measured floor instead of going on to negative costs."""
        width = self.width or self.gamma + 1
        if width <= 1:
            return self.t1
        line = self.t1 + (n_tokens - 1) * (self.t_verify - self.t1) / (width - 1)
        return max(line, min(self.t1, self.t_verify))


def verify_width(r: RoundEvent) -> int:
    """Tokens a round's verify forward fed: the answer's last token and the drafts, or every node
    of its token tree (the walked path is only part of what the target scored)."""
    return 1 + (len(r.tree.nodes) if r.tree else len(r.drafted_ids))


def drafter_steps(r: RoundEvent) -> int:
    """Drafter forwards a round drafted with: one per draft of a chain (prompt lookup: lookups);
    for a tree, the catch-up and one per node that has children."""
    if r.tree:
        return 1 + len({n.parent for n in r.tree.nodes if n.parent >= 0})
    return len(r.drafted_ids)


def full_width(trace: Trace) -> int:
    """The verify width of a round that drafted all it may: gamma + 1, or a full tree's nodes + 1."""
    tree = trace.start.drafter.tree if trace.start and trace.start.drafter else None
    return 1 + (tree.nodes(trace.gamma) if tree else trace.gamma)


def costs(spd: Trace, ar: Trace) -> Costs | None:
    """The step costs of a finished race (None until both runs have decoding rounds)."""
    steps = [r.verify_seconds for r in ar.rounds]
    width = full_width(spd)
    full = [r.verify_seconds for r in spd.rounds if verify_width(r) == width] or [
        r.verify_seconds for r in spd.rounds if r.drafted_ids
    ]
    per_draft = [r.draft_seconds / drafter_steps(r) for r in spd.rounds if r.drafted_ids]
    if not steps or not full or not per_draft:
        return None
    return Costs(
        t1=_quantile(steps, STEP_QUANTILE),
        t_verify=_quantile(full, STEP_QUANTILE),
        t_draft=_quantile(per_draft, STEP_QUANTILE),
        gamma=spd.gamma,
        t1_spread=spread(steps),
        verify_spread=spread(full),
        width=width,
    )


def predicted_by_rounds(trace: Trace, c: Costs) -> float:
    """The cost model over the rounds that ran: tau target steps' worth of tokens for each round's
    own drafter steps and its verify of its own width (chains, trees, rounds that drafted
    nothing alike), averaged over the rounds."""
    if not trace.rounds:
        return math.nan
    steps, _, verify = round_costs(trace, c)
    return tau(trace) * c.t1 / (steps * c.t_draft + verify)


def round_costs(trace: Trace, c: Costs) -> tuple[float, float, float]:
    """A round of `trace` on average (it has rounds): its drafter steps, its verify width, and the
    seconds of its verify, each round's verify priced at its own width."""
    n = len(trace.rounds)
    steps = sum(drafter_steps(r) for r in trace.rounds) / n
    width = sum(verify_width(r) for r in trace.rounds) / n
    return steps, width, sum(c.verify(verify_width(r)) for r in trace.rounds) / n


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
    # token trees: per round (drafter steps, verify width), as `drafter_steps` and `verify_width`
    # count them; empty for chains, whose drafts made are both (plus one, for the width)
    tree_costs: tuple[tuple[int, int], ...] = ()
    draft_seconds: tuple[float, ...] = ()  # per round: the wall time of its drafting, as replayed here

    @property
    def steps(self) -> list[int]:
        """Drafter steps per round, as `drafter_steps` counts a race's: a chain's drafts made, a
        tree's catch-up and one per node with children."""
        return [s for s, _ in self.tree_costs] if self.tree_costs else [d for d, _, _ in self.rounds]

    @property
    def step_seconds(self) -> float:
        """A drafter step's measured cost, as `costs` measures a race's t_draft: the lower quartile over
        the rounds that drafted of their drafting seconds over their drafter steps (nan: none timed)."""
        made = [(t, n) for t, n, (d, _, _) in zip(self.draft_seconds, self.steps, self.rounds) if d and n]
        return _quantile([t / n for t, n in made], STEP_QUANTILE)

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


def scaled_speedup(trace: Trace) -> float:
    """The race's speedup at the paper's fixed step-cost ratios (`demo.engine.scale`): τ over a
    round's cost in target steps, each round priced at its own drafter steps and verify width.
    A function of the trace's counts alone, so a rerun of the same race reads the same."""
    if not trace.rounds or trace.start is None:
        return math.nan
    drafter = trace.start.drafter
    d = scale.draft_ratio(drafter.kind if drafter else None, param_ratio(trace))
    return tau(trace) / scale.rounds_cost([(drafter_steps(r), verify_width(r)) for r in trace.rounds], d)


def sweep_rows(points: list[SweepPoint], c: float, step_costs: Costs | None, kind: str | None = None) -> list[dict]:
    """The sweep as records: gamma, tau, alpha, MBSU (from the drafts made), the speedup at the
    paper's ratios (`scaled_speedup`, for a drafter of this `kind`: None prices a drafter model's
    steps, or none where c = 0) and the cost model's predicted speedup from this race's measured
    costs (None without them)."""
    d = scale.draft_ratio(kind or ("prompt-lookup" if c == 0 else None), c)
    rows = []
    for pt in points:
        pairs = list(pt.tree_costs) or [(made, made + 1) for made, _, _ in pt.rounds]
        row = {
            "gamma": pt.gamma,
            "tau": pt.tau,
            "alpha": pt.alpha,
            "mbsu": pt.tau / (1 + pt.drafts_per_round * c),
            "scaled_speedup": pt.tau / scale.rounds_cost(pairs, d) if pairs else math.nan,
        }
        if not step_costs:
            row["predicted_speedup"] = None
        elif pt.tree_costs:  # each round's own drafter steps and verify width
            cost = sum(n * step_costs.t_draft + step_costs.verify(w) for n, w in pt.tree_costs) / len(pt.tree_costs)
            row["predicted_speedup"] = pt.tau * step_costs.t1 / cost
        else:
            row["predicted_speedup"] = predicted(pt.tau, pt.drafts_per_round, step_costs)
        rows.append(row)
    return rows
