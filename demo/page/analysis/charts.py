"""Error-analysis summaries -> plotly figures (rejection rate by word category and along the answer),
for the Analysis tab and the batch report: pure functions of `rejections.summary` per drafter, each
bin with its counts and 95% Wilson interval."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from demo.page.charts import MODEBAR
from demo.session.rejections import CATEGORIES, is_grounded

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00")  # Okabe-Ito
# The seed's three answers to "does a drafter need to see the image?" keep one colour in every
# figure: blind, sighted, and reading the target's hidden state. Any other drafter takes a colour
# none of them has, by its place in the figure, so no two drafters of a figure share one.
DRAFTER_COLOURS = {"text-only": "#E69F00", "image-aware": "#0072B2", "feature": "#009E73"}
FREE_COLOURS = tuple(c for c in PALETTE if c not in DRAFTER_COLOURS.values())
HEIGHT = 330
GROUPS = ("image-grounded", "text and template")
WHISKERS = "<br><sup>whiskers: 95% Wilson interval · {}</sup>"  # what the marks are
LABELS = {"punctuation": "punct."}  # axis labels short enough to sit side by side


def colour(drafter: str, i: int) -> str:
    return DRAFTER_COLOURS.get(drafter, FREE_COLOURS[i % len(FREE_COLOURS)])


def _layout(title: str, empty: bool, counts: str = "labels, where they fit: rejected/drafted", **extra) -> dict:
    layout = {
        "title": {"text": title + WHISKERS.format(counts), "font": {"size": 14}, "x": 0.02, "y": 0.97},
        "height": HEIGHT,
        "margin": {"l": 55, "r": 12, "t": 58, "b": 80},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "font": {"size": 11},
        "modebar": MODEBAR,
        # at the figure's foot, under the axis however tall its labels grow (a phone turns them)
        "legend": {"orientation": "h", "x": 0, "y": 0, "yref": "container", "yanchor": "bottom"},
        "yaxis": {
            "title": {"text": "rejected / drafted"},
            "tickformat": ".0%",
            "range": [0, 1.05],
            "gridcolor": "#e6e6e6",
            "zeroline": False,
        },
        **extra,
    }
    if empty:  # no axes to read: plotly would draw its default −1…6 for an empty category axis
        layout["xaxis"] = layout["yaxis"] = {"visible": False}
        layout["annotations"] = [
            {
                "text": "no drafts checked yet",
                "showarrow": False,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "font": {"size": 13, "color": "#888"},
            }
        ]
    return layout


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The 95% Wilson score interval of a rate of k in n (None when n is 0)."""
    if not n:
        return None
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _error_bars(cells: list[dict]) -> dict:
    """Plotly's asymmetric error bars: each cell's rate to its Wilson interval's ends."""
    spans = [wilson(c["rejected"], c["drafted"]) for c in cells]
    rates = [c["rejection_rate"] for c in cells]
    return {
        "type": "data",
        "symmetric": False,
        "array": [s[1] - r if s else 0 for s, r in zip(spans, rates, strict=True)],
        "arrayminus": [r - s[0] if s else 0 for s, r in zip(spans, rates, strict=True)],
        "thickness": 1.2,
        "width": 3,
        "color": "#444",
    }


def category_figure(summaries: dict[str, dict]) -> go.Figure:
    """Rejection rate by word category, one bar per drafter, with its 95% Wilson interval; each bar
    is labelled with its counts (rejected/drafted)."""
    present = [c for c in CATEGORIES if any(c in s["by_category"] for s in summaries.values())]
    groups = [GROUPS[0] if is_grounded(c) else GROUPS[1] for c in present]
    bars = []
    for i, (drafter, s) in enumerate(summaries.items()):
        cells = [s["by_category"].get(c, {"drafted": 0, "rejected": 0, "rejection_rate": None}) for c in present]
        bars.append(
            go.Bar(
                x=[groups, [LABELS.get(c, c) for c in present]],
                y=[cell["rejection_rate"] for cell in cells],
                name=drafter,
                marker={"color": colour(drafter, i)},
                error_y=_error_bars(cells),
                text=[f"{cell['rejected']}/{cell['drafted']}" if cell["drafted"] else "" for cell in cells],
                textposition="outside",
                textfont={"size": 9},
                cliponaxis=False,
                customdata=[
                    [cell["rejected"], cell["drafted"], *(wilson(cell["rejected"], cell["drafted"]) or (0, 0))]
                    for cell in cells
                ],
                hovertemplate=f"{drafter}<br>%{{x}}: %{{y:.0%}} rejected<br>(%{{customdata[0]}} of "
                "%{customdata[1]} drafted; 95% interval %{customdata[2]:.0%}–%{customdata[3]:.0%})<extra></extra>",
            )
        )
    return go.Figure(
        bars,
        _layout(
            "Rejection rate by word category",
            not present,
            barmode="group",
            bargap=0.25,
            bargroupgap=0.15,  # a gap between a group's bars: their counts never run into each other
            showlegend=len(summaries) > 1,
            xaxis={"automargin": True},  # labels turn where they would overlap (a phone)
            uniformtext={"minsize": 8, "mode": "hide"},  # a count wider than its bar is left to the hover
        ),
    )


def position_figure(summaries: dict[str, dict]) -> go.Figure:
    """Rejection rate by where in the answer the position lies, one line per drafter."""
    lines = []
    for i, (drafter, s) in enumerate(summaries.items()):
        bins = s["by_answer_position"]
        lines.append(
            go.Scatter(
                x=[(b["from"] + b["to"]) / 2 for b in bins],
                y=[b["rejection_rate"] for b in bins],
                mode="lines+markers",  # counts on hover: two drafters' labels at one bin overlapped
                name=drafter,
                line={"color": colour(drafter, i), "width": 2.5},
                error_y=_error_bars(bins) | {"color": colour(drafter, i)},
                customdata=[
                    [b["from"], b["to"], b["rejected"], b["drafted"], *(wilson(b["rejected"], b["drafted"]) or (0, 0))]
                    for b in bins
                ],
                hovertemplate=f"{drafter}<br>%{{customdata[0]:.0%}}–%{{customdata[1]:.0%}} of the answer: "
                "%{y:.0%} rejected<br>(%{customdata[2]} of %{customdata[3]} drafted; 95% interval "
                "%{customdata[4]:.0%}–%{customdata[5]:.0%})<extra></extra>",
            )
        )
    empty = not any(b["drafted"] for s in summaries.values() for b in s["by_answer_position"])
    return go.Figure(
        lines,
        _layout(
            "Rejection rate along the answer",
            empty,
            "counts on hover",
            showlegend=len(summaries) > 1,
            xaxis={
                "title": {"text": "position in the answer (start → end)"},
                "tickformat": ".0%",
                "range": [0, 1],
                "dtick": 0.1,
                "gridcolor": "#e6e6e6",
            },
        ),
    )
