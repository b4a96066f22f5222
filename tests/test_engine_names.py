"""The engine names (SGLang's and vLLM's) that exports and /trace add per speculative lane equal the
page's tau and alpha, counted the way those engines count them (docs/api.md, "Engine names")."""

import pytest
import races

from demo.engine import export, metrics
from demo.engine.events import Trace
from demo.engine.sampling import Sampling

IMAGE, QUESTION = races.CASES[2]


def _races(world, **kwargs):
    spd = races.spd(world, "text-partly", IMAGE, QUESTION, 3, **kwargs)
    ar = races.ar(world, IMAGE, QUESTION, sampling=kwargs.get("sampling", races.GREEDY))
    return spd, ar


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"sampling": Sampling(greedy=False, temperature=0.9, seed=3), "seed": 3}, {"min_confidence": 0.2}],
    ids=["greedy", "sampling", "adaptive"],
)
def test_engine_names_equal_the_pages_tau_and_alpha(world, kwargs):
    spd, ar = _races(world, **kwargs)
    record = export.payload({}, {"speculative": spd, "autoregressive": ar})
    page = record["runs"]["speculative"]["metrics"]
    names = record["runs"]["speculative"]["engine_names"]
    assert "engine_names" not in record["runs"]["autoregressive"]
    rounds = len(spd.rounds)
    assert names["spec_verify_ct"] == page["target_forwards"] == rounds
    assert names["spec_num_proposed_drafts"] == names["num_draft_tokens"] == page["drafted"]
    assert names["spec_num_correct_drafts"] == names["num_accepted_tokens"] == page["accepted"]
    assert names["spec_accept_rate"] == page["alpha"]  # the same division of the same counts
    # SGLang's accept length counts the prefill's token too: completion_tokens / spec_verify_ct.
    assert names["spec_accept_length"] * rounds == pytest.approx(page["tokens"])
    assert names["spec_accept_length"] == pytest.approx(page["tau"] + 1 / rounds, abs=1e-12)
    assert names["spec_accept_histogram"] == page["accept_length_histogram"]
    hist = names["spec_accept_histogram"]
    assert sum(hist) == rounds and sum(k * n for k, n in enumerate(hist)) == page["accepted"]
    # vLLM's per-position counts: rounds whose draft i+1 was accepted; over the rounds that drafted
    # that far, they are the page's acceptance by position.
    for i, accepted in enumerate(names["num_accepted_tokens_per_pos"]):
        reached = sum(len(r.drafted_ids) > i for r in spd.rounds)
        if reached:
            assert accepted / reached == page["acceptance_by_position"][i]
        else:  # adaptive drafting never drafted this far: nothing to accept, no rate
            assert accepted == 0 and page["acceptance_by_position"][i] is None
    drafting = sum(bool(r.drafted_ids) for r in spd.rounds)
    assert names["num_drafts"] == drafting
    assert names["mean_acceptance_length"] == pytest.approx(1 + page["accepted"] / drafting)
    if "min_confidence" in kwargs:  # adaptive drafting made rounds shorter than gamma
        assert page["drafted"] < 3 * drafting


def test_a_full_gamma_lane_reads_vllms_rate_per_position_as_the_pages(world):
    """With every round drafting all gamma drafts (no stop, no adaptive cut), vLLM's unconditional
    rate per position is the page's acceptance by position, number for number."""
    spd, _ = _races(world)
    full = Trace(start=spd.start)
    full.rounds = [r for r in spd.rounds if len(r.drafted_ids) == 3]  # drafts are cut after a stop, and by the budget
    assert len(full.rounds) > 3
    names = export.engine_names(full)
    assert names["acceptance_rate_per_pos"] == metrics.acceptance_by_position(full)
    assert 0 < sum(names["num_accepted_tokens_per_pos"]) < 3 * len(full.rounds)  # some accepted, some not
