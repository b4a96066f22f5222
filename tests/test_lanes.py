"""The Race tab's lanes as component updates (demo.page.lanes), on hand-built traces: every lane's
panel, stats and block view keyed by component name, and what the page says of a preset's drafters."""

import math

import pytest
from test_render import ar_trace, spd_trace

from demo import session
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.models import presets
from demo.page import lanes, layout, strategy_table
from demo.session import offers, strategies

pytestmark = pytest.mark.fast  # the fast tier (`pytest -m fast`): pure functions and tiny models, milliseconds each


def test_one_speculative_lane_leaves_the_second_lanes_components_empty():
    update = lanes.view({"speculative": spd_trace(), "autoregressive": ar_trace()}, (), charts_too=True)
    assert update["spd_panel"].count('class="tok tok-') == 8 and 'data-blocks="blocks"' in update["spd_panel"]
    assert "tok tok-" not in update["spd2_panel"] and "Rounds appear here" in update["blocks2"]
    assert "stats-narrow" not in update["spd_stats"] + update["ar_stats"]  # two lanes: room for the formulas
    outcome = update["outcome"]
    assert "lossless" not in outcome and "✗ outputs differ from token 3 on" in outcome
    assert "text-only: " not in outcome and "over the target alone" not in outcome  # one lane: no lane names
    assert [line.name for line in update["race_chart"].data] == ["SPD text-only", "autoregressive"]
    assert "the first speculative lane" not in update["how_round"]


def test_two_speculative_lanes_fill_every_lanes_components_by_name():
    traces = {
        "speculative": spd_trace(),
        "speculative-2": spd_trace(drafter="image-aware"),
        "autoregressive": ar_trace(),
    }
    update = lanes.view(traces, ("a fact",), charts_too=True)
    assert update["spd2_panel"].startswith('<div class="panel lane-2" data-blocks="blocks2">')
    assert "Speculative, second lane · image-aware" in update["spd2_panel"]
    assert 'href="#spd2-panel"' in update["spd_panel"] and 'href="#ar-panel"' in update["spd2_panel"]  # skip links
    assert "image-aware drafter" in update["blocks2"] and update["blocks2"].count('<summary class="round">') == 3
    assert all("stats-narrow" in update[name] for name in ("spd_stats", "spd2_stats", "ar_stats"))
    assert "text-only: ✗ outputs differ" in update["outcome"] and "image-aware: ✗ outputs differ" in update["outcome"]
    assert [line.name for line in update["race_chart"].data] == ["SPD text-only", "SPD image-aware", "autoregressive"]
    assert len(update["tau_chart"].data) == len(update["hist_chart"].data) == 2
    # the one time chart: the proof section's split of each lane (drafting, verification, everything else)
    assert [bar.name for bar in update["time_chart"].data][:3] == [
        "drafting (γ·D)",
        "verification (T(γ+1))",
        "everything else",
    ]
    assert update["time_chart2"]["visible"] and update["time_note"].count("time-sentence") == 2
    assert "dependence" not in update  # until the race's call has read the ablation
    assert "the first speculative lane" in update["how_round"]
    assert lanes.ordered({"autoregressive", "speculative-2", "speculative"}) == list(traces)


def test_while_racing_the_charts_wait_and_the_time_chart_waits_for_the_end():
    traces = {"speculative": Trace(), "speculative-2": Trace(), "autoregressive": Trace()}
    update = lanes.view(traces, (), charts_too=False)
    assert not {"race_chart", "how_round", "time_chart"} & set(update)
    assert "time_chart" not in lanes.view(traces, (), charts_too=True)


def test_the_preset_line_names_each_drafter_it_cannot_offer_with_the_reason(monkeypatch):
    monkeypatch.setattr(offers, "availability", lambda name: (True, "Ready."))
    monkeypatch.setitem(presets.PRESETS, "p", presets.Preset("p", "t", (presets.DrafterSpec("d", "text-only", "x"),)))
    html = layout.preset_html("p")
    # one collapsed line, opened on demand: each drafter with its reason
    assert (
        "<summary>3 drafters not offered here</summary><br><b>layer-skip</b>: no search for the layers to skip is stored"
        in html
    )
    assert "<b>feature</b>: no feature drafter has been trained" in html and "<b>medusa</b>: no medusa" in html
    assert layout.drafter_choices("p") == ["d", "d+tree", "prompt-lookup", "staged"]  # d is text-only: staged
    assert layout.second_choices("p") == ["none", "d", "d+tree", "prompt-lookup", "staged"]


def test_a_preset_not_offered_is_told_in_words_for_visitors_without_paths_or_settings():
    cache = (
        "Not in the local Hugging Face cache: llava-hf/llava-1.5-7b-hf, double7/vicuna-68m. Downloads are off: "
        "set DEMO_ALLOW_DOWNLOADS=1 to fetch them, or put them in the cache beforehand."
    )
    told = layout.left_out_html({"llava-1.5-7b": cache, "big": "It needs 30 GB of memory; this machine has 24 GB."})
    assert "DEMO_" not in told and "cache" not in told and "llava-hf/" not in told
    assert "<b>llava-1.5-7b</b>: Its models are not on this machine; the project&#x27;s README says how" in told
    assert "<b>big</b>: It needs 30 GB of memory; this machine has 24 GB." in told  # a reason for visitors stays


def row(name, predicted, raced=False, left_out=None, tau=2.5, alpha=0.5, mbsu=2.0, c=0.1, draft_ms=1.25) -> dict:
    """A strategy row as `session.strategies` writes it: its NUMBERS, every one None where it was left out."""
    numbers = (
        dict.fromkeys(strategies.NUMBERS)
        if left_out
        else dict(zip(strategies.NUMBERS, (tau, alpha, mbsu, predicted, c, draft_ms)))
    )
    return dict(strategy=name, raced=raced, gamma=4, **numbers, left_out=left_out)


def test_the_table_lists_each_row_by_predicted_speedup_marks_the_race_and_footnotes_what_was_left_out():

    rows = [
        row("text-only", 1.4, raced=True),
        row("text-only+tree", None, left_out="a tree <too> large"),
        row("prompt-lookup", 1.9),
        row("layer-skip", math.nan),
        row("image-aware", 1.6),
    ]
    html = strategy_table.table_html(rows, 4)
    assert "<caption>Every drafting strategy on this prompt at γ = 4" in html
    assert html.count('<th scope="col">') == len(strategy_table.COLUMNS)
    order = [
        html.index(f'<th scope="row">{name}') for name in ("prompt-lookup", "image-aware", "text-only", "layer-skip")
    ]
    assert order == sorted(order)  # by predicted speedup, the one without a prediction last
    assert html.count('<tr class="raced"><th scope="row">text-only <span class="raced-mark">(this race)</span>') == 1
    assert html.count("(this race)") == 1 and "×1.90" in html and "1.25" in html and '<td class="num">–</td>' in html
    assert (
        '<th scope="row">text-only<wbr>+tree' not in html
        and "<li>text-only+tree: a tree &lt;too&gt; large</li>" in html
    )
    assert "τ and α are exact" in html and "this machine's measurement" in html


def test_the_sweep_view_puts_the_table_under_the_sweep_and_says_why_a_sampling_race_has_none():
    request = session.Request(
        question="q", preset="embedded", drafter="text-only", gamma=4, sampling=Sampling(), max_new_tokens=24
    )
    rows = [row("text-only", 1.3, raced=True, tau=2.0, mbsu=1.9, c=0.04, draft_ms=0.9)]
    assert '<th scope="row">text-only' in lanes.sweep_view([], request, None, tuple(rows))["strategies"]
    assert lanes.sweep_view([], request, "sampling")["strategies"] == strategy_table.NONE
    assert lanes.cleared()["strategies"] == strategy_table.NOTE
