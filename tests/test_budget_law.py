"""The Analysis tab's sampling law over a batch under the work budget (issue 56): its estimate,
refused with what fits like an analysis, and a limit that ends it after the example at hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import tiny

from demo.models import loader
from demo.session import batch_law, budget
from demo.session.validate import InvalidInput


def test_the_batch_law_check_is_estimated_and_shortened_to_the_examples_that_fit(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    full = budget.law_check("embedded", "text-only", 4, 2, 200, batch_law.SHARE)
    # per example: two prefills (40), the law (1 + 100 prefixes), the target alone (1 + 200), the
    # p-values (10), at 0.02 s a step; and 6 s of the lanes' draws
    assert full.steps == pytest.approx(4 * (352 + 6.0 / 0.02))
    assert full.seconds == pytest.approx(52.16)
    assert budget.fit(full) == (full, "")  # the tab's default batch (its first 4 examples) runs whole
    assert budget.limit(full) == 60.0
    monkeypatch.setenv(budget.BUDGET_ENV, "20")
    assert budget.fit(full)[1] == (
        "1 of the 4 examples you asked for fit in the 20 s a request may take, so the check runs 1."
    )
    assert len(batch_law.LawBatch("embedded", "text-only", [None] * 4, 4).call[2]) == 1  # before any work
    monkeypatch.setenv(budget.BUDGET_ENV, "5")
    with pytest.raises(InvalidInput) as refused:
        budget.fit(full)
    assert str(refused.value) == (
        "This check asks for the sampling law of 2 tokens checked 200 times each way on 4 examples (text-only), and "
        "not even its smallest version (1 example) fits in the 5 s a request may take here. To run it, check one "
        "example at a time with the Race tab's Check exactness."
    )


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    root = tmp_path_factory.mktemp("law")
    tiny.save_preset(root / "preset", "tiny-law")
    yield [SimpleNamespace(image=image, question="Describe the image.") for image in tiny.images(2)]
    loader.PRESETS.pop("tiny-law", None)
    loader._LOADED.pop("tiny-law", None)


def test_a_batch_law_check_past_its_limit_ends_over_budget_after_the_example_at_hand(items, monkeypatch):
    monkeypatch.setattr(batch_law, "SHARE", 0.2)  # a short draw for each example
    monkeypatch.setattr(budget, "limit", lambda estimate: 0.0)  # runs out as soon as it is armed
    batch = batch_law.LawBatch("tiny-law", "text-only", items, 3, k=1, n=10)
    results = list(batch.results())
    assert len(results) == 1 and batch.ending == "over budget" and batch.deadline.seconds == 0.0
    assert set(results[0]["p_value"]) == set(batch_law.WAYS)
    whole = batch_law.LawBatch("tiny-law", "text-only", items, 3, k=1, n=10)
    monkeypatch.setattr(budget, "limit", lambda estimate: None)  # no budget: every example
    assert len(list(whole.results())) == 2 and whole.ending == "finished"


def test_a_single_law_check_counts_the_law_and_the_targets_draws_and_is_shortened_or_refused(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    # the check: k 3, γ 10: two prefills (40), the law (1 + 2 x 100 prefixes), the p-values (10), one
    # step more; per draw the lane's 3 rounds and the broken rule's 1 at γ 4 (its drafts stop at k + 1), sampled,
    # and the target's 2
    heavy = budget.law("embedded", "text-only", 10, 3, 200)
    assert heavy.fixed == pytest.approx(40 + 1 + 200 + 1 + 10)
    assert heavy.per_unit == pytest.approx(4 * (1.1 + 4 * 0.18) * 1.25 + 2)
    assert budget.fit(heavy) == (heavy, "")  # 49 s: it runs whole
    monkeypatch.setenv(budget.BUDGET_ENV, "20")
    fitted, said = budget.fit(heavy)
    assert budget.MIN_DRAWS <= fitted.units < 200 and fitted.seconds <= 20
    assert (
        said
        == f"{fitted.units} of the 200 draws you asked for fit in the 20 s a request may take, so the check runs {fitted.units}."
    )
    monkeypatch.setenv(budget.BUDGET_ENV, "8")
    with pytest.raises(InvalidInput) as refused:
        budget.fit(heavy)
    assert str(refused.value) == (
        "This check asks for the sampling law of 3 tokens drawn 200 times each way (text-only at γ 10), and not even "
        "its smallest version (50 draws) fits in the 8 s a request may take here. To run it, check fewer tokens (k), "
        "or lower γ."
    )
