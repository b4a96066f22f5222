"""The Race tab's handlers: each yields dicts keyed by the names of the components it updates.

    run_race      /race and the Run button: streams every lane's token panel and stats, the block
                  views and the charts while the runs decode, then the downloads
    replay_race   the Replay button: the last race again from its recorded events, slowed down
                  by the factor chosen (`demo.page.classroom.SPEEDS`), which the page states
    stop_race     the Stop button: ends the page's race or replay after the event at hand, which
                  says "Stopped." in its own last update
    trace_api     /trace, for gradio_client: the same race returned whole as one JSON document

A name left out of an update leaves that component as it is. `positional(handler)` turns the
dicts into the tuples Gradio expects, in `OUTPUTS` order (`demo.page.server` wires them; the
mechanism, the Stop registry and the downloads' folder are `demo.page.runs`, shared with the
Analysis tab).

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

import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import gradio as gr
import gradio.utils

from demo import session
from demo.engine import export
from demo.engine.events import RoundEvent, TokenEvent, Trace
from demo.page import classroom, lanes, render, runs, strategy_table
from demo.page.examples import reference_for
from demo.page.runs import page_error
from demo.session import budget, failures, form, validate

PANEL_EVERY = 0.08  # seconds of wall time between redraws of the panels (the browser keeps up)
CHART_EVERY = 0.5  # and of the charts, which cost the browser more to draw
HEARTBEAT_EVERY = 0.02  # seconds: a handler yields after a round once this much time has passed since its last yield
THRESHOLD_DEFAULT = 0.5  # the page's adaptive-drafting threshold slider starts here

# The API's outputs keep their places: what issue 26 added comes after the downloads, the second
# speculative lane's (issue 27) after those, and the table of strategies (issue 44) last.
OUTPUTS = (
    *("spd_panel", "spd_stats", "ar_panel", "ar_stats", "outcome", "blocks"),
    *("race_chart", "tau_chart", "hist_chart", "pos_chart", "json_file", "csv_file"),
    *("how_round", "time_chart", "sweep_chart", "sweep_note", "spd2_panel", "spd2_stats", "blocks2"),
    "strategies",
    *("run", "replay", "stop", "last"),
)


def positional(handler: Callable) -> Callable:
    """`handler`, its dicts turned into tuples in OUTPUTS order (`runs.positional`)."""
    return runs.positional(handler, OUTPUTS)


def uploads() -> Path:
    """Gradio's upload folder: the only place an image may be read from."""
    return Path(gradio.utils.get_upload_folder())


# --- views ------------------------------------------------------------------------------------------


def buttons(busy: bool) -> dict:
    """Run and Replay off and Stop on while a race or replay is on; the reverse once it is over."""
    return {
        "run": gr.Button(interactive=not busy, value="Racing…" if busy else "Run the race"),
        "replay": gr.Button(interactive=not busy),
        "stop": gr.Button(interactive=busy, value="Stop"),
    }


def status(html_text: str, busy: bool) -> dict:
    """A message where the outcome goes; the rest of the page stays as it is."""
    return {"outcome": html_text, **buttons(busy)}


def failed(message: str) -> dict:
    return status(render.error_html(message), busy=False)


def downloads(
    traces: dict[str, Trace],
    request: session.Request,
    gamma_sweep: list[dict] | None = None,
    strategies: list[dict] | None = None,
) -> dict:
    folder = Path(runs.export_dir().name)
    json_path, csv_path = folder / "trace.json", folder / "tokens.csv"
    json_path.write_text(export.to_json(export.payload(request.settings(), traces, gamma_sweep, strategies)))
    csv_path.write_text(export.tokens_csv(traces))
    return {
        "json_file": gr.DownloadButton(value=str(json_path), interactive=True),
        "csv_file": gr.DownloadButton(value=str(csv_path), interactive=True),
    }


NO_DOWNLOADS = dict.fromkeys(("json_file", "csv_file"), gr.DownloadButton(value=None, interactive=False))


# --- runs a page can stop ---------------------------------------------------------------------------


def stopped_html(run: runs.PageRun) -> str:
    """ "Stopped.", how long after the Stop reached the server the run had ended, and what stays."""
    took = (
        "" if run.asked_at is None else f" It ended {time.perf_counter() - run.asked_at:.2f} s after the Stop arrived."
    )
    return f'<div class="outcome">Stopped.{took} The panels below keep what was decoded before the stop.</div>'


# The Stop button: the page's race or replay ends after the event at hand and says "Stopped."
# itself, in its last updates (`runs.stop`); Stop says "Stopping…", off, at once.
stop_race = runs.stopper("race", lambda: {"stop": gr.Button(interactive=False, value="Stopping…")})


def _stopped(run: runs.PageRun) -> Iterator[dict]:
    """The last updates of a run its Stop (or its budget) ended: what was decoded, each lane's clock
    stopped, Run on; first without the charts, which a busy machine is slowest to draw, then with them."""
    # timed once: the run has ended here
    said = render.over_budget_html(run.stop.seconds) if run.stop.over else stopped_html(run)
    for charts_too in (False, True) if run.shown else (False,):
        traces, facts, reference = run.shown or ({}, (), None)
        shown = lanes.view(traces, facts, charts_too, reference, stopped=True) if traces else {}
        yield shown | status(said, False)


# --- streaming ------------------------------------------------------------------------------------


SWEEPING = (
    '<div class="sweep-note">Replaying the answer at γ = 1 … 10 with the drafter, then with every drafting '
    "strategy of the preset…</div>"
)
SWEEP_WAIT = '<div class="sweep-note">The γ sweep follows once the race is over (greedy races).</div>'


def _frames(
    timeline, traces: dict[str, Trace], facts: tuple[str, ...], reference: str | None = None
) -> Iterator[dict | None]:
    """Feed (lane, event) pairs into `traces` and yield views: at the first token at once, then
    at most every PANEL_EVERY s (charts every CHART_EVERY s), once every lane is done, and always at the end. In between
    it yields None (nothing to redraw) after a round that ends HEARTBEAT_EVERY s or more after
    the last yield, so that Gradio can close the handler for a Stop or a client gone within
    max(one round, HEARTBEAT_EVERY); a yield per round would cost a few ms of wall time each."""
    last_panel = last_chart = last_yield = time.perf_counter()
    shown_tokens = False
    for lane, event in timeline:
        traces[lane].add(event)
        now = time.perf_counter()
        first = not shown_tokens and isinstance(event, TokenEvent)
        last = not isinstance(event, TokenEvent | RoundEvent) and all(t.done for t in traces.values())
        if first or last or now - last_panel >= PANEL_EVERY:
            charts_too = now - last_chart >= CHART_EVERY
            yield lanes.view(traces, facts, charts_too, reference)
            shown_tokens = shown_tokens or first
            last_panel = last_yield = time.perf_counter()
            last_chart = last_panel if charts_too else last_chart
        elif isinstance(event, RoundEvent) and now - last_yield >= HEARTBEAT_EVERY:
            yield None
            last_yield = time.perf_counter()
    yield lanes.view(traces, facts, charts_too=True, reference=reference)


def _unless_stopped(loading: Iterator, run: runs.PageRun):
    """`yield from loading` (`session.until_ready`), ended after a report if the page's Stop was
    pressed: then it returns None."""
    while True:
        try:
            update = next(loading)
        except StopIteration as done:
            return done.value
        yield update
        if run.stop.is_set():
            return None


def _lanes(stream, run: runs.PageRun, timeline: list, swept: list) -> Iterator:
    """The race's (lane, event) pairs from `gpu_race`'s stream, each recorded in `timeline` (for
    the replay), until the page's Stop (checked before each); its Swept goes into `swept`."""
    for item in stream:
        if run.stop.is_set():
            return
        if isinstance(item, session.Swept):
            swept.append(item)
            continue
        if isinstance(item, session.Sweeping):  # the γ sweep or table goes on: a Stop is answered between replays
            continue
        timeline.append((item.name, item.event))
        yield item.name, item.event


def page_request(values: dict) -> session.Request:
    """The page form's values by name (/race's parameters) as a session Request: the Decoding
    radio is `greedy`, the adaptive box and threshold `min_confidence`; the rest are the request's
    own fields (`form.fields`)."""
    greedy = validate.choice("decoding", values["decoding"], ["greedy", "sampling"]) == "greedy"
    min_confidence = values["threshold"] if validate.flag("adaptive draft length", values["adaptive"]) else 0.0
    return session.parse(**form.fields(values), greedy=greedy, min_confidence=min_confidence)


@runs.tidy
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
    values = locals()  # the page's form by name (read first: nothing else is bound yet)
    with runs.page_run(page, "race") as run:
        try:
            request = page_request(values)
            with closing(session.gpu_race(request, image, uploads())) as stream:
                loading = session.until_ready(
                    stream, lambda fraction, message: status(render.loading_html(fraction, message), busy=True)
                )
                ready = yield from _unless_stopped(loading, run)
                run.stop.run_for(budget.limit(budget.race(request)))  # the race's own limit, from its start
                if run.stop.is_set():  # stopped while the preset loaded
                    yield from _stopped(run)
                    return
                for note in ready.notes:
                    gr.Info(note)
                reference = _reference(image, request.question)
                yield from _race_to_page(request, ready.facts, stream, run, reference)
        except Exception as error:  # Gradio closing the handler is a GeneratorExit: not caught, not an error
            message = failures.message(error)
            # Before this race's first view the panels still show the last race: they are cleared.
            yield (lanes.cleared() | NO_DOWNLOADS if run.shown is None else {}) | failed(message)
            raise page_error(message) from None


def _reference(image, question) -> str | None:
    """The reference answer when the race is of one of the page's examples (same pixels and question)."""
    try:
        return reference_for(validate.image_path(image, uploads()), question)
    except Exception:  # the race has accepted the image; anything odd here only costs the badge
        return None


def _race_to_page(
    request: session.Request, facts: tuple[str, ...], stream, run: runs.PageRun, reference: str | None
) -> Iterator[dict]:
    traces = {lane: Trace() for lane in lanes.ordered(session.lane_names(request))}
    timeline, swept = [], []  # the race in the order it ran, for the replay; its γ sweep
    run.shown = (traces, facts, reference)
    # The charts wait for the first redraw after the first token: drawing four plots costs the
    # browser more than the first tokens do.
    last_view = lanes.view(traces, facts, charts_too=False, reference=reference)
    waiting = {"sweep_note": SWEEP_WAIT, "strategies": strategy_table.NOTE}
    yield last_view | NO_DOWNLOADS | buttons(busy=True) | lanes.sweep_view([], request) | waiting
    raced = False  # every lane done: the sweep replays the answer (Stop stays on: it ends the sweep too)
    for frame in _frames(_lanes(stream, run, timeline, swept), traces, facts, reference):
        last_view = frame or last_view
        if not raced and all(t.done for t in traces.values()):
            raced, frame = True, (frame or {}) | {"sweep_note": SWEEPING}
        yield frame or {}
    cut = raced and not swept and run.stop.over  # the budget ran out in the sweep or the table: the race stands
    if cut:
        stream.close()
        swept.append(session.Swept((), render.sweep_cut_note(run.stop.seconds)))
    elif run.stop.is_set() or not swept:
        stream.close()  # the runs closed (their caches freed) before the stopped page is drawn
        for update in _stopped(run):  # the race's own table was not made
            yield update | {"strategies": strategy_table.STOPPED}
        return
    rows, why_not, table = list(swept[0].rows), swept[0].why_not, swept[0].strategies
    for lane, attention in swept[0].attention:  # read after the sweep, in the race's own call
        traces[lane].image_attention = attention
    last_view |= lanes.view(traces, facts, True, reference)
    # The last update repeats the final view, so that an API client's result is the whole page.
    yield (
        last_view
        | lanes.sweep_view(rows, request, why_not, table)
        | ({"strategies": f'<div class="sweep-note">{why_not}</div>'} if cut else {})
        | downloads(traces, request, rows, list(table))
        | buttons(busy=False)
        | {"last": (facts, timeline)}
    )


@runs.tidy
def replay_race(last, speed: str = classroom.SPEED_DEFAULT, page: gr.Request = None):
    """Show the last race again at `speed` (¼×: four times slower than it ran); the clocks,
    numbers and order are the measured ones."""
    if last is None:
        yield failed("Run a race first; the replay shows the last one again, slowly.")
        return
    facts, timeline = last
    slowdown = classroom.slowdown(speed)
    facts = facts + (f"Replay: the measured race shown {slowdown}× slower than it ran.",)
    traces = {lane: Trace() for lane in lanes.ordered({lane for lane, _ in timeline})}
    last_view = lanes.view(traces, facts, charts_too=True)
    yield last_view | buttons(busy=True)
    with runs.page_run(page, "race") as run:
        run.shown = (traces, facts, None)
        for frame in _frames(session.paced(timeline, slowdown, run.stop), traces, facts):
            last_view = frame or last_view
            yield frame or {}
        if run.stop.is_set():
            yield from _stopped(run)
        else:
            yield last_view | buttons(busy=False)


@runs.tidy
def trace_api(image, *sent):
    """/trace: the whole race as one JSON document: settings, every lane's trace and its metrics.
    Its parameters are the image, then the request's fields (`TRACE`, read off `session.parse`).

    A generator, so that a cancelled or disconnected caller stops the decoding within a round;
    its last value is the document, which is what gradio_client's predict() returns.
    """
    try:
        values = TRACE.bind(image, *sent)  # the defaults of those left out are parse's
        request = session.parse(**form.fields(values.arguments))
        traces = {lane: Trace() for lane in lanes.ordered(session.lane_names(request))}
        rows, table = [], []
        with closing(session.gpu_race(request, image, uploads())) as events:
            yield from session.until_ready(events, lambda fraction, message: gr.skip())
            deadline = budget.Deadline(budget.limit(budget.race(request)))  # from the race's start (models loaded)
            last_yield = time.perf_counter()
            over = False
            for item in events:
                over = deadline.is_set()  # over budget: what was decoded, said so, and no sweep
                if over:
                    break
                if isinstance(item, session.Sweeping):
                    continue
                if isinstance(item, session.Swept):
                    rows, table = list(item.rows), list(item.strategies)
                    for lane, attention in item.attention:
                        traces[lane].image_attention = attention
                    continue
                traces[item.name].add(item.event)
                if isinstance(item.event, RoundEvent) and time.perf_counter() - last_yield >= HEARTBEAT_EVERY:
                    yield gr.skip()  # a chance for Gradio to close this handler (see `_frames`)
                    last_yield = time.perf_counter()
        raced = all(t.done for t in traces.values())  # then only the sweep and the table were cut
        stopped = {"sweep_cut": budget.SWEEP_CUT} if raced else {"stopped": budget.OVER_BUDGET}
        yield export.payload(request.settings(), traces, rows, table) | (stopped if over else {})
    except Exception as error:
        raise gr.Error(failures.message(error), print_exception=False) from None


TRACE = form.signature()
trace_api.__signature__ = TRACE  # what Gradio reads /trace's parameters and defaults from
