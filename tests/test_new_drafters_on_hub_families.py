"""Prompt lookup and token trees on the three hub families (LLaVA, Qwen2.5-VL with its M-RoPE
positions, Idefics3), through the preset loading path, on tiny random models built from configs."""

import pytest
import tiny
import tiny_families
import torch
from races import ar, spd

from demo.engine.trees import visibility
from demo.models import loader
from demo.models.presets import LAYER_SKIP, PROMPT_LOOKUP

QUESTIONS = ("Describe the image.", "Where is the star?")
PARENTS = [-1, -1, 0, 0, 1, 2, 4]  # two branches at depth 1, two children under node 0, then chains
TOKENS = [40, 41, 42, 43, 44, 45, 46]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    yield from tiny_families.registered(tmp_path_factory.mktemp("tree-families"), load=False, skip_missing=True)


@pytest.fixture(params=tiny_families.FAMILIES)
def loaded(request, built):
    if request.param not in built:
        pytest.skip(f"{request.param} cannot be built with this transformers")
    return loader.load(built[request.param])


def test_every_hub_preset_offers_prompt_lookup_and_trees_and_says_why_not_layer_skip(loaded):
    names = loaded.preset.drafter_names()
    assert PROMPT_LOOKUP in names and "text+tree" in names and LAYER_SKIP not in names
    assert "no search" in loaded.preset.unusable()[LAYER_SKIP]
    with pytest.raises(KeyError, match="no search"):
        loaded.drafter(LAYER_SKIP)


def test_a_tree_forward_scores_each_node_as_the_chain_of_its_path(loaded):
    target = loaded.target
    depths = [0]
    for p in PARENTS:
        depths.append(1 if p < 0 else depths[p + 1] + 1)
    with torch.inference_mode():
        cache = target.new_cache()
        target.prefill(loaded.prompt(tiny.images(1)[0], QUESTIONS[0]).target_inputs, cache)
        base = cache.get_seq_length()
        got = target.forward_tree([30] + TOKENS, depths, visibility(PARENTS), cache)
        for node in range(len(TOKENS)):
            path, at = [], node
            while at >= 0:
                path.insert(0, TOKENS[at])
                at = PARENTS[at]
            cache.crop(-(cache.get_seq_length() - base))
            want = target.forward([30] + path, cache)
            torch.testing.assert_close(got[node + 1], want[-1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("drafter", ["text+tree", PROMPT_LOOKUP])
def test_greedy_output_identical_to_the_target_alone(loaded, drafter):
    image = tiny.images(1)[0]
    for question in QUESTIONS:
        reference = ar(loaded, image, question, max_new=20).summary.token_ids
        for gamma in (1, 3, 5):
            assert spd(loaded, drafter, image, question, gamma, max_new=20).summary.token_ids == reference
