"""The proof views (`demo.page.proof`): where a lane's time went, the law check's panels, and the
image-dependent tokens."""

import embedded
import pytest
import races

from demo.page import proof
from demo.world.tasks import heldout_examples


@pytest.fixture(scope="module")
def described():
    """A held-out description and the target's own run on it (shared by the lanes below)."""
    ex = heldout_examples("description", 1, seed=2)[0]
    return ex, races.ar(embedded.embedded(), ex.image, ex.question, max_new=32)


@pytest.mark.parametrize("drafter", ["text-only", "text-only+tree", "layer-skip", "prompt-lookup"])
def test_the_time_split_sums_to_the_lanes_clock(drafter, described):
    ex, ar = described
    spd = races.spd(embedded.embedded(), drafter, ex.image, ex.question, 4, max_new=32)
    split = proof.time_split(spd, ar)
    total = sum(r["draft"] + r["verify"] + r["other"] for r in split["rounds"])
    assert len(split["rounds"]) == len(spd.rounds) > 3
    assert total == pytest.approx(split["clock"], rel=0.05)
    assert all(r["draft"] > 0 or not d.drafted_ids for r, d in zip(split["rounds"], spd.rounds))
    sentence = proof.time_sentence(split)
    assert f"τ {split['tau']:.1f}" in sentence and "ate the most" in sentence
    assert ("nodes a round" in sentence) == drafter.endswith("+tree")
    fig = proof.time_figure(split)
    assert [t.name for t in fig.data][:3] == ["drafting (γ·D)", "verification (T(γ+1))", "everything else"]
    assert len(fig.data[0].y) == len(spd.rounds)


CHECK = {
    "k": 2,
    "n": 100,
    "gamma": 4,
    "drafter": "text-only",
    "context": "Y",
    "labels": ["es,", "es.", "other"],
    "law": [0.76, 0.24, 0.0],
    "counts": {"target": [75, 25, 0], "speculative": [77, 23, 0], "broken": [52, 10, 38]},
    "tv": {"target": 0.01, "speculative": 0.01, "broken": 0.38},
    "p_value": {"target": 0.8, "speculative": 0.7, "broken": 0.00025},
    "alpha": 0.001,
    "tv_bound": 0.16,
    "passed": {"target": True, "speculative": True, "broken": False},
}


@pytest.mark.fast
def test_the_law_panels_show_each_way_against_the_exact_law_and_colour_the_broken_rule_failing():
    fig = proof.law_figure(CHECK)
    bars = [t for t in fig.data if t.type == "bar"]
    assert [b.name for b in bars] == list(proof.WAY_NAMES.values())
    assert [b.marker.color for b in bars] == [proof.PASS, proof.PASS, proof.FAIL]
    assert list(bars[2].y) == [0.52, 0.10, 0.38]
    assert all(list(t.y) == CHECK["law"] for t in fig.data if t.type == "scatter")
    # each panel's title: its way, TV and p on lines of their own (three panels share 420 px on a phone)
    titles = [a.text.split("<br>") for a in fig.layout.annotations]
    assert [t[0] for t in titles] == ["target alone", "the lane", "broken rule"] and all(len(t) == 3 for t in titles)
    assert titles[2][1].startswith("TV ") and titles[2][2].startswith("p ")
    summary = proof.law_summary(CHECK)
    assert summary.count("law-pass") == 2 and summary.count("law-fail") == 1
    assert "does not write the target's law" in summary and "below 0.001" in summary
    assert "law-note" not in summary
    note = "The broken rule passed: 100 draws a way were too few to tell its law from the target law here."
    blind = CHECK | {"passed": {"target": True, "speculative": True, "broken": True}, "note": note}
    assert f"<li class='law-note'>{note}" in proof.law_summary(blind)  # a control that could not fail says why
    shortened = "This machine is busy: 60 of the 200 draws you asked for fit in the 60 s a request may take."
    assert shortened in proof.law_summary(CHECK | {"shortened": shortened})  # the budget's sentence, with it


@pytest.mark.fast
def test_the_image_dependent_tokens_are_marked_and_the_two_readings_compared():
    from demo.engine.events import TokenEvent, Trace
    from demo.engine.grounding import ImageAttention

    trace = Trace()
    for i, text in enumerate(["The", " shape", " is", " red"]):
        trace.tokens.append(TokenEvent(index=i, token_id=i, text=text, kind="target", round=i, p=1.0, t=0.0))
    trace.image_attention = ImageAttention(
        layers=(1,),
        rows=1,
        cols=1,
        image=(0.0, 0.5, 0.1, 0.8),
        text=(1, 0.5, 0.9, 0.2),
        own=(0, 0, 0, 0),
        maps=((0.0,), (0.5,), (0.1,), (0.8,)),
    )
    ablation = {
        "p_with": [1.0, 1.0, 1.0, 0.99],
        "p_without": [1.0, 1.0, 1.0, 0.05],
        "flips": [False, False, False, True],
        "dependent": [False, False, False, True],
        "ratio": 2.0,
        "unavailable": None,
    }
    page = proof.dependence_html(trace, ablation)
    assert page.count("class='img-dep'") == 1 and "title='p with the image 0.99, without 0.05" in page
    assert "Attention and ablation agree on 1; 1 drew attention to the image without needing it, 0 needed it" in page
    assert proof.dependence_html(trace, {"unavailable": "No image."}) == "<p class='ablation-none'>No image.</p>"
