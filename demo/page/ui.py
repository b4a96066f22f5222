"""The Gradio page: a live race of speculative against autoregressive decoding of one target.

`build_demo()` lays the page out and wires two endpoints, both fed by the same race of the
engine's event streams (`demo.engine.race`):

    /race    the page's Run button: a generator that streams both token panels, the block view,
             the stats and the four charts while the runs decode, then the downloads
    /trace   for gradio_client: the same race, returned whole as one JSON document
             (`demo.engine.export.payload`)

The Replay button shows the last race again from its recorded events, slowed down by one
factor that the page states (a race of the embedded models takes about a second on a CPU).
The Stop button ends a race or replay.

This module holds no decoding logic and touches no caches or logits: it has `demo.validate`
check the request, asks `demo.models.loader` for the preset, starts the two generators, and maps their
events to components with `demo.page.render` and `demo.page.charts`. Nothing is loaded at import time;
`launch()` warms the default preset up in a background thread once the first page has loaded,
unless the presets were preloaded at start-up (a Space, or DEMO_PRELOAD: `demo.models.zerogpu`); then
only those are offered and served, and no request loads anything. The accelerator part of a race
is `gpu_race`, decorated with `@spaces.GPU` on a Space: it yields plain data (the engine's events),
and the handlers here turn them into components.

Reliability, as the handlers guarantee it:
- Both endpoints receive the raw request values (`preprocess=False`), so every malformed value
  reaches `demo.validate` and gets its message; nothing reaches the engine unchecked.
- Every failure ends as `gr.Error(message)`: the page shows it (and keeps what was decoded), an
  API caller's gradio_client raises it. Unexpected errors are logged with their traceback and
  the person sees one sentence with a reference to the log line, never a traceback.
- A race leaves through `_racing`, however it ends (finished, failed, stopped, cancelled, client
  gone): both engine generators are closed, which frees their KV caches. The page's Stop button
  ends its own race after the event at hand (`stop_race`). An API caller's cancel or a client
  gone makes Gradio close the handler at its next yield, and the handlers yield after any round
  that ends HEARTBEAT_EVERY s after their last yield: decoding ends within max(one round,
  HEARTBEAT_EVERY).
- One decoder at a time (`concurrency_id="decode"`, limit 1: one accelerator, honest clocks),
  at most QUEUE_SIZE requests waiting; one more is told at once that the queue is full.

Gradio 6 takes the theme and CSS at launch, so launch through `launch()` (or pass `CSS` and
`THEME` yourself).
"""

from __future__ import annotations

import functools
import gc
import html
import json
import logging
import os
import queue
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import gradio.utils
from PIL import Image

from demo import validate
from demo.engine import export
from demo.engine.events import Event, RoundEvent, TokenEvent, Trace
from demo.engine.race import race
from demo.models import presets, zerogpu
from demo.page import analysis_tab, charts, render
from demo.validate import InvalidInput, Request

# torch and the decoding engine are imported where a race starts (`start_race`, `_prepare`):
# they take seconds to import, and the page should not wait for them.

log = logging.getLogger(__name__)

DEFAULTS = {"gamma": 4, "max_new_tokens": 128, "temperature": 0.8, "top_p": 0.95, "seed": 0, "min_confidence": 0.5}
QUEUE_SIZE = 32  # requests that may wait for the decoder; the next one is refused as "queue full"
PANEL_EVERY = 0.08  # seconds of wall time between redraws of the panels (the browser keeps up)
CHART_EVERY = 0.5  # and of the charts, which cost the browser more to draw
STOP_WAIT = 2.0  # seconds the Stop button waits for the run to end before it answers anyway
HEARTBEAT_EVERY = 0.02  # seconds: a handler yields after a round once this much time has passed since its last yield
REPLAY_SECONDS = 12.0  # a replay lasts this long, whatever the race took
WARM_UP_AFTER_S = 20.0  # launch() warms the default preset up this long after the start at the latest
LANES = ("speculative", "autoregressive")
# Gradio's cache (uploads, and each race's two downloads) is swept every 10 minutes of files
# older than an hour: a page left open that long uploads its image again.
DELETE_CACHE = (600, 3600)

CSS = (
    render.CSS
    + """
.gradio-container { max-width: 1480px !important; }
#title h1 { margin: 0 0 2px 0; font-size: 26px; }
#title p { margin: 0; opacity: .8; }
#timing { font-size: 13px; opacity: .85; }
#run { min-height: 44px; font-size: 16px; }
.preset-info { font-size: 12px; opacity: .85; line-height: 1.45; }
.preset-info .ready { color: #009E73; }
.preset-info .unavailable { color: #D55E00; }
.reference { font-size: 13px; opacity: .9; padding: 2px 2px 0; }
.reference .task { display: inline-block; padding: 0 8px; margin-right: 6px; border-radius: 999px;
  background: rgba(0,114,178,.14); font-weight: 600; }
#examples .caption-label { font-size: 10px; padding: 0 4px; opacity: .85; }  /* less of the scene hidden */
#examples .grid-wrap { height: auto !important; max-height: none !important; overflow: visible !important; }
#examples .grid-container { grid-template-columns: repeat(auto-fill, minmax(96px, 1fr)) !important; }
#examples-title p { font-size: 13px; margin: 0; }
"""
    + analysis_tab.CSS
)
THEME = gr.themes.Default(primary_hue="teal", neutral_hue="slate")


def _raw_image(**kwargs) -> gr.Image:
    """A gr.Image whose request value reaches the handler as sent (a file dict, None, or anything
    else an API caller put there), instead of failing Gradio's own check of its data model
    first with a message the caller never sees; `demo.validate` then answers every malformed
    value. Gradio still checks, before the handler, that a file it is given was uploaded.
    (Done on the instance: Gradio writes a .pyi stub beside any module that subclasses a component.)"""
    image = gr.Image(**kwargs)
    schema = image.api_info()  # what API clients are told to send, unchanged
    image.data_model = None
    image.api_info = lambda: schema
    return image


# --- errors -----------------------------------------------------------------------------------


class LoadFailed(RuntimeError):
    """A preset whose files are here but would not load (damaged weights, a bad config...)."""


def _first_line(error: BaseException, limit: int = 160) -> str:
    line = (str(error).strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _out_of_memory(error: BaseException) -> bool:
    import torch

    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(error).lower()  # other backends, and the CPU allocator, raise a RuntimeError
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _release_memory() -> None:
    """Give freed tensors back to the accelerator, so the next request finds the memory free."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _message(error: Exception) -> str:
    """What the person or API caller is told about a failed request; the server log gets the rest."""
    from demo.models import loader  # torch and transformers: imported on first use, not to slow the start

    if isinstance(error, (InvalidInput, loader.Unavailable, loader.NotEnoughMemory, LoadFailed)):
        return str(error)  # written for the page
    if _out_of_memory(error):
        log.warning("out of memory during a request: %s", error)
        traceback.clear_frames(error.__traceback__)  # the failed run's frames hold its KV caches
        _release_memory()
        return (
            "The models ran out of memory for this request; it was stopped and its memory freed. "
            "Ask for fewer new tokens, shorten the question, or pick a smaller preset."
        )
    reference = uuid.uuid4().hex[:8]
    log.error("request failed (reference %s)", reference, exc_info=error)
    return f"Something went wrong on the server (reference {reference}; the details are in its log). Try again."


def _load_failed(preset: str, error: Exception) -> Exception:
    """The error a failed load becomes: messages written for the page pass through."""
    from demo.models import loader

    if isinstance(error, (loader.Unavailable, loader.NotEnoughMemory)) or _out_of_memory(error):
        return error
    log.error("loading preset %r failed", preset, exc_info=error)
    return LoadFailed(
        f"The models of preset {preset!r} could not be loaded ({type(error).__name__}: {_first_line(error)}). "
        "Its files may be missing or damaged; the other presets still work."
    )


# --- preparing and running a race -------------------------------------------------------------

_WARMING = threading.Lock()  # held while the background warm-up decodes


def load(request: Request, progress=None):
    """The request's preset and drafter, loaded once per process (`progress(fraction, message)`
    hears about each stage). Waits for a running warm-up, so that a race never shares the CPU
    with one and its clocks stay honest."""
    from demo.models import loader  # torch and transformers: imported on first use, not to slow the start

    with _WARMING:
        pass
    loaded = loader.load(request.preset, progress)
    loaded.drafter(request.drafter, progress)
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
            raise _load_failed(request.preset, item)
        if not isinstance(item, tuple):
            return item
        yield show(*item)


def _uploads() -> Path:
    """Gradio's upload folder: the only place an image may be read from."""
    return Path(gradio.utils.get_upload_folder())


def _image(payload) -> tuple[Image.Image, list[str]]:
    path = validate.image_path(payload, _uploads())
    if path is None:
        raise InvalidInput(validate.NO_IMAGE)
    return validate.open_image(path)


def _prepare(request: Request, image_payload, show) -> Iterator:
    """Everything before the first token: the image, the models, the prompt and its length.
    Yields show(fraction, message) while loading; returns (facts, lanes, notes)."""
    from demo.models import loader  # torch and transformers: imported on first use, not to slow the start

    loader.check_served(request.preset)  # preloaded deployments (a Space) never load in a request
    image, notes = _image(image_payload)
    if not loader.is_loaded(request.preset):
        try:
            available = loader.availability(request.preset)
        except Exception as error:  # files too damaged even to count their parameters
            raise _load_failed(request.preset, error) from error
        if not available.ok:
            raise loader.Unavailable(available.message)
    if _WARMING.locked():
        yield show(0.0, "waiting for the warm-up to finish")
    loaded = yield from _loading(request, show)
    try:
        facts = loaded.notes(request.drafter)
    except Exception as error:
        raise _load_failed(request.preset, error) from error
    return facts, start_race(loaded, request, image), notes


def _check_context(loaded, request: Request, prompt) -> None:
    tokens = {"target": prompt.target_inputs["input_ids"].shape[1]}
    windows = {"target": validate.context_window(loaded.target.model.config)}
    if prompt.drafter_inputs is not None:
        tokens["drafter"] = prompt.drafter_inputs["input_ids"].shape[1]
        windows["drafter"] = validate.context_window(loaded.drafter(request.drafter).model.config)
    validate.check_context(tokens, windows, request.max_new_tokens)


def start_race(loaded, request: Request, image: Image.Image) -> dict[str, Iterator[Event]]:
    """The two runs of a race, not started: lane name -> the engine's event generator.
    Refuses (InvalidInput) a prompt the models cannot read or whose answer would not fit."""
    import torch

    from demo.engine.speculative import Prompt, autoregressive_generate, speculative_generate

    try:
        prompt = loaded.prompt(image, request.question, request.drafter)
    except Exception as error:
        log.warning("the processor refused a request", exc_info=error)
        raise InvalidInput(f"This model could not read the image and question ({_first_line(error)}).") from error
    _check_context(loaded, request, prompt)
    s = request.sampling

    def generator():
        return torch.Generator(device=loaded.device).manual_seed(s.seed)

    spd = speculative_generate(
        loaded.target,
        loaded.drafter(request.drafter),
        prompt,
        gamma=request.gamma,
        sampling=s,
        max_new_tokens=request.max_new_tokens,
        generator=generator(),
        min_confidence=request.min_confidence,
    )
    # Both runs read the same target inputs: the image is processed once, outside both clocks.
    ar = autoregressive_generate(
        loaded.target,
        Prompt(prompt.target_inputs),
        sampling=s,
        max_new_tokens=request.max_new_tokens,
        generator=generator(),
    )
    return {"speculative": spd, "autoregressive": ar}


def _close(lanes: dict[str, Iterator[Event]]) -> None:
    """End both runs now: closing a generator runs its cleanup and drops its KV cache."""
    import torch

    for run in lanes.values():
        run.close()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@contextmanager
def _racing(lanes: dict[str, Iterator[Event]]):
    """The race of `lanes` as (lane, event) pairs; however the block is left (the race over, an
    error, or Gradio closing the handler for a Stop or a client gone), both runs are closed."""
    try:
        yield race(lanes)
    finally:
        _close(lanes)


def _race_duration(request: Request, image_payload) -> int:
    """Seconds a race asks ZeroGPU for: both runs at the preset's per-token budget, capped."""
    preset = presets.PRESETS.get(request.preset)
    per_token = preset.seconds_per_token if preset else presets.SECONDS_PER_TOKEN
    return zerogpu.duration(request.max_new_tokens, len(LANES), per_token)


@zerogpu.GPU(duration=_race_duration)
def gpu_race(request: Request, image_payload) -> Iterator[tuple]:
    """The part of a race that needs the accelerator, yielding plain data only (on ZeroGPU it
    runs in another process, its values pickled): ("loading", fraction, message) while a preset
    loads (lazy deployments only), ("ready", facts, notes) once both runs are set up, then the
    race's (lane, event) pairs. Both runs are closed however it ends."""
    facts, lanes, notes = yield from _prepare(
        request, image_payload, lambda fraction, message: ("loading", fraction, message)
    )
    yield "ready", facts, notes
    with _racing(lanes) as events:
        yield from events


def _until_ready(stream: Iterator[tuple], show) -> Iterator:
    """Yield show(fraction, message) for `gpu_race`'s loading reports; returns (facts, notes)."""
    for item in stream:
        if item[0] == "ready":
            return item[1], item[2]
        yield show(item[1], item[2])
    raise RuntimeError("the race ended before it started")


def warm_up(preset: str) -> None:
    """Load a preset and its drafters and decode a few tokens with each, so the first Run is fast."""
    from demo.engine.sampling import Sampling
    from demo.models import loader  # torch and transformers: imported on first use, not to slow the start

    available = loader.availability(preset)
    if not available.ok:  # said again, on the page, to whoever picks it
        log.warning("not warming up preset %r: %s", preset, available.message)
        return
    image = Image.new("RGB", (64, 64), (200, 200, 200))
    try:
        with _WARMING:
            loaded = loader.load(preset)
            for spec in loaded.preset.drafters:
                request = Request("Describe the image.", preset, spec.name, 4, Sampling(), 8)
                with _racing(start_race(loaded, request, image)) as events:
                    for _ in events:
                        pass
    except Exception:  # reported again to whoever runs the preset
        log.exception("warm-up of preset %r failed", preset)


# --- what Gradio keeps per visitor --------------------------------------------------------------


def _forget_stale_copies() -> None:
    """Drop the component copies Gradio 6 files in this session after each run (call it in a
    handler, after its last yield).

    A handler's gr.skip() (the heartbeat, the charts between redraws, a status message) is a
    prop update: Gradio files a fresh copy of that output component in the session, under the
    output's id. The next plain value for the same output then files that copy again under the
    copy's own id, with the value in the session's config, and nothing ever reads or removes it:
    without this, every race left about 120 such copies in a visitor's session, holding its panels
    and figures (0.7 MiB per 32-token race, 2.1 MiB per 128-token one, for good), and every /trace
    one copy of its JSON. The page's components are the Blocks' own ids; everything else in the
    session's blocks (this app renders nothing dynamically) is such a copy.
    """
    from gradio.context import LocalContext

    blocks, request = LocalContext.blocks.get(None), LocalContext.request.get(None)
    holder = getattr(blocks, "state_holder", None)
    session = getattr(holder, "session_data", {}).get(getattr(request, "session_hash", None))
    if session is None:
        return
    known = blocks.default_config.blocks
    for key in [k for k in session.blocks_config.blocks if k not in known]:
        del session.blocks_config.blocks[key]
        session.config_values.pop(key, None)


def _tidy(handler: Callable[..., Iterator]) -> Callable[..., Iterator]:
    """The generator handler `handler`, followed by `_forget_stale_copies()` however it ends."""

    @functools.wraps(handler)
    def tidied(*args, **kwargs):
        try:
            yield from handler(*args, **kwargs)
        finally:
            _forget_stale_copies()

    return tidied


# --- the streaming handler --------------------------------------------------------------------


def _view(traces: dict[str, Trace], request: Request, facts: tuple[str, ...], charts_too: bool) -> tuple:
    spd, ar = traces["speculative"], traces["autoregressive"]
    gamma = request.gamma
    done = spd.done and ar.done
    comparison = export.comparison(spd, ar) if done else None
    speedup = comparison["speedup"] if comparison else None
    mode = (
        "greedy"
        if request.sampling.greedy
        else f"sampling T={request.sampling.temperature}, top-p={request.sampling.top_p}"
    )
    drafts = f"γ ≤ {gamma}, adaptive below {request.min_confidence:g}" if request.min_confidence else f"γ = {gamma}"
    figures = (
        (
            charts.race(spd, ar),
            charts.block_efficiency(spd),
            charts.accept_lengths(spd),
            charts.acceptance_by_position(spd),
        )
        if charts_too
        else (gr.skip(),) * 4
    )
    return (
        render.panel_html(spd, "Speculative", f"{request.drafter} drafter · {drafts} · {mode}"),
        render.speculative_stats_html(spd, speedup),
        render.panel_html(ar, "Autoregressive (target only)", f"one target forward per token · {mode}"),
        render.autoregressive_stats_html(ar),
        render.outcome_html(spd, ar, comparison, facts),
        render.blocks_html(spd),
        *figures,
    )


@functools.cache
def _export_dir() -> tempfile.TemporaryDirectory:
    """One folder per process for the downloads (held by the cache, removed at exit). Gradio
    copies each file into its own cache when it sends it, and runs never overlap (one
    concurrency slot), so every run can write the same two names."""
    return tempfile.TemporaryDirectory(prefix="spd-exports-")


def _downloads(traces: dict[str, Trace], request: Request) -> tuple:
    folder = Path(_export_dir().name)
    json_path, csv_path = folder / "trace.json", folder / "tokens.csv"
    json_path.write_text(export.to_json(export.payload(request.settings(), traces)))
    csv_path.write_text(export.tokens_csv(traces))
    return (
        gr.DownloadButton(value=str(json_path), interactive=True),
        gr.DownloadButton(value=str(csv_path), interactive=True),
    )


N_VIEW = 10  # panels, stats, outcome, block view and charts: what _view fills


def _update(view: tuple | None = None, downloads: tuple | None = None, busy: bool | None = None, last=None) -> tuple:
    """One update of every output of a run (see `build_demo`); None leaves that part alone, so
    `_update()` changes nothing (the handlers' once-a-round heartbeat).

    busy: whether a race or replay is on (Run and Replay off, Stop on) or over (the reverse).
    """
    skip = gr.skip()
    buttons = (
        (skip, skip, skip)
        if busy is None
        else (
            gr.Button(interactive=not busy, value="Racing…" if busy else "Run the race"),
            gr.Button(interactive=not busy),
            gr.Button(interactive=busy),
        )
    )
    return (view or (skip,) * N_VIEW) + (downloads or (skip, skip)) + buttons + (skip if last is None else last,)


def _status(html_text: str, busy: bool) -> tuple:
    """Show a message where the outcome goes, and leave the rest of the page as it is."""
    skip = gr.skip()
    return _update(view=(skip,) * 4 + (html_text,) + (skip,) * (N_VIEW - 5), busy=busy)


def _failed(message: str) -> tuple:
    return _status(render.error_html(message), busy=False)


class _PageRun:
    """A race or replay on one page, which its Stop button can end: `stop` asks it to end after
    the event at hand; `ended` says it has, its runs closed and its last update sent."""

    def __init__(self):
        self.stop = threading.Event()
        self.ended = threading.Event()


_PAGE_RUNS: dict[str, _PageRun] = {}  # by the page's session: each page runs one thing at a time


@contextmanager
def _page_run(session: gr.Request | None):
    """Register a run of the page `session` (None: a call without a page, e.g. in tests)."""
    run = _PageRun()
    key = getattr(session, "session_hash", None)
    if key:
        _PAGE_RUNS[key] = run
    try:
        yield run
    finally:
        run.ended.set()
        if key and _PAGE_RUNS.get(key) is run:
            del _PAGE_RUNS[key]


def stop_race(session: gr.Request = None) -> tuple:
    """The Stop button: end the page's race or replay after the event at hand, and only then
    say so (an update of the run sent later would cover the word). Gradio also cancels the
    event, which ends a run still waiting in the queue."""
    run = _PAGE_RUNS.get(getattr(session, "session_hash", None))
    if run is not None:
        run.stop.set()
        run.ended.wait(STOP_WAIT)
    return _status(
        '<div class="outcome">Stopped. The panels below keep what was decoded before the stop.</div>', busy=False
    )


def _frames(
    timeline,
    traces: dict[str, Trace],
    request: Request,
    facts: tuple[str, ...],
    stop: threading.Event,
    slowdown: float | None = None,
) -> Iterator[tuple | None]:
    """Feed (lane, event) pairs into `traces` and yield views: at the first token at once, then
    at most every PANEL_EVERY s (charts every CHART_EVERY s), and always at the end. In between
    it yields None (nothing to redraw) after a round that ends HEARTBEAT_EVERY s or more after
    the last yield, so that Gradio can close the handler for a Stop or a client gone within
    max(one round, HEARTBEAT_EVERY); a yield per round would cost a few ms of wall time each.

    Live (slowdown None), events come as fast as the race makes them. A replay shows the event
    made at t seconds of compute at t * slowdown seconds after it starts. Once `stop` is set it
    ends, without a last view, before the next event.
    """
    started = last_panel = last_chart = last_yield = time.perf_counter()
    shown_tokens = False
    for lane, event in timeline:
        if stop.wait(max(0.0, started + event.t * slowdown - time.perf_counter()) if slowdown else 0):
            return
        traces[lane].add(event)
        now = time.perf_counter()
        first = not shown_tokens and isinstance(event, TokenEvent)
        if first or now - last_panel >= PANEL_EVERY:
            charts_too = now - last_chart >= CHART_EVERY
            yield _view(traces, request, facts, charts_too)
            shown_tokens = shown_tokens or first
            last_panel = last_yield = time.perf_counter()
            last_chart = last_panel if charts_too else last_chart
        elif isinstance(event, RoundEvent) and now - last_yield >= HEARTBEAT_EVERY:
            yield None
            last_yield = time.perf_counter()
    yield _view(traces, request, facts, charts_too=True)


def _page_request(
    question, preset, drafter, gamma, decoding, temperature, top_p, seed, max_new_tokens, adaptive, threshold
) -> Request:
    greedy = validate.choice("decoding", decoding, ["greedy", "sampling"]) == "greedy"
    min_confidence = threshold if validate.flag("adaptive draft length", adaptive) else 0.0
    return validate.parse_request(
        question,
        preset,
        drafter,
        gamma,
        greedy,
        temperature,
        top_p,
        seed,
        max_new_tokens,
        min_confidence,
        presets=presets.PRESETS,
    )


@_tidy
def run_race(
    image,
    question,
    preset,
    drafter,
    gamma,
    decoding,
    temperature,
    top_p,
    seed,
    max_new_tokens,
    adaptive=False,
    threshold=DEFAULTS["min_confidence"],
    session: gr.Request = None,
):
    """Stream the race to the page: both panels, stats, block view and charts as events arrive.
    A failure is shown where the outcome goes and raised as gr.Error (an API caller gets it)."""
    with _page_run(session) as run:
        try:
            request = _page_request(
                question,
                preset,
                drafter,
                gamma,
                decoding,
                temperature,
                top_p,
                seed,
                max_new_tokens,
                adaptive,
                threshold,
            )
            with closing(gpu_race(request, image)) as stream:
                facts, notes = yield from _until_ready(
                    stream, lambda fraction, message: _status(render.loading_html(fraction, message), busy=True)
                )
                for note in notes:
                    gr.Info(note)
                yield from _race_to_page(request, facts, stream, run.stop)
        except Exception as error:  # Gradio closing the handler is a GeneratorExit: not caught, not an error
            message = _message(error)
            yield _failed(message)
            raise gr.Error(message, print_exception=False) from None


def _race_to_page(request: Request, facts: tuple[str, ...], events, stop: threading.Event) -> Iterator[tuple]:
    traces = {lane: Trace() for lane in LANES}
    timeline = []  # the race in the order it ran, for the replay
    # The charts wait for the first redraw after the first token: drawing four plots costs the
    # browser more than the first tokens do.
    view = _view(traces, request, facts, charts_too=False)
    yield _update(view=view, downloads=(gr.DownloadButton(value=None, interactive=False),) * 2, busy=True)
    for frame in _frames(_recorded(events, timeline), traces, request, facts, stop):
        view = frame or view
        yield _update(view=frame)
    if stop.is_set():  # the Stop button answers for the page
        return
    # The last update repeats the final view, so that an API client's result is the whole page.
    yield _update(view=view, downloads=_downloads(traces, request), busy=False, last=(request, facts, timeline))


def _recorded(events, timeline: list) -> Iterator:
    for pair in events:
        timeline.append(pair)
        yield pair


@_tidy
def replay_race(last, session: gr.Request = None):
    """Show the last race again, slowed down so that the slower run takes REPLAY_SECONDS; the
    clocks, numbers and order are the measured ones."""
    if last is None:
        yield _failed("Run a race first; the replay shows the last one again, slowly.")
        return
    request, facts, timeline = last
    slowdown = REPLAY_SECONDS / max(event.t for _, event in timeline)
    note = (f"Replay: the measured race shown {slowdown:.0f}× slower than it ran.",)
    traces = {lane: Trace() for lane in LANES}
    view = _view(traces, request, facts + note, charts_too=True)
    yield _update(view=view, busy=True)
    with _page_run(session) as run:
        for frame in _frames(timeline, traces, request, facts + note, run.stop, slowdown):
            view = frame or view
            yield _update(view=frame)
    if not run.stop.is_set():
        yield _update(view=view, busy=False)


@_tidy
def trace_api(
    image, question, preset, drafter, gamma, greedy, temperature, top_p, seed, max_new_tokens, min_confidence=0.0
):
    """The whole race as one JSON document: settings, both traces and their metrics.

    A generator, so that a cancelled or disconnected caller stops the decoding within a round;
    its last value is the document, which is what gradio_client's predict() returns.
    """
    try:
        request = validate.parse_request(
            question,
            preset,
            drafter,
            gamma,
            greedy,
            temperature,
            top_p,
            seed,
            max_new_tokens,
            min_confidence,
            presets=presets.PRESETS,
        )
        traces = {lane: Trace() for lane in LANES}
        with closing(gpu_race(request, image)) as events:
            yield from _until_ready(events, lambda fraction, message: gr.skip())
            last_yield = time.perf_counter()
            for lane, event in events:
                traces[lane].add(event)
                if isinstance(event, RoundEvent) and time.perf_counter() - last_yield >= HEARTBEAT_EVERY:
                    yield gr.skip()  # a chance for Gradio to close this handler (see `_frames`)
                    last_yield = time.perf_counter()
        yield export.payload(request.settings(), traces)
    except Exception as error:
        raise gr.Error(_message(error), print_exception=False) from None


# --- examples ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    image: str  # path to the image file
    question: str
    task: str
    answer: str


EXAMPLES_DIR = presets.ASSETS / "examples"


def load_examples(folder: Path = EXAMPLES_DIR) -> list[Example]:
    """The examples in folder/examples.json, as `demo.world.gallery` writes it: a list of
    {"image", "task", "question", "answer"}, image being a file name in the folder. No file
    means no examples (the embedded world not trained yet)."""
    index = Path(folder) / "examples.json"
    if not index.exists():
        return []
    rows = json.loads(index.read_text())
    return [Example(str(Path(folder) / r["image"]), r["question"], r["task"], r["answer"]) for r in rows]


# --- the page ---------------------------------------------------------------------------------

TIMING = """**How the race is timed.** Both runs decode on this machine, taking turns on one thread.
Each has its own clock that runs only while it computes; the page always advances whichever run
has used less compute so far, so the race you watch is the race that was measured. Drawing the
page and the network are on neither clock."""

HOW_IT_WORKS = r"""
**Speculative decoding** (Leviathan et al. 2023; for multimodal models, Gagrani et al. 2024).
`p` is the target's next-token distribution (the model that sees the image), `q` the drafter's.
Each round:

1. **Draft.** The small drafter proposes γ tokens, one at a time: x₁ … xᵧ with probabilities q.
   A *text-only* drafter never sees the image; an *image-aware* one does.
2. **Verify.** One target forward over the last token plus the γ drafts gives p at every draft
   position and one more, the price of about one target step on a GPU.
3. **Accept.** Greedy: a draft is accepted while it equals the target's argmax. Sampling: draft x
   is accepted with probability min(1, p(x)/q(x)).
4. **Correct.** At the first rejection the target samples its own token from
   norm(max(0, p − q)) (greedy: its argmax): a <span style="color:#D55E00">resampled</span> token.
   If all γ were accepted, it adds a <span style="color:#0072B2">bonus</span> token from p for free.

So every round costs one target forward and yields between 1 and γ+1 tokens, and the output has
exactly the target's distribution: greedy outputs are identical to plain decoding (the badge checks
this on every run), and sampled outputs are distributed identically.

**Adaptive draft length** (the checkbox): the drafter ends a round's drafting early, before γ,
wherever its most likely next token has probability below the threshold, so it wastes fewer
drafts where it is unsure; verification is unchanged, so the output is exactly the same.

**The numbers** (each computed from the run's events, shown beside its formula in the panel):

| | formula | meaning |
|---|---|---|
| τ (block efficiency) | tokens after the prefill / target forwards | 1 for plain decoding, at most γ+1 |
| α (acceptance rate) | accepted drafts / drafted tokens | how often the drafter guessed right |
| MBSU | τ / (1 + γ·c), c = drafter / target params | speedup if a forward costs reading its weights |
| wall-clock speedup | SPD decode tokens/s / AR decode tokens/s | what this machine actually measured |

**CPU versus GPU.** On a GPU a forward over γ+1 tokens costs about as much as over one (decoding is
memory-bound), so the speedup approaches MBSU. On this CPU it costs about two single steps, and
the drafter's steps are not free either, so the measured speedup is smaller than MBSU and
needs a high acceptance rate to exceed 1.

**Inputs.** An image is required (PNG, JPEG, GIF, WebP, BMP or TIFF, at most 10 MiB and 4096 × 4096
pixels; animated GIFs use their first frame, transparency is shown on white). Questions may be up
to 4,000 characters, and the question, image and answer must fit the model's context.
"""


def _header() -> str:
    return (
        '<div id="title"><h1>Speculative decoding, live</h1><p>Upload an image, ask a question, and '
        "watch a small drafter plus the target race the target alone. Every token is coloured by "
        "where it came from; hover or focus one for its probabilities.</p></div>"
    )


def reference_html(example: Example | None) -> str:
    """The chosen example's task family and reference answer (for judging the answers by eye)."""
    return render.reference_html(None if example is None else example.task, None if example is None else example.answer)


def preset_html(name: str) -> str:
    """What a preset is, its caveat, and whether it can load on this machine now."""
    from demo.models import loader  # torch and transformers: imported on first use, not to slow the start

    preset = presets.PRESETS.get(name)
    if preset is None:
        return ""
    try:
        available = loader.availability(name)
    except Exception as error:  # files too damaged even to count their parameters
        log.warning("cannot check preset %r: %s", name, error)
        message = f"Its files could not be read ({type(error).__name__}); they may be damaged."
        available = loader.Availability(False, True, message)
    status = "ready" if available.ok else "unavailable"
    lines = [html.escape(preset.description), html.escape(preset.note)]
    lines.append(f'<span class="{status}">{"✓" if available.ok else "✗"} {html.escape(available.message)}</span>')
    return '<div class="preset-info">' + "<br>".join(line for line in lines if line) + "</div>"


def offered(default: str) -> tuple[list[str], dict[str, str]]:
    """The presets the selector offers, and the others with the reason each is left out.

    Preloaded (a Space, or DEMO_PRELOAD): exactly the presets that loaded at start-up. Lazy: the
    presets whose files are here or may be downloaded (`demo.models.hub`, no torch needed), and always
    `default`, whose own status line says whether it can load."""
    if zerogpu.preload_names(presets.DEFAULT_PRESET) is not None:
        from demo.models import loader  # already imported: the presets were loaded at start-up

        outcome = loader.preloaded()
        if outcome is not None:
            left = {name: f"it failed to load at start-up: {why}." for name, why in outcome.items() if why}
            left |= {
                name: f"not loaded at start-up here (set {zerogpu.PRELOAD_ENV} to serve it)."
                for name in presets.PRESETS
                if name not in outcome
            }
            return [name for name, why in outcome.items() if why is None and name in presets.PRESETS], left
    from demo.models import hub

    choices, left = [], {}
    for name, preset in presets.PRESETS.items():
        found = hub.availability([preset.target, *(s.path for s in preset.drafters)])
        if found.ok or name == default:
            choices.append(name)
        else:
            left[name] = found.message
    return choices, left


def left_out_html(left: dict[str, str]) -> str:
    """The presets the selector does not offer, each with why."""
    if not left:
        return ""
    rows = "".join(f"<br><b>{html.escape(name)}</b>: {html.escape(why)}" for name, why in left.items())
    return f'<div class="preset-info"><span class="unavailable">Not offered here:</span>{rows}</div>'


def _drafter_choices(preset: str) -> list[str]:
    return [s.name for s in presets.PRESETS[preset].drafters]


def _inputs(default_preset: str, examples: list[Example]) -> SimpleNamespace:
    """The left column (image, examples) and the settings; returns the components by name."""
    c = SimpleNamespace()
    choices, left = offered(default_preset)
    if default_preset not in choices:
        default_preset = choices[0] if choices else None
    drafters = _drafter_choices(default_preset) if default_preset else []
    with gr.Column(scale=5, min_width=300):
        c.image = _raw_image(
            type="filepath",
            image_mode=None,
            format="png",  # an image set by the page (the Analysis tab's example) keeps its exact pixels
            label="Image",
            height=240,
            sources=["upload", "clipboard"],
            elem_id="image",
        )
        gr.Markdown(
            "**Examples**: held-out scenes of the embedded world, covering every task family. Pick one.",
            visible=bool(examples),
            elem_id="examples-title",
        )
        c.gallery = gr.Gallery(
            [(e.image, e.task.replace("_", " ")) for e in examples],
            show_label=False,
            columns=4,
            height="auto",
            allow_preview=False,
            object_fit="contain",
            buttons=[],
            visible=bool(examples),
            elem_id="examples",
        )
    with gr.Column(scale=7):
        c.question = gr.Textbox(
            label="Question",
            lines=2,
            max_length=validate.MAX_QUESTION_CHARS,
            elem_id="question",
            placeholder="Describe this image in detail.",
        )
        c.reference = gr.HTML(reference_html(None), js_on_load=None, elem_id="reference")
        with gr.Row():
            # Only the presets' own names and drafters: a request can never name a model or a path.
            c.preset = gr.Dropdown(choices, value=default_preset, label="Model preset", elem_id="preset")
            c.drafter = gr.Dropdown(
                drafters, value=drafters[0] if drafters else None, label="Drafter", elem_id="drafter"
            )
        c.preset_info = gr.HTML(js_on_load=None, elem_id="preset-info")
        gr.HTML(left_out_html(left), js_on_load=None, visible=bool(left), elem_id="presets-left")
        with gr.Row():
            c.gamma = gr.Slider(
                *validate.GAMMA_RANGE, value=DEFAULTS["gamma"], step=1, label="γ: drafts per round", elem_id="gamma"
            )
            c.max_new = gr.Slider(
                *validate.MAX_NEW_RANGE,
                value=DEFAULTS["max_new_tokens"],
                step=1,
                label="Max new tokens",
                elem_id="max-new",
            )
        with gr.Row():
            c.adaptive = gr.Checkbox(False, label="Adaptive draft length", elem_id="adaptive")
            c.threshold = gr.Slider(
                0.05,
                0.95,
                value=DEFAULTS["min_confidence"],
                step=0.05,
                label="Stop drafting below this drafter confidence",
                visible=False,
                elem_id="threshold",
            )
        with gr.Row():
            c.decoding = gr.Radio(["greedy", "sampling"], value="greedy", label="Decoding", elem_id="decoding")
            c.temperature = gr.Slider(
                0.05, 2.0, value=DEFAULTS["temperature"], step=0.05, label="Temperature", visible=False
            )
            c.top_p = gr.Slider(0.05, 1.0, value=DEFAULTS["top_p"], step=0.05, label="Top-p", visible=False)
            c.seed = gr.Number(
                DEFAULTS["seed"], precision=0, label="Seed", visible=False, minimum=0, maximum=validate.SEED_RANGE[1]
            )
        with gr.Row():
            c.run = gr.Button("Run the race", variant="primary", elem_id="run", scale=3)
            c.stop = gr.Button("Stop", variant="stop", interactive=False, elem_id="stop", scale=1)
            c.replay = gr.Button("Replay slowly", interactive=False, elem_id="replay", scale=1)
        gr.Markdown(TIMING, elem_id="timing")
    return c


def _race_view() -> SimpleNamespace:
    """The race's outputs: outcome, both panels and their stats, charts, block view, downloads."""
    v = SimpleNamespace()
    empty = Trace()
    with gr.Row(elem_id="race-head"):
        gr.HTML(render.legend_html(), js_on_load=None, elem_id="legend")
    v.outcome = gr.HTML(render.outcome_html(empty, empty, None), js_on_load=None, label="outcome", elem_id="outcome")
    with gr.Row(equal_height=False):
        with gr.Column(min_width=320):
            v.spd_panel = gr.HTML(
                render.panel_html(empty, "Speculative", "drafter + target"),
                js_on_load=None,
                label="speculative panel",
                elem_id="spd-panel",
            )
            v.spd_stats = gr.HTML(
                render.speculative_stats_html(empty, None),
                js_on_load=None,
                label="speculative stats",
                elem_id="spd-stats",
            )
        with gr.Column(min_width=320):
            v.ar_panel = gr.HTML(
                render.panel_html(empty, "Autoregressive (target only)", "one forward per token"),
                js_on_load=None,
                label="autoregressive panel",
                elem_id="ar-panel",
            )
            v.ar_stats = gr.HTML(
                render.autoregressive_stats_html(empty),
                js_on_load=None,
                label="autoregressive stats",
                elem_id="ar-stats",
            )
    # Empty charts at load: the browser fetches plotly.js before the first Run, not during it.
    with gr.Row(elem_id="charts"):
        v.race_chart = gr.Plot(charts.race(empty, empty), label="race chart", show_label=False, elem_id="chart-race")
        v.tau_chart = gr.Plot(
            charts.block_efficiency(empty), label="block efficiency chart", show_label=False, elem_id="chart-tau"
        )
    with gr.Row(elem_id="charts-2"):
        v.hist_chart = gr.Plot(
            charts.accept_lengths(empty), label="accept lengths chart", show_label=False, elem_id="chart-hist"
        )
        v.pos_chart = gr.Plot(
            charts.acceptance_by_position(empty),
            label="acceptance by position chart",
            show_label=False,
            elem_id="chart-pos",
        )
    with gr.Accordion("Block by block: every verification round of the speculative run", open=True):
        v.blocks = gr.HTML(render.blocks_html(empty), js_on_load=None, label="block view", elem_id="blocks")
    with gr.Row():
        v.json_file = gr.DownloadButton("Download the trace (JSON)", interactive=False, elem_id="download-json")
        v.csv_file = gr.DownloadButton("Download the tokens (CSV)", interactive=False, elem_id="download-csv")
    return v


def _wire(demo: gr.Blocks, c: SimpleNamespace, v: SimpleNamespace, examples: list[Example]) -> None:
    """The events. The page's small events skip the queue, so a full queue never blocks them."""

    def on_example(evt: gr.SelectData):
        example = examples[evt.index]
        return example.image, example.question, reference_html(example)

    def on_preset(name):
        names = _drafter_choices(name) if name in presets.PRESETS else []
        return gr.Dropdown(choices=names, value=names[0] if names else None), preset_html(name)

    def visible(on):
        return gr.update(visible=bool(on))

    small = {"api_visibility": "private", "queue": False}
    c.gallery.select(on_example, None, [c.image, c.question, c.reference], **small)
    c.image.upload(lambda: reference_html(None), None, c.reference, **small)
    c.preset.change(on_preset, c.preset, [c.drafter, c.preset_info], **small)
    demo.load(preset_html, c.preset, c.preset_info, **small)
    c.decoding.change(lambda d: [visible(d == "sampling")] * 3, c.decoding, [c.temperature, c.top_p, c.seed], **small)
    c.adaptive.change(visible, c.adaptive, c.threshold, **small)

    last = gr.State(None)  # the last race: (request, facts, its events in order), for the replay
    outputs = [
        *(v.spd_panel, v.spd_stats, v.ar_panel, v.ar_stats, v.outcome, v.blocks),
        *(v.race_chart, v.tau_chart, v.hist_chart, v.pos_chart),
        *(v.json_file, v.csv_file, c.run, c.replay, c.stop, last),
    ]
    settings = [c.question, c.preset, c.drafter, c.gamma]
    sampling = [c.temperature, c.top_p, c.seed, c.max_new]
    decode = {"concurrency_limit": 1, "concurrency_id": "decode", "preprocess": False}
    racing = c.run.click(
        run_race,  # its accelerator part is `gpu_race`
        [c.image, *settings, c.decoding, *sampling, c.adaptive, c.threshold],
        outputs,
        api_name="race",
        show_progress="hidden",
        **decode,
    )
    replaying = c.replay.click(
        replay_race, last, outputs, api_visibility="private", show_progress="hidden", concurrency_limit=8
    )  # replays mostly sleep
    c.stop.click(stop_race, None, outputs, cancels=[racing, replaying], **small)

    greedy = gr.Checkbox(True, visible=False)
    min_confidence = gr.Number(0.0, visible=False)
    trace_out = gr.JSON(visible=False, label="trace")
    gr.Button(visible=False).click(
        trace_api,
        [c.image, *settings, greedy, *sampling, min_confidence],
        trace_out,
        api_name="trace",
        **decode,
    )


def build_demo(default_preset: str = presets.DEFAULT_PRESET, examples_dir: Path = EXAMPLES_DIR) -> gr.Blocks:
    """The page. Offers the presets of `presets.PRESETS` and the examples in `examples_dir`."""
    examples = load_examples(examples_dir)
    with gr.Blocks(title="Speculative decoding, live", delete_cache=DELETE_CACHE) as demo:
        gr.HTML(_header(), js_on_load=None)
        with gr.Tabs(elem_id="tabs") as tabs:
            with gr.Tab("Race", id="race", elem_id="tab-race"):
                with gr.Row(equal_height=False):
                    controls = _inputs(default_preset, examples)
                view = _race_view()
                with gr.Accordion("How it works", open=False, elem_id="how"):
                    gr.Markdown(HOW_IT_WORKS)
            with gr.Tab("Analysis", id="analysis", elem_id="tab-analysis"):
                c = controls
                analysis_tab.analysis_tab(
                    analysis_tab.RaceControls(
                        tabs=tabs,
                        race_tab="race",
                        image=c.image,
                        question=c.question,
                        preset=c.preset,
                        drafter=c.drafter,
                        gamma=c.gamma,
                        decoding=c.decoding,
                        max_new=c.max_new,
                        run=c.run,
                        reference=c.reference,
                        adaptive=c.adaptive,
                    )
                )
        _wire(demo, controls, view, examples)
    return demo


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    """`fn`, run by the first call only (thread-safe)."""
    lock, done = threading.Lock(), []

    def call():
        with lock:
            if not done:
                done.append(True)
                fn()

    return call


def launch(demo: gr.Blocks, warm: str | None = presets.DEFAULT_PRESET, queue_size: int = QUEUE_SIZE, **kwargs):
    """Serve the page, then warm preset `warm` up in a background thread (None warms nothing),
    started by the first page load or after WARM_UP_AFTER_S, whichever comes first.

    Defaults a caller may override through kwargs: listen on 127.0.0.1 (or $GRADIO_SERVER_NAME),
    no share link, no /monitoring page. Always: at most `queue_size` requests waiting, uploads up to
    `validate.MAX_FILE_BYTES`, no Python errors shown to users (show_error=False), the page's
    theme and CSS. Returns what `Blocks.launch` returns; pass prevent_thread_lock=True to get
    control back.
    """
    block = not kwargs.pop("prevent_thread_lock", False)
    kwargs.setdefault("server_name", os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    kwargs.setdefault("share", False)
    kwargs.setdefault("enable_monitoring", False)  # Gradio's /monitoring summary is open to anyone
    demo.queue(max_size=queue_size, default_concurrency_limit=1)
    if warm:
        # Not at once: importing torch and transformers holds the GIL for seconds, and the first
        # page's requests would wait on it. The first page load starts the warm-up; a timer
        # starts it anyway for a server nobody has opened yet.
        start = _once(lambda: threading.Thread(target=warm_up, args=(warm,), name="warm-up", daemon=True).start())
        with demo:
            demo.load(start, api_visibility="private", queue=False)
        timer = threading.Timer(WARM_UP_AFTER_S, start)
        timer.daemon = True
        timer.start()
    result = demo.launch(
        prevent_thread_lock=True,
        css=CSS,
        theme=THEME,
        max_file_size=validate.MAX_FILE_BYTES,
        show_error=False,
        **kwargs,
    )
    if block:
        demo.block_thread()
    return result
