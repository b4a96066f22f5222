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
DRAFT = "#E69F00"
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


def _empty(title: str) -> go.Figure:
    """A chart with nothing to show yet: its title and a line saying when it fills, no axes."""
    hidden = {"visible": False}
    return _figure(
        title,
        hidden,
        hidden,
        [],
        annotations=[
            {
                "text": "appears once the race runs",
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "showarrow": False,
                "font": {"size": 12, "color": "#888"},
            }
        ],
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
    if not spd.rounds:
        return _empty("Block efficiency τ, running")
    taus = metrics.running_tau(spd)
    rounds = list(range(1, len(taus) + 1))
    gamma = spd.gamma
    levels = [_level(1, "autoregressive: 1", AUTOREGRESSIVE)]
    if gamma:
        levels.append(_level(gamma + 1, f"γ+1 = {gamma + 1}", POSITION))
    return _figure(
        "Block efficiency τ, running",
        {"title": {"text": "round"}, "range": [0.5, max(len(taus), 1) + 0.5]},
        {"title": {"text": "tokens / forward"}, "range": [0, max(gamma, 1) + 1.5]},
        [go.Scatter(x=rounds, y=taus, mode="lines+markers", name="τ", line={"color": SPECULATIVE}, marker={"size": 4})],
        shapes=[line for line, _ in levels],
        annotations=[label for _, label in levels],
    )


def accept_lengths(spd: Trace) -> go.Figure:
    """Rounds by number of accepted drafts: the accept-length histogram, k = 0..gamma."""
    if not spd.rounds:
        return _empty("Accepted drafts per round")
    counts = metrics.accept_length_histogram(spd)
    return _figure(
        "Accepted drafts per round",
        {"title": {"text": "drafts accepted"}, "dtick": 1},
        {"title": {"text": "rounds"}, "rangemode": "tozero"},
        [go.Bar(x=list(range(spd.gamma + 1)), y=counts, name="rounds", marker={"color": SPECULATIVE})],
    )


def acceptance_by_position(spd: Trace) -> go.Figure:
    """Acceptance rate at each draft position 1..gamma: later drafts are accepted less often."""
    if not spd.rounds:
        return _empty("Acceptance by draft position")
    rates = [None if math.isnan(r) else r for r in metrics.acceptance_by_position(spd)]
    return _figure(
        "Acceptance by draft position",
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
    if not spd.tokens and not ar.tokens:
        return _empty("The race: tokens against compute")
    lines = []
    for trace, name, colour in ((spd, "speculative", SPECULATIVE), (ar, "autoregressive", AUTOREGRESSIVE)):
        xs, ys = _curve(trace)
        lines.append(
            go.Scatter(x=xs, y=ys, mode="lines", name=name, line={"color": colour, "shape": "hv", "width": 2.5})
        )
    return _figure(
        "The race: tokens against compute",
        {"title": {"text": "seconds of compute (own clock)"}, "rangemode": "tozero"},
        {"title": {"text": "tokens"}, "rangemode": "tozero"},
        lines,
        showlegend=True,
        legend={"x": 0.02, "y": 0.98, "bgcolor": "rgba(255,255,255,.7)"},
    )


def round_times(spd: Trace, ar: Trace) -> go.Figure:
    """Per speculative round: drafting and verifying time stacked, against the target's median
    single step (from the autoregressive run): where each round's time goes."""
    if not spd.rounds:
        return _empty("Time per round: draft + verify")
    rounds = [r.index for r in spd.rounds]
    draft = [r.draft_seconds * 1000 for r in spd.rounds]
    verify = [r.verify_seconds * 1000 for r in spd.rounds]
    steps = sorted(r.verify_seconds for r in ar.rounds)
    levels = [_level(steps[len(steps) // 2] * 1000, "target alone: 1 step", AUTOREGRESSIVE)] if steps else []
    return _figure(
        "Time per round: draft + verify",
        {"title": {"text": "round"}},
        {"title": {"text": "ms"}, "rangemode": "tozero"},
        [
            go.Bar(x=rounds, y=draft, name="draft", marker={"color": DRAFT}),
            go.Bar(x=rounds, y=verify, name="verify", marker={"color": POSITION}),
        ],
        barmode="stack",
        showlegend=True,
        legend={"x": 0.01, "y": 0.99, "yanchor": "top", "xanchor": "left", "bgcolor": "rgba(255,255,255,.75)"},
        shapes=[line for line, _ in levels],
        annotations=[label for _, label in levels],
    )


def gamma_sweep(rows: list[dict], race_gamma: int) -> go.Figure:
    """The γ sweep of this prompt: τ, MBSU and the cost model's predicted speedup against γ (left
    axis), α (right axis), the race's γ marked."""
    if not rows:
        return _empty("γ sweep for this prompt (greedy races)")
    gammas = [r["gamma"] for r in rows]
    lines = [
        go.Scatter(x=gammas, y=[r["tau"] for r in rows], name="τ", mode="lines+markers", line={"color": SPECULATIVE}),
        go.Scatter(
            x=gammas, y=[r["mbsu"] for r in rows], name="MBSU", mode="lines", line={"color": "#999", "dash": "dot"}
        ),
        go.Scatter(
            x=gammas,
            y=[r["predicted_speedup"] for r in rows],
            name="predicted speedup",
            mode="lines+markers",
            line={"color": DRAFT, "width": 2.5},
        ),
        go.Scatter(
            x=gammas,
            y=[r["alpha"] for r in rows],
            name="α",
            mode="lines",
            yaxis="y2",
            line={"color": POSITION, "dash": "dash"},
        ),
    ]
    mark = {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": race_gamma,
        "x1": race_gamma,
        "y0": 0,
        "y1": 1,
        "line": {"color": "#bbb", "width": 6},
        "opacity": 0.35,
    }
    return _figure(
        "γ sweep for this prompt",
        {"title": {"text": "γ (drafts per round)"}, "dtick": 1},
        {"title": {"text": "τ, ×"}, "rangemode": "tozero"},
        lines,
        yaxis2={"overlaying": "y", "side": "right", "range": [0, 1.05], "title": {"text": "α"}, "showgrid": False},
        showlegend=True,
        legend={"orientation": "h", "x": 0.0, "y": -0.2, "yanchor": "top", "xanchor": "left"},
        shapes=[mark],
        height=HEIGHT + 50,
        margin={"l": 44, "r": 40, "t": 36, "b": 80},
    )
