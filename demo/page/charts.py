"""Events -> plotly figures: the live charts of the race (block efficiency, accept lengths, acceptance
by position, the race, the γ sweep). Pure functions of `Trace`s that work on partial traces, so the
page can redraw them while the runs go; each speculative lane has a colour and pattern of its own."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from demo.engine import metrics
from demo.engine.events import Trace

SPECULATIVE = "#009E73"
SECOND = "#CC79A7"  # the second speculative lane (Okabe-Ito reddish purple)
AUTOREGRESSIVE = "#666666"
POSITION = "#0072B2"
DRAFT = "#E69F00"
HEIGHT = 270
# A small template of our own, and each figure built in one call: plotly's named templates are
# deep-copied into every figure and every update re-validates, which cost ~100 ms for the four
# charts, and they are redrawn several times a second while the runs go.
_AXIS = {"gridcolor": "#e6e6e6", "zerolinecolor": "#cccccc", "linecolor": "#bbbbbb", "automargin": True}
TEMPLATE = go.layout.Template(layout={"paper_bgcolor": "white", "plot_bgcolor": "white"})
# The charts' toolbar keeps "download plot as a png" and drops the rest: zoom, pan and select are
# undone by the next redraw of a live chart, and at 420 px the whole bar covered the chart's title.
MODEBAR = {"remove": ["zoom", "pan", "select", "lasso", "zoomin", "zoomout", "autoscale", "resetscale"]}


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
            "modebar": MODEBAR,
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
        "bgcolor": "rgba(255,255,255,0.85)",  # legible where it crosses bars (the time chart's were hidden)
    }
    return line, label


# The page's script for the charts (joined to `text.JS`). Gradio now and then draws a chart into a
# new plot element and drops the old one without `Plotly.purge`; plotly's window "resize" listener
# (Gradio sets `responsive`) then holds the dropped element and its whole SVG for good: about 45
# of them a race, and the tab grew by ~15,000 DOM nodes and 6.7 MiB of JS heap a race
# (`python -m demo.lab.bench.page --runs 0 --races N`). Each plot element that has left the page loses
# that listener, and responsive is turned off so that a redraw still under way does not add it back.
# Not `Plotly.purge`: the element is often dropped while plotly is still drawing it (Gradio redraws
# a chart every 0.5 s of a race), and a purge then took the layout from under that drawing, which
# threw "Cannot read properties of undefined (reading '_redrawFromAutoMarginCount')" (or
# '_rehover'): 16-63 page errors a race in headless Chromium.
JS = """
  new MutationObserver((records) => {
    for (const record of records) {
      for (const node of record.removedNodes) {
        if (node.nodeType !== 1) continue;
        const plots = node.classList.contains("js-plotly-plot") ? [node] : node.getElementsByClassName("js-plotly-plot");
        for (const plot of Array.from(plots)) {
          if (plot.isConnected) continue;
          if (plot._context) plot._context.responsive = false;
          if (plot._responsiveChartHandler) window.removeEventListener("resize", plot._responsiveChartHandler);
          delete plot._responsiveChartHandler;
        }
      }
    }
  }).observe(document.body, { childList: true, subtree: true });
"""

# Per speculative lane, in lane order: colour, line dash, marker and bar fill pattern, so the
# lanes stay apart without colour too.
LANE_STYLES = (
    {"color": SPECULATIVE, "dash": "solid", "symbol": "circle", "pattern": ""},
    {"color": SECOND, "dash": "dash", "symbol": "diamond", "pattern": "/"},
)
LEGEND = {"x": 0.02, "y": 0.98, "bgcolor": "rgba(255,255,255,.7)"}  # inside the plot, top left
TOP_LEFT = {"x": 0.01, "y": 0.99, "yanchor": "top", "xanchor": "left", "bgcolor": "rgba(255,255,255,.75)"}
HATCH = {"shape": "/", "fgcolor": "white", "fillmode": "overlay", "solidity": 0.35}  # over the lane's colour


def _legend_below(n_entries: int = 2) -> dict:
    """A legend in rows under the x axis, where it hides no data (the figure grows to hold it)."""
    rows = 1 + (n_entries > 3)
    return {
        "showlegend": True,
        # under the x axis's title: plotly places it in paper units, so the figure's plot area must
        # stay about as tall as without the legend (HEIGHT - 78 px)
        "legend": {"orientation": "h", "x": 0.0, "y": -0.36, "yanchor": "top", "xanchor": "left"},
        "height": HEIGHT + 30 + 22 * rows,
        "margin": {"l": 50, "r": 12, "t": 36, "b": 72 + 22 * rows},
    }


def lane_name(trace: Trace) -> str:
    """A lane's name in a legend: its drafter's, or "autoregressive"."""
    if trace.start is None:
        return "speculative"
    return f"SPD {trace.start.drafter.name}" if trace.start.drafter else "autoregressive"


def _several(spds) -> bool:
    return len(spds) > 1


def _bars(spds, x_of, y_of, colour: str) -> list:
    """One bar series per lane: a single lane in `colour`, several in their lanes' styles."""
    bars = []
    for i, spd in enumerate(spds):
        style = LANE_STYLES[i]
        marker = {"color": colour if not _several(spds) else style["color"]}
        if style["pattern"]:
            marker["pattern"] = HATCH | {"shape": style["pattern"]}
        bars.append(go.Bar(x=x_of(spd), y=y_of(spd), name=lane_name(spd), marker=marker))
    return bars


def block_efficiency(spds: list[Trace]) -> go.Figure:
    """Running tau (tokens per target forward) after each round of each speculative lane, with
    its floor and, once the runs have said their gamma, its ceiling gamma+1."""
    spds = [s for s in spds if s.rounds]
    if not spds:
        return _empty("Block efficiency τ, running")
    lines = []
    for i, spd in enumerate(spds):
        taus, style = metrics.running_tau(spd), LANE_STYLES[i]
        lines.append(
            go.Scatter(
                x=list(range(1, len(taus) + 1)),
                y=taus,
                mode="lines+markers",
                name=lane_name(spd) if _several(spds) else "τ",
                line={"color": style["color"], "dash": style["dash"]},
                marker={"size": 5, "symbol": style["symbol"]},
            )
        )
    gamma = max(s.gamma for s in spds)
    levels = [_level(1, "autoregressive: 1", AUTOREGRESSIVE)]
    if gamma:
        levels.append(_level(gamma + 1, f"γ+1 = {gamma + 1}", POSITION))
    most = max(len(s.rounds) for s in spds)
    return _figure(
        "Block efficiency τ, running",
        {"title": {"text": "round"}, "range": [0.5, most + 0.5]},
        {"title": {"text": "tokens / forward"}, "range": [0, max(gamma, 1) + 1.5]},
        lines,
        shapes=[line for line, _ in levels],
        annotations=[label for _, label in levels],
        **(_legend_below() if _several(spds) else {}),
    )


def accept_lengths(spds: list[Trace]) -> go.Figure:
    """Rounds by number of accepted drafts: the accept-length histogram, k = 0..gamma, a bar per lane."""
    spds = [s for s in spds if s.rounds]
    if not spds:
        return _empty("Accepted drafts per round")
    return _figure(
        "Accepted drafts per round",
        {"title": {"text": "drafts accepted"}, "dtick": 1},
        {"title": {"text": "rounds"}, "rangemode": "tozero"},
        _bars(spds, lambda s: list(range(s.gamma + 1)), metrics.accept_length_histogram, SPECULATIVE),
        barmode="group",
        **(_legend_below() if _several(spds) else {}),
    )


def acceptance_by_position(spds: list[Trace]) -> go.Figure:
    """Acceptance rate at each draft position 1..gamma: later drafts are accepted less often."""
    spds = [s for s in spds if s.rounds]
    if not spds:
        return _empty("Acceptance by draft position")

    def rates(spd):
        return [None if math.isnan(r) else r for r in metrics.acceptance_by_position(spd)]

    return _figure(
        "Acceptance by draft position",
        {"title": {"text": "draft position"}, "dtick": 1},
        {"title": {"text": "accepted / drafted"}, "range": [0, 1.05]},
        _bars(spds, lambda s: list(range(1, s.gamma + 1)), rates, POSITION),
        barmode="group",
        **(_legend_below() if _several(spds) else {}),
    )


def _curve(trace: Trace) -> tuple[list[float], list[int]]:
    """(compute seconds, answer tokens so far) at the start and after every token event."""
    xs, ys = [0.0], [0]
    for tok in trace.tokens:
        xs.append(tok.t)
        ys.append(tok.index + 1)
    return xs, ys


def race(spds: list[Trace], ar: Trace) -> go.Figure:
    """Answer tokens against compute time, one line per run: the race as measured."""
    if not ar.tokens and not any(s.tokens for s in spds):
        return _empty("The race: tokens against compute")
    lines = []
    for i, spd in enumerate(spds):
        xs, ys = _curve(spd)
        style = LANE_STYLES[i]
        line = {"color": style["color"], "dash": style["dash"], "shape": "hv", "width": 2.5}
        lines.append(go.Scatter(x=xs, y=ys, mode="lines", name=lane_name(spd), line=line))
    xs, ys = _curve(ar)
    line = {"color": AUTOREGRESSIVE, "dash": "dot", "shape": "hv", "width": 2.5}
    lines.append(go.Scatter(x=xs, y=ys, mode="lines", name="autoregressive", line=line))
    return _figure(
        "The race: tokens against compute",
        {"title": {"text": "seconds of compute (own clock)"}, "rangemode": "tozero"},
        {"title": {"text": "tokens"}, "rangemode": "tozero"},
        lines,
        **(_legend_below(len(lines)) if _several(spds) else {"showlegend": True, "legend": LEGEND}),
    )


STAR = {"mode": "markers+text", "showlegend": False, "textfont": {"size": 10, "color": "#8a5a00"}}
STAR["marker"] = {"color": DRAFT, "symbol": "star", "size": 14, "line": {"color": "#333", "width": 1}}


def best_gamma(rows: list[dict], key: str) -> dict | None:
    """The sweep's row where the speedup `key` peaks ("scaled_speedup": the projection's,
    "predicted_speedup": this machine's), or None where no row has it."""
    scored = [r for r in rows if r.get(key) is not None and not math.isnan(r[key])]
    return max(scored, key=lambda r: r[key]) if scored else None


def gamma_sweep(rows: list[dict], race_gamma: int) -> go.Figure:
    """The γ sweep of this prompt: τ, MBSU, the speedup at the paper's fixed ratios and the cost
    model's from this race's measured costs against γ (left axis), α (right axis), the race's γ marked,
    and each speedup's best γ starred on its curve."""
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
            y=[r["scaled_speedup"] for r in rows],
            name="speedup, paper's scale",
            mode="lines+markers",
            line={"color": DRAFT, "width": 2.5},
        ),
        go.Scatter(
            x=gammas,
            y=[r["predicted_speedup"] for r in rows],
            name="speedup, this machine",
            mode="lines",
            line={"color": DRAFT, "width": 1, "dash": "dot"},
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
    # each speedup curve's best γ starred on it and named: above it, and this machine's below it unless
    # that is down at the axis (its curve runs under the projection's)
    top = best_gamma(rows, "scaled_speedup")
    for key, where in (("scaled_speedup", "projected"), ("predicted_speedup", "this machine's")):
        if (best := best_gamma(rows, key)) is not None:
            side = "bottom" if key != "scaled_speedup" and best[key] > (top or best)["scaled_speedup"] / 4 else "top"
            at = f"{side} {'left' if best['gamma'] > 5 else 'right'}"  # inside the plot
            text = {"text": [f"{where} best γ {best['gamma']}"], "textposition": at}
            lines.append(go.Scatter(x=[best["gamma"]], y=[best[key]], name=f"best γ, {where}", **text, **STAR))
    mark = dict(type="line", xref="x", yref="paper", x0=race_gamma, x1=race_gamma, y0=0, y1=1, opacity=0.35)
    mark["line"] = {"color": "#bbb", "width": 6}
    return _figure(
        "γ sweep for this prompt",
        {"title": {"text": "γ (drafts per round)"}, "dtick": 1},
        {"title": {"text": "τ, ×"}, "rangemode": "tozero"},
        lines,
        yaxis2={"overlaying": "y", "side": "right", "range": [0, 1.05], "title": {"text": "α"}, "showgrid": False},
        showlegend=True,  # at the figure's foot, under the axis's title at every width
        legend={"orientation": "h", "x": 0.0, "y": 0, "yref": "container", "yanchor": "bottom", "xanchor": "left"},
        shapes=[mark],
        height=HEIGHT + 60,
        margin={"l": 44, "r": 40, "t": 36, "b": 92},
    )
