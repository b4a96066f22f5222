"""What both tabs' handlers stand on: dicts turned into Gradio's tuples (`positional`), runs a page's
Stop can end, one folder for the downloads, and the per-visitor copies Gradio leaves behind."""

from __future__ import annotations

import functools
import html
import inspect
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager

import gradio as gr


def positional(handler: Callable, names: tuple[str, ...]) -> Callable:
    """`handler`, its dicts turned into tuples in `names` order (gr.skip() for a name left out).
    Keeps the handler's signature (Gradio reads it to pass the page's gr.Request). A generator
    handler is followed by `forget_stale_copies()` however it ends."""

    def as_tuple(update: dict) -> tuple:
        return tuple(update.get(name, gr.skip()) for name in names)

    if inspect.isgeneratorfunction(inspect.unwrap(handler)):

        @functools.wraps(handler)
        def tuples(*args, **kwargs):
            try:
                for update in handler(*args, **kwargs):
                    yield as_tuple(update)
            finally:
                forget_stale_copies()

        return tuples

    @functools.wraps(handler)
    def one(*args, **kwargs):
        return as_tuple(handler(*args, **kwargs))

    return one


# --- runs a page can stop ---------------------------------------------------------------------------


class PageRun:
    """A run on one page (a race, a replay, an analysis), which its Stop button can end: `stop`
    asks what runs (a `session.Race`, `Replay` or `Analysis`, held by `holds`) to end after the
    event at hand, and the run then says so in its own last update."""

    def __init__(self):
        self.running = None  # what runs: anything with a stop()
        self.asked_at: float | None = None  # time.perf_counter() when its Stop reached the server
        self.shown = None  # what the run has on show, for its stopped view (the Race tab's: traces, facts, reference)

    def holds(self, running):
        """`running` is what this run's Stop ends (at once, if the Stop came first); returns it."""
        self.running = running
        if self.asked_at is not None:
            running.stop()
        return running

    def stop(self) -> None:
        self.asked_at = time.perf_counter()
        if self.running is not None:
            self.running.stop()


# The one registry, by (the page's session, tab): each tab of a page runs one thing at a time, and
# a page may replay a race on one tab while an analysis runs on the other (replays do not queue
# behind the decoder), so each tab's Stop finds its own run.
_PAGE_RUNS: dict[tuple[str, str], PageRun] = {}


@contextmanager
def page_run(page: gr.Request | None, tab: str):
    """Register a run of the page `page`'s tab `tab`, where that tab's Stop finds it (None: a
    call without a page, e.g. in tests)."""
    run = PageRun()
    key = (getattr(page, "session_hash", None), tab)
    if key[0]:
        _PAGE_RUNS[key] = run
    try:
        yield run
    finally:
        if key[0] and _PAGE_RUNS.get(key) is run:
            del _PAGE_RUNS[key]


def stop(page: gr.Request | None, tab: str) -> None:
    """Ask the run of the page's tab `tab`, if it has one, to end after the event at hand. The run says "Stopped."
    itself, in its last update: a run's updates reach the page in order, on the page's one stream
    of queued events, while a Stop's answer comes back on a request of its own and can arrive
    before the run's last updates, which would then cover it (a busy machine did, after a heavy
    race). For the same reason Gradio does not cancel the run: its stopped update would be dropped.
    Stop is only on while the run streams, so there is no queued run to cancel."""
    run = _PAGE_RUNS.get((getattr(page, "session_hash", None), tab))
    if run is not None:
        run.stop()


def stopper(tab: str, answer: Callable[[], object]) -> Callable:
    """The Stop button's handler for tab `tab`: `stop(page, tab)`, then `answer()` (its Stop off)."""

    def stop_handler(page: gr.Request = None):
        stop(page, tab)
        return answer()

    return stop_handler


def page_error(message: str) -> gr.Error:
    """The error a page's handler raises: the browser's pop-up renders its message as HTML, so the
    characters HTML would swallow (`<image>` in a quoted question) are escaped and show as typed.
    The same handlers serve /race and /analysis, whose callers then read those three as entities;
    /trace, for API callers only, raises the plain sentence."""
    return gr.Error(html.escape(message, quote=False), print_exception=False)


# --- downloads ----------------------------------------------------------------------------------


@functools.cache
def export_dir() -> tempfile.TemporaryDirectory:
    """One folder per process for the downloads of both tabs (held by the cache, removed at exit).
    Gradio copies each file into its own cache when it sends it, and runs never overlap (one
    concurrency slot), so every run can write the same names (each tab its own)."""
    return tempfile.TemporaryDirectory(prefix="spd-exports-")


# --- what Gradio keeps per visitor --------------------------------------------------------------


def forget_stale_copies() -> None:
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


def page_only(fn: Callable) -> Callable:
    """A page endpoint (/race, /analysis: HTML panels for the page) kept off the MCP tool list, still on
    the API: Gradio's MCP server lists each named endpoint as a tool unless its function is marked as
    another MCP kind. /trace and /exactness are the tools."""
    fn._mcp_type = "page"
    return fn
