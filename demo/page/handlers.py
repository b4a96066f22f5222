"""The Race tab's handlers (/race, Replay, Stop, /trace): each yields dicts keyed by the names of the
components it updates, consuming one `session.Race`. They receive the raw values, so every bad one
gets the session's message; every failure ends as one `gr.Error` sentence; a race is closed however
it ends, within a heartbeat of a client gone (docs/modules.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import gradio as gr
import gradio.utils

from demo import session
from demo.engine import export
from demo.engine.events import RoundEvent, Trace
from demo.page import classroom, lanes, render, runs, strategy_table
from demo.page.examples import reference_for
from demo.page.redraws import (  # noqa: F401 (HEARTBEAT_EVERY: tests read it here)
    HEARTBEAT_EVERY,
    NO_DOWNLOADS,
    Redraws,
    buttons,
    downloads,
    failed,
    status,
    stopped_html,
)
from demo.page.runs import page_error
from demo.session import failures, form, validate

TRACE_HEARTBEAT_EVERY = 0.02  # /trace has one output: its heartbeat costs Gradio one component, not 24

PAGE_ONLY = ("adaptive",)  # /race's parameters after the request's fields (`form.FIELDS`), /trace's alone

# The API's outputs keep their places: what was added later comes after the downloads (the second
# speculative lane's, then the table of strategies, then the proof section's: the time-split
# sentence, the second lane's split and the image's part, read off the race's own record).
OUTPUTS = (
    *("spd_panel", "spd_stats", "ar_panel", "ar_stats", "outcome", "blocks"),
    *("race_chart", "tau_chart", "hist_chart", "pos_chart", "json_file", "csv_file"),
    *("how_round", "time_chart", "sweep_chart", "sweep_note", "spd2_panel", "spd2_stats", "blocks2"),
    "strategies",
    *("time_note", "time_chart2", "dependence"),
    *("run", "replay", "stop", "last"),
)


def positional(handler: Callable) -> Callable:
    """`handler`, its dicts turned into tuples in OUTPUTS order (`runs.positional`)."""
    return runs.positional(handler, OUTPUTS)


def uploads() -> Path:
    """Gradio's upload folder: the only place an image may be read from."""
    return Path(gradio.utils.get_upload_folder())


# --- runs a page can stop ---------------------------------------------------------------------------


# The Stop button: the page's race or replay ends after the event at hand and says "Stopped."
# itself, in its last updates (`runs.stop`). Stop says "Stopping…", off, at once, in the browser
# (`text.STOPPING_JS`); this answer turns it off and leaves its label alone: it may arrive after the
# run's last update, whose "Stop" it must not cover.
stop_race = runs.stopper("race", lambda: {"stop": gr.Button(interactive=False)})


def _stopped(run: runs.PageRun, result: session.RaceResult | None = None) -> list[dict]:
    """The last updates of a run its Stop (or its budget: `result`'s ending) ended: what was decoded,
    each lane's clock stopped, Run on; first without the charts, which a busy machine is slowest to
    draw, then with them."""
    over = result is not None and result.ending == "over budget"
    said = render.over_budget_html(result.limit) if over else stopped_html(run)  # timed once: it has ended here
    traces, facts, reference = run.shown or ({}, (), None)
    return [
        (lanes.view(traces, facts, charts_too, reference, stopped=True) if traces else {}) | status(said, False)
        for charts_too in ((False, True) if run.shown else (False,))
    ]


# --- streaming ------------------------------------------------------------------------------------


SWEEPING = (
    '<div class="sweep-note">Replaying the answer at γ = 1 … 10 with the drafter, then with every drafting '
    "strategy of the preset…</div>"
)
SWEEP_WAIT = '<div class="sweep-note">The γ sweep follows once the race is over.</div>'


def run_race(
    image,
    question,
    preset,
    drafter,
    gamma=session.DEFAULTS["gamma"],
    greedy=session.DEFAULTS["greedy"],
    temperature=session.DEFAULTS["temperature"],
    top_p=session.DEFAULTS["top_p"],
    seed=session.DEFAULTS["seed"],
    max_new_tokens=session.DEFAULTS["max_new_tokens"],
    min_confidence=session.DEFAULTS["min_confidence"],
    second_drafter="none",
    adaptive=True,
    page: gr.Request = None,
):
    """Stream the race to the page: every lane's panel and stats, the block views and the charts
    as events arrive. A failure is shown where the outcome goes and raised as gr.Error (an API
    caller gets it). The race (`session.Race`) is what the page's Stop ends. Its parameters are
    /trace's (`form.FIELDS`), then the page-only `adaptive` (PAGE_ONLY): the page's Adaptive box,
    which applies `min_confidence` when ticked (an API caller's is applied unless it sends False)."""
    with runs.page_run(page, "race") as run:
        try:
            adaptive = validate.flag("adaptive draft length", adaptive)
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
                min_confidence=min_confidence if adaptive else 0.0,
                second_drafter=second_drafter,
            )
            race = run.holds(session.Race(request, image, uploads()))
            redraws = None
            for item in race.events():
                if isinstance(item, session.Loading):
                    yield status(render.loading_html(item.fraction, item.message), busy=True)
                elif isinstance(item, session.Ready):
                    redraws = Redraws(race.traces, item.facts, _reference(image, request.question))
                    run.shown = (race.traces, item.facts, redraws.reference)
                    for note in item.notes:
                        gr.Info(note)
                    yield _started(request, redraws)
                elif isinstance(item, session.Lane):
                    update = redraws.add(item.name, item.event)
                    if update is not None:  # the race's last redraw says the sweep is under way
                        sweeping = redraws.done() and request.sampling.greedy
                        yield update | ({"sweep_note": SWEEPING} if sweeping else {})
                elif isinstance(item, session.RaceResult):
                    yield from _ended(
                        race.request, image, run, redraws, item
                    )  # as raced (a busy machine may shorten it)
                # a Sweeping: the γ sweep or the table goes on (a Stop is answered between its replays)
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


def _started(request: session.Request, redraws: Redraws) -> dict:
    """The race's first view, once every lane is set up: empty panels, Run off and Stop on. The
    charts wait for the first redraw after the first token: drawing four plots costs the browser
    more than the first tokens do."""
    # A sampled race has neither: `sweep_view` without rows says so from its start, and promises nothing.
    waiting = {"sweep_note": SWEEP_WAIT, "strategies": strategy_table.NOTE} if request.sampling.greedy else {}
    empty = lanes.view(redraws.traces, redraws.facts, charts_too=False, reference=redraws.reference)
    return empty | NO_DOWNLOADS | buttons(busy=True) | lanes.sweep_view([], request) | waiting


def _ended(request: session.Request, image, run: runs.PageRun, redraws: Redraws | None, result) -> list[dict]:
    """The race's last updates, by how it ended (`result.ending`): the whole page (the γ sweep, the
    table of strategies, the proof section, the downloads, the race's record for the replay and the
    law check); the finished race with its sweep cut; or the stopped page."""
    if redraws is None:  # stopped while the preset loaded
        return _stopped(run, result)
    cut = result.ending == "sweep cut"  # out of budget in the sweep: the race stands
    record = {"last": (redraws.facts, result.timeline, request, image)}  # the race shown, stopped or not
    if result.ending in ("stopped", "over budget"):  # the race's own table was not made
        return [update | {"strategies": strategy_table.STOPPED} | record for update in _stopped(run, result)]
    rows, table = list(result.rows), list(result.strategies)
    why_not = render.sweep_cut_note(result.limit) if cut else result.why_not
    # The last update repeats the whole view, so that an API client's result is the whole page.
    return [
        redraws.whole()
        | lanes.sweep_view(rows, request, why_not, table)
        | ({"strategies": f'<div class="sweep-note">{why_not}</div>'} if cut else {})
        | downloads(redraws.traces, request, rows, table)
        | buttons(busy=False)
        | record
    ]


def replay_race(last, speed: str = classroom.SPEED_DEFAULT, page: gr.Request = None):
    """Show the last race again at `speed` (¼×: four times slower than it ran); the clocks,
    numbers and order are the measured ones."""
    if last is None:
        yield failed("Run a race first; the replay shows the last one again, slowly.")
        return
    facts, timeline = last[:2]
    slowdown = classroom.slowdown(speed)
    facts = facts + (f"Replay: the measured race shown {slowdown}× slower than it ran.",)
    redraws = Redraws({lane: Trace() for lane in lanes.ordered({lane for lane, _ in timeline})}, facts)
    yield redraws.whole() | buttons(busy=True)
    with runs.page_run(page, "race") as run:
        run.shown = (redraws.traces, facts, None)
        replay = run.holds(session.Replay(timeline, slowdown))
        for lane, event in replay.events():
            redraws.traces[lane].add(event)
            update = redraws.add(lane, event)
            if update is not None:
                yield update
        yield from _stopped(run) if replay.stopped else [redraws.whole() | buttons(busy=False)]


def trace(image, *sent):
    """Race speculative decoding against plain decoding on one image and question, and return every
    token's story as JSON: which tokens the drafter proposed, which the target model accepted or
    rejected (with p, q and the rejected draft), per-round timings, and the speedup metrics
    (tau, alpha, MBSU, and the same counts under SGLang's and vLLM's names).

    Args:
        image: the picture the question is about (a URL or a file; PNG, JPEG, WEBP, GIF, BMP, TIFF).
        question: what to ask about the image, e.g. "What colour is the circle?".
        preset: the model pair to use; "embedded" is the small built-in pair and always available.
        drafter: the drafter that proposes tokens, e.g. "text-only", "image-aware", "prompt-lookup".
        gamma: tokens the drafter proposes per round, 1 to 10.
        greedy: true for deterministic argmax decoding; false to sample at `temperature` and `top_p`.
        temperature: sampling temperature, above 0 and at most 5 (ignored when greedy).
        top_p: nucleus sampling mass in (0, 1] (ignored when greedy).
        seed: the sampling seed; the same seed gives the same answer.
        max_new_tokens: the longest answer, 1 to 512 tokens; a busy server may shorten it and says so.
        min_confidence: adaptive drafting; stop a round's drafting below this probability (0 = off).
        second_drafter: race a second drafter beside the first, or "none".
    Returns:
        The race as JSON: settings, each lane's tokens and rounds, and their metrics.
    """
    # A generator, so that a cancelled or disconnected caller stops the decoding within a round; its
    # last value is the document, which is what gradio_client's predict() and an MCP call return.
    try:
        values = TRACE.bind(image, *sent)  # the defaults of those left out are parse's
        request = session.parse(**form.fields(values.arguments))
        race = session.Race(request, image, uploads())
        last_yield = time.perf_counter()
        for item in race.events():
            if isinstance(item, session.RaceResult):
                rows, table = list(item.rows), list(item.strategies)
                yield export.payload(race.request.settings(), race.traces, rows, table) | item.said()
                return
            round_ended = isinstance(item, session.Lane) and isinstance(item.event, RoundEvent)
            if isinstance(item, session.Loading | session.Sweeping) or (
                round_ended and time.perf_counter() - last_yield >= TRACE_HEARTBEAT_EVERY
            ):
                yield gr.skip()  # a chance for Gradio to close this handler (see `Redraws`)
                last_yield = time.perf_counter()
    except Exception as error:
        raise gr.Error(failures.message(error), print_exception=False) from None
    finally:
        runs.forget_stale_copies()  # after the last yield, however it ends


TRACE = form.signature()
trace.__signature__ = TRACE  # what Gradio reads /trace's parameters and defaults from
