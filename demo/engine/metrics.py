"""Metrics: pure functions over a run's trace. Every number the app shows comes from here.

tau    block efficiency: answer tokens per target forward in decoding, the bonus included
       (the prefill's token excluded: an autoregressive run has tau = 1 exactly).
alpha  acceptance rate: accepted drafts / drafted tokens.
MBSU   memory-bound speedup (Gagrani et al. 2024): tau / (1 + gamma * c), c = drafter over
       target parameters; `mbsu_made` counts the drafts actually made per round.
split  a round at this race's step costs (`costs`): drafting, verify, the host's part, and
       this machine's speedup range from them; `scaled_speedup` prices the rounds at the
       paper's ratios (`demo.engine.scale`). Token trees: tau and alpha read the walked path,
       the costs the whole tree (`verify_width`, `drafter_steps`).
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


# Each step cost is the lower quartile of the race's steps: what a step costs when the race has the
# cores (other processes make steps slower, never faster; docs/benchmark.md).
STEP_QUANTILE = 0.25


@dataclass(frozen=True)
class Costs:
    """A race's measured step costs in seconds, each the lower quartile (STEP_QUANTILE) of the rounds
    that measure it."""

    t1: float  # one target step over one token (the autoregressive run's rounds)
    t_verify: float  # one target forward over gamma + 1 tokens (the speculative run's full rounds)
    t_draft: float  # one drafter step (a round's draft seconds over its drafts)
    gamma: int  # the race's gamma
    width: int = 0  # tokens in the verifies t_verify measures: gamma + 1 (0 says so), or a tree's nodes + 1

    def verify(self, n_tokens: float) -> float:
        """A target forward over n_tokens tokens, interpolated linearly between the two measured
        widths (1 token, and `width`), and never below one single step: a forward over more
        tokens does the one-token step's work and more, so where a busy machine timed the wide
        forward cheaper, the step holds (and a round that gets nothing accepted never reads
        faster than the target alone)."""
        width = self.width or self.gamma + 1
        if width <= 1:
            return self.t1
        return max(self.t1, self.t1 + (n_tokens - 1) * (self.t_verify - self.t1) / (width - 1))


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
        width=width,
    )


def round_costs(trace: Trace, c: Costs) -> tuple[float, float, float]:
    """A round of `trace` on average (it has rounds): its drafter steps, its verify width, and the
    seconds of its verify, each round's verify priced at its own width."""
    n = len(trace.rounds)
    steps = sum(drafter_steps(r) for r in trace.rounds) / n
    width = sum(verify_width(r) for r in trace.rounds) / n
    return steps, width, sum(c.verify(verify_width(r)) for r in trace.rounds) / n


def split(spd: Trace, ar: Trace) -> dict | None:
    """A round of `spd` on average, in seconds at this race's step costs (`costs`), as the proof
    panel and the headline both tell it: `draft` (its drafter steps), `verify` (its verify at its
    width) and `other` (the rest of its measured clock: the host's part), with `t1`; and this
    machine's speedup from them, `low` with the host's part, `high` the model steps alone."""
    c = costs(spd, ar)
    if c is None or not spd.rounds:
        return None
    steps, width, verify = round_costs(spd, c)
    before, other = spd.tokens[0].t if spd.tokens else (spd.prefill.t if spd.prefill else 0.0), 0.0
    for r in spd.rounds:
        other += max(0.0, r.t - before - r.draft_seconds - r.verify_seconds)
        before = r.t
    draft, other, t = steps * c.t_draft, other / len(spd.rounds), tau(spd)
    return {
        **{"t1": c.t1, "draft": draft, "verify": verify, "other": other, "steps": steps, "width": width},
        **{"low": t * c.t1 / (draft + verify + other), "high": t * c.t1 / (draft + verify)},
    }


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
            made = pt.drafts_per_round  # the cost model: tau target steps for the drafts made and one verify
            row["predicted_speedup"] = (
                pt.tau * step_costs.t1 / (made * step_costs.t_draft + step_costs.verify(made + 1))
            )
        rows.append(row)
    return rows
