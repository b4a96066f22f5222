"""What differs between the multimodal families the presets use, and nothing else.

    llava       LLaVA-1.5 (and the embedded world): CLIP tower + projector + Llama. The image is
                one placeholder, <image>, repeated once per image feature (576 for llava-1.5).
    qwen2_5_vl  Qwen2.5-VL: <|vision_start|> <|image_pad|>... <|vision_end|>, one pad per merged
                patch, and 3-D rotary positions (M-RoPE): image tokens are indexed by (t, h, w),
                so text after an image sits at a position offset ("rope delta") from its index in
                the cache. `MRopeTarget` supplies those positions on every forward.
    idefics3    Idefics3 / SmolVLM: the image is split into tiles, each wrapped as
                <fake_token_around_image><row_i_col_j><image>*n, plus a <global-img> thumbnail.
More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoProcessor, AutoTokenizer, DynamicCache, Qwen2_5_VLProcessor, Qwen2VLImageProcessorPil
from transformers.processing_utils import ProcessorMixin

from demo.engine.speculative import Target


class _RopeCache(DynamicCache):
    """A request's KV cache, plus its rope delta: text position = cache index + rope_delta."""

    rope_delta: int = 0


class MRopeTarget(Target):
    """A Qwen2.5-VL target that computes its own M-RoPE positions on every forward.

    transformers keeps the rope delta on the model, set by whichever request prefilled last: with
    one model shared by all users that is wrong for the others. Here the delta belongs to the
    request's cache, and every forward passes explicit position ids: the prompt's from the model's
    own `get_rope_index`, then `cache length + delta` onwards (a crop moves them back with it).
    """

    def dynamic_cache(self) -> _RopeCache:
        return _RopeCache(config=self.model.config)

    def prompt_positions(self, inputs: dict) -> tuple[torch.Tensor, int]:
        """Positions for the prompt [3, 1, L] and the rope delta after it."""
        input_ids = inputs["input_ids"]
        if inputs.get("image_grid_thw") is None:  # text only: ordinary 1-D positions on all three axes
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)
            return positions.view(1, 1, -1).expand(3, 1, -1), 0
        get_rope_index = self.model.model.get_rope_index
        accepted = inspect.signature(get_rope_index).parameters
        positions, deltas = get_rope_index(**{k: v for k, v in inputs.items() if k in accepted})
        return positions, int(deltas[0, 0])

    def prefill_positions(self, inputs: dict, cache: _RopeCache | None = None) -> dict:
        positions, delta = self.prompt_positions(inputs)
        if cache is not None:
            cache.rope_delta = delta
        return {"position_ids": positions}

    def decode_positions(self, cache: _RopeCache, n: int) -> dict:
        return {"position_ids": self.positions(cache, torch.arange(n, device=self.device))}

    def positions(self, cache, offsets: torch.Tensor) -> torch.Tensor:
        """Text positions for tokens at `offsets` [n] past the cache: [3, 1, n], one per M-RoPE axis."""
        return (cache.get_seq_length() + cache.rope_delta + offsets).view(1, 1, -1).expand(3, 1, -1)


class Qwen2_5_VLImageProcessor(Qwen2_5_VLProcessor):
    """Qwen2.5-VL's processor without its video half (the stock one cannot be built without
    torchvision in transformers 5.x): the same inputs for images and text."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template, **kwargs)


def chat_template(path: Path, tokenizer) -> str | None:
    """The processor's chat template (chat_template.jinja or .json), else the tokenizer's."""
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text()
    if (path / "chat_template.json").is_file():
        return json.loads((path / "chat_template.json").read_text())["chat_template"]
    return tokenizer.chat_template


def _auto_processor(path: Path):
    return AutoProcessor.from_pretrained(path, local_files_only=True, trust_remote_code=False)


def _qwen_processor(path: Path):
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    # The PIL image processor, named directly: AutoImageProcessor needs torchvision in transformers 5.17.
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(path, local_files_only=True)
    return Qwen2_5_VLImageProcessor(image_processor, tokenizer, chat_template=chat_template(path, tokenizer))


@dataclass(frozen=True)
class Family:
    name: str
    placeholder_tokens: tuple[str, ...]  # image-structure tokens a text-only drafter never reads or drafts
    target_class: type[Target]
    processor: Callable[[Path], object]  # model directory -> processor


FAMILIES = {
    "llava": Family("llava", ("<image>",), Target, _auto_processor),
    "qwen2_5_vl": Family(
        "qwen2_5_vl",
        ("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"),
        MRopeTarget,
        _qwen_processor,
    ),
    "idefics3": Family(
        "idefics3",
        ("<fake_token_around_image>", "<image>", "<global-img>")
        + tuple(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)),
        Target,
        _auto_processor,
    ),
}
