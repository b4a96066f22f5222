"""The image ablation (`demo.models.ablation`) on the embedded world's own target: blanking the image
flips the colour word of a colour question, and leaves the template words alone."""

import embedded
import pytest

from demo import session
from demo.engine.sampling import Sampling
from demo.models import ablation
from demo.session import rejections
from demo.world.tasks import heldout_examples


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_blanking_the_image_flips_the_colour_word_and_not_the_template_words(seed):
    loaded = embedded.embedded()
    ex = heldout_examples("vqa_colour", 1, seed=seed)[0]
    request = session.Request(
        question=ex.question, preset="embedded", drafter="text-only", gamma=4, sampling=Sampling(), max_new_tokens=48
    )
    trace = session.run(loaded, request, ex.image, lane="autoregressive")
    read = ablation.ablate(loaded, ex.image, ex.question, list(trace.summary.token_ids))
    categories = [c for _, c in rejections.token_categories(trace, loaded.target.stop_ids, "en")]
    assert read.unavailable is None and len(read.p_with) == len(trace.tokens)
    colour = [i for i, c in enumerate(categories) if c == "colour"]
    template = [i for i, c in enumerate(categories) if c == "template"]
    assert len(colour) == 1 and template
    i = colour[0]
    assert read.flips[i] and read.dependent[i]  # without the picture the target says another colour
    assert read.choice_without[i] != trace.summary.token_ids[i]
    assert read.p_with[i] > 0.9 and read.p_without[i] < read.p_with[i] / ablation.RATIO
    for j in template:  # "object", "shape", "picture", "image": the wording, not the picture
        assert not read.flips[j] and not read.dependent[j]
        assert read.p_with[j] == pytest.approx(read.p_without[j], abs=0.05)


def test_without_an_image_nothing_is_ablated():
    loaded = embedded.embedded()
    read = ablation.ablate(loaded, None, "What is two and two?", [5, 6])
    assert read.p_with == () and "no image" in read.unavailable
    assert read.to_dict()["unavailable"] == read.unavailable


@pytest.mark.fast
def test_a_token_depends_on_the_image_when_the_image_at_least_doubles_its_probability():
    read = ablation.Ablation(
        p_with=(0.9, 0.5, 0.51, 0.32),
        p_without=(0.05, 0.3, 0.49, 0.15),
        choice_without=(1, 2, 3, 4),
        flips=(True, False, True, False),
    )
    assert read.dependent == (True, False, False, True)  # a flip on a near tie is not dependence


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    import tiny_families

    yield from tiny_families.registered(tmp_path_factory.mktemp("ablation-families"))


@pytest.mark.parametrize("family", ["llava", "qwen2_5_vl", "idefics3"])
def test_each_hub_family_scores_its_own_answer_as_its_run_did(families, family):
    """The pass with the image re-reads the run's own p of every token (teacher forced, no cache,
    the family's positions), so its comparison with the blank image is of the same numbers."""
    import races
    from PIL import Image

    loaded = families[family]
    image = Image.new("RGB", (64, 48), (40, 90, 200))
    trace = races.ar(loaded, image, "Describe the image.", max_new=8)
    read = ablation.ablate(loaded, image, "Describe the image.", list(trace.summary.token_ids))
    assert read.unavailable is None and len(read.p_with) == len(trace.tokens)
    assert list(read.p_with) == pytest.approx([t.p for t in trace.tokens], abs=2e-3)
    assert all(0 <= p <= 1 for p in read.p_without)
