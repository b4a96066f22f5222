"""The session layer: what every surface goes through to decode, with no Gradio in it.

The page, the API, the Analysis tab, the benchmark and the tests all turn what they were sent
into one `Request` (`parse`, by name: every field is checked by `validate` and refused with its
name and valid range), and then use the calls below:

    load(request, progress)        the preset and drafter, loaded once per process (waits for a
                                   running warm-up, so clocks never share the CPU with it)
    prepare(request, image, ...)   everything before the first token, as a generator of loading
                                   reports: the image checked, the models loaded, the lanes built
    lanes(loaded, request, image)  the race's seeded runs, not started: lane -> event generator
                                   (`lane_names(request)`: one speculative lane per drafter, then
                                   the autoregressive one)
    racing(lanes)                  the race as (lane, event) pairs, compute-fair; closes the runs
                                   (and frees their KV caches) however it is left
    run_lanes(...)                 the request's lanes decoded whole, one after the other
    gpu_race(request, image)       prepare + racing + the γ sweep + the table of strategies in one
                                   accelerator call, yielding Loading / Ready / Lane / Sweeping /
                                   Swept (plain data: the part a Space runs on its GPU, in another
                                   process)
    race_until(stop, request, image)  gpu_race's items until `stop` is set, the call closed then
    run(loaded, request, image)    one lane decoded whole -> Trace (benchmark, Analysis tab)
    warm_up(preset)                load and decode a few tokens with each drafter
    paced(timeline, slowdown)      a recorded race again, each event at its measured time x slowdown
What a failed request is told is `failures.message(error)`. Whether a preset and a request's
lanes can run here at all is `offers`'s to say (`prepare` asks it first, before any work).

The package's other modules: `request` (`Request`, `parse`, `lane_names` and `DEFAULTS`, re-exported
here), `race_events` (what `gpu_race` yields: Loading, Ready, Lane, Sweeping, Swept; and what
`decode_examples` yields: Running, Decoded; re-exported here), `validate` (every value checked
before any work), `offers`, `failures`, `languages` (a question's language and the drafter it
gets), `gamma_sweep` (the γ sweep of a finished race), `strategies` (its answer replayed with every
drafter of the preset) and `rejections` (where drafts are rejected, by word category).

Torch and transformers are imported on first use, so a page can import this module and be
usable before they are.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from demo.engine.race import race
from demo.models import zerogpu
from demo.session import budget, failures, gamma_sweep, offers, validate
from demo.session.race_events import Decoded, Lane, Loading, Ready, Running, Sweeping, Swept
from demo.session.request import (  # noqa: F401  (re-exported: demo.session.X is how every surface knows them)
    DEFAULTS,
    LANES,
    SECOND,
    Request,
    lane_names,
    parse,
)
from demo.session.validate import InvalidInput

if TYPE_CHECKING:
    from demo.engine.events import Event, Trace

log = logging.getLogger(__name__)


# --- loading --------------------------------------------------------------------------------------

_WARMING = threading.Lock()  # held while the background warm-up decodes


def load(request: Request, progress=None):
    """The request's preset and drafters, loaded once per process (`progress(fraction, message)`
    hears about each stage). Waits for a running warm-up, so that a race never shares the CPU
    with one and its clocks stay honest."""
    from demo.models import loader  # torch and transformers: imported on first use

    with _WARMING:
        pass
    loaded = loader.load(request.preset, progress)
    for drafter in request.drafters:
        loaded.drafter(drafter, progress)
    return loaded


def _loading(request: Request, show) -> Iterator:
    """Load in a thread, yielding show(fraction, message) for each progress report; returns the
    Loaded, or raises what `_load_failed` makes of the error."""
    reports = queue.Queue()

    def work():
        try:
            reports.put(load(request, lambda fraction, message: reports.put((fraction, message))))
        except Exception as error:  # handed over to the request's thread
            reports.put(error)

    threading.Thread(target=work, name=f"load-{request.preset}", daemon=True).start()
    while True:
        item = reports.get()
        if isinstance(item, Exception):
            raise failures.load_failed(request.preset, item)
        if not isinstance(item, tuple):
            return item
        yield show(*item)


def prepare(request: Request, image_payload, uploads: str | Path, show) -> Iterator:
    """Everything before the first token: the image (a file inside `uploads`), the models, the
    prompt and its length. Yields show(fraction, message) while loading; returns (facts, lanes,
    notes, loaded, image): what the page says of the drafter, the race's runs, notes on the image,
    and the models and image the runs read."""
    offers.check_available(request.preset)
    offers.check_memory(request.preset, request.drafters)
    budget.check(budget.race(request))  # before any work: what exceeds the budget is refused
    path = validate.image_path(image_payload, uploads)
    if path is None:
        raise InvalidInput(validate.NO_IMAGE)
    image, notes = validate.open_image(path)
    if _WARMING.locked():
        yield show(0.0, "waiting for the warm-up to finish")
    loaded = yield from _loading(request, show)
    try:
        facts = tuple(dict.fromkeys(note for d in request.drafters for note in loaded.notes(d)))
    except Exception as error:
        raise failures.load_failed(request.preset, error) from error
    return facts, lanes(loaded, request, image), notes, loaded, image


# --- lanes and runs ---------------------------------------------------------------------------------


def _prompt(loaded, request: Request, image: Image.Image, drafter: str):
    """The prompt of the lanes of `drafter` (the autoregressive lane reads its target inputs);
    refuses (InvalidInput) one the models cannot read or whose answer would not fit their context."""
    try:
        prompt = loaded.prompt(image, request.question, drafter)
    except Exception as error:
        log.warning("the processor refused a request", exc_info=error)
        raise InvalidInput(
            f"This model could not read the image and question ({failures.first_line(error)})."
        ) from error
    tokens = {"target": prompt.target_inputs["input_ids"].shape[1]}
    windows = {"target": validate.context_window(loaded.target.model.config)}
    model = loaded.drafter(drafter).model  # None for prompt lookup: no context to fill
    if prompt.drafter_inputs is not None and model is not None:
        tokens["drafter"] = prompt.drafter_inputs["input_ids"].shape[1]
        windows["drafter"] = validate.context_window(model.config)
    validate.check_context(tokens, windows, request.max_new_tokens)
    return prompt


def lanes(
    loaded, request: Request, image: Image.Image, names: tuple[str, ...] | None = None, drafter=None
) -> dict[str, Iterator[Event]]:
    """The runs of a race, not started: lane name -> the engine's event generator, each with its
    own generator seeded with the request's seed. `names`: the lanes to build, in race order
    (default `lane_names(request)`). Every lane reads the same target inputs: the image is
    processed once per drafter, outside every clock. `drafter` replaces the first speculative
    lane's drafter (the benchmark's drafter on another forward path)."""
    import torch

    from demo.engine.speculative import Prompt, autoregressive_generate, speculative_generate

    names = lane_names(request) if names is None else names
    prompts = {}
    for d in dict.fromkeys(request.lane_drafter(n) for n in names if n != "autoregressive"):
        prompt = _prompt(loaded, request, image, d)
        first = next(iter(prompts.values()), prompt)
        prompts[d] = Prompt(first.target_inputs, prompt.drafter_inputs)
    target_inputs = next(iter(prompts.values())).target_inputs if prompts else None
    if target_inputs is None:  # the autoregressive lane alone
        target_inputs = _prompt(loaded, request, image, request.drafter).target_inputs
    s = request.sampling

    def seeded():
        return torch.Generator(device=loaded.device).manual_seed(s.seed)

    def make(name: str):
        if name == "autoregressive":
            return autoregressive_generate(
                loaded.target,
                Prompt(target_inputs),
                sampling=s,
                max_new_tokens=request.max_new_tokens,
                generator=seeded(),
            )
        d = request.lane_drafter(name)
        return speculative_generate(
            loaded.target,
            drafter if drafter is not None and name == "speculative" else loaded.drafter(d),
            prompts[d],
            gamma=request.gamma,
            sampling=s,
            max_new_tokens=request.max_new_tokens,
            generator=seeded(),
            min_confidence=request.min_confidence,
        )

    return {name: make(name) for name in names}


def close(runs: dict[str, Iterator[Event]]) -> None:
    """End the runs now: closing a generator runs its cleanup and drops its KV cache."""
    import torch

    for run_ in runs.values():
        run_.close()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@contextmanager
def racing(runs: dict[str, Iterator[Event]]):
    """The race of `runs` as (lane, event) pairs; however the block is left (the race over, an
    error, or a caller closing it for a Stop or a client gone), every run is closed."""
    try:
        yield race(runs)
    finally:
        close(runs)


def run_lanes(loaded, request: Request, image: Image.Image, order: tuple[str, ...] | None = None, drafter=None) -> dict:
    """The request's lanes decoded whole, one after the other in `order` (default: all of them,
    `lane_names(request)`), from one prompt: lane -> Trace (`drafter`: as in `lanes`)."""
    from demo.engine.events import Trace

    order = lane_names(request) if order is None else order
    runs = lanes(loaded, request, image, order, drafter)
    try:
        return {lane: Trace.of(runs[lane]) for lane in order}
    finally:
        close(runs)


def run(loaded, request: Request, image: Image.Image, lane: str = "speculative", drafter=None) -> Trace:
    """One lane of the request decoded whole, as a trace (`drafter`: as in `lanes`)."""
    return run_lanes(loaded, request, image, (lane,), drafter)[lane]


def _race_duration(request: Request, image_payload, uploads=None) -> int:
    """Seconds a race asks ZeroGPU for: the work budget's estimate of it (`budget.race`: every lane,
    and a greedy race's γ sweep, which runs in the same call), capped."""
    return zerogpu.clamp(budget.race(request).seconds)


@zerogpu.GPU(duration=_race_duration)
def gpu_race(
    request: Request, image_payload, uploads: str | Path
) -> Iterator[Loading | Ready | Lane | Sweeping | Swept]:
    """The part of a race that needs the accelerator, in one call, yielding plain data only (on
    ZeroGPU it runs in another process, its values pickled): Loading while a preset loads (lazy
    deployments only), Ready once every lane is set up, a Lane per event of the race, a Sweeping
    per draft length the γ sweep has replayed and per strategy the table has (`strategies`), then
    Swept: both, computed here from the models, image and prompt the race used. Every run is closed
    however it ends."""
    from demo.engine.events import Trace
    from demo.session import image_attention, strategies

    facts, runs, notes, loaded, image = yield from prepare(request, image_payload, uploads, Loading)
    yield Ready(facts, tuple(notes))
    traces = {lane: Trace() for lane in runs}
    with racing(runs) as events:
        for lane, event in events:
            traces[lane].add(event)
            yield Lane(lane, event)
    why_not = gamma_sweep.unsweepable(request)
    spd, ar = traces["speculative"], traces["autoregressive"]
    points = []
    for point in gamma_sweep.replays(request, loaded, image, spd, ar):
        points.append(point)
        yield Sweeping(point.gamma)  # between draft lengths the caller may stop (and close) the call
    rows = tuple(gamma_sweep.rows(points, spd, ar))
    table = yield from strategies.compare(request, loaded, image, spd, ar, lambda d: Sweeping(request.gamma, d), points)
    done = {lane: trace for lane, trace in traces.items() if trace.done}  # off every clock: the race is over
    image_attention.attach(loaded, request.question, image, done)
    yield Swept(rows, why_not, tuple((lane, trace.image_attention) for lane, trace in done.items()), tuple(table))


def race_until(stop: threading.Event, request: Request, image_payload, uploads: str | Path) -> Iterator:
    """`gpu_race(request, image_payload, uploads)`'s items as they come, until `stop` is set (a
    page's Stop, a request's budget): it is checked before each next item is asked for, while the
    preset loads, between the race's events and between the sweep's replays, so a stop costs at most
    the item at hand. The accelerator call is closed however this ends, its runs with it."""
    with closing(gpu_race(request, image_payload, uploads)) as items:
        for item in items:
            yield item
            if stop.is_set():
                return


def _examples_duration(preset: str, drafters: list[str], items: list, gamma: int, max_new_tokens: int) -> int:
    """Seconds an analysis asks ZeroGPU for: the work budget's estimate of it (`budget.analysis`), capped."""
    return zerogpu.clamp(budget.analysis(preset, drafters, len(items), len(items), gamma, max_new_tokens).seconds)


@zerogpu.GPU(duration=_examples_duration)
def decode_examples(preset: str, drafters: list[str], items: list, gamma: int, max_new_tokens: int):
    """Speculative decoding, greedy, of each example (`.image`, `.question`, `.language`, and what
    `demo.world.scoring.score` reads) with each drafter, yielding plain data only (on ZeroGPU it runs
    in another process): Running(i, drafter) before each run, then Decoded(i, drafter, trace,
    observations, correct)."""
    from demo.engine.sampling import Sampling
    from demo.models import loader, preloading
    from demo.session import image_attention, rejections
    from demo.world.scoring import score

    preloading.check_served(preset)  # preloaded deployments (a Space) never load in a request
    loaded = loader.load(preset)
    for i, item in enumerate(items):
        for d in drafters:
            yield Running(i, d)
            trace = run(loaded, Request(item.question, preset, d, gamma, Sampling(), max_new_tokens), item.image)
            image_attention.attach(loaded, item.question, item.image, {d: trace})  # after the run, off its clock
            observations = rejections.observations(trace, i, loaded.target.stop_ids, item.language)
            yield Decoded(i, d, trace, observations, score(item.task, item, trace.summary.text))


def warm_up(preset: str) -> None:
    """Load a preset and its drafters and decode a few tokens with each, so the first Run is fast."""
    from demo.engine.sampling import Sampling
    from demo.models import loader  # torch and transformers: imported on first use

    available = loader.availability(preset)
    if not available.ok:  # said again, to whoever picks it
        log.warning("not warming up preset %r: %s", preset, available.message)
        return
    image = Image.new("RGB", (64, 64), (200, 200, 200))
    try:
        with _WARMING:
            loaded = loader.load(preset)
            for spec in loaded.preset.drafters:
                request = Request("Describe the image.", preset, spec.name, 4, Sampling(), 8)
                with racing(lanes(loaded, request, image)) as events:
                    for _ in events:
                        pass
    except Exception:  # reported again to whoever runs the preset
        log.exception("warm-up of preset %r failed", preset)


def paced(timeline, slowdown: float, stop: threading.Event) -> Iterator[tuple[str, Event]]:
    """A recorded race's (lane, event) pairs again, the event made at t seconds of compute shown
    t * slowdown seconds after the start; ends before the next event once `stop` is set."""
    import time

    started = time.perf_counter()
    for lane, event in timeline:
        if stop.wait(max(0.0, started + event.t * slowdown - time.perf_counter())):
            return
        yield lane, event
