"""Tiny random-weight models of the real architectures, built from configs (no downloads).

A LLaVA target (CLIP tower + projector + Llama LM), drafters of both kinds, a byte-level BPE
tokenizer trained on a few sentences, and a LlavaProcessor around them. Every builder is seeded,
so every test that uses them is deterministic.
"""

from __future__ import annotations

import torch
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    CLIPImageProcessorPil,
    CLIPVisionConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedTokenizerFast,
)

SPECIALS = ["<unk>", "<pad>", "<image>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'image' %}<image>\n{% else %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CORPUS = [
    "The image shows a red circle and a blue square.",
    "What colour is the triangle? The triangle is green.",
    "How many objects are there? There are three objects in the picture.",
    "A small yellow star sits in the top left corner of the image.",
    "Describe the scene in detail, naming every shape and colour you can see.",
    "Is there a purple cross? No, there is no purple cross.",
    "café naïve 猫 🐱 emoji and accents decode across several byte tokens",
]
QUESTIONS = [
    "What colour is the circle?",
    "Describe the image.",
    "How many objects are there?",
    "Is there a red square?",
    "Where is the star?",
    "What shape is in the top left?",
    "Write a short caption.",
    "Which object is the largest?",
    "What is next to the blue triangle?",
    "Tell me about the picture in detail.",
    "猫 🐱 café?",
]
IMAGE_SIZE, PATCH = 32, 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2


VISION = dict(  # every tiny CLIP-like tower: one layer of 32 over IMAGE_SIZE-pixel images in PATCH-pixel patches
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    image_size=IMAGE_SIZE,
    patch_size=PATCH,
)


def bpe(specials: list[str], unk_token: str | None = None) -> Tokenizer:
    """A byte-level BPE of 400 ids trained on the tiny corpus, with `specials` as its first ids."""
    tok = Tokenizer(models.BPE(unk_token=unk_token))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 4 + QUESTIONS, trainer=trainer)
    return tok


def tokenizer() -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe(SPECIALS, unk_token="<unk>"),
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="<|end|>",
        extra_special_tokens={"image_token": "<image>"},
        chat_template=CHAT_TEMPLATE,
    )


def processor(
    tok, template: str = CHAT_TEMPLATE, *, size: int = IMAGE_SIZE, patch: int = PATCH, **image
) -> LlavaProcessor:
    """A LlavaProcessor around `tok`: CLIP's image processor at `size` pixels (with `image`'s other
    settings: a real repo's mean and std), one image token per `patch`-pixel patch."""
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": size}, crop_size={"height": size, "width": size}, **image
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        patch_size=patch,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        image_token="<image>",
        chat_template=template,
    )


def lm_text(vocab: int, **changes) -> dict:
    """Every tiny language model, as a config dict: 2 layers of 64, 4 heads over 2 KV heads, with
    `changes` (a family's rope, special ids, a real config's sizes)."""
    return (
        dict(
            vocab_size=vocab,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=1024,
        )
        | changes
    )


def llama_config(tok, hidden: int, layers: int) -> LlamaConfig:
    special = dict(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    sizes = dict(hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers)
    return LlamaConfig(**lm_text(len(tok), max_position_embeddings=512, **sizes, **special))


def finish(model, eos, pad):
    """`model` with its generation config's stop and pad ids set."""
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    return model


def llava_target(text_config, image_token: int, eos, pad, *, seed: int = 0, vision=None, **config):
    """A seeded LLaVA model: a CLIP tower (`VISION`, with `vision`'s changes), the language model of
    `text_config`, one image token per patch; `config`: LlavaConfig's other fields (a real repo's)."""
    vision = VISION | (vision or {})
    torch.manual_seed(seed)
    llava_config = LlavaConfig(
        vision_config=CLIPVisionConfig(**vision),
        text_config=text_config,
        image_token_index=image_token,
        image_seq_length=(vision["image_size"] // vision["patch_size"]) ** 2,
        **(dict(vision_feature_layer=-1, vision_feature_select_strategy="default") | config),
    )
    model = finish(LlavaForConditionalGeneration(llava_config).eval(), eos, pad)
    # Random weights barely look at the image; make the image matter to the output.
    with torch.no_grad():
        model.model.multi_modal_projector.linear_2.weight.mul_(8.0)
    return model


def llava(tok, hidden: int = 64, layers: int = 2, seed: int = 0) -> LlavaForConditionalGeneration:
    image = tok.convert_tokens_to_ids("<image>")
    return llava_target(llama_config(tok, hidden, layers), image, tok.eos_token_id, tok.pad_token_id, seed=seed)


def llama(tok, hidden: int = 32, layers: int = 1, seed: int = 1) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(tok, hidden, layers)).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


def text_part_of(target: LlavaForConditionalGeneration, tok) -> LlamaForCausalLM:
    """The target's own language model as a standalone text-only causal LM (it partly agrees)."""
    text_config = target.config.text_config
    model = LlamaForCausalLM(text_config).eval()
    model.model.load_state_dict(target.model.language_model.state_dict())
    model.lm_head.load_state_dict(target.lm_head.state_dict())
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


def noisy_copy(target: LlavaForConditionalGeneration, scale: float, seed: int = 2) -> LlavaForConditionalGeneration:
    """An image-aware drafter that agrees with the target more or less, by how much noise."""
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(target.config).eval()
    model.load_state_dict(target.state_dict())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale * p.std().clamp_min(1e-3))
    return model


def images(n: int) -> list[Image.Image]:
    """n distinct, seeded images: noise, stripes and flat colours."""
    g = torch.Generator().manual_seed(123)
    out = []
    for i in range(n):
        pixels = torch.randint(0, 256, (IMAGE_SIZE * 2, IMAGE_SIZE * 2, 3), generator=g, dtype=torch.uint8)
        if i % 3 == 1:
            pixels[:, :IMAGE_SIZE] = torch.tensor([255 - 20 * i, 40, 20 * i], dtype=torch.uint8)
        out.append(Image.fromarray(pixels.numpy(), "RGB"))
    return out


def save_preset(directory, name: str = "tiny"):
    """Save a tiny target and both drafter kinds to disk and register them as a preset.

    Loading then goes through `demo.models.loader.load`, the same path as the real presets.
    """
    from pathlib import Path

    from demo.models import loader as presets

    directory = Path(directory)
    tok = tokenizer()
    proc = processor(tok)
    target = llava(tok)
    for sub, model, saver in [
        ("target", target, proc),
        ("drafter-text", text_part_of(target, tok), tok),
        ("drafter-image", noisy_copy(target, 0.3), proc),
    ]:
        model.save_pretrained(directory / sub)
        saver.save_pretrained(directory / sub)
    preset = presets.Preset(
        name=name,
        target=str(directory / "target"),
        drafters=(
            presets.DrafterSpec("text-only", "text-only", str(directory / "drafter-text")),
            presets.DrafterSpec("image-aware", "image-aware", str(directory / "drafter-image")),
        ),
        description="tiny random models for tests",
        cpu_seconds_per_token=0.001,  # a step of these models takes about a millisecond (the work budget's unit)
    )
    presets.PRESETS[name] = preset
    return preset


def saved_world(tmp_path_factory, label: str, name: str):
    """For a module's server fixture (`yield from`): the tiny preset saved to disk and registered
    as `name`, two images beside it; torch on one thread while the module runs (the app runs in
    the test's process). Yields the folder; unregisters the preset after."""
    import torch

    from demo.models import loader as presets

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp(label)
    save_preset(root / "preset", name)
    (root / "images").mkdir()
    for i, image in enumerate(images(2)):
        image.save(root / "images" / f"{i}.png")
    yield root
    presets.PRESETS.pop(name, None)
    torch.set_num_threads(threads)
