"""The sampling law checked over a batch in the Analysis tab (issue 56): each example checked
live (`demo.session.exactness`), the verdicts pooled by Fisher's method."""

import math

import pytest

from demo.page.analysis import law as analysis_law
from demo.session import batch_law


def test_fishers_method_gives_one_p_value_back_and_combines_two_in_closed_form():
    assert batch_law.fisher([0.3]) == pytest.approx(0.3)
    p1, p2 = 0.04, 0.2
    assert batch_law.fisher([p1, p2]) == pytest.approx(p1 * p2 * (1 - math.log(p1 * p2)))
    assert batch_law.fisher([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert math.isnan(batch_law.fisher([]))


def test_the_pooled_verdict_fails_a_way_that_fails_on_most_examples_and_passes_one_that_never_does():
    def check(lane: float, broken: float) -> dict:
        return {"p_value": {"target": 0.5, "speculative": lane, "broken": broken}}

    results = [check(0.6, 0.002), check(0.3, 0.0004), check(0.9, 0.01)]
    verdict = batch_law.pooled(results)
    assert verdict["speculative"]["passed"] and verdict["target"]["passed"]
    assert not verdict["broken"]["passed"] and verdict["broken"]["failed"] == 1  # one fails alone; pooled, all do
    assert verdict["broken"]["p_value"] < 1e-4
    note = analysis_law.pooled_html(results, done=True)
    assert "<b>the lane</b> passes" in note and "<b>the broken rule</b> fails" in note
    assert "1 of 3 examples fail alone" in note


@pytest.mark.slow
def test_the_tab_checks_the_law_on_each_example_of_the_batch_and_the_lane_passes():
    *_, (note, table) = analysis_law.check_law("embedded", "vqa", ["text-only"], 4, 2, 0, "en")
    assert len(table) == 2 and list(table.columns) == analysis_law.COLUMNS
    assert all(table["draws"] > 0)
    assert "2 examples checked: <b>the lane</b> passes" in note, note
    assert all(p > batch_law.ALPHA for p in table["p lane"])
