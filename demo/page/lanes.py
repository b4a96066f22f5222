"""The Race tab's lanes as component updates: a race's traces (lane -> Trace) in, a dict keyed by
component name out (speculative, speculative-2 and autoregressive, each its panel, stats and block
view). The teaching views follow the first speculative lane. Pure functions; no decoding."""

from __future__ import annotations

from demo import session
from demo.engine import export
from demo.engine.events import Trace
from demo.page import blocks, charts, proof, render, stats_tables, strategy_table, teach

SPECULATIVE = ("speculative", session.SECOND)  # the speculative lanes, in lane order
# lane -> (panel, stats, block view) component names; the block view's name is also its element id
COMPONENTS = {
    "speculative": ("spd_panel", "spd_stats", "blocks"),
    session.SECOND: ("spd2_panel", "spd2_stats", "blocks2"),
}
LANE_CLASS = {"speculative": "lane-1", session.SECOND: "lane-2"}


def ordered(lanes) -> list[str]:
    """Lane names in page order (speculative, speculative-2, autoregressive), whatever order they came in."""
    order = (*SPECULATIVE, "autoregressive")
    return sorted(lanes, key=order.index)


def title(lane: str, trace: Trace) -> str:
    """A speculative panel's title: the lane and, once its run has started, its drafter."""
    base = "Speculative" if lane == "speculative" else "Speculative, second lane"
    return f"{base} · {trace.start.drafter.name}" if trace.start and trace.start.drafter else base


def empty_second() -> dict:
    """The second lane's components with no race in them (hidden unless a second drafter is picked)."""
    empty = Trace()
    return {
        "spd2_panel": render.panel_html(
            empty, title(session.SECOND, empty), "a second drafter, raced beside the first"
        ),
        "spd2_stats": stats_tables.speculative_stats_html(empty, None, narrow=True),
        "blocks2": blocks.blocks_html(empty),
    }


def view(
    traces: dict[str, Trace],
    facts: tuple[str, ...],
    charts_too: bool,
    reference: str | None = None,
    stopped: bool = False,
) -> dict:
    """The race's panels, stats, outcome, annotated round and block views (and its charts, with
    charts_too), from the traces alone. `reference`: the example's reference answer, when the
    race is of an example; `stopped`: the Stop button ended it."""
    lanes = [lane for lane in SPECULATIVE if lane in traces]
    spds, ar = [traces[lane] for lane in lanes], traces["autoregressive"]
    done = all(t.done for t in traces.values())
    comparisons = [export.comparison(spd, ar) for spd in spds] if done else None
    update = {} if session.SECOND in traces else empty_second()
    for i, lane in enumerate(lanes):
        spd = traces[lane]
        panel, stats, block_view = COMPONENTS[lane]
        update[panel] = render.panel_html(
            spd,
            title(lane, spd),
            stopped=stopped and not spd.done,
            skip_to=COMPONENTS[lanes[i + 1]][0].replace("_", "-") if i + 1 < len(lanes) else "ar-panel",
            blocks=block_view,
            lane=LANE_CLASS[lane],
        )
        speedup = comparisons[i]["speedup"] if comparisons else None
        update[stats] = stats_tables.speculative_stats_html(spd, speedup, narrow=len(lanes) > 1)
        update[block_view] = blocks.blocks_html(spd)
    update |= {
        "ar_panel": render.panel_html(
            ar, "Autoregressive (target only)", stopped=stopped and not ar.done, skip_to="spd-stats", lane="lane-ar"
        ),
        "ar_stats": stats_tables.autoregressive_stats_html(ar, narrow=len(lanes) > 1),
        "outcome": render.outcome_html(spds, ar, comparisons, facts, reference),
    }
    # The page's heavier views follow the charts' pace; the time chart waits for the race's end.
    if charts_too:
        update |= {
            "how_round": teach.annotated_round_html(spds[0], several=len(spds) > 1),
            "race_chart": charts.race(spds, ar),
            "tau_chart": charts.block_efficiency(spds),
            "hist_chart": charts.accept_lengths(spds),
            "pos_chart": charts.acceptance_by_position(spds),
        }
    if charts_too and done:
        update |= proof.views(spds, ar)  # the time split, and the image's part once it is read
    return update


SWEEP_NOTE = (
    '<div class="sweep-note">After a greedy race: τ, α, MBSU and the predicted speedup of this prompt for '
    "γ = 1 … 10, replayed with the drafter alone against the target's own answer.</div>"
)


def cleared() -> dict:
    """Every view of a race, empty: what the page shows after a request fails before its race
    starts, so that the last race's panels do not stay on screen looking current."""
    empty = Trace()
    traces = {"speculative": empty, "autoregressive": empty}
    return (
        view(traces, (), charts_too=True, stopped=True)
        | empty_second()
        | {
            "time_chart": None,
            "time_note": "",
            "time_chart2": proof.shown(None),
            "dependence": "",
            "sweep_chart": charts.gamma_sweep([], 0),
            "sweep_note": SWEEP_NOTE,
            "strategies": strategy_table.NOTE,
        }
    )


def sweep_view(
    rows: list[dict], request: session.Request, note: str | None = None, strategies: tuple[dict, ...] = ()
) -> dict:
    """The γ sweep's chart and its rule of thumb (`note`, when there is none: why), for the first
    speculative lane; and the table of drafting strategies (`demo.session.strategies` records)."""
    table = {"strategies": strategy_table.table_html(list(strategies), request.gamma)}
    if not rows:
        note = note or "The γ sweep is computed after greedy races only (a sampling race's verdicts are random draws)."
        return {"sweep_chart": charts.gamma_sweep([], 0), "sweep_note": f'<div class="sweep-note">{note}</div>'} | table
    whose = f" (the first speculative lane: {request.drafter})" if request.second_drafter else ""
    return {
        "sweep_chart": charts.gamma_sweep(rows, request.gamma),
        "sweep_note": teach.rule_of_thumb(rows, request.gamma, whose),
    } | table
