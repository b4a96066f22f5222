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


@pytest.fixture(scope="module")
def default_example():
    """The page's default example (the gallery's first: a description) and its race's request."""
    from PIL import Image

    from demo import session
    from demo.page.examples import load_examples

    example = load_examples()[0]
    request = session.parse(question=example.question, preset="embedded", drafter="text-only")
    return Image.open(example.image).convert("RGB"), request


def test_the_broken_rule_fails_the_checks_defaults_in_nine_of_ten_seeds(default_example, one_thread):
    """The check's defaults on the page's default race (greedy: the check samples at temperature 1,
    k 2, 200 draws): the check walks the target's answer to where it is unsure, so the law has
    several outcomes, and the broken rule's departure shows."""
    from dataclasses import replace

    image, request = default_example
    loaded = embedded.embedded()
    failed, passed = 0, 0
    for seed in range(10):
        prompt = loaded.prompt(image, request.question, request.drafter)
        sampling = replace(request.sampling, greedy=False, seed=seed)
        result = exactness.check(  # as /exactness runs it where the budget has room: 200 draws, not timed
            loaded,
            prompt,
            loaded.drafter(request.drafter),
            gamma=request.gamma,
            sampling=sampling,
            k=2,
            seed=seed,
            budget_s=None,
        )
        assert len(result.law) >= 3 and result.n == 200, (result.context, result.law, result.n)
        failed += not result.passed("broken")
        passed += result.passed("speculative")
    assert failed >= 9 and passed >= 9, (failed, passed)


def test_each_draw_starts_from_the_target_features_the_lane_had_where_it_was_raced(default_example, one_thread):
    image, request = default_example
    loaded = embedded.embedded()
    prompt = loaded.prompt(image, request.question, "feature")
    sampling = Sampling(greedy=False, temperature=1.0, seed=0)
    with torch.inference_mode():
        bench = exactness._Bench(loaded.target, loaded.drafter("feature"), prompt, 4, sampling, 2, 0)
        raced = (
            bench.drafting.feature.copy() if hasattr(bench.drafting.feature, "copy") else bench.drafting.feature.clone()
        )
        unseen = bench.state.features  # the rows the lane had not handed its drafter yet
        bench.speculative()  # a draw observes the target's newer features
        assert not (bench.drafting.feature == raced).all() and bench.state.features is not unseen
        bench.reset()
    assert (bench.drafting.feature == raced).all() and bench.state.features is unseen


def test_the_draws_end_where_the_time_left_would_not_hold_the_rest(default_example, one_thread):
    import time

    image, request = default_example
    loaded = embedded.embedded()
    prompt = loaded.prompt(image, request.question, "text-only")
    heard = []  # what the page's progress bar shows: (fraction, sentence, seconds since the start)
    started = time.monotonic()
    result = exactness.check(
        loaded,
        prompt,
        loaded.drafter("text-only"),
        gamma=4,
        sampling=SAMPLING,
        k=2,
        n=10_000,
        budget_s=None,
        ends=started + 2.0,
        progress=lambda fraction, said: heard.append((fraction, said, time.monotonic() - started)),
    )
    assert 0 < result.n < 10_000 and time.monotonic() - started < 2.0 + 1.0
    assert all(sum(c) == result.n for c in result.counts.values())
    # after each draw: how many of the planned are done, and the time left: here the deadline's, not
    # the 10,000 draws' at the measured rate
    assert heard[0][:2] == (0.0, "the target's exact law of 2 tokens")  # first, before any draw
    assert [fraction for fraction, _, _ in heard[1:]] == [i / 10_000 for i in range(1, result.n + 1)]
    for i, (_, said, at) in enumerate(heard[1:], 1):
        left = int(said.removeprefix(f"{i} of 10000 draws a way, about ").removesuffix(" s left"))
        assert abs(left - (2.0 - at)) <= 0.6, (said, at)
