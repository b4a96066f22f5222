"""The work budget: the compute a request asks of this deployment, known from the request alone.

    race(request) -> Estimate               a race (or /trace): its lanes, their drafters, gamma,
                                            sampling and max new tokens, and its γ sweep
    analysis(preset, drafters, n, runs, gamma, max_new_tokens, answers) -> Estimate
                                            an analysis: examples x drafters greedy runs, each
                                            counted to its reference answer's bound, and
                                            each example's image ablation
    check(estimate)                         refuses (InvalidInput) what exceeds the budget, saying
                                            what was asked, what is allowed and how to get it
    Deadline()                              a request's end: a Stop (`stop()`), or its own limit,
                                            `limit(estimate)`, once armed (`arm(seconds)`: a race
                                            arms it at its start, once its models are loaded)
    learn(request, traces)                  records what a finished race's lanes cost a token on
                                            this machine (`slowdown` then scales the estimates)

The estimate counts target steps (one forward of the target for one token), for the worst case:
every draft rejected, so each round yields one token, and every lane runs to max new tokens.

    autoregressive lane        1 step a token
    speculative lane           CHAIN_BASE + gamma x (drafter step + VERIFY_PER_DRAFT) a token:
                               gamma drafter steps and one verify of gamma + 1 tokens per round
    token tree                 x TREE_FACTOR (several drafts per depth, a verify of the whole tree)
    sampling                   x SAMPLING_FACTOR (p and q warped, residual draws)
    each lane                  + SETUP_STEPS (image, prompt, prefill)
    a greedy race's γ sweep    + SWEEP_GAMMAS x max new tokens x a drafter step (drafter only)
    its table of strategies    + max new tokens x each strategy's drafter step, for the strategies
                               that fit the budget beside the race (`table_strategies`)

Seconds are steps x the preset's seconds per step on the hardware: `Preset.cpu_seconds_per_token`,
or on ZeroGPU `Preset.seconds_per_token`, the same figure the ZeroGPU duration is asked from
(`demo.models.zerogpu.clamp(estimate.seconds)`). The budget is DEMO_BUDGET_SECONDS (default
BUDGET_SECONDS; 0 switches it off, as on a local copy); a running request ends "stopped: over
budget", keeping what it made, once it has run `limit(estimate)` seconds.

The figures above are an idle machine's. A loaded CPU runs a target step 20-25x slower (issue 54:
160-200 ms against 7-9 ms), and no constant covers that without refusing the page's own races on
an idle one. So on a CPU the estimate also learns (`learn`): each race's lanes report what a
token cost them, as a ratio to what the budget counts for that lane (its `token_steps` x the step);
the last LEARN_KEEP ratios of each lane's kind (the autoregressive lane, each drafter) from the last
LEARN_WINDOW seconds, their median x LEARN_MARGIN, scale that lane's tokens (`slowdown`, never
below 1); set-ups and replays follow the target's. On an idle machine every ratio is below 1 (the
step is counted at 2.5x its idle cost) and the estimates are the figures above; on a loaded one
they grow, and the heaviest races are refused, with a sentence that says so, instead of cut.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from itertools import accumulate

from demo.models import drafter_kinds, presets, zerogpu
from demo.session.validate import InvalidInput

BUDGET_ENV = "DEMO_BUDGET_SECONDS"
# The default: the embedded preset's worst-case estimate at 0.02 s a step (2.5x the 6.7-8.7 ms a
# target step measured on an idle 2-core CPU) keeps any admitted request on the default CPU Space
# (2 vCPU) within about a minute, and the running limit ends one that is not.
BUDGET_SECONDS = 60.0
MIN_LIMIT = 15.0  # seconds a request may always run, however small its estimate (a shared CPU is noisy)
LIMIT_SLACK = 2.0  # a request may run this many times its worst-case estimate, up to the budget

# Measured on an idle 2-core CPU (docs/benchmark.md, ../shared/notes/stack-facts.md): a target step
# 6.66 ms, a verify of 5 tokens 7.44 ms, a text-only drafter step 0.96 ms (transformers path).
CHAIN_BASE = 1.1  # the verify's first token and the round's own bookkeeping, in target steps
VERIFY_PER_DRAFT = 0.03  # each drafted token's share of the verify: (7.44 - 6.66) / 4 / 6.66
# A drafter step's cost is its kind's (`demo.models.drafter_kinds.Kind.step`).
TREE_FACTOR = 2.0
SAMPLING_FACTOR = 1.25
SETUP_STEPS = 20.0  # image processing and a prefill of ~40 tokens with the image (33 ms on the CPU)
# An analysis's image ablation, once per example (greedy: every drafter writes the target's answer):
# two teacher-forced target forwards over prompt + answer: 131 ms each profiled (a description of
# 106 tokens, the 2-core CPU at load 9), 40 steps (0.8 s) allowed.
ABLATION_STEPS = 2 * SETUP_STEPS
ANSWER_MARGIN = 8  # new tokens an analysis counts past an example's reference answer (`answer_bound`)
SWEEP_GAMMAS = 10  # the γ sweep replays the answer with the drafter at γ = 1..10

LEARN_ENV = "DEMO_BUDGET_LEARN"  # "0": the idle figures only (the test suite's default: its estimates are exact)
LEARN_MARGIN = 1.25  # a loaded machine's step varies; an admitted race must still fit
LEARN_WINDOW = 600.0  # seconds a lane's measured cost is remembered
LEARN_KEEP = 3  # the recent measurements of each lane's kind that count
LEARN_MIN_TOKENS = 6  # a lane that made fewer says too little
TARGET = "autoregressive"  # the kind of the autoregressive lane; a drafted lane's kind is its drafter


def budget_seconds() -> float:
    """This deployment's budget per request, in seconds (0: none)."""
    value = os.environ.get(BUDGET_ENV, "").strip()
    try:
        return max(0.0, float(value)) if value else BUDGET_SECONDS
    except ValueError:
        return BUDGET_SECONDS


def step_seconds(preset: str) -> float:
    """Seconds one target step of `preset` is allowed on this hardware."""
    known = presets.PRESETS.get(preset)
    if zerogpu.zero_gpu():
        return known.seconds_per_token if known else presets.SECONDS_PER_TOKEN
    return known.cpu_seconds_per_token if known else presets.CPU_SECONDS_PER_TOKEN


@dataclass(frozen=True)
class Estimate:
    """What a request asks for: `fixed + per_unit x units` target steps, where a unit is what a
    person would lower to ask for less (new tokens of a race, examples of an analysis)."""

    preset: str
    fixed: float  # steps whatever the units: set-ups
    per_unit: float  # steps per unit
    units: int  # as asked
    unit: str  # e.g. "max new tokens", "N examples"
    asked: str  # e.g. "3 lanes x 440 new tokens (text-only+tree, image-aware at γ 8, sampling)"
    advice: str  # other ways to ask for less
    busy: str = ""  # what a slowed machine adds to the estimate (`slowdown`), said with it
    each: tuple[float, ...] = ()  # each unit's own steps where they differ (a description > a yes/no)

    @property
    def steps(self) -> float:
        return self.fixed + self.per_unit * self.units

    @property
    def seconds(self) -> float:
        return self.steps * step_seconds(self.preset)

    def most(self, seconds: float) -> int:
        """The most units that fit in `seconds` (0: none do): the first units' own steps where
        they differ (`each`), else the mean's."""
        room = seconds / step_seconds(self.preset) - self.fixed
        if not self.each:
            return max(0, int(room // self.per_unit))
        return sum(1 for used in accumulate(self.each) if used <= room)  # the first units' own steps


def drafter_step(drafter: str, preset: str) -> float:
    """A drafter's step, in target steps: its registered kind's (`demo.models.drafter_kinds`); a
    drafter of no registered kind costs a text-only drafter's."""
    offer = presets.PRESETS[preset].drafter(drafter) if preset in presets.PRESETS else None
    return (offer.kind if offer else drafter_kinds.of("text-only")).step


def token_steps(drafter: str | None, gamma: int, greedy: bool, preset: str) -> float:
    """Worst-case target steps per new token of one lane (None: the autoregressive lane)."""
    if drafter is None:
        steps = 1.0
    else:
        steps = CHAIN_BASE + gamma * (drafter_step(drafter, preset) + VERIFY_PER_DRAFT)
        steps *= TREE_FACTOR if drafter.endswith(presets.TREE) else 1.0
    return steps * (1.0 if greedy else SAMPLING_FACTOR)


_LEARNED: dict[tuple[str, str], deque] = {}  # (preset, lane kind) -> (time.monotonic(), ratio) pairs
_LEARNED_LOCK = threading.Lock()


def learning() -> bool:
    """Whether estimates learn from measured costs: on a CPU, unless DEMO_BUDGET_LEARN is "0" (a
    ZeroGPU call is asked its duration from the estimate, and a GPU's step is not this CPU's)."""
    return os.environ.get(LEARN_ENV, "1").strip() != "0" and not zerogpu.zero_gpu()


def record(preset: str, drafter: str | None, ratio: float, now: float | None = None) -> None:
    """Remember that a lane (`drafter`; None: the autoregressive lane) just cost `ratio` times what
    the budget counts for its tokens."""
    key = (preset, drafter or TARGET)
    with _LEARNED_LOCK:
        _LEARNED.setdefault(key, deque(maxlen=LEARN_KEEP)).append((time.monotonic() if now is None else now, ratio))


def forget() -> None:
    """Drop every measured cost (the idle figures again)."""
    with _LEARNED_LOCK:
        _LEARNED.clear()


def slowdown(preset: str, drafter: str | None = None) -> float:
    """What this machine's recent lanes of this kind (None: the target's, which a kind never
    measured also gets) cost over what the budget counts: the median of the last LEARN_KEEP within
    LEARN_WINDOW seconds, x LEARN_MARGIN, at least 1."""
    if not learning():
        return 1.0
    now = time.monotonic()
    with _LEARNED_LOCK:
        recent = {k: [r for t, r in kept if now - t <= LEARN_WINDOW] for k, kept in _LEARNED.items() if k[0] == preset}
    ratios = recent.get((preset, drafter or TARGET)) or recent.get((preset, TARGET)) or [0.0]
    return max(1.0, LEARN_MARGIN * statistics.median(ratios))  # the median: one stall is not the machine's speed


def learn(request, traces: dict) -> None:
    """Record what each lane of a race (its `Trace` by lane name) cost a token: its clock from its
    first token to its last (set-up and prefill left out), over what `token_steps` counts."""
    if not learning():
        return
    from demo.session.request import SECOND

    kinds = {"speculative": request.drafter, SECOND: request.second_drafter, "autoregressive": None}
    for lane, trace in traces.items():
        if lane not in kinds or len(trace.tokens) < LEARN_MIN_TOKENS:
            continue
        drafter = kinds[lane]
        measured = (trace.tokens[-1].t - trace.tokens[0].t) / (len(trace.tokens) - 1)
        counted = token_steps(drafter, request.gamma, request.sampling.greedy, request.preset)
        record(request.preset, drafter, measured / (counted * step_seconds(request.preset)))


def _race_alone(request) -> tuple[float, float]:
    """(fixed, per new token) target steps of a race's lanes and, when greedy, its γ sweep, each
    at this machine's `slowdown`."""
    preset, lanes = request.preset, (*request.drafters, None)
    per_token = sum(token_steps(d, request.gamma, request.sampling.greedy, preset) * slowdown(preset, d) for d in lanes)
    if request.sampling.greedy:
        per_token += SWEEP_GAMMAS * replay_step(request.drafter, preset) * slowdown(preset)
    return len(lanes) * SETUP_STEPS * slowdown(preset), per_token


def _busy(preset: str, drafters) -> str:
    """What the estimate says of a machine slower than the idle figures (empty when it is not)."""
    most = max(slowdown(preset, d) for d in (*drafters, None))
    return f" at this machine's present speed (its recent runs cost up to {most:.1f}x the idle figures)" * (most > 1)


def race(request) -> Estimate:
    """The worst case of a race (`demo.session.Request`): every lane, and the γ sweep and the table
    of strategies of a greedy one."""
    fixed, per_token = _race_alone(request)
    replays = sum(replay_step(name, request.preset) for name in table_strategies(request))
    per_token += replays * slowdown(request.preset)
    mode = "greedy" if request.sampling.greedy else "sampling"
    lanes = len(request.drafters) + 1
    asked = (
        f"{lanes} lanes x {request.max_new_tokens} new tokens ({', '.join(request.drafters)} "
        f"at γ {request.gamma}, {mode})"
    )
    advice = "race one drafter rather than two, lower γ, or pick a chain drafter rather than a tree"
    busy = _busy(request.preset, request.drafters)
    return Estimate(request.preset, fixed, per_token, request.max_new_tokens, "max new tokens", asked, advice, busy)


def replay_step(drafter: str, preset: str) -> float:
    """Target steps per new token of one replay of a greedy answer with `drafter` (the γ sweep's
    per draft length, the table of strategies' per strategy): its drafter steps only."""
    return drafter_step(drafter, preset) * (TREE_FACTOR if drafter.endswith(presets.TREE) else 1)


def table_strategies(request, offered: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The strategies the table of a greedy race replays (`demo.session.strategies`): of those
    `offered` (default: the preset's), the race's own first, while the race and the replays stay
    within the budget; the others are left out of the table, not refused. A sampling race has none."""
    known = presets.PRESETS.get(request.preset)
    offered = offered if offered is not None else known.drafter_names() if known else ()
    if not request.sampling.greedy:
        return ()
    allowed = budget_seconds() / step_seconds(request.preset) if budget_seconds() else float("inf")
    fixed, per_token = _race_alone(request)
    used = fixed + per_token * request.max_new_tokens
    chosen = []
    for name in sorted(offered, key=lambda name: name not in request.drafters):
        cost = replay_step(name, request.preset) * slowdown(request.preset) * request.max_new_tokens
        if used + cost <= allowed:
            chosen.append(name)
            used += cost
    return tuple(name for name in offered if name in chosen)


def answer_bound(answer: str, max_new_tokens: int) -> int:
    """New tokens an analysis's run of an example is counted for: its reference answer's characters
    plus ANSWER_MARGIN, at most max new tokens. A tokenizer gives no more tokens than characters
    (the embedded world's measured 0.22-1.0 a character), and the target is trained to give that
    answer; a run that writes past it is still bounded by its max new tokens and the running limit."""
    return min(max_new_tokens, len(answer) + ANSWER_MARGIN)


def analysis(
    preset: str,
    drafters: list[str],
    n: int,
    runs: int,
    gamma: int,
    max_new_tokens: int,
    answers: list[str] | None = None,
) -> Estimate:
    """The worst case of an analysis of N = `n` asked: `runs` examples (N in each language asked),
    each decoded greedily with every drafter, every draft rejected; each run to max new tokens, or,
    given the examples' reference `answers`, to each one's `answer_bound`."""
    lengths = [answer_bound(a, max_new_tokens) for a in answers] if answers else [max_new_tokens] * runs
    per_token = sum(token_steps(d, gamma, True, preset) * slowdown(preset, d) for d in drafters)
    setups = (SETUP_STEPS * len(drafters) + ABLATION_STEPS) * slowdown(preset)
    steps = sum(lengths) * per_token + setups * len(lengths)
    asked = f"{runs} examples x {len(drafters)} drafter{'s' * (len(drafters) > 1)} x {max_new_tokens} new tokens"
    if answers:
        asked = f"{runs} examples x {len(drafters)} drafter{'s' * (len(drafters) > 1)} (answers of up to {max(lengths)} tokens)"
    advice = "compare fewer drafters, pick one language, or pick shorter answers (a vqa task)"
    # a smaller N asks for the first of the same examples (the mix is prefix-stable), N in each language
    each, per = [length * per_token + setups for length in lengths], max(1, runs // max(n, 1))
    estimate = Estimate(preset, 0.0, steps / max(n, 1), n, "N examples", asked, advice, _busy(preset, drafters))
    return replace(estimate, each=tuple(sum(each[i : i + per]) for i in range(0, runs, per))) if answers else estimate


def check(estimate: Estimate) -> None:
    """Refuse a request whose estimate exceeds the budget, saying what would fit."""
    allowed = budget_seconds()
    if allowed and estimate.seconds > allowed:
        most = estimate.most(allowed)
        lower = f"lower {estimate.unit} to {most} or less, or " if most else ""
        raise InvalidInput(
            f"This request asks for {estimate.asked}: up to about {estimate.seconds:.0f} s of compute here"
            f"{estimate.busy}, and "
            f"this deployment allows {allowed:.0f} s a request so that no visitor holds it for long. To run it, "
            f"{lower}{estimate.advice}; or run your own copy with `{BUDGET_ENV}=0 python app.py`, which lifts the "
            "budget."
        )


def limit(estimate: Estimate) -> float | None:
    """Seconds a request with this estimate may run before it is stopped over budget (None: no limit)."""
    allowed = budget_seconds()
    return min(allowed, max(MIN_LIMIT, LIMIT_SLACK * estimate.seconds)) if allowed else None


def race_limit(request) -> float | None:
    """Seconds a race may run before it is stopped over budget: a sampled race runs under the limit
    of the same race greedy. Its lanes cost about what greedy ones do a token (the lanes' own clocks,
    medians of two greedy and two sampled races interleaved on the embedded world, text-only at γ 4,
    96 new tokens, the shared 2-core CPU at load 5-10, 2026-12-05: sampled / greedy 1.02 on the
    speculative lane, 0.83 on the autoregressive one), and its answers run to max new tokens more
    often; but without a sweep or a table its own estimate is far smaller than the greedy one's, and
    two of three sampled races were stopped by that limit (issue 53)."""
    greedy = replace(request, sampling=type(request.sampling)()) if not request.sampling.greedy else request
    return limit(race(greedy))


OVER_BUDGET = "stopped: over budget"
# A race whose every lane finished, whose budget then ran out while its γ sweep and strategy table
# were made: the race stands whole; only those are missing.
SWEEP_CUT = "the budget ran out after the race, while its γ sweep and table of strategies were made"


class Deadline:
    """A request's end: a Stop (`stop()`), or its limit running out once armed (`arm(seconds)`,
    from then). `over` says the limit ran out (and no Stop came first); `ended`, either."""

    def __init__(self):
        self._stopped = threading.Event()  # set by a Stop; `wait` wakes on it at once
        self.seconds: float | None = None  # the limit armed (None: none)
        self.ends: float | None = None  # time.monotonic() when it runs out

    def arm(self, seconds: float | None) -> None:
        """From now, run out after `seconds` (None: never)."""
        self.seconds = seconds
        self.ends = None if seconds is None else time.monotonic() + seconds

    def stop(self) -> None:
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    @property
    def over(self) -> bool:
        return not self.stopped and self.ends is not None and time.monotonic() >= self.ends

    @property
    def ended(self) -> bool:
        return self.stopped or self.over

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a Stop or the limit; whether it has ended."""
        if self.ends is not None:
            timeout = min(timeout, max(0.0, self.ends - time.monotonic()))
        self._stopped.wait(timeout)
        return self.ended
