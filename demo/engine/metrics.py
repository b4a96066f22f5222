"""Metrics: pure functions over a run's trace. Every number the app shows comes from here.

    tau    block efficiency: answer tokens produced in decoding per target forward in decoding,
           the bonus included (vLLM calls it "mean acceptance length"). The prefill's token is
           excluded from both counts, so an autoregressive run has tau = 1 exactly.
    alpha  acceptance rate: accepted drafts / drafted tokens.
    MBSU   memory-bound speedup (Gagrani et al. 2024): tau / (1 + gamma * c), with
           c = drafter parameters / target parameters. It is the speedup when every forward
           costs the time to read the model's weights.

gamma and the parameter counts come from the trace's first event (`RunStart`): a trace is
measured on its own, with nothing passed beside it.
"""

from __future__ import annotations

import math

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
            acceptance_by_position=acceptance_by_position(trace),
            accept_length_histogram=accept_length_histogram(trace),
        )
    return result
