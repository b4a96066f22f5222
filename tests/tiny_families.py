"""Tiny random-weight models of the three hub families, saved as their hub repos are (no downloads).

`build(family, root)` writes root/target and root/drafter and returns a Preset that points at them,
so a test loads them through `demo.models.loader.load` exactly as a hub preset loads from the Hugging Face
cache. Each family keeps the real vocabulary relation between target and drafter:

    llava       target embeddings = drafter vocabulary + 64 (real: 32064 vs 32000); <image> and
                <pad> are the first ids past the drafter's vocabulary
    qwen2_5_vl  one tokenizer for both; both embeddings padded past it (real: 151936 rows for about
                151665 tokens); the vision tokens are inside the drafter's vocabulary
    idefics3    target embeddings = drafter vocabulary + 64 (real: 49280 vs 49152); every image
                token and <end_of_utterance> lie past the drafter's vocabulary

Chat templates are the real ones (llava-1.5-hf, Qwen2.5-VL, SmolVLM). The drafter is the target's
own language model cut to the drafter's vocabulary, so it partly agrees with the target: runs see
accepted drafts, rejections and bonus tokens. Everything is seeded.
"""

from __future__ import annotations

import json
from pathlib import Path

import tiny
import torch
from tiny import finish, lm_text
from transformers import (
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3ImageProcessorPil,
    Idefics3Processor,
    Idefics3VisionConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2VLImageProcessorPil,
)

from demo.models.loader import DrafterSpec, Preset

FAMILIES = ("llava", "qwen2_5_vl", "idefics3")
PAD_ROWS = 64  # embedding rows past the tokenizer (llava, idefics3: past the drafter's vocabulary)

LLAVA_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif %}"
    "{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}{# Render all text next #}{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] + ' '}}"
    "{% endfor %}{% else %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)
QWEN_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: "
    "{% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SMOLVLM_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
IDEFICS3_EXTRA = (
    ["<global-img>"]
    + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    + ["<fake_token_around_image>", "<image>", "<end_of_utterance>"]
)


def llama_text(vocab: int, tok, **special) -> LlamaConfig:
    return LlamaConfig(**lm_text(vocab, **special))


def cut_lm(target_lm, lm_head, config, cls, vocab: int):
    """A causal LM with the target's language-model weights, its vocabulary cut to `vocab` rows."""
    model = cls(config).eval()
    state = {f"model.{k}": v for k, v in target_lm.state_dict().items()}
    state["lm_head.weight"] = lm_head.weight
    state["model.embed_tokens.weight"] = state["model.embed_tokens.weight"][:vocab]
    state["lm_head.weight"] = state["lm_head.weight"][:vocab]
    model.load_state_dict(state)
    return model


def qwen_text(vocab: int, **changes) -> dict:
    """A tiny Qwen2 language model's config (`lm_text` with Qwen's rope), as a dict: the text config
    of a Qwen2.5-VL target (`qwen_vl`) and the config of the drafter cut from it."""
    return lm_text(vocab, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}) | changes


def qwen_vl(text: dict, ids: dict, *, patch: int, window: int, stops, pad: int):
    """A tiny Qwen2.5-VL target over `text` (`qwen_text`), seeded, with a 2-block vision tower of
    `patch`-pixel patches; its image features and attention are sharpened, so that the image and
    positions visibly matter. `ids`: the tokenizer's ids of the vision tokens."""
    torch.manual_seed(0)
    tie = {"tie_word_embeddings": True} if text.get("tie_word_embeddings") else {}
    config = Qwen2_5_VLConfig(
        vision_config=dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            patch_size=patch,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=window,
            out_hidden_size=64,
            fullatt_block_indexes=[1],
        ),
        text_config={**text, "rope_parameters": {**text["rope_parameters"], "mrope_section": [2, 3, 3]}},
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        **tie,
    )
    target = finish(Qwen2_5_VLForConditionalGeneration(config).eval(), stops, pad)
    with torch.no_grad():
        target.model.visual.merger.mlp[-1].weight.mul_(8.0)
        for layer in target.model.language_model.layers:  # sharp attention: positions visibly matter
            layer.self_attn.q_proj.weight.mul_(6.0)
            layer.self_attn.k_proj.weight.mul_(6.0)
    return target


def qwen_processor_files(folder: Path, **image) -> None:
    """A Qwen2.5-VL repo's processor files, as on the hub: the image processor's config (`image`'s
    settings) naming the (torchvision) class, and the chat template in chat_template.json."""
    Qwen2VLImageProcessorPil(**image).save_pretrained(folder)
    config_file = folder / "preprocessor_config.json"
    saved = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**saved, "image_processor_type": "Qwen2VLImageProcessor"}, indent=2))
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": QWEN_TEMPLATE}))


def _llava(root: Path) -> None:
    base = tiny.bpe(["<unk>", "<s>", "</s>"])
    n = base.get_vocab_size()
    drafter_tok = PreTrainedTokenizerFast(tokenizer_object=base, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    target_tok = PreTrainedTokenizerFast(
        tokenizer_object=tiny.bpe(["<unk>", "<s>", "</s>"]),
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        extra_special_tokens={"image_token": "<image>"},
    )
    target_tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    target_tok.add_special_tokens({"pad_token": "<pad>"})
    image, pad = target_tok.convert_tokens_to_ids(["<image>", "<pad>"])
    assert (image, pad) == (n, n + 1)  # as in llava-1.5-hf: 32000 and 32001
    special = dict(bos_token_id=1, eos_token_id=2, pad_token_id=pad)
    target = tiny.llava_target(llama_text(n + PAD_ROWS, target_tok, **special), image, 2, pad)
    processor = tiny.processor(target_tok, LLAVA_TEMPLATE)
    drafter_config = llama_text(n, drafter_tok, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    drafter = cut_lm(target.model.language_model, target.lm_head, drafter_config, LlamaForCausalLM, n)
    target.save_pretrained(root / "target")
    processor.save_pretrained(root / "target")
    finish(drafter, 2, 0).save_pretrained(root / "drafter")
    drafter_tok.save_pretrained(root / "drafter")


def _qwen(root: Path) -> None:
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tiny.bpe(QWEN_SPECIALS),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    ids = dict(zip(QWEN_SPECIALS, tok.convert_tokens_to_ids(QWEN_SPECIALS)))
    vocab = len(tok) + PAD_ROWS
    text = qwen_text(
        vocab,
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    target = qwen_vl(text, ids, patch=4, window=16, stops=ids["<|im_end|>"], pad=ids["<|endoftext|>"])
    drafter = cut_lm(target.model.language_model, target.lm_head, Qwen2Config(**text), Qwen2ForCausalLM, vocab)
    target.save_pretrained(root / "target")
    tok.save_pretrained(root / "target")
    qwen_processor_files(root / "target", min_pixels=8 * 8, max_pixels=64 * 64, patch_size=4, merge_size=2)
    finish(drafter, ids["<|im_end|>"], ids["<|endoftext|>"]).save_pretrained(root / "drafter")
    tok.save_pretrained(root / "drafter")


def _idefics3(root: Path) -> None:
    base = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    drafter_tok = PreTrainedTokenizerFast(
        tokenizer_object=tiny.bpe(base),
        unk_token="<|endoftext|>",
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
    )
    n = len(drafter_tok)
    target_tok = PreTrainedTokenizerFast(
        tokenizer_object=tiny.bpe(base),
        unk_token="<|endoftext|>",
        bos_token="<|im_start|>",
        pad_token="<|im_end|>",
    )
    target_tok.add_special_tokens({"additional_special_tokens": IDEFICS3_EXTRA})
    target_tok.eos_token = "<end_of_utterance>"
    image, eou = target_tok.convert_tokens_to_ids(["<image>", "<end_of_utterance>"])
    assert min(target_tok.convert_tokens_to_ids(IDEFICS3_EXTRA)) == n  # all past the drafter's vocabulary
    special = dict(bos_token_id=1, eos_token_id=eou, pad_token_id=2)
    torch.manual_seed(0)
    config = Idefics3Config(
        vision_config=Idefics3VisionConfig(**tiny.VISION),
        text_config=llama_text(n + PAD_ROWS, target_tok, **special),
        scale_factor=2,
        image_token_id=image,
        pad_token_id=2,
    )
    target = finish(Idefics3ForConditionalGeneration(config).eval(), eou, 2)
    with torch.no_grad():
        target.model.connector.modality_projection.proj.weight.mul_(8.0)
    drafter_config = llama_text(n, drafter_tok, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    drafter = cut_lm(target.model.text_model, target.lm_head, drafter_config, LlamaForCausalLM, n)
    # As SmolVLM's repo: 512 px tiles (here 32) of an image scaled to 2048 px (here 128).
    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": 128}, max_image_size={"longest_edge": 32}, do_image_splitting=True
    )
    processor = Idefics3Processor(
        image_processor=image_processor, tokenizer=target_tok, image_seq_len=4, chat_template=SMOLVLM_TEMPLATE
    )
    target.save_pretrained(root / "target")
    processor.save_pretrained(root / "target")
    finish(drafter, 2, 2).save_pretrained(root / "drafter")
    drafter_tok.save_pretrained(root / "drafter")


BUILDERS = {"llava": _llava, "qwen2_5_vl": _qwen, "idefics3": _idefics3}
IMAGE_KWARGS = {  # what the family's preset passes with each image (the hub presets cap image size too)
    "llava": {},
    "qwen2_5_vl": {"size": {"shortest_edge": 8 * 8, "longest_edge": 32 * 32}},  # 16 image tokens, not 64
    "idefics3": {"size": {"longest_edge": 64}},  # 2 x 2 tiles + thumbnail, not 4 x 4 + thumbnail
}


def build(family: str, root: Path) -> Preset:
    """Save a tiny target and drafter of `family` under root; a preset that loads them."""
    BUILDERS[family](root)
    return Preset(
        name=f"tiny-{family}",
        target=str(root / "target"),
        drafters=(DrafterSpec("text", "text-only", str(root / "drafter")),),
        description=f"tiny random {family}",
        family=family,
        image_kwargs=IMAGE_KWARGS[family],
    )


def registered(root: Path, *, load: bool = True, skip_missing: bool = False):
    """For a module's fixture (`yield from`): every family's tiny preset built under root and
    registered with the loader; yields family -> its Loaded (`load`: False, its preset's name),
    then unregisters them and forgets what was loaded of them. `skip_missing`: leave out a family
    this transformers cannot build (5.17's Idefics3 image processor needs torchvision)."""
    from demo.models import loader

    names = {}
    for family in FAMILIES:
        try:
            preset = build(family, root / family)
        except ImportError:
            if not skip_missing:
                raise
            continue
        loader.PRESETS[preset.name] = preset
        names[family] = preset.name
    yield {family: loader.load(name) for family, name in names.items()} if load else names
    for name in names.values():
        del loader.PRESETS[name]
        loader._LOADED.pop(name, None)
