"""The proof views (`demo.page.proof`): where a lane's time went, the law check's panels, and the
image-dependent tokens."""

import embedded
import pytest
import races

from demo.engine.sampling import Sampling
from demo.page import proof
from demo.world.tasks import heldout_examples


def _race(loaded, drafter, ex, gamma=4, max_new=48):
    spd = races.spd(loaded, drafter, ex.image, ex.question, gamma, max_new=max_new)
    ar = races.ar(loaded, ex.image, ex.question, max_new=max_new)
    return spd, ar


@pytest.mark.parametrize("drafter", ["text-only", "text-only+tree", "layer-skip", "prompt-lookup"])
def test_the_time_split_sums_to_the_lanes_clock(drafter):
    loaded = embedded.embedded()
    ex = heldout_examples("description", 1, seed=2)[0]
    spd, ar = _race(loaded, drafter, ex)
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
