"""Events -> plotly figures: the four live charts of the race.

Pure functions of `Trace`s; every plotted number comes from `demo.engine.metrics` or straight from the
events. No Gradio here. Each figure is sized for a quarter of the page and works on an empty
or partial trace, so the UI can redraw it while the runs are still going.

    block_efficiency        running tau after each round, between 1 (autoregressive) and gamma+1
    accept_lengths          how many rounds accepted exactly k drafts, k = 0..gamma
    acceptance_by_position  the fraction of drafts accepted at draft position 1..gamma
    race                    answer tokens against each run's own compute clock
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from demo.engine import metrics
from demo.engine.events import Trace

SPECULATIVE = "#009E73"
AUTOREGRESSIVE = "#666666"
POSITION = "#0072B2"
HEIGHT = 270
# A small template of our own, and each figure built in one call: plotly's named templates are
# deep-copied into every figure and every update re-validates, which cost ~100 ms for the four
# charts, and they are redrawn several times a second while the runs go.
_AXIS = {"gridcolor": "#e6e6e6", "zerolinecolor": "#cccccc", "linecolor": "#bbbbbb", "automargin": True}
TEMPLATE = go.layout.Template(layout={"paper_bgcolor": "white", "plot_bgcolor": "white"})


def _figure(title: str, x_axis: dict, y_axis: dict, data: list, **layout) -> go.Figure:
    return go.Figure(
        data=data,
        layout={
            "title": {"text": title, "font": {"size": 14}, "x": 0.02, "y": 0.96},
            "height": HEIGHT,
            "margin": {"l": 50, "r": 12, "t": 36, "b": 42},
            "template": TEMPLATE,
            "showlegend": False,
            "font": {"size": 11},
            "xaxis": _AXIS | x_axis,
            "yaxis": _AXIS | y_axis,
            **layout,
        },
    )


def _level(y: float, text: str, colour: str) -> tuple[dict, dict]:
    """A dotted horizontal reference line across the plot, labelled at its right end."""
    line = {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"dash": "dot", "color": colour, "width": 1.5},
    }
    label = {
        "xref": "paper",
        "x": 1,
        "y": y,
        "text": text,
        "showarrow": False,
        "xanchor": "right",
        "yanchor": "bottom",
        "font": {"size": 10, "color": colour},
    }
    return line, label


def block_efficiency(spd: Trace) -> go.Figure:
    """Running tau (tokens per target forward) after each round, with its floor and, once the
    run has said its gamma, its ceiling gamma+1."""
    taus = metrics.running_tau(spd)
    rounds = list(range(1, len(taus) + 1))
    gamma = spd.gamma
    levels = [_level(1, "autoregressive: 1", AUTOREGRESSIVE)]
    if gamma:
        levels.append(_level(gamma + 1, f"γ+1 = {gamma + 1}", POSITION))
    return _figure(
        "Block efficiency τ, running",
        {"title": {"text": "round"}, "range": [0.5, max(len(taus), 1) + 0.5]},
        {"title": {"text": "tokens / target forward"}, "range": [0, max(gamma, 1) + 1.5]},
        [go.Scatter(x=rounds, y=taus, mode="lines+markers", name="τ", line={"color": SPECULATIVE}, marker={"size": 4})],
        shapes=[line for line, _ in levels],
        annotations=[label for _, label in levels],
    )


def accept_lengths(spd: Trace) -> go.Figure:
    """Rounds by number of accepted drafts: the accept-length histogram, k = 0..gamma."""
    counts = metrics.accept_length_histogram(spd)
    return _figure(
        "Accepted drafts per round",
        {"title": {"text": "drafts accepted in the round"}, "dtick": 1},
        {"title": {"text": "rounds"}, "rangemode": "tozero"},
        [go.Bar(x=list(range(spd.gamma + 1)), y=counts, name="rounds", marker={"color": SPECULATIVE})],
    )


def acceptance_by_position(spd: Trace) -> go.Figure:
    """Acceptance rate at each draft position 1..gamma: later drafts are accepted less often."""
    rates = [None if math.isnan(r) else r for r in metrics.acceptance_by_position(spd)]
    return _figure(
        "Acceptance rate by draft position",
        {"title": {"text": "draft position"}, "dtick": 1},
        {"title": {"text": "accepted / drafted"}, "range": [0, 1.05]},
        [go.Bar(x=list(range(1, spd.gamma + 1)), y=rates, name="acceptance", marker={"color": POSITION})],
    )


def _curve(trace: Trace) -> tuple[list[float], list[int]]:
    """(compute seconds, answer tokens so far) at the start and after every token event."""
    xs, ys = [0.0], [0]
    for tok in trace.tokens:
        xs.append(tok.t)
        ys.append(tok.index + 1)
    return xs, ys


def race(spd: Trace, ar: Trace) -> go.Figure:
    """Answer tokens against compute time, one line per run: the race as measured."""
    lines = []
    for trace, name, colour in ((spd, "speculative", SPECULATIVE), (ar, "autoregressive", AUTOREGRESSIVE)):
        xs, ys = _curve(trace)
        lines.append(
            go.Scatter(x=xs, y=ys, mode="lines", name=name, line={"color": colour, "shape": "hv", "width": 2.5})
        )
    return _figure(
        "The race: tokens against compute time",
        {"title": {"text": "seconds of compute (each run's own clock)"}, "rangemode": "tozero"},
        {"title": {"text": "tokens"}, "rangemode": "tozero"},
        lines,
        showlegend=True,
        legend={"x": 0.02, "y": 0.98, "bgcolor": "rgba(255,255,255,.7)"},
    )
