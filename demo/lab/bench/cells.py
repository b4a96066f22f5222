"""One cell of the paper-style benchmark (`demo.lab.bench.benchmark`): a task, a drafter on one of its
paths, a gamma and a decoding, measured over held-out examples.

`bench_cell` runs speculative decoding (SPD) and plain autoregressive decoding (AR) of each
example back to back through the session, alternating which goes first, and returns a `Cell`:
tau, alpha, MBSU, throughput and speedup from the runs' own clocks; the step costs T1, T(w) and D
(`step_costs`: medians, with their interquartile ranges); the overhead outside model forwards
(`ForwardTime`); the cost model's predicted and limit speedups; answers the world's scorer accepts;
and, greedy, how many outputs were identical. `drafter_on` puts a loaded drafter on the path
under test. The per-language table and the step-cost bench's race row measure their cells here.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass

from demo import session
from demo.engine import lean, metrics
from demo.engine.decoding import Target
from demo.engine.drafters import DraftState
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.engine.trees import TreeDrafter
from demo.world.scoring import score

SAMPLING = Sampling(greedy=False, temperature=0.7, top_p=0.95, seed=0)


@dataclass
class Cell:
    task: str
    drafter: str
    drafter_path: (
        str  # the drafter's forward that ran: "lean + NumPy step", "lean + CUDA graphs", "lean" or "transformers"
    )
    gamma: int
    decoding: str  # "greedy" | "sampling"
    n: int  # examples
    tau: float
    alpha: float
    acceptance_by_position: list[float]
    mbsu: float
    tok_s_spd: float
    tok_s_ar: float
    speedup: float
    verify_tokens: float  # tokens per verify forward, averaged over rounds (a tree: its nodes + 1)
    drafter_steps: float  # drafter forwards per round (a tree: 1 + nodes with children; prompt lookup: lookups)
    t1_ms: float  # median target step over 1 token (AR rounds)
    t_verify_ms: float  # median full verify forward: gamma + 1 tokens, or a full tree's nodes + 1
    d_ms: float  # median drafter step: a round's drafting time over its drafter steps
    t1_iqr_ms: float  # interquartile range of the same T1 samples
    t_verify_iqr_ms: float  # of the full verifies
    d_iqr_ms: float  # of the drafter steps
    overhead_ms_per_round: float  # SPD: decode wall time minus host time inside model forwards, per round
    overhead_ms_per_step_ar: float  # AR: the same, per step
    limit_speedup: float  # tau * T1 / T(w): this tau with free drafting, every verify a full one
    predicted_speedup: float  # cost model over the rounds that ran, from this cell's step costs, drafting included
    draft_share: float  # drafting's share of the SPD runs' decoding time
    lossless: str  # "k/n identical" for greedy, "n/a (sampling)" otherwise
    correct_spd: int  # answers the world's scorer accepts
    correct_ar: int
    # staged drafting (`demo.engine.staged`): tokens its lookup stage guessed over the cell's rounds,
    # and how many of them the drafter confirmed (its own stage's acceptance); 0 for other drafters
    stage_guessed: int = 0
    stage_confirmed: int = 0


WARM_TOKENS = 16  # the untimed pair each cell starts with (`bench_cell`)


def _classes(base: type) -> list[type]:
    """base and every subclass of it, recursively."""
    out = [base]
    for sub in base.__subclasses__():
        out += _classes(sub)
    return out


class ForwardTime:
    """Host seconds spent inside the engine's forwards while `active()` (nested calls counted once):
    the target's decode forwards (`Target.forward`, `forward_tree` and their overrides) and every
    drafting state's step (`DraftState._forward` and its subclasses'); not the prefills. A run's
    decode wall time minus that is its overhead: the loop around the models."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0
        self._depth = 0

    def _wrap(self, method):
        def timed(*args, **kwargs):
            if self._depth:
                return method(*args, **kwargs)
            self._depth += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
                self._depth -= 1

        return timed

    @contextmanager
    def active(self):
        """Count forwards inside this block (the class methods are wrapped, then restored)."""
        patched = [
            (cls, name, cls.__dict__[name])
            for base, names in ((Target, ("forward", "forward_tree")), (DraftState, ("_forward",)))
            for cls in _classes(base)
            for name in names
            if name in cls.__dict__
        ]
        for cls, name, method in patched:
            setattr(cls, name, self._wrap(method))
        try:
            yield self
        finally:
            for cls, name, method in patched:
                setattr(cls, name, method)


def drafter_on(loaded, name: str, path: str):
    """The loaded drafter `name` on the requested path: "lean" (as loaded: the device's fastest
    checked step, falling back where it must), "lean-torch" (LeanLM's torch step, where "lean" takes
    the NumPy step on a CPU) or "transformers" (the model's transformers forward; a tree drafts
    through its model's). None for a drafter with one path only (prompt lookup, layer-skip) on
    any path but the first."""
    d = loaded.drafter(name)
    if path == "lean":
        return d
    if d.tree is not None:
        return TreeDrafter(lean.on_path(d.base, path), d.tree, name=d.name)
    return lean.on_path(d, path) if d.kind in ("text-only", "image-aware") else None


def run_pair(loaded, example, drafter, gamma: int, sampling: Sampling, max_new: int, spd_first: bool):
    """One SPD and one AR run of the same request, in the given order, through the session as the
    page's races go (`drafter`: the loaded drafter on the path under test) -> (spd, ar), and the
    host seconds each spent inside model forwards (`ForwardTime`)."""
    request = session.Request(
        question=example.question,
        preset=loaded.preset.name,
        drafter=drafter.name,
        gamma=gamma,
        sampling=sampling,
        max_new_tokens=max_new,
    )
    traces, inside = {}, {}
    for lane in session.LANES if spd_first else session.LANES[::-1]:
        meter = ForwardTime()
        with meter.active():
            traces[lane] = session.run(loaded, request, example.image, lane, drafter)
        inside[lane] = meter.seconds
    return traces["speculative"], traces["autoregressive"], inside["speculative"], inside["autoregressive"]


def iqr(values: list[float]) -> float:
    """Interquartile range (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q3 - q1


def step_costs(spd_traces: list[Trace], ar_traces: list[Trace]) -> tuple[metrics.Costs, dict[str, float]]:
    """The measured step costs, pooled over the cell's runs: their medians as `Costs` (seconds), and
    the interquartile range of each (ms): "t1" (AR steps), "t_verify" (full verifies: w = gamma + 1,
    or a full tree's nodes + 1) and "d" (drafter steps: a round's drafting time over its drafter
    steps, rounds that drafted only)."""
    width = metrics.full_width(spd_traces[0])
    spd = [r for t in spd_traces for r in t.rounds]
    full = [r for r in spd if metrics.verify_width(r) == width] or [r for r in spd if r.drafted_ids] or spd
    samples = {
        "t1": [r.verify_seconds for t in ar_traces for r in t.rounds],
        "t_verify": [r.verify_seconds for r in full],
        "d": [r.draft_seconds / metrics.drafter_steps(r) for r in spd if r.drafted_ids],
    }
    median = {k: statistics.median(v) if v else 0.0 for k, v in samples.items()}
    costs = metrics.Costs(median["t1"], median["t_verify"], median["d"], gamma=spd_traces[0].gamma, width=width)
    return costs, {k: iqr(v) * 1e3 for k, v in samples.items()}


def bench_cell(loaded, task, drafter, gamma, decoding, examples, max_new) -> tuple[Cell, list[Trace]]:
    """One cell: SPD with `drafter` (a Drafter) and AR on every example, alternating the order,
    after one short untimed pair: a cell starts warm (the first cell of an idle run, unwarmed,
    measured 9.4 ms of overhead a round where the same drafter later measured 1.6)."""
    sampling = Sampling() if decoding == "greedy" else SAMPLING
    run_pair(loaded, examples[0], drafter, gamma, sampling, min(max_new, WARM_TOKENS), spd_first=True)
    spds, ars, inside_spd, inside_ar = [], [], 0.0, 0.0
    for i, ex in enumerate(examples):
        s, a, s_inside, a_inside = run_pair(loaded, ex, drafter, gamma, sampling, max_new, spd_first=i % 2 == 0)
        spds.append(s)
        ars.append(a)
        inside_spd += s_inside
        inside_ar += a_inside
    all_spd = metrics.pooled(spds)
    tok_s_spd = sum(metrics.decode_tokens(t) for t in spds) / sum(metrics.decode_seconds(t) for t in spds)
    tok_s_ar = sum(metrics.decode_tokens(t) for t in ars) / sum(metrics.decode_seconds(t) for t in ars)
    tau = metrics.tau(all_spd)
    costs, spread = step_costs(spds, ars)
    rounds = len(all_spd.rounds)
    steps, _, verify = metrics.round_costs(all_spd, costs)  # a round's drafter steps and verify, on average
    ar_steps = sum(len(t.rounds) for t in ars)
    identical = sum(s.summary.token_ids == a.summary.token_ids for s, a in zip(spds, ars))
    drafting = sum(r.draft_seconds for t in spds for r in t.rounds)
    stages = [r.stages for t in spds for r in t.rounds if r.stages is not None]
    cell = Cell(
        task=task,
        drafter=drafter.name,
        drafter_path=spds[0].start.drafter.path,
        gamma=gamma,
        decoding=decoding,
        n=len(examples),
        tau=tau,
        alpha=metrics.alpha(all_spd),
        acceptance_by_position=metrics.acceptance_by_position(all_spd),
        mbsu=metrics.mbsu(all_spd),
        tok_s_spd=tok_s_spd,
        tok_s_ar=tok_s_ar,
        speedup=tok_s_spd / tok_s_ar,
        verify_tokens=sum(metrics.verify_width(r) for r in all_spd.rounds) / rounds,
        drafter_steps=sum(metrics.drafter_steps(r) for r in all_spd.rounds) / rounds,
        t1_ms=costs.t1 * 1e3,
        t_verify_ms=costs.t_verify * 1e3,
        d_ms=costs.t_draft * 1e3,
        t1_iqr_ms=spread["t1"],
        t_verify_iqr_ms=spread["t_verify"],
        d_iqr_ms=spread["d"],
        overhead_ms_per_round=(sum(metrics.decode_seconds(t) for t in spds) - inside_spd) / rounds * 1e3,
        overhead_ms_per_step_ar=(sum(metrics.decode_seconds(t) for t in ars) - inside_ar) / ar_steps * 1e3,
        limit_speedup=tau * costs.t1 / costs.t_verify,
        predicted_speedup=tau * costs.t1 / (steps * costs.t_draft + verify),
        draft_share=drafting / sum(metrics.decode_seconds(t) for t in spds),
        lossless=f"{identical}/{len(examples)} identical" if decoding == "greedy" else "n/a (sampling)",
        correct_spd=sum(score(ex.task, ex, s.summary.text) for ex, s in zip(examples, spds)),
        correct_ar=sum(score(ex.task, ex, a.summary.text) for ex, a in zip(examples, ars)),
        stage_guessed=sum(g for g, _ in stages),
        stage_confirmed=sum(c for _, c in stages),
    )
    return cell, spds
