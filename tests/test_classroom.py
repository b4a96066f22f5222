"""The classroom replay: chosen speeds that are really slower, and the step mode, which shows the
last race one verification round at a time with that round annotated; and a failed request, which
clears the last race's panels instead of leaving them looking current."""

import dataclasses

import gradio as gr
import pytest
from test_app import events_in_race_order
from test_render import ar_trace, spd_trace

from demo.engine.events import DraftTree, TokenEvent, TreeNode
from demo.models import presets
from demo.page import classroom, drafter_notes, handlers, render, stats_tables


def race():
    return (("a fact",), events_in_race_order({"speculative": spd_trace(), "autoregressive": ar_trace()}))


def test_the_replay_speeds_are_four_and_eight_times_slower_than_the_race_ran():
    assert classroom.slowdown("¼×") == 4 and classroom.slowdown("⅛×") == 8
    assert classroom.slowdown(None) == 4  # anything else: the default


def test_each_step_shows_the_race_as_it_stood_after_that_round_with_the_round_told():
    last = race()
    first = classroom.step(last, 1)
    assert first["spd_panel"].count('class="tok tok-') == 3  # "The", " red", " square": the prefill and round 1
    assert "Step by step: round 1 of 3" in first["outcome"]
    assert "Round 1 of this race" in first["how_round"] and "✗  circle" in first["how_round"]
    assert first["blocks"].count('class="round') >= 1 and "round-d" in first["blocks"]
    second = classroom.step(last, 2)
    assert second["spd_panel"].count('class="tok tok-') == 7
    assert "Round 2 of this race" in second["how_round"] and "accepted all 3 drafts" in second["how_round"]
    assert "+4 tokens for one target forward" in second["how_round"]
    third = classroom.step(last, 3)
    assert "round 3 of 3" in third["outcome"] and "That was the last" in third["outcome"]
    assert "+1 token for one target forward" in third["how_round"]  # one token, in the singular


def test_next_round_counts_up_and_starts_over_after_the_last():
    last = race()
    assert [classroom.next_step(k, last) for k in (0, 1, 2, 3)] == [1, 2, 3, 1]
    assert classroom.next_step(None, last) == 1


def test_before_a_race_the_step_mode_says_to_run_one_first():
    assert "Run a race first" in classroom.step(None, 1)["outcome"]
    assert set(classroom.step(None, 1)) == {"outcome"}


def test_a_request_that_fails_before_its_race_clears_the_last_races_panels():
    race = handlers.run_race(None, "  ", "embedded", "text-only", 4, "greedy", 0.8, 0.95, 0, 16)
    update = next(race)
    assert "Ask a question about the image first." in update["outcome"] and "error-box" in update["outcome"]
    assert "0.000 s compute · 0 tokens · not run" in update["spd_panel"]  # nothing of the last race stays
    assert "0.000 s compute · 0 tokens · not run" in update["ar_panel"]
    assert "Run the race and one of its rounds is explained here" in update["how_round"]
    assert update["json_file"].interactive is False and "blocks" in update and "race_chart" in update
    with pytest.raises(gr.Error):
        next(race)


def test_every_drafter_the_default_preset_offers_has_its_one_line_description():
    preset = presets.PRESETS[presets.DEFAULT_PRESET]
    lines = {name: drafter_notes.describe(preset.name, name) for name in preset.drafter_names()}
    assert all(line.endswith(".") and len(line) > 40 for line in lines.values()), lines
    assert "never the image" in lines["text-only"] and "sees the image too" in lines["image-aware"]
    assert "no model at all" in lines["prompt-lookup"]
    assert "τ and α count the branch the target walked, the cost counts every node" in lines["text-only+tree"]
    assert drafter_notes.describe(preset.name, "no such drafter") == ""


def test_a_tree_lanes_alpha_says_it_counts_the_walked_branch_and_how_many_nodes_were_proposed():
    nodes = (
        TreeNode(11, " red", -1, 1, 0.6, True),
        TreeNode(20, " blue", -1, 1, 0.3, False),
        TreeNode(12, " circle", 0, 2, 0.5, False),
        TreeNode(21, " cube", 0, 2, 0.4, False),
    )
    trace = spd_trace()
    trace.rounds[0] = dataclasses.replace(trace.rounds[0], tree=DraftTree(nodes, (0,)))
    html = stats_tables.speculative_stats_html(trace, speedup=None)
    assert (
        "accepted / drafted = 5 / 7, counting each tree's walked branch; the trees proposed 4 nodes (4.0 a round): "
        "per node, 1 / 4 = 0.25" in html
    )
    assert "a tree counts γ drafter steps a round, one forward per depth" in html


def test_a_token_of_spaces_alone_is_drawn_as_visible_spaces_not_an_empty_box():
    html = render.token_span(TokenEvent(3, 40, "  ", "target", 0, p=0.5, t=0.1), greedy=True)
    assert '<span class="nl">␣</span><span class="nl">␣</span><span class="tip"' in html
    assert "↵" in render.token_span(TokenEvent(4, 41, "\n", "target", 0, p=0.5, t=0.1), greedy=True)
