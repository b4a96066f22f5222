"""The Race tab's handlers: each yields dicts keyed by the names of the components it updates.

    run_race      /race and the Run button: streams every lane's token panel and stats, the block
                  views and the charts while the runs decode, then the downloads
    replay_race   the Replay button: the last race again from its recorded events, slowed down
                  by one factor that the page states
    stop_race     the Stop button: ends the page's race or replay after the event at hand, which
                  says "Stopped." in its own last update
    trace_api     /trace, for gradio_client: the same race returned whole as one JSON document

A name left out of an update leaves that component as it is. `positional(handler)` turns the
dicts into the tuples Gradio expects, in `OUTPUTS` order (`demo.page.app` wires them).

The handlers hold no decoding logic and touch no caches or logits: `demo.session` parses the
request, loads, builds the lanes, races and closes them; `demo.page.lanes` turns the traces into
component updates.

Reliability, as the handlers guarantee it:
- Both endpoints receive the raw request values (`preprocess=False`), so every malformed value
  reaches the session's parsing and gets its message; nothing reaches the engine unchecked.
- Every failure ends as `gr.Error(message)`: the page shows it (and keeps what was decoded), an
  API caller's gradio_client raises it. Unexpected errors are logged with their traceback and
  the person sees one sentence with a reference to the log line, never a traceback.
- A race is closed however it ends (finished, failed, stopped, cancelled, client gone), which
  frees its KV caches (`session.racing`). An API caller's cancel or a client gone makes Gradio
  close the handler at its next yield, and the handlers yield after any round that ends
  HEARTBEAT_EVERY s after their last yield: decoding ends within max(one round, HEARTBEAT_EVERY).
"""

from __future__ import annotations

import functools
import html
import inspect
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import gradio as gr
import gradio.utils

from demo import session
from demo.engine import export
from demo.engine.events import RoundEvent, TokenEvent, Trace
from demo.page import lanes, render
from demo.page.examples import reference_for
from demo.session import failures, gamma_sweep, validate

PANEL_EVERY = 0.08  # seconds of wall time between redraws of the panels (the browser keeps up)
CHART_EVERY = 0.5  # and of the charts, which cost the browser more to draw
HEARTBEAT_EVERY = 0.02  # seconds: a handler yields after a round once this much time has passed since its last yield
REPLAY_SECONDS = 12.0  # a replay lasts this long, whatever the race took
THRESHOLD_DEFAULT = 0.5  # the page's adaptive-drafting threshold slider starts here

# The API's outputs keep their places: what issue 26 added comes after the downloads, and the
# second speculative lane's (issue 27) after those.
OUTPUTS = (
    *("spd_panel", "spd_stats", "ar_panel", "ar_stats", "outcome", "blocks"),
    *("race_chart", "tau_chart", "hist_chart", "pos_chart", "json_file", "csv_file"),
    *("how_round", "time_chart", "sweep_chart", "sweep_note", "spd2_panel", "spd2_stats", "blocks2"),
    *("run", "replay", "stop", "last"),
)


def positional(handler: Callable) -> Callable:
    """`handler`, its dicts turned into tuples in OUTPUTS order (gr.skip() for a name left out).
    Keeps the handler's signature (Gradio reads it to pass the page's gr.Request)."""

    def as_tuple(update: dict) -> tuple:
        return tuple(update.get(name, gr.skip()) for name in OUTPUTS)

    if inspect.isgeneratorfunction(inspect.unwrap(handler)):

        @functools.wraps(handler)
        def tuples(*args, **kwargs):
            for update in handler(*args, **kwargs):
                yield as_tuple(update)

        return tuples

    @functools.wraps(handler)
    def one(*args, **kwargs):
        return as_tuple(handler(*args, **kwargs))

    return one


def page_error(message: str) -> gr.Error:
    """The error a page's handler raises: the browser's pop-up renders its message as HTML, so the
    characters HTML would swallow (`<image>` in a quoted question) are escaped and show as typed.
    The same handlers serve /race and /analysis, whose callers then read those three as entities;
    /trace, for API callers only, raises the plain sentence."""
    return gr.Error(html.escape(message, quote=False), print_exception=False)


def uploads() -> Path:
    """Gradio's upload folder: the only place an image may be read from."""
    return Path(gradio.utils.get_upload_folder())


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
    data = getattr(holder, "session_data", {}).get(getattr(request, "session_hash", None))
    if data is None:
        return
    known = blocks.default_config.blocks
    for key in [k for k in data.blocks_config.blocks if k not in known]:
        del data.blocks_config.blocks[key]
        data.config_values.pop(key, None)


def _tidy(handler: Callable[..., Iterator]) -> Callable[..., Iterator]:
    """The generator handler `handler`, followed by `_forget_stale_copies()` however it ends."""

    @functools.wraps(handler)
    def tidied(*args, **kwargs):
        try:
            yield from handler(*args, **kwargs)
        finally:
            _forget_stale_copies()

    return tidied


# --- views ------------------------------------------------------------------------------------------


def buttons(busy: bool) -> dict:
    """Run and Replay off and Stop on while a race or replay is on; the reverse once it is over."""
    return {
        "run": gr.Button(interactive=not busy, value="Racing…" if busy else "Run the race"),
        "replay": gr.Button(interactive=not busy),
        "stop": gr.Button(interactive=busy),
    }


def status(html_text: str, busy: bool) -> dict:
    """A message where the outcome goes; the rest of the page stays as it is."""
    return {"outcome": html_text, **buttons(busy)}


def failed(message: str) -> dict:
    return status(render.error_html(message), busy=False)


@functools.cache
def _export_dir() -> tempfile.TemporaryDirectory:
    """One folder per process for the downloads (held by the cache, removed at exit). Gradio
    copies each file into its own cache when it sends it, and runs never overlap (one
    concurrency slot), so every run can write the same two names."""
    return tempfile.TemporaryDirectory(prefix="spd-exports-")


def downloads(traces: dict[str, Trace], request: session.Request, gamma_sweep: list[dict] | None = None) -> dict:
    folder = Path(_export_dir().name)
    json_path, csv_path = folder / "trace.json", folder / "tokens.csv"
    json_path.write_text(export.to_json(export.payload(request.settings(), traces, gamma_sweep)))
    csv_path.write_text(export.tokens_csv(traces))
    return {
        "json_file": gr.DownloadButton(value=str(json_path), interactive=True),
        "csv_file": gr.DownloadButton(value=str(csv_path), interactive=True),
    }


NO_DOWNLOADS = {"json_file": gr.DownloadButton(value=None, interactive=False)}
NO_DOWNLOADS["csv_file"] = NO_DOWNLOADS["json_file"]


# --- runs a page can stop ---------------------------------------------------------------------------


class PageRun:
    """A run on one page (a race, a replay, an analysis), which its Stop button can end: `stop`
    asks it to end after the event at hand, and the run then says so in its own last update."""

    def __init__(self):
        self.stop = threading.Event()
        self.shown = None  # (traces, facts, reference) of the race on show, for its stopped view


_PAGE_RUNS: dict[str, PageRun] = {}  # by the page's session: each page races or replays one thing at a time


@contextmanager
def page_run(page: gr.Request | None, runs: dict[str, PageRun] = _PAGE_RUNS):
    """Register a run of the page `page` in `runs`, where its Stop finds it (None: a call
    without a page, e.g. in tests)."""
    run = PageRun()
    key = getattr(page, "session_hash", None)
    if key:
        runs[key] = run
    try:
        yield run
    finally:
        if key and runs.get(key) is run:
            del runs[key]


STOPPED = '<div class="outcome">Stopped. The panels below keep what was decoded before the stop.</div>'


def stop_race(page: gr.Request = None) -> dict:
    """The Stop button: ask the page's race or replay to end after the event at hand, and switch
    Stop off. The run says "Stopped." itself, in its last update (`_stopped`): a run's updates
    reach the page in order, on the page's one stream of queued events, while this answer comes
    back on a request of its own and can arrive before the run's last updates, which would then
    cover it (a busy machine did, after a heavy race). For the same reason Gradio does not cancel
    the run: its stopped update would be dropped. Stop is only on while the run streams, so there
    is no queued run to cancel."""
    run = _PAGE_RUNS.get(getattr(page, "session_hash", None))
    if run is not None:
        run.stop.set()
    return {"stop": gr.Button(interactive=False)}


def _stopped(run: PageRun) -> dict:
    """The last update of a run its Stop ended: what was decoded, each lane's clock stopped, Run on."""
    shown = {}
    if run.shown is not None:
        traces, facts, reference = run.shown
        shown = lanes.view(traces, facts, charts_too=True, reference=reference, stopped=True)
    return shown | status(STOPPED, False)


# --- streaming ------------------------------------------------------------------------------------


SWEEP_WAIT = '<div class="sweep-note">The γ sweep follows once the race is over (greedy races).</div>'


def _frames(
    timeline, traces: dict[str, Trace], facts: tuple[str, ...], reference: str | None = None
) -> Iterator[dict | None]:
    """Feed (lane, event) pairs into `traces` and yield views: at the first token at once, then
    at most every PANEL_EVERY s (charts every CHART_EVERY s), and always at the end. In between
    it yields None (nothing to redraw) after a round that ends HEARTBEAT_EVERY s or more after
    the last yield, so that Gradio can close the handler for a Stop or a client gone within
    max(one round, HEARTBEAT_EVERY); a yield per round would cost a few ms of wall time each."""
    last_panel = last_chart = last_yield = time.perf_counter()
    shown_tokens = False
    for lane, event in timeline:
        traces[lane].add(event)
        now = time.perf_counter()
        first = not shown_tokens and isinstance(event, TokenEvent)
        if first or now - last_panel >= PANEL_EVERY:
            charts_too = now - last_chart >= CHART_EVERY
            yield lanes.view(traces, facts, charts_too, reference)
            shown_tokens = shown_tokens or first
            last_panel = last_yield = time.perf_counter()
            last_chart = last_panel if charts_too else last_chart
        elif isinstance(event, RoundEvent) and now - last_yield >= HEARTBEAT_EVERY:
            yield None
            last_yield = time.perf_counter()
    yield lanes.view(traces, facts, charts_too=True, reference=reference)


def _unless_stopped(loading: Iterator, run: PageRun):
    """`yield from loading` (`session.until_ready`), ended after a report if the page's Stop was
    pressed: then it returns (None, ())."""
    while True:
        try:
            update = next(loading)
        except StopIteration as done:
            return done.value
        yield update
        if run.stop.is_set():
            return None, ()


def _until(events, stop: threading.Event) -> Iterator:
    """`events` until `stop` is set (checked before each)."""
    for pair in events:
        if stop.is_set():
            return
        yield pair


def page_request(
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
    second_drafter=None,
) -> session.Request:
    """The page form's values as a session Request: the Decoding radio is `greedy`, the adaptive
    checkbox and its threshold are `min_confidence`."""
    greedy = validate.choice("decoding", decoding, ["greedy", "sampling"]) == "greedy"
    min_confidence = threshold if validate.flag("adaptive draft length", adaptive) else 0.0
    return session.parse(
        question=question,
        preset=preset,
        drafter=drafter,
        gamma=gamma,
        greedy=greedy,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        max_new_tokens=max_new_tokens,
        min_confidence=min_confidence,
        second_drafter=second_drafter,
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
    threshold=THRESHOLD_DEFAULT,
    second_drafter="none",
    page: gr.Request = None,
):
    """Stream the race to the page: every lane's panel and stats, the block views and the charts
    as events arrive. A failure is shown where the outcome goes and raised as gr.Error (an API
    caller gets it)."""
    with page_run(page) as run:
        try:
            request = page_request(
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
                second_drafter,
            )
            with closing(session.gpu_race(request, image, uploads())) as stream:
                loading = session.until_ready(
                    stream, lambda fraction, message: status(render.loading_html(fraction, message), busy=True)
                )
                facts, notes = yield from _unless_stopped(loading, run)
                if run.stop.is_set():  # stopped while the preset loaded
                    yield _stopped(run)
                    return
                for note in notes:
                    gr.Info(note)
                reference = _reference(image, request.question)
                yield from _race_to_page(request, facts, stream, run, image, reference)
        except Exception as error:  # Gradio closing the handler is a GeneratorExit: not caught, not an error
            message = failures.message(error)
            yield failed(message)
            raise page_error(message) from None


def _reference(image, question) -> str | None:
    """The reference answer when the race is of one of the page's examples (same pixels and question)."""
    try:
        return reference_for(validate.image_path(image, uploads()), question)
    except Exception:  # the race has accepted the image; anything odd here only costs the badge
        return None


def _race_to_page(
    request: session.Request, facts: tuple[str, ...], events, run: PageRun, image, reference: str | None
) -> Iterator[dict]:
    traces = {lane: Trace() for lane in lanes.ordered(session.lane_names(request))}
    timeline = []  # the race in the order it ran, for the replay
    run.shown = (traces, facts, reference)
    # The charts wait for the first redraw after the first token: drawing four plots costs the
    # browser more than the first tokens do.
    last_view = lanes.view(traces, facts, charts_too=False, reference=reference)
    yield last_view | NO_DOWNLOADS | buttons(busy=True) | lanes.sweep_view([], request) | {"sweep_note": SWEEP_WAIT}
    for frame in _frames(_until(_recorded(events, timeline), run.stop), traces, facts, reference):
        last_view = frame or last_view
        yield frame or {}
    if run.stop.is_set():
        events.close()  # the runs closed (their caches freed) before the stopped page is drawn
        yield _stopped(run)
        return
    spd, ar = traces["speculative"], traces["autoregressive"]
    rows, why_not = None, gamma_sweep.unsweepable(request)
    if why_not is None:  # the race is over, so Stop is off while the sweep replays its answer
        note = '<div class="sweep-note">Replaying the answer at γ = 1 … 10 with the drafter…</div>'
        yield {"sweep_note": note, "stop": gr.Button(interactive=False)}
        rows = gamma_sweep.gamma_sweep(request, image, uploads(), spd, ar)
    # The last update repeats the final view, so that an API client's result is the whole page.
    yield (
        last_view
        | lanes.sweep_view(rows or [], request, why_not)
        | downloads(traces, request, rows)
        | buttons(busy=False)
        | {"last": (facts, timeline)}
    )


def _recorded(events, timeline: list) -> Iterator:
    for pair in events:
        timeline.append(pair)
        yield pair


@_tidy
def replay_race(last, page: gr.Request = None):
    """Show the last race again, slowed down so that the slower run takes REPLAY_SECONDS; the
    clocks, numbers and order are the measured ones."""
    if last is None:
        yield failed("Run a race first; the replay shows the last one again, slowly.")
        return
    facts, timeline = last
    slowdown = REPLAY_SECONDS / max(event.t for _, event in timeline)
    facts = facts + (f"Replay: the measured race shown {slowdown:.0f}× slower than it ran.",)
    traces = {lane: Trace() for lane in lanes.ordered({lane for lane, _ in timeline})}
    last_view = lanes.view(traces, facts, charts_too=True)
    yield last_view | buttons(busy=True)
    with page_run(page) as run:
        run.shown = (traces, facts, None)
        for frame in _frames(session.paced(timeline, slowdown, run.stop), traces, facts):
            last_view = frame or last_view
            yield frame or {}
        yield _stopped(run) if run.stop.is_set() else last_view | buttons(busy=False)


@_tidy
def trace_api(
    image,
    question,
    preset,
    drafter,
    gamma,
    greedy,
    temperature,
    top_p,
    seed,
    max_new_tokens,
    min_confidence=0.0,
    second_drafter="none",
):
    """The whole race as one JSON document: settings, every lane's trace and its metrics.

    A generator, so that a cancelled or disconnected caller stops the decoding within a round;
    its last value is the document, which is what gradio_client's predict() returns.
    """
    try:
        request = session.parse(
            question=question,
            preset=preset,
            drafter=drafter,
            gamma=gamma,
            greedy=greedy,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            max_new_tokens=max_new_tokens,
            min_confidence=min_confidence,
            second_drafter=second_drafter,
        )
        traces = {lane: Trace() for lane in lanes.ordered(session.lane_names(request))}
        with closing(session.gpu_race(request, image, uploads())) as events:
            yield from session.until_ready(events, lambda fraction, message: gr.skip())
            last_yield = time.perf_counter()
            for lane, event in events:
                traces[lane].add(event)
                if isinstance(event, RoundEvent) and time.perf_counter() - last_yield >= HEARTBEAT_EVERY:
                    yield gr.skip()  # a chance for Gradio to close this handler (see `_frames`)
                    last_yield = time.perf_counter()
        rows = gamma_sweep.gamma_sweep(request, image, uploads(), traces["speculative"], traces["autoregressive"])
        yield export.payload(request.settings(), traces, rows)
    except Exception as error:
        raise gr.Error(failures.message(error), print_exception=False) from None
