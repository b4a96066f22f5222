"""The target's image attention, read after a run: shares, maps on the image grid, every family."""

from __future__ import annotations

import pytest
import tiny_families
import torch
from PIL import Image

from demo.lab.bench.grounding_layers import answer
from demo.models import attention_pass, loader
from demo.session import rejections as analysis
from demo.world.scenes import GRID
from demo.world.tasks import heldout_examples

# From `python -m demo.lab.bench.grounding_layers` (docs/grounding.md): at the embedded preset's layer,
# 90% of the tokens copied from the question put less than 0.35 of their attention on the image, and
# 75% of the colour words the question does not give more.
COPIED_BELOW = COLOUR_ABOVE = 0.35


@pytest.fixture(scope="module")
def world():
    return loader.load("embedded")


def test_image_text_and_own_shares_sum_to_one_for_every_head(world):
    ex = heldout_examples("caption", 1, seed=5)[0]
    trace, inputs = answer(world, ex, max_new_tokens=48)
    ids = list(trace.summary.token_ids)
    input_ids = inputs["input_ids"][0].tolist()
    _, _, cells = attention_pass.layout(
        "llava", input_ids, inputs, world.target.model.config, world.processor.tokenizer
    )
    weights = attention_pass.head_shares(world.target.model, inputs, ids, tuple(range(6)))
    parts = attention_pass.partition(weights, [c[0] for c in cells], len(input_ids))  # [6, 6, n, 3]
    assert parts.shape == (6, 6, len(ids), 3)
    assert (parts >= -1e-6).all()
    assert torch.allclose(parts.sum(-1), torch.ones(6, 6, len(ids)), atol=1e-5)
    read = attention_pass.image_attention(world, inputs, ids)
    for image, text, own, cells_ in zip(read.image, read.text, read.own, read.maps):
        assert image + text + own == pytest.approx(1.0, abs=1e-5)
        assert sum(cells_) == pytest.approx(image, abs=1e-3)  # the map spreads the image share over the grid


def test_a_token_copied_from_the_question_looks_at_text_and_a_colour_word_at_the_image(world):
    ex = next(e for e in heldout_examples("vqa_colour", 8, seed=3) if len(e.scene.objects) == 1)
    trace, inputs = answer(world, ex, max_new_tokens=48)
    read = attention_pass.image_attention(world, inputs, list(trace.summary.token_ids))
    categories = analysis.token_categories(trace, world.target.stop_ids)
    question = ex.question.lower()
    colour = [i for i, (_, c) in enumerate(categories) if c == "colour"]
    copied = [i for i, (w, c) in enumerate(categories) if w and w.lower() in question and c != "colour"]
    assert colour and copied, (trace.text, categories)
    assert all(read.image[i] > COLOUR_ABOVE for i in colour), [read.image[i] for i in colour]
    assert all(read.image[i] < COPIED_BELOW for i in copied), [read.image[i] for i in copied]


def test_a_colour_word_looks_at_the_cell_of_its_object(world):
    """The probe: one shape on the 3 x 3 grid (one patch per cell); where the target writes its
    colour, the map's brightest cell is that shape's."""
    found = 0
    for ex in heldout_examples("vqa_colour", 16, seed=7):
        if len(ex.scene.objects) != 1:
            continue
        trace, inputs = answer(world, ex, max_new_tokens=48)
        read = attention_pass.image_attention(world, inputs, list(trace.summary.token_ids))
        assert (read.rows, read.cols) == (GRID, GRID)
        at = next(i for i, (_, c) in enumerate(analysis.token_categories(trace)) if c == "colour")
        cells = read.maps[at]
        assert max(range(len(cells)), key=cells.__getitem__) == ex.scene.objects[0].cell
        found += 1
    assert found >= 2


def _probe(rows: int, cols: int, cells: list, k: int) -> list[float]:
    """The map of an attention row that puts everything on the k-th image token."""
    attn = torch.zeros(1, max(c[0] for c in cells) + 1)
    attn[0, cells[k][0]] = 1.0
    return attention_pass._grid(attn, rows, cols, cells)[0].tolist()


def test_llava_patches_map_row_major_onto_the_square_grid(world):
    image = Image.new("RGB", (48, 48), (230, 230, 230))
    inputs = world.prompt(image, "What colour is the shape?").target_inputs
    ids = inputs["input_ids"][0].tolist()
    rows, cols, cells = attention_pass.layout(
        "llava", ids, inputs, world.target.model.config, world.processor.tokenizer
    )
    assert (rows, cols, len(cells)) == (3, 3, 9)
    grid = _probe(rows, cols, cells, 5)  # the sixth patch: row 1, column 2
    assert grid == [0, 0, 0, 0, 0, 1, 0, 0, 0]


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    yield from tiny_families.registered(tmp_path_factory.mktemp("grounding-families"))


def test_qwen_merged_patches_map_through_the_grid_thw(families):
    loaded = families["qwen2_5_vl"]
    inputs = loaded.prompt(Image.new("RGB", (64, 32), "white"), "Where is the star?").target_inputs
    t, h, w = inputs["image_grid_thw"][0].tolist()
    ids = inputs["input_ids"][0].tolist()
    rows, cols, cells = attention_pass.layout("qwen2_5_vl", ids, inputs, loaded.target.model.config, None)
    assert (rows, cols) == (h // 2, w // 2) and rows * cols == len(cells)
    assert rows >= 2 and cols > rows  # wider than tall, as the image
    k = cols + 1  # second row, second column
    grid = _probe(rows, cols, cells, k)
    assert grid.index(1.0) == k and sum(grid) == 1.0


def test_idefics3_tiles_map_to_their_row_and_column_and_the_thumbnail_spreads_over_them(families):
    loaded = families["idefics3"]
    inputs = loaded.prompt(Image.new("RGB", (64, 64), "white"), "Where is the star?").target_inputs
    ids = inputs["input_ids"][0].tolist()
    tok = loaded.processor.tokenizer
    rows, cols, cells = attention_pass.layout("idefics3", ids, inputs, loaded.target.model.config, tok)
    assert (rows, cols) == (4, 4)  # 2 x 2 tiles of 2 x 2 tokens each (pixel shuffle 2: 16 patches -> 4)
    assert len(cells) == 4 * 4 + 4  # the tiles' tokens, then the thumbnail's
    first_of_tile_12 = ids.index(tok.convert_tokens_to_ids("<row_1_col_2>")) + 1
    k = next(i for i, c in enumerate(cells) if c[0] == first_of_tile_12 + 3)  # its last token: bottom right
    grid = _probe(rows, cols, cells, k)
    assert grid.index(1.0) == 1 * 4 + 3  # row 1, column 3: tile (0, 1)'s bottom-right cell
    thumbnail = _probe(rows, cols, cells, 16)  # the thumbnail's first token covers the top-left tile
    assert thumbnail[:2] + thumbnail[4:6] == [0.25] * 4 and sum(thumbnail) == pytest.approx(1.0)


@pytest.mark.parametrize("family", tiny_families.FAMILIES)
def test_each_hub_family_reads_image_attention_with_maps_on_its_grid(families, family):
    loaded = families[family]
    image = Image.new("RGB", (64, 48), (40, 90, 200))
    inputs = loaded.prompt(image, "Describe the image.").target_inputs
    answer = [int(i) for i in torch.randint(10, 200, (6,), generator=torch.Generator().manual_seed(0))]
    read = attention_pass.image_attention(loaded, inputs, answer)
    assert read.unavailable is None
    assert len(read.image) == len(read.maps) == 6 and all(len(m) == read.rows * read.cols for m in read.maps)
    for image_, text, own, cells in zip(read.image, read.text, read.own, read.maps):
        assert 0 < image_ < 1 and image_ + text + own == pytest.approx(1.0, abs=1e-5)
        assert sum(cells) == pytest.approx(image_, abs=1e-3)


def test_recorded_weights_are_the_eager_attention_and_the_forward_is_unchanged(families):
    loaded = families["llava"]
    model = loaded.target.model
    inputs = loaded.prompt(Image.new("RGB", (32, 32), "red"), "Describe the image.").target_inputs
    answer = [11, 12, 13, 14]
    recorded = attention_pass.head_shares(model, inputs, answer, (0, 1))  # [2, H, 4, K]
    ids = torch.cat([inputs["input_ids"], torch.tensor([answer[:-1]])], dim=1)
    full = {**inputs, "input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        plain = model(**full).logits
        with attention_pass.recording([model.model.language_model.layers[0].self_attn], 4):
            watched = model(**full).logits
        model.set_attn_implementation("eager")
        try:
            eager = model(**full, output_attentions=True).attentions
        finally:
            model.set_attn_implementation("sdpa")
    assert torch.equal(plain, watched)  # reading the weights leaves SDPA's output as it was
    for layer in (0, 1):
        assert torch.allclose(recorded[layer], eager[layer][0, :, -4:], atol=1e-5)


def test_a_family_whose_attention_returns_no_weights_is_said_and_nothing_is_read(families):
    loaded = families["llava"]
    config = loaded.target.model.config.get_text_config()
    inputs = loaded.prompt(Image.new("RGB", (32, 32), "red"), "Describe the image.").target_inputs
    saved = config._attn_implementation
    config._attn_implementation = "flash_attention_2"
    try:
        read = attention_pass.image_attention(loaded, inputs, [11, 12])
    finally:
        config._attn_implementation = saved
    assert read.image == () and read.maps == ()
    assert read.unavailable == (
        "This model's attention (flash_attention_2) returns no weights, so its attention on the image cannot be read."
    )


def test_a_question_without_an_image_has_no_map_and_says_why(families):
    loaded = families["llava"]
    inputs = loaded.prompt(None, "Write a short caption.").target_inputs
    read = attention_pass.image_attention(loaded, inputs, [11, 12])
    assert read.maps == () and read.unavailable.startswith("There is no image in this question")


def test_reading_leaves_no_hook_and_no_recording_behind(families):
    loaded = families["llava"]
    model = loaded.target.model
    inputs = loaded.prompt(Image.new("RGB", (32, 32), "red"), "Describe the image.").target_inputs
    modules = [layer.self_attn for layer in model.model.language_model.layers]
    hooks = [len(m._forward_hooks) for m in modules]
    attention_pass.image_attention(loaded, inputs, [11, 12, 13])
    assert attention_pass._state.kept is None
    assert [len(m._forward_hooks) for m in modules] == hooks
