"""The table of drafting strategies on this prompt, under the γ sweep: HTML from the records
`demo.session.strategies.compare` made, the race's own marked, each strategy left out footnoted."""

from __future__ import annotations

import html
import math

NOTE = (
    '<div class="sweep-note">After a greedy race: every drafting strategy of the preset, replayed on this '
    "prompt at the race's γ, in one table.</div>"
)
NONE = (
    '<div class="sweep-note">The table of drafting strategies, like the γ sweep, is made after greedy races '
    "only (a sampling race's verdicts are random draws).</div>"
)
STOPPED = '<div class="sweep-note">No table of drafting strategies: the race was stopped before it was made.</div>'
HOW = (
    "τ: tokens per target forward, the bonus included; α: drafts accepted / drafts made; c: drafter parameters / "
    "target parameters; ms / step: one drafter step's wall time in this replay; MBSU = τ / (1 + d·c), d the drafts "
    "made per round; predicted: the cost model with this race's measured target step and verify and that drafter "
    "step. τ and α are exact (the target's own verdicts, replayed off its answer); the ms are this machine's "
    "measurement, made while it ran."
)
COLUMNS = ("strategy", "τ", "α", "c", "ms / step", "MBSU", "predicted speedup")


def _number(value: float | None, digits: int = 2, prefix: str = "") -> str:
    """A cell's number, or a dash where there is none (nothing drafted, no cost model)."""
    if value is None or math.isnan(value):
        return "–"
    return f"{prefix}{value:.{digits}f}"


def _ranked(rows: list[dict]) -> list[dict]:
    """The replayed rows by predicted speedup, highest first (those without one last, in the
    preset's order)."""

    def key(row: dict) -> float:
        value = row["predicted_speedup"]
        return -value if value is not None and not math.isnan(value) else math.inf

    return sorted((r for r in rows if r["left_out"] is None), key=key)


def _row_html(row: dict) -> str:
    name = html.escape(row["strategy"]).replace("+", "<wbr>+")  # a narrow screen breaks "image-aware+tree" there
    mark = ' <span class="raced-mark">(this race)</span>' if row["raced"] else ""
    cells = (
        _number(row["tau"]),
        _number(row["alpha"]),
        _number(row["c"], 3),
        _number(row["draft_ms"], 2),
        _number(row["mbsu"]),
        _number(row["predicted_speedup"], 2, "×"),
    )
    tds = "".join(f'<td class="num">{cell}</td>' for cell in cells)
    raced = ' class="raced"' if row["raced"] else ""
    return f'<tr{raced}><th scope="row">{name}{mark}</th>{tds}</tr>'


def table_html(rows: list[dict], gamma: int) -> str:
    """The table of `rows` (`demo.session.strategies` records) for a race at `gamma`; NONE without rows."""
    if not rows:
        return NONE
    head = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in COLUMNS)
    body = "".join(_row_html(r) for r in _ranked(rows))
    left_out = "".join(
        f"<li>{html.escape(r['strategy'])}: {html.escape(r['left_out'])}</li>" for r in rows if r["left_out"]
    )
    notes = f'<p class="strategies-left-out">Left out of the table:</p><ul>{left_out}</ul>' if left_out else ""
    return (
        '<div class="strategies">'
        f'<table class="strategies-table"><caption>Every drafting strategy on this prompt at γ = {gamma}, '
        "replayed against the target's answer, by predicted speedup (the race's own marked)</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        f'<p class="strategies-how">{html.escape(HOW, quote=False)}</p>{notes}</div>'
    )
