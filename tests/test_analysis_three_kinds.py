"""The Analysis tab compares the seed's three answers to "does a drafter need to see the image?"
on the embedded world: the blind text-only drafter, the sighted image-aware one and the drafter
that reads the target's hidden state, side by side on the same examples, each in its colour."""

import pytest

from demo.page.analysis import charts as analysis_charts
from demo.page.analysis import tab as analysis_tab
from demo.session import batches

pytestmark = pytest.mark.slow

THREE = ["text-only", "image-aware", "feature"]


def test_the_blind_the_sighted_and_the_target_feature_drafter_are_compared_on_the_same_examples():
    assert set(THREE) <= set(batches.drafter_choices("embedded"))  # the page's control offers all three
    *_, outputs = analysis_tab.analyze("embedded", "vqa_colour", THREE, 4, 2, 0, "en")
    batch = outputs["batch"]
    assert "Done: 2 examples × 3 drafters" in outputs["status"]
    assert [(r.example, r.drafter) for r in batch.runs] == [(e, d) for e in range(2) for d in THREE]
    for example in range(2):  # greedy: each drafter writes the target's own answer
        answers = {r.trace.summary.token_ids for r in batch.runs if r.example == example}
        assert len(answers) == 1
    figure = outputs["by_category"]  # one bar series per drafter, in its own colour
    drawn = {trace.name: trace.marker.color for trace in figure.data}
    assert drawn == {name: analysis_charts.colour(name, i) for i, name in enumerate(THREE)}
    assert len(set(drawn.values())) == 3
