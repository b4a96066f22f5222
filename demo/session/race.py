"""A race as one object, what the page's Run and /trace consume: `Race(request, image, uploads)`, its
`events()` (Loading / Ready / Lane / Sweeping, then one `RaceResult` whose `ending` says how it
ended), `stop()`, `traces` and `deadline`. `gpu_race` is its one accelerator call: the lanes, the
γ sweep, the table of strategies and each answer's image attention, all from one `Prompts`.
`Replay` plays a recorded race again, slowed down."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from demo.models import zerogpu
from demo.session import budget, gamma_sweep, image_attention, lane_runs, offers, strategies, validate
from demo.session.race_events import Lane, Loading, Ready, Sweeping, Swept
from demo.session.request import Request, lane_names
from demo.session.validate import InvalidInput

if TYPE_CHECKING:
    from demo.engine.events import Event, Trace

Ending = Literal["finished", "stopped", "over budget", "sweep cut"]


def prepare(request: Request, image_payload, uploads: str | Path, show) -> Iterator:
    """Everything before the first token: the image (a file inside `uploads`), the models, the
    prompts. Yields show(fraction, message) while loading; returns (facts, notes, prompts): what
    the page says of the drafters, notes on the image, and the race's `Prompts` (its models and
    image with them)."""
    offers.check_available(request.preset)
    offers.check_memory(request.preset, request.drafters)
    path = validate.image_path(image_payload, uploads)
    if path is None:
        raise InvalidInput(validate.NO_IMAGE)
    image, notes = validate.open_image(path)
    if lane_runs._WARMING.locked():
        yield show(0.0, "waiting for the warm-up to finish")
    loaded = yield from lane_runs.loading(request, show)
    try:
        facts = tuple(dict.fromkeys(note for d in request.drafters for note in loaded.notes(d)))
    except Exception as error:
        from demo.session import failures

        raise failures.load_failed(request.preset, error) from error
    return facts, tuple(notes), lane_runs.Prompts(loaded, request.question, image)


def _race_duration(request: Request, image_payload, uploads=None) -> int:
    """Seconds a race asks ZeroGPU for: the work budget's estimate of it (`budget.race`: every lane,
    and a greedy race's γ sweep and table, which run in the same call), capped."""
    return zerogpu.clamp(budget.race(request).seconds)


@zerogpu.GPU(duration=_race_duration)
def gpu_race(
    request: Request, image_payload, uploads: str | Path
) -> Iterator[Loading | Ready | Lane | Sweeping | Swept]:
    """The part of a race that needs the accelerator, in one call, yielding plain data only (Loading,
    Ready, a Lane per event, a Sweeping per replay, then Swept); every run is closed however it ends."""
    from demo.engine.events import Trace

    facts, notes, prompts = yield from prepare(request, image_payload, uploads, Loading)
    # Fitted again before any decoding: a warm-up it waited for may have just measured this machine.
    request, replayed, said = budget.fit_race(request)
    runs = lane_runs.lanes(prompts.loaded, request, prompts.image, prompts=prompts)
    yield Ready((said,) * bool(said) + facts, notes, request, said)
    traces = {lane: Trace() for lane in runs}  # this call's own, for the sweep (the caller's are Race.traces)
    with lane_runs.racing(runs) as events:
        for lane, event in events:
            traces[lane].add(event)
            yield Lane(lane, event)
    spd, ar = traces["speculative"], traces["autoregressive"]
    points = []
    for point in gamma_sweep.replays(request, prompts, spd, ar, replayed):
        points.append(point)
        yield Sweeping(point.gamma)  # between draft lengths the caller may stop (and close) the call
    rows = tuple(gamma_sweep.rows(points, spd, ar))
    sweeping = (lambda d: Sweeping(request.gamma, d), points, replayed)
    table = yield from strategies.compare(request, prompts, spd, ar, *sweeping)
    done = {lane: trace for lane, trace in traces.items() if trace.done}  # off every clock: the race is over
    image_attention.attach(prompts, done, request.question)  # the attention and the ablation, read once
    attention = tuple((lane, trace.image_attention, trace.ablation) for lane, trace in done.items())
    yield Swept(rows, gamma_sweep.unsweepable(request), attention, tuple(table))


@dataclass(frozen=True)
class RaceResult:
    """How a race ended, and what it made: its lanes' traces (`Race.traces`), the γ sweep's rows
    (or why none), the table of strategies, and the limit it ran under (None: no budget)."""

    ending: Ending
    traces: dict[str, Trace]
    rows: tuple[dict, ...] = ()
    why_not: str | None = None
    strategies: tuple[dict, ...] = ()
    limit: float | None = None
    shortened: str = ""  # the sentence that says the budget shortened the race (`budget.fit_race`)
    timeline: tuple[tuple[str, Event], ...] = field(default=(), repr=False)  # (lane, event) as they ran

    def said(self) -> dict:
        """What a trace document adds for this ending: {"sweep_cut": ...} or {"stopped": ...}
        with the sentence (`budget.SWEEP_CUT`, `budget.OVER_BUDGET`); nothing when it finished."""
        said = {"sweep cut": {"sweep_cut": budget.SWEEP_CUT}, "over budget": {"stopped": budget.OVER_BUDGET}}
        said = said.get(self.ending, {"stopped": "stopped"} if self.ending == "stopped" else {})
        return said | ({"shortened": self.shortened} if self.shortened else {})


class Race:
    """One race: its request, its budget and stop, its lanes' traces, and its events (see the
    module's docstring). Made cheaply: nothing loads until `events()` is iterated."""

    def __init__(self, request: Request, image_payload, uploads: str | Path):
        from demo.engine.events import Trace

        self.request = request
        self.estimate = budget.race(request)
        self.deadline = budget.Deadline()
        self.traces: dict[str, Trace] = {lane: Trace() for lane in lane_names(request)}
        self.timeline: list[tuple[str, Event]] = []  # (lane, event) in the order the race ran them
        self.ready: Ready | None = None
        self.shortened = ""  # the sentence that says the budget shortened it (`budget.fit_race`)
        self._call = (image_payload, uploads)

    def stop(self) -> None:
        """End the race after the item at hand (the call, and its runs, are closed then)."""
        self.deadline.stop()

    def events(self) -> Iterator[Loading | Ready | Lane | Sweeping | RaceResult]:
        """The race's items as they come, then its RaceResult. The deadline is checked after each
        item (while the preset loads, between the race's events and between the sweep's replays),
        so a stop costs at most the item at hand. Refuses (InvalidInput) before any work a request
        that does not fit the budget even shortened; one that fits shortened runs so (`Ready.request`)."""
        budget.fit_race(self.request)
        swept = None
        with closing(gpu_race(self.request, *self._call)) as items:
            for item in items:
                if isinstance(item, Swept):  # the last item: its contents go into the result
                    swept = item
                    break
                if isinstance(item, Ready):
                    self.request, self.shortened, self.ready = item.request or self.request, item.said, item
                    self.estimate = budget.race(self.request)
                    self.deadline.arm(budget.race_limit(self.request))  # the race's own limit, from its start
                elif isinstance(item, Lane):
                    self.traces[item.name].add(item.event)
                    self.timeline.append((item.name, item.event))
                yield item
                if self.deadline.ended:
                    break
        yield self._result(swept)

    def _result(self, swept: Swept | None) -> RaceResult:
        budget.learn(self.request, self.traces)  # what its tokens cost: the next estimates follow this machine
        made = dict(traces=self.traces, limit=self.deadline.seconds, timeline=tuple(self.timeline))
        made["shortened"] = self.shortened
        if swept is not None:
            for lane, attention, ablation in swept.attention:
                self.traces[lane].image_attention, self.traces[lane].ablation = attention, ablation
            return RaceResult("finished", rows=swept.rows, why_not=swept.why_not, strategies=swept.strategies, **made)
        if self.deadline.over:
            raced = self.ready is not None and all(t.done for t in self.traces.values())
            return RaceResult("sweep cut" if raced else "over budget", **made)
        if self.deadline.stopped:
            return RaceResult("stopped", **made)
        raise RuntimeError("the race ended before it started")


class Replay:
    """A recorded race's (lane, event) pairs again (`events()`), the event made at t seconds of
    compute shown t * slowdown seconds after the start; `stop()` ends it before the next event."""

    def __init__(self, timeline, slowdown: float):
        self.timeline, self.slowdown = timeline, slowdown
        self.deadline = budget.Deadline()  # never armed: a replay has no budget, only a Stop

    def stop(self) -> None:
        self.deadline.stop()

    @property
    def stopped(self) -> bool:
        return self.deadline.stopped

    def events(self) -> Iterator[tuple[str, Event]]:
        started = time.perf_counter()
        for lane, event in self.timeline:
            if self.deadline.wait(max(0.0, started + event.t * self.slowdown - time.perf_counter())):
                return
            yield lane, event
