"""The live check of the sampling law (`demo.session.exactness`) on the embedded world's own models:
the lane and the target alone pass it, and the broken rule (accept every draft) fails the same check."""

import embedded
import pytest
import torch

from demo.engine.sampling import Sampling
from demo.session import exactness
from demo.world.tasks import heldout_examples

SAMPLING = Sampling(greedy=False, temperature=1.0, top_p=0.95, seed=0)


@pytest.fixture
def one_thread():
    """Draws of one token each are too small to share between threads: on a busy 2-core machine two
    threads made the check ten times slower (the suite's workers run on one thread anyway)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def yes_no():
    """A yes/no question whose first answer tokens the target spreads over several outcomes
    (measured: ' es,' 0.76, 'es.' 0.24 after 'Y' at temperature 1)."""
    return heldout_examples("vqa_yesno", 1, seed=3)[0]


@pytest.mark.parametrize("drafter, k", [("text-only", 2), ("image-aware+tree", 2)])
def test_the_lane_writes_the_target_law_and_accepting_every_draft_does_not(yes_no, drafter, k, one_thread):
    loaded = embedded.embedded()
    prompt = loaded.prompt(yes_no.image, yes_no.question, drafter)
    result = exactness.check(
        loaded, prompt, loaded.drafter(drafter), gamma=4, sampling=SAMPLING, k=k, n=150, budget_s=None
    )
    assert abs(sum(result.law) - 1) < 1e-6 and len(result.law) >= 3  # two sequences at least, and "other"
    assert all(sum(c) == 150 for c in result.counts.values())
    assert result.p_value["target"] > exactness.ALPHA
    assert result.p_value["speculative"] > exactness.ALPHA
    assert result.tv["speculative"] < result.tv_bound
    assert result.p_value["broken"] < exactness.ALPHA and not result.passed("broken")
    assert result.tv["broken"] > result.tv_bound
    record = result.to_dict()
    assert record["passed"] == {"target": True, "speculative": True, "broken": False}


@pytest.mark.fast
def test_the_p_value_reads_the_tv_against_draws_from_the_law_itself():
    law = [0.5, 0.3, 0.2]
    assert exactness.p_value(0.0, law, 100) == 1.0  # every draw is at least as far
    assert exactness.p_value(0.5, law, 100) == 1 / (1 + exactness.MC_DRAWS)  # none is this far
    middling = exactness.p_value(exactness.tv_distance([55, 28, 17], law), law, 100)
    assert 0.2 < middling < 0.9  # a draw this close is common
    assert exactness.tv_bound(law, 100) > exactness.tv_bound(law, 400)


def test_greedy_is_refused_the_law_check():
    loaded = embedded.embedded()
    with pytest.raises(AssertionError, match="greedy"):
        exactness.check(loaded, None, None, gamma=4, sampling=Sampling(), k=1)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "idefics3"])
def test_hub_families_draw_the_law_check_on_one_prefill(tmp_path, family, one_thread):
    """The check's rollback (the target cache cropped to the prompt, the drafter rolled back) holds
    on the hub families' caches and positions: the lane's draws pass against their exact law."""
    import tiny_families
    from PIL import Image

    from demo.models import loader

    preset = tiny_families.build(family, tmp_path / family)
    loader.PRESETS[preset.name] = preset
    try:
        loaded = loader.load(preset.name)
        image = Image.new("RGB", (64, 48), (40, 90, 200))
        prompt = loaded.prompt(image, "Describe the image.", "text")
        sampling = Sampling(greedy=False, temperature=0.3, seed=0)
        result = exactness.check(
            loaded, prompt, loaded.drafter("text"), gamma=3, sampling=sampling, k=2, n=60, budget_s=None
        )
        assert all(sum(c) == 60 for c in result.counts.values())
        assert result.passed("speculative") and result.passed("target")
    finally:
        del loader.PRESETS[preset.name]
        loader._LOADED.pop(preset.name, None)
