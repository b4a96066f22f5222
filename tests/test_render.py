"""Token panels, block view, stats and outcome as HTML, on hand-built traces with known answers."""

import re

import pytest

from demo.engine import metrics
from demo.engine.events import DrafterInfo, PrefillEvent, Rejection, RoundEvent, RunStart, RunSummary, TokenEvent, Trace
from demo.engine.sampling import Sampling
from demo.page import render, stats_tables, teach

pytestmark = pytest.mark.fast  # the fast tier (`pytest -m fast`): pure functions and tiny models, milliseconds each


def spd_trace(stop: str = "eos", greedy: bool = True, gamma: int = 3, drafter: str = "text-only") -> Trace:
    """A speculative run with gamma 3 (the most drafts per round it announces: `gamma`) and every
    kind of token:

    prefill -> "The" (target)
    round 1: drafts " red" " circle" " is"; accepts " red", rejects " circle" -> resamples " square"
    round 2: drafts " on" " top" "\\n"; accepts all three -> bonus "<b>&"
    round 3: drafts "" (the end); accepts it -> the answer ends inside the drafts
    """
    info = DrafterInfo(drafter, "text-only", 100, 0.0)
    events = [
        RunStart("speculative", "tiny", 1000, info, gamma, Sampling(greedy=greedy), 8),
        PrefillEvent("speculative", 40, 24, 0.030, 0.004, t=0.034),
        TokenEvent(0, 10, "The", "target", 0, p=0.9, t=0.035),
        TokenEvent(1, 11, " red", "accepted", 1, p=0.8, q=0.6, accept_prob=1.0, t=0.060),
        TokenEvent(
            2,
            13,
            " square",
            "resampled",
            1,
            p=0.7,
            rejection=Rejection(id=12, text=" circle", p=0.05, q=0.9, accept_prob=0.0556),
            t=0.060,
        ),
        RoundEvent(1, (11, 12, 14), (" red", " circle", " is"), 1, 13, 2, None, 0.01, 0.015, t=0.060),
        TokenEvent(3, 15, " on", "accepted", 2, p=0.6, q=0.5, accept_prob=1.0, t=0.090),
        TokenEvent(4, 16, " top", "accepted", 2, p=0.5, q=0.7, accept_prob=0.714, t=0.090),
        TokenEvent(5, 17, "\n", "accepted", 2, p=0.4, q=0.4, accept_prob=1.0, t=0.090),
        TokenEvent(6, 18, "<b>&", "bonus", 2, p=0.3, t=0.090),
        RoundEvent(2, (15, 16, 17), (" on", " top", "\n"), 3, 18, 4, None, 0.01, 0.02, t=0.090),
        TokenEvent(7, 2, "", "accepted", 3, p=0.95, q=0.9, accept_prob=1.0, t=0.110),
        RoundEvent(3, (2,), ("",), 1, 19, 1, stop, 0.005, 0.015, t=0.110),
        RunSummary(
            "speculative",
            (10, 11, 13, 15, 16, 17, 18, 2),
            "The red square on top\n<b>&",
            stop,
            3,
            drafter,
            1000,
            100,
            0.034,
            0.076,
            3,
            t=0.110,
        ),
    ]
    return Trace.of(events)


def ar_trace(ids=(10, 11, 13), texts=("The", " red", " square"), greedy: bool = True) -> Trace:
    events = [
        RunStart("autoregressive", "tiny", 1000, None, 0, Sampling(greedy=greedy), 8),
        PrefillEvent("autoregressive", 40, 0, 0.03, 0.0, t=0.03),
    ]
    for i, (token, text) in enumerate(zip(ids, texts, strict=True)):
        events.append(TokenEvent(i, token, text, "target", i, p=0.5, t=0.03 + 0.01 * (i + 1)))
        if i:
            events.append(
                RoundEvent(
                    i, (), (), 0, token, 1, "eos" if i == len(ids) - 1 else None, 0, 0.01, t=0.03 + 0.01 * (i + 1)
                )
            )
    events.append(
        RunSummary(
            "autoregressive",
            tuple(ids),
            "".join(texts),
            "eos",
            0,
            None,
            1000,
            0,
            0.03,
            0.01 * len(ids),
            len(ids) - 1,
            t=0.03 + 0.01 * len(ids),
        )
    )
    return Trace.of(events)


def spans(html: str) -> list[str]:
    return re.findall(r'<span class="tok tok-(\w+)" tabindex="0"', html)


def test_one_focusable_span_per_token_classed_by_its_kind():
    html = render.tokens_html(spd_trace(greedy=False))
    assert spans(html) == ["target", "accepted", "resampled", "accepted", "accepted", "accepted", "bonus", "accepted"]


def test_token_text_is_escaped():
    html = render.tokens_html(spd_trace(greedy=False))
    assert "&lt;b&gt;&amp;" in html
    assert "<b>&" not in html


def test_newline_and_control_characters_stay_visible():
    assert render.visible("a\nb") == 'a<span class="nl">↵</span>\nb'
    assert render.visible("\x1d") == '<span class="ctl">␝</span>'
    assert render.visible("\x7f") == '<span class="ctl">␡</span>'
    assert render.visible("  x\t") == "  x\t"
    assert render.visible("a\nb", line_breaks=False) == 'a<span class="nl">↵</span>b'


def test_answer_ending_at_eos_shows_an_end_marker_on_the_last_token():
    html = render.tokens_html(spd_trace(stop="eos", greedy=False))
    assert html.count(teach.END_MARK) == 1
    assert 'class="end"' not in render.tokens_html(spd_trace(stop="max_new_tokens", greedy=False))


def test_tooltip_of_accepted_token_gives_p_q_and_acceptance_probability():
    tok = spd_trace().tokens[4]  # " top": p 0.5, q 0.7
    span = render.token_span(tok, greedy=False)
    assert "<td>p (target)</td><td>0.500</td>" in span
    assert "<td>q (draft)</td><td>0.700</td>" in span
    assert "<td>min(1, p/q)</td><td>0.714</td>" in span
    assert "round 2" in span
    assert 'aria-label="#4 &#x27; top&#x27; · accepted draft · round 2' in span


def test_tooltip_of_resampled_token_names_the_rejected_draft():
    tok = spd_trace().tokens[2]
    span = render.token_span(tok, greedy=False)
    assert '<s class="rej"> circle</s>' in span
    assert "<td>its p / q</td><td>0.050 / 0.900</td>" in span
    assert "<td>its min(1, p/q)</td><td>0.056</td>" in span
    assert "rejected draft &#x27; circle&#x27;" in span  # in the accessible label too


def test_greedy_tooltips_name_the_argmax_rule():
    accepted = render.token_span(spd_trace().tokens[1], greedy=True)
    assert "<td>argmax match</td><td>yes</td>" in accepted and "argmax match: yes" in accepted
    resampled = render.token_span(spd_trace().tokens[2], greedy=True)
    assert "<td>its argmax match</td><td>no</td>" in resampled
    assert "min(1, p/q)" not in accepted + resampled


def test_speculative_stats_show_the_metrics_beside_their_formulas():
    trace = spd_trace()
    html = stats_tables.speculative_stats_html(trace, speedup=1.5)
    assert metrics.tau(trace) == 7 / 3
    assert '<td class="num">2.33</td><td class="formula">tokens after prefill / target forwards = 7 / 3</td>' in html
    assert '<td class="num">0.71</td><td class="formula">accepted / drafted = 5 / 7 (drafted: every token' in html
    assert "×1.50" in html
    assert "d = drafts made per round = 2.33 (γ = 3), c = drafter/target params = 0.100" in html
    assert '<td class="num">1.89</td>' in html  # MBSU from the drafts made: (7/3) / (1 + (7/3) * 0.1)
    assert "5 accepted · 1 resampled · 1 bonus · 1 from the target alone (the prefill" in html


def test_token_breakdown_counts_the_tokens_shown_while_a_round_event_is_still_to_come():
    trace = spd_trace()
    trace.rounds = trace.rounds[:1]  # round 2's tokens have arrived, its round event not yet
    html = stats_tables.speculative_stats_html(trace, speedup=None)
    assert '<td class="num">8</td><td class="formula">5 accepted · 1 resampled · 1 bonus · 1 from' in html


def test_stats_of_an_empty_trace_show_dashes_not_errors():
    html = stats_tables.speculative_stats_html(Trace(), speedup=None)
    assert html.count('<td class="num">–</td>') == 5
    assert "–" in stats_tables.autoregressive_stats_html(Trace())


SAME = {"identical": True, "first_difference": None, "speedup": 2.0}


def test_lossless_badge_only_when_the_outputs_are_identical():
    spd, ar = spd_trace(), ar_trace()
    same = render.outcome_html([spd], ar, [SAME])
    assert "lossless ✓ identical outputs (8 tokens)" in same
    # the headline is the projection (test_teach works it out: ×2.11), then this machine's speedup;
    # the wall clock is in the closed section, which says how each is computed
    assert "<b>×2.11</b> projected <small>for a 7B LLaVA" in same
    assert '<span class="wall">measured on this machine: <b>×1.03</b>' in same
    assert '<details class="how-computed"><summary>How these are computed</summary>' in same
    assert "The wall clock read ×2.00 (92.1 against 66.7 tokens/s)" in same.split("How these are computed")[1]
    differ = render.outcome_html([spd], ar, [{"identical": False, "first_difference": 3, "speedup": 2.0}])
    assert "lossless" not in differ and "outputs differ from token 3 on" in differ
    sampled = render.outcome_html(
        [spd_trace(greedy=False)], ar_trace(greedy=False), [{"identical": False, "first_difference": 3, "speedup": 2.0}]
    )
    assert "lossless" not in sampled and "differ by design, same distribution" in sampled


def test_with_two_speculative_lanes_the_outcome_compares_each_with_the_target_alone():
    spds, ar = [spd_trace(), spd_trace(drafter="image-aware")], ar_trace()
    differ = {"identical": False, "first_difference": 3, "speedup": 0.5}
    html = render.outcome_html(spds, ar, [SAME, differ])
    assert "text-only: lossless ✓ identical outputs (8 tokens)" in html
    assert "image-aware: ✗ outputs differ from token 3 on" in html
    # one cost basis for every lane: the same rounds read the same at the paper's scale
    assert "text-only: <b>×2.11</b> projected" in html and "image-aware: <b>×2.11</b> projected" in html
    assert "wall clock read ×2.00 " in html and "wall clock read ×0.50 " in html
    assert "text-only: Projected" in html and "image-aware: Projected" in html
    racing = render.outcome_html([Trace.of([spds[0].start, spds[0].prefill]), Trace()], Trace(), None)
    assert "Racing… text-only: 0.034 s, speculative at 0.000 s, autoregressive at 0.000 s of compute." in racing


def test_the_speedup_is_explained_at_the_papers_ratios_then_by_this_runs_own_step_costs():
    spd, ar = spd_trace(), ar_trace()
    slower = render.outcome_html([spd], ar, [{"identical": True, "first_difference": None, "speedup": 0.8}])
    c = metrics.costs(spd, ar)
    assert "<b>×2.11</b> projected" in slower and "The wall clock read ×0.80 " in slower
    assert f"against {c.t1 * 1000:.2f} ms a token alone" in slower
    assert f"×{metrics.split(spd, ar)['high']:.2f} without" in slower


def test_panel_shows_its_own_compute_clock():
    html = render.panel_html(spd_trace(), "Speculative", "text-only")
    assert "0.110 s compute · 8 tokens · done (end of answer)" in html


def test_a_speculative_panel_names_its_block_view_and_its_round_tokens_say_they_open_their_round():
    html = render.panel_html(spd_trace(), "Speculative", blocks="blocks2", lane="lane-2")
    assert html.startswith('<div class="panel lane-2" data-blocks="blocks2">')
    assert html.count(render.OPENS) == 2 * 7  # tooltip and label of every token but the prefill's
    prefill = re.search(r'<span class="tok tok-target"[^>]*data-round="0"[^>]*>', html).group(0)
    assert render.OPENS not in prefill
    assert render.OPENS not in render.panel_html(spd_trace(), "Speculative")  # no block view named: nothing opens


def test_legend_lists_every_kind_with_its_non_colour_cue():
    html = render.legend_html()
    for kind, cue in render.KIND_CUES.items():
        assert f'<span class="tok tok-{kind}">' in html and cue in html
    # the two marks a panel draws that are no kind: a token of spaces alone, and the end of the answer
    assert '<span class="nl">␣</span> a token of spaces alone' in html
    assert f"{teach.END_MARK} the token that ends the answer" in html
    assert "∅ a draft of no text" in html  # the block view's and the tooltip's mark, named


def test_each_lane_says_how_large_its_models_are():
    assert render.settings_line(spd_trace()) == (
        "text-only drafter (100 parameters, 1/10.0 of the 1K target) · γ = 3 · greedy"
    )
    assert render.settings_line(ar_trace()) == "the target (1K parameters), one forward per token · greedy"
    assert [render.params(n) for n in (16_260_864, 656_000, 7_060_000_000, 12)] == ["16.3M", "656K", "7.06B", "12"]


def test_outcome_states_the_presets_facts_about_the_pairing():
    html = render.outcome_html([Trace()], Trace(), None, ("The drafter cannot propose <end>.",))
    assert '<div class="fact">The drafter cannot propose &lt;end&gt;.</div>' in html
    assert "press <b>Run the race</b>" in html


def test_loading_shows_how_far_it_got_and_what_it_does():
    html = render.loading_html(0.42, "loading the target <x>")
    assert '<progress max="100" value="42"></progress>' in html
    assert "Loading the models: loading the target &lt;x&gt;" in html


def test_errors_are_escaped_and_announced():
    assert render.error_html("bad <thing>") == (
        '<div class="outcome"><div class="error-box" role="alert">bad &lt;thing&gt;</div></div>'
    )


def test_exported_token_flattens_its_rejection_into_the_rejected_columns():
    trace = spd_trace()
    record = trace.to_dict()
    # the run's start is the export's settings
    assert set(record) == {"prefill", "tokens", "rounds", "summary", "image_attention"}
    assert record["tokens"][2] == {
        "index": 2,
        "token_id": 13,
        "text": " square",
        "kind": "resampled",
        "round": 1,
        "p": 0.7,
        "q": None,
        "accept_prob": None,
        "rejected_id": 12,
        "rejected_text": " circle",
        "rejected_p": 0.05,
        "rejected_q": 0.9,
        "rejected_accept_prob": 0.0556,
        "t": 0.06,
        "image_attention": None,  # not read for this trace
    }
    assert record["image_attention"] is None
    assert record["tokens"][1]["rejected_id"] is None and record["tokens"][1]["rejected_text"] is None


def test_a_chinese_description_says_why_its_end_can_show_broken_characters():
    chinese = render.reference_html("description", "这是一幅浅色背景上的几何图形简图。")
    assert "byte pieces it learnt poorly" in chinese and ".md" not in chinese  # words for visitors, no paths
    assert "byte pieces" not in render.reference_html("description", "The image is a simple drawing.")
    assert "byte pieces" not in render.reference_html("caption", "右上角有一个红色圆形。")
