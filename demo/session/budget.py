"""The work budget: the compute a request asks, estimated from the request alone at this machine's
speed. `race`, `analysis` and `law` count worst-case target steps; `fit` runs the largest version
that fits DEMO_BUDGET_SECONDS and says so; `Deadline` ends a request at its limit; `learn` makes
the estimates follow this machine's measured speed (docs/modules.md)."""

from __future__ import annotations

import math
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
BUDGET_SECONDS = 60.0  # about a minute on a 2-vCPU Space for any admitted request (docs/modules.md)
MIN_LIMIT = 15.0  # seconds a request may always run, however small its estimate (a shared CPU is noisy)
LIMIT_SLACK = 2.0  # a request may run this many times its worst-case estimate, up to the budget

# A speculative lane's token: CHAIN_BASE + gamma x (its kind's drafter step + VERIFY_PER_DRAFT),
# from step costs measured on an idle 2-core CPU (docs/modules.md).
CHAIN_BASE = 1.1  # the verify's first token and the round's own bookkeeping, in target steps
VERIFY_PER_DRAFT = 0.03  # each drafted token's share of the verify
TREE_FACTOR = 2.0
SAMPLING_FACTOR = 1.25
SETUP_STEPS = 20.0  # image processing and a prefill of ~40 tokens with the image
ABLATION_STEPS = 2 * SETUP_STEPS  # an example's image ablation: two forwards over prompt + answer
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
    """What a request asks for: `fixed + per_unit x units` target steps, where a unit is what is
    shortened to fit (new tokens of a race, examples of an analysis, draws of a law check)."""

    preset: str
    fixed: float  # steps whatever the units: set-ups
    per_unit: float  # steps per unit
    units: int  # as asked (`fit`: as it runs)
    noun: str  # the unit, plural: "tokens", "examples", "draws"
    what: str  # the request: "race", "analysis", "check"
    asked: str  # e.g. "3 lanes x 440 new tokens (text-only+tree, image-aware at γ 8, sampling)"
    advice: tuple[str, ...] = ()  # the other ways to ask for less that apply to this request
    slow: float = 1.0  # the machine's present slowdown (`slowdown`) the estimate counts
    each: tuple[float, ...] = ()  # each unit's own steps where they differ (a description > a yes/no)
    least: int = 1  # the fewest units worth running (`fit` refuses below)

    @property
    def steps(self) -> float:
        return self.fixed + (sum(self.each[: self.units]) if self.each else self.per_unit * self.units)

    @property
    def seconds(self) -> float:
        return self.steps * step_seconds(self.preset)

    def most(self, seconds: float) -> int:
        """The most units that fit in `seconds` (0: none do): the first units' own steps where
        they differ (`each`), else the mean's."""
        room = seconds / step_seconds(self.preset) - self.fixed
        if not self.each:
            return max(0, int(room // self.per_unit)) if room >= 0 else 0
        return sum(1 for used in accumulate(self.each) if used <= room)  # the first units' own steps


def fit(estimate: Estimate) -> tuple[Estimate, str]:
    """The largest version of the request that fits the budget at this machine's present speed,
    and the sentence that says it was shortened (empty: it runs as asked). Refuses (InvalidInput)
    only when not even `estimate.least` units fit, saying what applies to this request."""
    allowed = budget_seconds()
    if not allowed or estimate.seconds <= allowed:
        return estimate, ""
    most, least = min(estimate.most(allowed), estimate.units), min(estimate.least, estimate.units)
    if most < least:
        busy = estimate.slow > 1
        speed = f" at this machine's present speed ({estimate.slow:.1f}x its idle figures)" * busy
        advice = ", or ".join([*estimate.advice, *["try again in a minute"] * busy]) or f"ask for fewer {estimate.noun}"
        raise InvalidInput(
            f"{'This machine is busy: t' if busy else 'T'}his {estimate.what} asks for {estimate.asked}, and not even "
            f"its smallest version ({least} {estimate.noun[:-1] if least == 1 else estimate.noun}) fits in the {allowed:.3g} s a request may take here"
            f"{speed}. To run it, {advice}."
        )
    return replace(estimate, units=most), shortened(estimate, most)


def shortened(estimate: Estimate, runs: int) -> str:
    """The sentence that says a request runs `runs` of its units, where the budget has room."""
    said = (
        f"{runs} of the {estimate.units} {estimate.noun} you asked for fit in the {budget_seconds():.3g} s a request "
        f"may take, so the {estimate.what} runs {runs}."
    )
    return f"This machine is busy: {said}" if estimate.slow > 1 else said


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


MIN_TOKENS = 16  # the shortest race worth showing: a race is shortened to no fewer, else refused


def _slowest(preset: str, drafters) -> float:
    return max(slowdown(preset, d) for d in (*drafters, None))


def _replays(request) -> float:
    """Target steps per new token of a greedy race's replays, at this machine's speed: the γ sweep's
    (its drafter at γ 1..SWEEP_GAMMAS) and the table's (every strategy of the preset, at its γ)."""
    known = presets.PRESETS.get(request.preset)
    if not request.sampling.greedy:
        return 0.0
    names = known.drafter_names() if known else ()
    steps = SWEEP_GAMMAS * replay_step(request.drafter, request.preset)
    return (steps + sum(replay_step(name, request.preset) for name in names)) * slowdown(request.preset)


def race(request) -> Estimate:
    """The worst case of a race (`demo.session.Request`) at this machine's speed: every lane, and
    the γ sweep and the table of strategies of a greedy one, which replay its answer."""
    preset, lanes = request.preset, (*request.drafters, None)
    per_token = sum(token_steps(d, request.gamma, request.sampling.greedy, preset) * slowdown(preset, d) for d in lanes)
    mode = "greedy" if request.sampling.greedy else "sampling"
    asked = (
        f"{len(lanes)} lanes x {request.max_new_tokens} new tokens ({', '.join(request.drafters)} "
        f"at γ {request.gamma}, {mode})"
    )
    advice = ("race one drafter rather than two",) * (len(request.drafters) > 1)
    advice += ("pick a chain drafter rather than a tree",) * any(d.endswith(presets.TREE) for d in request.drafters)
    advice += ("lower γ",) * (request.gamma > 2)
    fixed = len(lanes) * SETUP_STEPS * slowdown(preset)
    slow = _slowest(preset, request.drafters)
    units = request.max_new_tokens
    return Estimate(
        preset, fixed, per_token + _replays(request), units, "tokens", "race", asked, advice, slow, least=MIN_TOKENS
    )


def fit_race(request) -> tuple[object, int, str]:
    """The largest race of `request` that fits (`fit`): the request as it runs (max new tokens
    lowered), the tokens of its answer the γ sweep and the table replay, and the sentence that says
    so (empty: as asked). Where the replays leave no room for MIN_TOKENS, the race runs MIN_TOKENS
    and its replays take the first tokens that fit beside it."""
    whole, replays = race(request), _replays(request)
    allowed = budget_seconds()
    if replays and allowed and whole.most(allowed) < min(MIN_TOKENS, whole.units):
        lanes, _ = fit(replace(whole, per_unit=whole.per_unit - replays))  # refuses where not even they fit
        tokens = min(lanes.units, MIN_TOKENS)
        room = allowed / step_seconds(request.preset) - lanes.fixed - lanes.per_unit * tokens
        replayed = max(0, min(tokens, int(room // replays)))
        tail = (
            f" Its γ sweep and table of strategies replay its first {replayed}."
            if replayed
            else (" There is no room left for its γ sweep and table of strategies.")
        )
        return replace(request, max_new_tokens=tokens), replayed, shortened(whole, tokens) + tail
    fitted, said = fit(whole)
    return replace(request, max_new_tokens=fitted.units), fitted.units, said


def replay_step(drafter: str, preset: str) -> float:
    """Target steps per new token of one replay of a greedy answer with `drafter` (the γ sweep's
    per draft length, the table of strategies' per strategy): its drafter steps only."""
    return drafter_step(drafter, preset) * (TREE_FACTOR if drafter.endswith(presets.TREE) else 1)


def answer_bound(answer: str, max_new_tokens: int) -> int:
    """New tokens an analysis's run of an example is counted for: its reference answer's characters
    (a tokenizer gives no more tokens than characters) plus ANSWER_MARGIN, at most max new tokens."""
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
    tokens = f"(answers of up to {max(lengths)} tokens)" if answers else f"x {max_new_tokens} new tokens"
    asked = f"{runs} examples x {len(drafters)} drafter{'s' * (len(drafters) > 1)} {tokens}"
    per = max(1, runs // max(n, 1))  # examples in each N: one in each language asked
    advice = ("compare fewer drafters",) * (len(drafters) > 1) + ("pick one language",) * (per > 1)
    advice += ("pick shorter answers (a vqa task)",) * (max(lengths) > 2 * ANSWER_MARGIN)
    # a smaller N asks for the first of the same examples (the mix is prefix-stable), N in each language
    each = [length * per_token + setups for length in lengths]
    slow = _slowest(preset, drafters)
    estimate = Estimate(preset, 0.0, steps / max(n, 1), n, "examples", "analysis", asked, advice, slow)
    return replace(estimate, each=tuple(sum(each[i : i + per]) for i in range(0, runs, per))) if answers else estimate


LAW_PREFIXES = 100  # target forwards of the exact law per token after the first (`exactness.PREFIXES`)
PVALUE_STEPS = 10
MIN_DRAWS = 50  # the fewest draws a way a single check is shortened to, else refused


def law(preset: str, drafter: str, gamma: int, k: int, n: int) -> Estimate:
    """The worst case of one live law check (/exactness): the prefills, the exact law of k tokens,
    n draws each way (the lane's and the broken rule's at the lane's sampled token cost, the target
    alone's one forward a prefix) and the p-values."""
    rounds = k + math.ceil(k / (min(gamma, k + 1) + 1))  # the lane's draw, then the broken rule's
    per_draw = rounds * token_steps(drafter, min(gamma, k + 1), False, preset) * slowdown(preset, drafter)
    per_draw += (k - 1) * slowdown(preset)  # the target alone's
    asked = f"the sampling law of {k} tokens drawn {n} times each way ({drafter} at γ {gamma})"
    advice = ("check fewer tokens (k)",) * (k > 1) + ("lower γ",) * (gamma > 2)
    fixed = (2 * SETUP_STEPS + 2 + (k - 1) * LAW_PREFIXES + PVALUE_STEPS) * slowdown(preset)
    slow = _slowest(preset, [drafter])
    return Estimate(preset, fixed, per_draw, n, "draws", "check", asked, advice, slow, least=MIN_DRAWS)


def limit(estimate: Estimate) -> float | None:
    """Seconds a request with this estimate may run before it is stopped over budget (None: no limit)."""
    allowed = budget_seconds()
    return min(allowed, max(MIN_LIMIT, LIMIT_SLACK * estimate.seconds)) if allowed else None


def race_limit(request) -> float | None:
    """Seconds a race may run before it is stopped over budget: a sampled race gets the same race
    greedy's (its lanes cost about as much a token, and its own estimate has no sweep or table)."""
    greedy = replace(request, sampling=type(request.sampling)()) if not request.sampling.greedy else request
    return limit(race(greedy))


OVER_BUDGET = "stopped: over budget"
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
