"""One registration per drafter kind: a toy kind registered in one call is offered by every
preset, described under the menu, budgeted at its own step cost, loaded by its own loader and
raced exactly; a kind a preset cannot offer is refused with its reason."""

import pytest
import torch
from races import CASES

from demo import session
from demo.engine import scale
from demo.engine.events import DrafterInfo, RoundEvent, RunStart, Trace
from demo.engine.lookup import PromptLookup
from demo.engine.sampling import Sampling
from demo.models import drafter_kinds, presets
from demo.models.loader import Loaded, Preset
from demo.page import blocks, drafter_notes, teach
from demo.session import budget
from demo.session.validate import InvalidInput

LOADS = []  # the toy loader's calls: (preset, name, spec)


def load_toy(loaded, name, spec, progress):
    """The toy kind's loader: a one-token prompt lookup that reports itself as kind "toy"."""
    LOADS.append((loaded.preset.name, name, spec))
    lookup = PromptLookup(
        name=name,
        target_vocab_size=loaded.target.vocab_size,
        stop_ids=loaded.target.stop_ids,
        blocked_ids=loaded.placeholder_ids(),
        device=loaded.device,
        max_ngram=1,
    )
    lookup.kind = "toy"
    return lookup


@pytest.fixture
def toy():
    kind = drafter_kinds.register(
        drafter_kinds.Kind(
            kind="toy",
            name="toy",
            line="a toy: it copies what followed the last token",
            load=load_toy,
            step=0.5,
            paper_step=0.25,
            reads="text",
            teach="the toy copies words and never looks at anything",
            note=lambda d, target: f"The toy looks {d.max_ngram} token back.",
            silent="the toy found nothing to copy",
            languages=("en", "de"),
            unusable=lambda preset: "no toys for 7B targets" if preset.name == "llava-1.5-7b" else None,
        )
    )
    LOADS.clear()
    yield kind
    drafter_kinds.unregister("toy")


@pytest.mark.fast
def test_a_registered_kind_is_offered_described_and_budgeted_from_its_one_registration(toy):
    embedded = presets.PRESETS["embedded"]
    assert embedded.drafter_names()[-1] == "toy"
    assert "toy" not in presets.PRESETS["llava-1.5-7b"].drafter_names()
    assert presets.PRESETS["llava-1.5-7b"].unusable()["toy"] == "no toys for 7B targets"
    assert drafter_notes.describe("embedded", "toy") == (
        "A toy: it copies what followed the last token, trained on English, German answers."
    )
    assert budget.drafter_step("toy", "embedded") == 0.5
    assert budget.drafter_step("text-only", "embedded") == drafter_kinds.of("text-only").step
    with pytest.raises(InvalidInput, match=r"no toys for 7B targets"):
        session.parse(question="What is it?", preset="llava-1.5-7b", drafter="toy")
    with pytest.raises(ValueError, match=r"^drafter kind 'toy' is registered already$"):
        drafter_kinds.register(toy)


@pytest.mark.fast
def test_a_registered_kinds_words_on_the_page_and_its_price_come_from_its_registration_alone(toy):
    said = teach.why_rejected("toy", "colour", 0.5, " red", " blue")
    assert said.endswith(
        "and the toy copies words and never looks at anything; the target put 50% of its attention on the image there"
    )
    assert scale.draft_ratio("toy", 0.9) == 0.25  # the paper-scale price of a step, whatever its size
    # a staged drafter is the text-only one: the page never tells it that it saw the image
    assert "cannot see the image" in teach.why_rejected("staged", "colour", None, " red", " blue")
    assert presets.PRESETS["embedded"].drafter("toy").kind is toy
    toy_lane = RunStart("speculative", "t", 10, DrafterInfo("toy", "toy", 0, 0.0), 3, Sampling(), 8)
    empty = RoundEvent(1, (), (), 0, 5, 1, None, 0.0, 0.0, 0.0)  # a round that drafted nothing
    assert blocks._why_none(Trace(start=toy_lane), empty) == "the toy found nothing to copy"


@pytest.mark.fast
def test_without_the_registration_the_kind_is_nowhere(toy):
    drafter_kinds.unregister("toy")
    try:
        assert "toy" not in presets.PRESETS["embedded"].drafter_names()
        assert drafter_notes.describe("embedded", "toy") == ""
    finally:
        drafter_kinds.register(toy)


def test_a_registered_kind_is_loaded_by_its_loader_and_raced_exactly(toy, world, answers):
    preset = Preset("toy-world", "", ())
    loaded = Loaded(preset, world.target, world.processor, torch.device("cpu"))
    for (image, question), answer in list(zip(CASES, answers))[:4]:
        request = session.Request(
            question=question, preset=preset.name, drafter="toy", gamma=3, sampling=Sampling(), max_new_tokens=24
        )
        traces = session.run_lanes(loaded, request, image)
        assert traces["speculative"].summary.token_ids == traces["autoregressive"].summary.token_ids == answer
        assert traces["speculative"].start.drafter.kind == "toy"
        assert traces["speculative"].start.drafter.path == "n-gram lookup"
    assert LOADS == [("toy-world", "toy", None)]  # loaded once, then shared by every race
    assert loaded.notes("toy") == ("The toy looks 1 token back.",)
