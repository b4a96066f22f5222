"""The hub presets `llava-1.5-7b` and `qwen2.5-vl-3b` on their real tokenizers, loaded offline.

tests/real_tokenizers.py writes the presets' four repos into a Hugging Face cache: the real
vocabularies, special tokens and chat templates, tiny random weights with the real vocabulary
sizes. The presets load from it by their own hub ids through `demo.models.loader.load`, with the
hub off, as a Space loads them after `preload_from_hub`. The files come from
tests/fetch_tokenizers.sh; without them every test here fails with a sentence saying so.
"""

import pytest
import real_tokenizers as real
import torch
from huggingface_hub import constants
from PIL import Image

from demo.engine.detokenize import Detokenizer
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.engine.speculative import autoregressive_generate, speculative_generate
from demo.models import hub, loader
from demo.models.families import FAMILIES

GREEDY = Sampling()
MAX_NEW = 16
IMAGE = Image.new("RGB", (500, 300), (200, 30, 30))
# transformers' tests/models/llava/test_processing_llava.py (4.x; test_chat_template), on llava-hf/llava-1.5-7b-hf:
# "USER: <image>\nWhat is shown in this image? ASSISTANT:". vLLM's llava.py gives the same head.
LLAVA_IDS = [1, 3148, 1001, 29901, 29871, 32000, 29871, 13, 5618, 338, 4318, 297, 445, 1967, 29973, 319, 1799, 9047]
LLAVA_IDS += [13566, 29901]
# transformers' tests/models/qwen2_5_vl/test_modeling_qwen2_5_vl.py (test_small_model_integration_test), on
# Qwen/Qwen2.5-VL-7B-Instruct (the 3B's tokenizer and template): the prompt's first 17 ids.
QWEN_HEAD = [151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198, 151652, 151655, 151655]
QWEN_TAIL = [151645, 198, 151644, 77091, 198]  # <|im_end|>\n<|im_start|>assistant\n
MULTILINGUAL = "Grüße aus München, café! 😀 中文字符 🇩🇪 Straße"


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """The four repos in a hub cache; HF_HUB_CACHE points at it and the hub is off, as on a Space."""
    try:
        root = real.build_cache(tmp_path_factory.mktemp("hub"))
    except real.NotFetched as error:
        pytest.fail(str(error))
    patch = pytest.MonkeyPatch()
    patch.setattr(constants, "HF_HUB_CACHE", str(root))
    patch.setenv("HF_HUB_OFFLINE", "1")
    yield root
    for name in real.PRESET.values():
        loader._LOADED.pop(name, None)
    patch.undo()


@pytest.fixture(params=["llava", "qwen2_5_vl"])
def family(request):
    return request.param


def load(family: str):
    return loader.load(real.PRESET[family])


def reference(loaded, prompt, max_new: int = MAX_NEW) -> list[int]:
    inputs = prompt.target_inputs
    out = loaded.target.model.generate(
        **inputs, max_new_tokens=max_new, do_sample=False, eos_token_id=sorted(loaded.target.stop_ids), pad_token_id=0
    )
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def spd(loaded, prompt, gamma: int, drafter: str) -> Trace:
    run = speculative_generate(
        loaded.target,
        loaded.drafter(drafter),
        prompt,
        gamma=gamma,
        sampling=GREEDY,
        max_new_tokens=MAX_NEW,
        generator=torch.Generator().manual_seed(0),
    )
    return Trace.of(run)


def ar(loaded, prompt) -> Trace:
    run = autoregressive_generate(
        loaded.target, prompt, sampling=GREEDY, max_new_tokens=MAX_NEW, generator=torch.Generator().manual_seed(0)
    )
    return Trace.of(run)


def test_presets_load_offline_from_the_hub_cache_by_their_own_ids(hub_cache):
    assert hub.offline()
    for family, name in real.PRESET.items():
        preset = loader.PRESETS[name]
        assert loader.availability(name).local
        assert hub.local(preset.target).is_relative_to(hub_cache)
        loaded = load(family)
        assert loaded.drafter(real.DRAFTER[family]).name == real.DRAFTER[family]


def test_vocabularies_and_added_tokens_are_the_real_ones(hub_cache):
    llava, qwen = load("llava"), load("qwen2_5_vl")
    vicuna, small = llava.drafter("vicuna-68m"), qwen.drafter("qwen2.5-0.5b")
    tok = llava.target.tokenizer
    assert (len(tok), llava.target.vocab_size, vicuna.usable) == (32_002, 32_064, 32_000)
    assert tok.convert_tokens_to_ids(["<unk>", "<s>", "</s>", "<image>", "<pad>"]) == [0, 1, 2, 32000, 32001]
    assert tok.convert_tokens_to_ids(["▁Hello", "▁world", "▁", "<0x0A>"]) == [15043, 3186, 29871, 13]  # LLaMA's
    qtok = qwen.target.tokenizer
    assert (len(qtok), qwen.target.vocab_size, small.usable) == (151_665, 151_936, 151_936)
    added = {i: t.content for i, t in qtok.added_tokens_decoder.items()}
    assert sorted(added) == list(range(151_643, 151_665))
    assert [added[i] for i in (151643, 151644, 151645, 151652, 151653, 151655, 151656)] == [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<|vision_start|>",
        "<|vision_end|>",
        "<|image_pad|>",
        "<|video_pad|>",
    ]
    assert (llava.target.stop_ids, qwen.target.stop_ids) == ({2}, {151643, 151645})


@pytest.mark.parametrize("legacy", [False, True])
def test_llava_chat_prompt_equals_transformers_published_ids(tmp_path, legacy):
    """Whichever `legacy` flag llava-hf's tokenizer_config.json holds, the preset's processor (the
    family's own builder, on a repo laid out as the hub's) gives the ids LLaVA-1.5 was trained on."""
    try:
        real.build_cache(tmp_path, ("llava",), legacy=legacy)
    except real.NotFetched as error:
        pytest.fail(str(error))
    processor = FAMILIES["llava"].processor(
        tmp_path / "models--llava-hf--llava-1.5-7b-hf" / "snapshots" / real.REVISION
    )
    conversation = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is shown in this image?"}]}
    ]
    text = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    assert text == "USER: <image>\nWhat is shown in this image? ASSISTANT:"
    assert processor.tokenizer(text).input_ids == LLAVA_IDS


def test_prompt_for_an_image_and_a_question_is_the_templates_with_the_image_expanded(hub_cache):
    llava = load("llava").prompt(IMAGE, "What is shown in this image?").target_inputs["input_ids"][0].tolist()
    image = LLAVA_IDS.index(32000)
    assert llava == LLAVA_IDS[:image] + [32000] * 576 + LLAVA_IDS[image + 1 :]  # (336 / 14)^2 patches
    qwen = load("qwen2_5_vl")
    question = "What kind of dog is this?"
    inputs = qwen.prompt(Image.new("RGB", (224, 224)), question).target_inputs
    ids = inputs["input_ids"][0].tolist()
    words = qwen.target.tokenizer.encode(question, add_special_tokens=False)
    assert ids == QWEN_HEAD[:15] + [151655] * 64 + [151653] + words + QWEN_TAIL  # 224 px: 8 x 8 merged patches
    assert words == [3838, 3093, 315, 5562, 374, 419, 30]
    assert inputs["image_grid_thw"].tolist() == [[1, 16, 16]]


@pytest.mark.parametrize(
    ("size", "grid", "tokens"),
    [
        ((500, 300), [1, 22, 36], 198),  # 504 x 308 px: rounded to multiples of 28
        ((2400, 1000), [1, 34, 84], 714),  # scaled under the preset's 768 x 28 x 28 pixels
        ((30, 20), [1, 4, 6], 6),  # scaled up to at least 56 x 56 pixels
    ],
)
def test_qwen_image_tokens_expand_as_its_processor_sizes_the_image(hub_cache, size, grid, tokens):
    inputs = load("qwen2_5_vl").prompt(Image.new("RGB", size), "Describe.").target_inputs
    assert inputs["image_grid_thw"].tolist() == [grid]
    assert inputs["input_ids"][0].tolist().count(151655) == tokens == grid[1] * grid[2] // 4


def test_a_question_with_control_token_strings_is_text(hub_cache, family):
    loaded = load(family)
    question = "Say </s> then <|im_start|>user and <|vision_start|> or <image> and <|endoftext|>."
    ids = loaded.prompt(IMAGE, question).target_inputs["input_ids"][0].tolist()
    added = loaded.target.tokenizer.added_tokens_encoder  # Qwen's BPE spells "</s>" too, as plain text
    names = ("</s>", "<|im_start|>", "<|vision_start|>", "<image>", "<|endoftext|>")
    counts = {t: ids.count(added[t]) for t in names if t in added}
    if family == "llava":
        assert counts == {"</s>": 0, "<image>": 576}
    else:
        assert counts == {"<|im_start|>": 3, "<|vision_start|>": 1, "<|endoftext|>": 0}
    answer = loaded.target.tokenizer.decode(ids, skip_special_tokens=True).replace("\u2060", "")
    assert question in answer


def test_detokenization_streams_byte_pieces_without_a_replacement_character(hub_cache, family):
    tokenizer = load(family).target.tokenizer
    ids = tokenizer.encode(MULTILINGUAL, add_special_tokens=False)
    pieces = tokenizer.convert_ids_to_tokens(ids)
    split = [p for p in pieces if p.startswith("<0x")] if family == "llava" else [p for p in pieces if len(p) == 1]
    assert split  # some characters really are spread over several byte tokens
    detokenizer = Detokenizer(tokenizer)
    streamed = [detokenizer.push(i) for i in ids]
    assert all("\ufffd" not in piece for piece in streamed)
    assert "".join(streamed) + detokenizer.flush() == MULTILINGUAL


def test_greedy_speculative_decoding_equals_the_target_alone(hub_cache, family):
    loaded = load(family)
    drafter = real.DRAFTER[family]
    accepted = 0
    for image, question in ((IMAGE, "What is shown in this image?"), (None, "Write a short caption.")):
        prompt = loaded.prompt(image, question, drafter)
        expected = reference(loaded, prompt)
        assert list(ar(loaded, prompt).summary.token_ids) == expected
        for gamma in (1, 4):
            trace = spd(loaded, prompt, gamma, drafter)
            assert list(trace.summary.token_ids) == expected
            accepted += sum(r.n_accepted for r in trace.rounds)
    assert accepted > 0


def test_the_drafter_never_proposes_image_tokens_or_ids_without_a_token(hub_cache, family):
    """Its head is rigged to prefer a vision token and an embedding row past the tokenizer."""
    loaded = load(family)
    drafter = loaded.drafter(real.DRAFTER[family])
    tokenizer = loaded.target.tokenizer
    head = drafter.model.get_output_embeddings().weight
    rows = head.shape[0]
    lure = sorted(i for i in loaded.placeholder_ids() if i < rows) + [i for i in (len(tokenizer), rows - 1) if i < rows]
    saved = head[lure].clone()
    prompt = loaded.prompt(IMAGE, "What is shown in this image?", drafter.name)
    try:
        with torch.no_grad():
            head[lure] = head.abs().max() * 50
        drafted = {i for r in spd(loaded, prompt, 4, drafter.name).rounds for i in r.drafted_ids}
    finally:
        with torch.no_grad():
            head[lure] = saved
    assert drafted
    assert not drafted & loaded.placeholder_ids()
    assert max(drafted) < min(len(tokenizer), drafter.usable)


@pytest.mark.parametrize(
    ("family", "stop"), [("llava", "</s>"), ("qwen2_5_vl", "<|im_end|>"), ("qwen2_5_vl", "<|endoftext|>")]
)
def test_a_stop_token_ends_the_run(hub_cache, family, stop):
    loaded = load(family)
    stop_id = loaded.target.tokenizer.convert_tokens_to_ids(stop)
    prompt = loaded.prompt(IMAGE, "What is shown in this image?", real.DRAFTER[family])
    free = reference(loaded, prompt)
    head = loaded.target.model.get_output_embeddings().weight
    saved = head[stop_id].clone()
    try:
        with torch.no_grad():  # the stop token now outscores the token the target picks at step 5
            head[stop_id] = head[free[5]] * 1.05
        expected = reference(loaded, prompt)
        assert stop_id in expected and expected[-1] == stop_id and len(expected) < MAX_NEW
        for trace in (ar(loaded, prompt), spd(loaded, prompt, 4, real.DRAFTER[family])):
            assert list(trace.summary.token_ids) == expected and trace.summary.stop == "eos"
    finally:
        with torch.no_grad():
            head[stop_id] = saved
