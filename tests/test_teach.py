"""The teaching views: the annotated round, the p/q inspector, the computed "why" of the speedup,
the sweep's rule of thumb and the reference badge, on hand-built traces; and the inspector's
numbers from a real (tiny) sampling run."""

import dataclasses
import re

import pytest
import tiny
import torch
from test_render import ar_trace, spd_trace

from demo.engine import metrics, scale
from demo.engine.events import Position, RoundDetail, Trace
from demo.engine.grounding import ImageAttention
from demo.engine.sampling import Sampling
from demo.engine.speculative import speculative_generate
from demo.page import blocks, charts, proof, speedup, teach

pytestmark = pytest.mark.fast  # the fast tier (`pytest -m fast`): pure functions and tiny models, milliseconds each

DETAIL = RoundDetail(
    positions=(
        Position(" red", 0.8, 0.6, 1.0, 0.41, True, ((" red", 0.8), (" blue", 0.1)), ((" red", 0.6), (" big", 0.2))),
        Position(" circle", 0.05, 0.9, 0.0556, 0.73, False, ((" square", 0.7), (" circle", 0.05)), ((" circle", 0.9),)),
    ),
    token=" square",
    own=((" square", 0.9), (" cube", 0.1)),
    own_p=0.9,
)


def with_detail(trace: Trace) -> Trace:
    trace.rounds[0] = dataclasses.replace(trace.rounds[0], detail=DETAIL)
    return trace


def test_the_annotated_round_is_one_that_accepted_then_rejected_told_with_its_numbers():
    html = teach.annotated_round_html(spd_trace())
    assert "Round 1 of this race" in html and "text-only drafter)" in html  # name == kind: said once
    assert "✓  red" in html and "✗  circle" in html and "→  square" in html
    assert (
        "accepted 1 of 3, rejected ‘ circle’ and wrote ‘ square’ instead; the 1 draft after it was never used" in html
    )
    assert "the text-only drafter cannot see the image" in html
    assert "‘ circle’ p = 0.05, the drafter q = 0.90; ‘ square’ had p = 0.70" in html
    assert teach.CAUSAL in html


def rejected_at_round_1(draft: str, own: str, share: float | None = None, kind: str = "text-only") -> Trace:
    """`spd_trace` with round 1's rejection changed: the drafter proposed `draft` at answer position 2,
    the target wrote `own` there; with `share`, the target's image share at every position."""
    trace = spd_trace(drafter=kind)
    tok = trace.tokens[2]
    trace.tokens[2] = dataclasses.replace(tok, text=own, rejection=dataclasses.replace(tok.rejection, text=draft))
    r = trace.rounds[0]
    trace.rounds[0] = dataclasses.replace(r, drafted_texts=(r.drafted_texts[0], draft, r.drafted_texts[2]))
    if kind != "text-only":
        trace.start = dataclasses.replace(trace.start, drafter=dataclasses.replace(trace.start.drafter, kind=kind))
    if share is not None:
        n = len(trace.tokens)
        trace.image_attention = ImageAttention((3,), 1, 1, (share,) * n, (0.0,) * n, (0.0,) * n, ((share,),) * n)
    return trace


def test_a_punctuation_swap_is_never_blamed_on_the_image():
    for kind in ("text-only", "image-aware"):
        told = teach.annotated_round_html(rejected_at_round_1(";", ".", share=0.6, kind=kind))
        assert "rejected ‘;’ and wrote ‘.’ instead" in told
        assert "a punctuation or spacing choice: the drafter put ‘;’ where the target puts ‘.’" in told
        assert "image, " not in told.split("instead")[1].split('class="causal"')[0].replace("in the image", "")
        assert "cannot see the image" not in told


def test_a_grounded_word_is_explained_by_the_image_and_the_targets_attention_on_it():
    looked = teach.annotated_round_html(rejected_at_round_1(" blue", " green", share=0.45))
    assert "‘ green’ is a colour word, the kind the image shows, and the text-only drafter cannot see" in looked
    assert "so it guessed from the words alone; the target put 45% of its attention on the image there." in looked
    assert "decided" not in looked  # attention alone never says the image decided it
    barely = teach.annotated_round_html(rejected_at_round_1(" blue", " green", share=0.1, kind="image-aware"))
    assert "the image-aware drafter sees the image, but it is a far smaller model" in barely


def test_the_round_and_the_proof_panel_read_the_image_the_same_way_at_each_token():
    """Attention and ablation both said where they differ; "the image decided it" only where the
    ablation says the token needed the image (the German colour answer: attention 74%, not needed)."""
    looked = rejected_at_round_1(" blue", " green", share=0.74)
    n = len(looked.tokens)
    looked.ablation = {"dependent": [False] * n, "unavailable": None}
    told = teach.annotated_round_html(looked)
    assert "the target looked at the image here (74%), but a blank image gives it about as likely" in told
    assert "decided it" in told and "image decided" not in told
    looked.ablation = {"dependent": [True] * n, "unavailable": None}
    needed = teach.annotated_round_html(looked)
    assert (
        "74% of its attention on the image there, and a blank image makes it far less likely, so the image decided it"
        in needed
    )
    [why] = [teach.round_reason(looked, r) for r in looked.rounds if teach.round_reason(looked, r)]
    assert why.startswith("Why ‘ blue’ was rejected: ‘ green’ is a colour word") and "the image decided it" in why
    assert f'<p class="why-rejected">{why}</p>' in blocks.blocks_html(looked)  # every rejected round opens its own
    counted = teach.annotated_round_html(rejected_at_round_1(" two", " three"))
    assert "‘ three’ is a count word" in counted and "attention" not in counted.split("count word")[1][:120]


def test_phrasing_and_the_end_are_explained_as_phrasing():
    phrasing = teach.annotated_round_html(rejected_at_round_1(" picture", " image", share=0.2))
    assert (
        "a phrasing word: the drafter&#x27;s sentence pattern" not in phrasing
    )  # the page's text is not escaped twice
    assert "a phrasing word: the drafter's sentence pattern differs from the target's here" in phrasing
    assert "(20% of the target's attention was on the image there)" in phrasing
    function = teach.why_rejected("text-only", "function", None, " a", " the")
    assert function.startswith("a function word") and "image" not in function
    end = teach.why_rejected("text-only", "end", 0.5, "<|end|>", ".")
    assert "whether to stop here, not on the image" in end


def test_before_a_run_the_top_says_what_a_round_is_and_why_one_forward_checks_all_drafts():
    html = teach.annotated_round_html(Trace())
    assert "Run the race and one of its rounds is explained here" in html and teach.CAUSAL in html
    # why the rule is exact, in three lines, before and after a run
    assert "P(x) = min(p, q)(x) + (1 − β)·residual(x) = min(p, q)(x) + p(x) − min(p, q)(x) = p(x)" in html
    assert teach.EXACT in teach.annotated_round_html(spd_trace())


def test_inspector_shows_p_q_min_ratio_and_u_at_each_checked_draft_and_the_residual_when_sampling():
    html = teach.inspector_html(with_detail(spd_trace(greedy=False)).rounds[0], greedy=False)
    assert (
        "✓ draft 1: ‘ red’ · p = 0.800 · q = 0.600 · min(1, p/q) = 1.000, u = 0.410: u &lt; min(1, p/q), accepted"
        in html
    )
    assert (
        "✗ draft 2: ‘ circle’ · p = 0.050 · q = 0.900 · min(1, p/q) = 0.056, u = 0.730: u ≥ min(1, p/q), rejected"
        in html
    )
    assert "drawn from the residual norm(max(0, p − q)) at the rejection: probability 0.900" in html
    assert html.count('<tr class="hit">') == 5  # the draft in p and q at both positions, the target's token


def test_greedy_inspector_names_the_argmax_rule_and_shows_min_ratio_beside_it():
    html = teach.inspector_html(with_detail(spd_trace()).rounds[0], greedy=True)
    assert "argmax match: yes (min(1, p/q) = 1.000, the rule when sampling)" in html
    assert "u =" not in html and "p at the rejection (greedy: the target's argmax)" in html


def test_reference_badge_compares_words_and_says_lossless_is_not_correct():
    ar = ar_trace()  # "The red square"
    assert "matches the reference" in teach.reference_badge(ar, "the red square.")
    differs = teach.reference_badge(ar, "The blue square.")
    assert "differs from the reference: lossless means identical to the target, not correct" in differs
    assert teach.reference_badge(ar, None) == "" and teach.reference_badge(Trace(), "x") == ""


def test_reference_badge_is_exact_in_german_and_chinese_too():
    def answer(text: str) -> Trace:
        trace = ar_trace()
        trace.summary = dataclasses.replace(trace.summary, text=text)
        return trace

    assert "matches" in teach.reference_badge(answer("图中有一个大的红色圆形。"), "图中有一个大的红色圆形")
    assert "differs" in teach.reference_badge(
        answer("图中有一个红色圆形。"), "图中有一个大的红色圆形。"
    )  # 大的 missing
    assert "matches" in teach.reference_badge(answer("Ein großer roter Kreis."), "ein großer roter kreis")
    assert "differs" in teach.reference_badge(answer("Ein großer roter Kreis."), "Ein kleiner roter Kreis.")


def hosted(spd: Trace, seconds: float = 0.005) -> Trace:
    """`spd` with `seconds` of the host's part in each round: every round's clock that much later."""
    rounds = [dataclasses.replace(r, t=r.t + seconds * (i + 1)) for i, r in enumerate(spd.rounds)]
    return dataclasses.replace(spd, rounds=rounds)


def test_how_these_are_computed_prices_the_rounds_at_the_papers_ratios_then_at_this_races_step_costs():
    spd, ar = spd_trace(), ar_trace()
    # The paper's scale: rounds of 3, 3 and 1 drafts at 0.011 T1 a step, verifies of 4, 4 and 2 tokens
    # at 22.39 / 20.67 and 22.17 / 20.67 T1: (7 × 0.011 + 2 × 1.0832 + 1.0726) / 3 = 1.1053 T1 a round
    # for τ 7/3: ×2.11.
    assert metrics.scaled_speedup(spd) == pytest.approx((7 / 3) / 1.10533, abs=1e-4)
    # This machine: T1 10 ms; the verifies of 4 tokens 15 and 20 ms: lower quartile 16.25 ms; D 3.33 ms.
    # A round: 2.33 x 3.33 + (16.25 + 16.25 + 12.08) / 3 = 22.64 ms for τ 2.33: ×1.03
    why = speedup.why_html(spd, ar, 0.9)
    assert "Projected: a round makes 2.3 drafter steps at 0.011 T1 and verifies 3.3 tokens, 1.11 T1 in all" in why
    assert "7.78 ms of drafting + 14.86 ms of verify + 0.00 ms of the host&#x27;s part, against 10.00 ms" in why
    assert "×1.03 with the host&#x27;s part, ×1.03 without. The wall clock read ×0.90" in why
    assert "MBSU" in why and "1.89" in why and "noisy" not in why  # 13% from ×1.03: nothing to warn about


def test_the_headline_names_the_projection_and_gives_this_machines_speedup_as_a_range():
    spd, ar = hosted(spd_trace()), ar_trace()
    first = speedup.headline_html(spd, ar, 0.9)
    busy = hosted(spd_trace())
    busy.rounds[0] = dataclasses.replace(busy.rounds[0], verify_seconds=0.5)  # a busy machine hits one round
    lead = first.split('<span class="wall">')[0]
    assert lead == speedup.headline_html(busy, ar, 0.3).split('<span class="wall">')[0]  # counted, not timed
    assert lead == (
        '<span class="headline"><b>×2.11</b> projected <small>for a 7B LLaVA with a 68M drafter on an H200, '
        "from this race's τ and step costs measured there</small></span>"
    )
    # 5 ms of the host's part a round: 2.33 × 10 / (22.64 + 5) = ×0.84, and ×1.03 without it
    assert "measured on this machine: <b>×0.84–1.03</b>" in first
    assert "MBSU" not in first and "wall clock" not in first  # those are in the closed section


def test_the_proof_panels_verify_cost_equals_the_headlines():
    spd, ar = hosted(spd_trace()), ar_trace()
    headline = speedup.headline_html(spd, ar, 0.9)
    sentence = proof.time_sentence(proof.time_split(spd, ar))
    verify = re.search(r"costs ([\d.]+) single steps here, drafting ([\d.]+)", headline).groups()
    assert (
        re.search(
            r"verification costs ([\d.]+) single steps, drafting \([\d.]+ drafter steps\) ([\d.]+)", sentence
        ).groups()
        == verify
    )
    assert verify == ("1.5", "0.8")
    low = re.search(r"<b>×([\d.]+)–", headline).group(1)
    assert f"buys ×{low};" in sentence  # what τ buys in the proof panel is the range's low end


def test_the_projection_says_what_was_not_measured_for_it():
    assert scale.unmeasured("text-only", [5, 5, 2]) == []  # a chain of the 68M drafter: all measured
    wide, kind = scale.unmeasured("target-feature", [12, 31, 9])
    assert wide.startswith("its verifies of 12–31 tokens are priced at the widest measured, 9 tokens")
    assert kind == "a target-feature drafter step is priced at the 68M drafter's (0.011 T1), not measured for it"
    assert scale.unmeasured("staged", [5]) and scale.unmeasured("target-heads", [5])
    spd = spd_trace()
    spd.start = dataclasses.replace(spd.start, drafter=dataclasses.replace(spd.start.drafter, kind="target-heads"))
    assert "not measured for it" in speedup.headline_html(spd, ar_trace(), 0.9)


def test_the_noisy_warning_shows_only_where_the_wall_clock_leaves_the_step_costs_range():
    spd, ar = hosted(spd_trace()), ar_trace()  # the range ×0.84–1.03
    assert speedup.clock_note(spd, ar, 0.9) == "" and speedup.clock_note(spd, ar, 1.15) == ""  # within 15%
    fast = speedup.clock_note(spd, ar, 2.0)
    assert "the wall clock reads ×2.00, outside ×0.84–1.03 of the step costs" in fast
    assert "the autoregressive lane&#x27;s clock was hit (its steps took 1.5× their typical cost)" in fast
    assert "the speculative lane&#x27;s clock was hit" in speedup.clock_note(spd, ar, 0.5)


def test_rule_of_thumb_takes_the_best_gamma_from_the_exact_tau_at_the_papers_ratios():
    rows = [
        {"gamma": 1, "tau": 1.8, "alpha": 0.8, "mbsu": 1.7, "scaled_speedup": 1.6, "predicted_speedup": 1.5},
        {"gamma": 2, "tau": 2.4, "alpha": 0.7, "mbsu": 2.2, "scaled_speedup": 2.1, "predicted_speedup": 1.0},
        {"gamma": 3, "tau": 2.7, "alpha": 0.6, "mbsu": 2.4, "scaled_speedup": 2.05, "predicted_speedup": 1.35},
    ]
    text = teach.rule_of_thumb(rows, race_gamma=3)  # this machine's costs would have picked γ = 1
    assert "projected, the speedup peaks at γ = 2 (×2.10), and γ = 2–3 is within 5% of it" in text
    assert "; on this machine it peaks at γ = 1 (×1.50)." in text  # this machine's curve names its own best γ
    assert "τ goes 1.80 → 2.70 while α goes 0.80 → 0.60" in text
    assert "used γ = 3: ×2.05 projected, ×1.35 on this machine." in text
    figure = charts.gamma_sweep(rows, 3)
    names = ["τ", "MBSU", "speedup, paper's scale", "speedup, this machine", "α"]
    assert [t.name for t in figure.data] == [*names, "best γ, projected", "best γ, this machine's"]
    assert list(figure.data[2].y) == [1.6, 2.1, 2.05] and figure.layout.shapes[0].x0 == 3
    # each curve's best γ starred on it, named as the sentence names it: the projection's, this machine's
    assert [(t.x, t.y, t.text) for t in figure.data[5:]] == [
        ((2,), (2.1,), ("projected best γ 2",)),
        ((1,), (1.5,), ("this machine's best γ 1",)),
    ]


def test_the_export_of_a_round_leaves_the_inspector_detail_out():
    record = with_detail(spd_trace()).to_dict()
    assert "detail" not in record["rounds"][0] and record["rounds"][0]["n_accepted"] == 1


def test_a_sampling_run_records_the_uniform_draws_that_decided_each_draft(world):
    image, question = tiny.images(1)[0], tiny.QUESTIONS[0]
    trace = Trace.of(
        speculative_generate(
            world.target,
            world.drafter("image-partly"),
            world.prompt(image, question, "image-partly"),
            gamma=3,
            sampling=Sampling(greedy=False, temperature=1.0, seed=0),
            max_new_tokens=24,
            generator=torch.Generator().manual_seed(5),
        )
    )
    checked = 0
    for r in trace.rounds:
        d = r.detail
        assert len(d.positions) == min(r.n_accepted + 1, len(r.drafted_ids))
        for i, pos in enumerate(d.positions):
            assert pos.accepted == (i < r.n_accepted) == (pos.u < pos.accept_prob)
            assert pos.draft == r.drafted_texts[i]
            checked += 1
        assert d.own_p > 0 and d.token == world.target.tokenizer.decode([r.target_id])
    assert checked > 5
