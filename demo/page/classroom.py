"""The classroom replay: the last race again at a speed a class can follow (`SPEEDS`), or one
verification round at a time with its annotation (`step`). Pure functions of the recorded race
(`last`, as `demo.page.handlers` keeps it); no decoding."""

from __future__ import annotations

import html
from types import SimpleNamespace

import gradio as gr

from demo.engine.events import RoundEvent, Trace
from demo.page import lanes, teach

SPEEDS = {"¼×": 4, "⅛×": 8}  # the replay's choice -> how many times slower than the race ran
SPEED_DEFAULT = "¼×"


def slowdown(speed: str | None) -> int:
    """The replay's slowdown for the speed chosen (the default for anything else)."""
    return SPEEDS.get(speed, SPEEDS[SPEED_DEFAULT])


def controls() -> SimpleNamespace:
    """The replay's speed and the step mode's button, in one row."""
    c = SimpleNamespace()
    with gr.Row(elem_id="classroom"):
        c.speed = gr.Radio(
            list(SPEEDS), value=SPEED_DEFAULT, label="Replay speed", elem_id="replay-speed", scale=2, min_width=160
        )
        c.next_round = gr.Button("Step: next round ▸", elem_id="next-round", scale=1, min_width=140)
    return c


def rounds_of(timeline) -> list[int]:
    """The positions in `timeline` of the speculative lane's round events, in order."""
    return [i for i, (lane, event) in enumerate(timeline) if lane == "speculative" and isinstance(event, RoundEvent)]


def step(last, k: int) -> dict:
    """The page after round `k` (1-based) of the last race's speculative lane: the lanes as they
    stood when that round ended, and that round told step by step. Before a race: a message."""
    if last is None:
        return {"outcome": '<div class="outcome">Run a race first; then step through it one round at a time.</div>'}
    facts, timeline = last[:2]
    ends = rounds_of(timeline)
    if not ends:
        return {"outcome": '<div class="outcome">This race has no verification rounds to step through.</div>'}
    k = max(1, min(k, len(ends)))
    traces = {lane: Trace() for lane in lanes.ordered({lane for lane, _ in timeline})}
    for lane, event in timeline[: ends[k - 1] + 1]:
        traces[lane].add(event)
    spd = traces["speculative"]
    update = lanes.view(traces, (), charts_too=False)
    more = "Press it again for the next." if k < len(ends) else "That was the last; press it again to start over."
    update["outcome"] = (
        f'<div class="outcome step-head" role="status"><b>Step by step: round {k} of {len(ends)}</b>'
        f"<span>The panels show the race as it stood when this round ended, and the round is told below the "
        f"panels. {html.escape(more)}</span></div>"
    )
    update["how_round"] = teach.annotated_round_html(spd, several=len(traces) > 2, index=spd.rounds[-1].index)
    return update


def next_step(k: int | None, last) -> int:
    """The round the Next button shows after round `k` (0 or None: none yet), wrapping after the last."""
    n = len(rounds_of(last[1])) if last else 0
    return 1 if not k or k >= n else k + 1
