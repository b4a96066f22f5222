"""What the Race tab sends while a race goes: when it redraws (`Redraws`, for the race and its
replay), its buttons and status, and the downloads it offers once the race is over (`downloads`). The views themselves are
`demo.page.lanes`'; the handlers are `demo.page.handlers`."""

from __future__ import annotations

import time
from pathlib import Path

import gradio as gr

from demo import session
from demo.engine import export
from demo.engine.events import RoundEvent, TokenEvent, Trace
from demo.page import lanes, render, runs

PANEL_EVERY = 0.08  # seconds of wall time between redraws of the panels (the browser keeps up)
CHART_EVERY = 0.5  # and of the charts, which cost the browser more to draw
# Seconds: a handler yields after a round once this much time has passed since its last yield. A
# yield costs Gradio a whole update even when nothing changed: each output left out is a gr.skip(),
# which Gradio 6 turns into a fresh component and its config (14 ms for the Race tab's 24 outputs).
# At 0.02 s those heartbeats were a third of the server's CPU per 32-token race on the embedded
# models: 1.48-1.51 s, against 1.04-1.14 s at 0.1 s (`python -m demo.lab.bench.soak --requests 12
# --warmup 3 --every 12 --mix chain --one-session`, run twice each, interleaved). While the lanes
# decode the page's redraws (every PANEL_EVERY s) come first anyway.
HEARTBEAT_EVERY = 0.1


class Redraws:
    """When the page redraws a race whose events arrive one at a time (`add`): at the first token
    at once, then at most every PANEL_EVERY s (charts every CHART_EVERY s), and once every lane is
    done. In between, an empty update (nothing to redraw) after a round that ends HEARTBEAT_EVERY s
    or more after the last update, so that Gradio can close the handler for a Stop or a client gone
    within max(one round, HEARTBEAT_EVERY); an update per round would cost Gradio milliseconds each."""

    def __init__(self, traces: dict[str, Trace], facts: tuple[str, ...], reference: str | None = None):
        self.traces, self.facts, self.reference = traces, facts, reference
        self.last_panel = self.last_chart = self.last_update = time.perf_counter()
        self.shown_tokens = False

    def add(self, lane: str, event) -> dict | None:
        """`event`, just added to its lane's trace: the update to send now, or None."""
        now = time.perf_counter()
        first = not self.shown_tokens and isinstance(event, TokenEvent)
        last = not isinstance(event, TokenEvent | RoundEvent) and self.done()
        if first or last or now - self.last_panel >= PANEL_EVERY:
            charts_too = now - self.last_chart >= CHART_EVERY
            update = lanes.view(self.traces, self.facts, charts_too, self.reference)
            self.shown_tokens = self.shown_tokens or first
            self.last_panel = self.last_update = time.perf_counter()
            self.last_chart = self.last_panel if charts_too else self.last_chart
            return update
        if isinstance(event, RoundEvent) and now - self.last_update >= HEARTBEAT_EVERY:
            self.last_update = time.perf_counter()
            return {}  # nothing to redraw, but a chance for Gradio to close the handler
        return None

    def done(self) -> bool:
        """Every lane has ended."""
        return all(t.done for t in self.traces.values())

    def whole(self) -> dict:
        """Every lane's view, the charts too."""
        return lanes.view(self.traces, self.facts, charts_too=True, reference=self.reference)


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


def stopped_html(run: runs.PageRun) -> str:
    """ "Stopped.", how long after the Stop reached the server the run had ended, and what stays."""
    took = (
        "" if run.asked_at is None else f" It ended {time.perf_counter() - run.asked_at:.2f} s after the Stop arrived."
    )
    return f'<div class="outcome">Stopped.{took} The panels below keep what was decoded before the stop.</div>'
