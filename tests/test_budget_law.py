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
