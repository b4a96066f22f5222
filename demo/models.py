"""Presets: which target and drafters to load, how, and how to turn (image, question) into inputs.

A preset names one multimodal target and the drafters that may assist it. Loading is lazy
(`load(name)` on first use), done once per process and shared: models are read-only at
inference, and every request gets its own KV caches. Nothing is loaded at import time.

The embedded world (`assets/world/`, trained by `python -m demo.world.train`) is the default
everywhere. Hub presets keep their real loading code; they need the weights in the local
Hugging Face cache, since nothing here downloads at run time unless allowed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch
from PIL import Image
from transformers import AutoModelForCausalLM, AutoProcessor, AutoTokenizer, LlavaForConditionalGeneration

from demo.drafters import Drafter
from demo.speculative import Prompt, Target

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "world"
END_OF_TURN = ("<|end|>", "<|im_end|>", "<end_of_utterance>", "<|eot_id|>")


class VocabMismatch(ValueError):
    """A drafter whose token ids do not mean what the target's ids mean."""


@dataclass(frozen=True)
class DrafterSpec:
    name: str  # shown in the UI
    kind: str  # "text-only" | "image-aware"
    path: str  # local directory or hub id


@dataclass(frozen=True)
class Preset:
    name: str
    target: str  # local directory or hub id
    drafters: tuple[DrafterSpec, ...]
    description: str = ""


PRESETS: dict[str, Preset] = {
    "embedded": Preset(
        name="embedded",
        target=str(ASSETS / "target"),
        drafters=(
            DrafterSpec("text-only", "text-only", str(ASSETS / "drafter-text")),
            DrafterSpec("image-aware", "image-aware", str(ASSETS / "drafter-image")),
        ),
        description="The project's own LLaVA (trained on synthetic scenes) and two drafters, on CPU.",
    ),
}
DEFAULT_PRESET = "embedded"


def stop_ids_of(tokenizer, model) -> frozenset[int]:
    """EOS ids from the generation config and tokenizer, plus the chat template's end of turn."""
    ids = set()
    eos = model.generation_config.eos_token_id
    ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
    return frozenset(ids)


def check_vocab_compatible(target_tokenizer, drafter_tokenizer, drafter_name: str) -> None:
    """Refuse a drafter whose shared ids spell different tokens than the target's."""
    target_vocab = {i: t for t, i in target_tokenizer.get_vocab().items()}
    drafter_vocab = {i: t for t, i in drafter_tokenizer.get_vocab().items()}
    for i in sorted(target_vocab.keys() & drafter_vocab.keys()):
        if target_vocab[i] != drafter_vocab[i]:
            raise VocabMismatch(
                f"drafter {drafter_name!r} cannot assist this target: token id {i} is "
                f"{drafter_vocab[i]!r} for the drafter but {target_vocab[i]!r} for the target"
            )


def image_placeholder_ids(processor) -> frozenset[int]:
    """Ids that stand for image content in the target's prompt; a text-only drafter never sees them."""
    tokenizer = processor.tokenizer
    names = {getattr(processor, "image_token", None), getattr(tokenizer, "image_token", None)}
    return frozenset(tokenizer.convert_tokens_to_ids(n) for n in names if n)


@dataclass
class Loaded:
    """A preset in memory: the target with its processor, and its drafters (loaded on demand)."""

    preset: Preset
    target: Target
    processor: object
    device: torch.device
    drafters: dict[str, Drafter] = field(default_factory=dict)
    drafter_processors: dict[str, object] = field(default_factory=dict)

    def conversation(self, question: str, with_image: bool) -> list[dict]:
        content = ([{"type": "image"}] if with_image else []) + [{"type": "text", "text": question}]
        return [{"role": "user", "content": content}]

    def _inputs(self, processor, image: Image.Image | None, question: str) -> dict:
        text = processor.apply_chat_template(
            self.conversation(question, image is not None), add_generation_prompt=True, tokenize=False
        )
        images = [image] if image is not None else None
        inputs = processor(images=images, text=text, return_tensors="pt")
        return {k: v.to(self.device) for k, v in inputs.items()}

    def prompt(self, image: Image.Image | None, question: str, drafter: str | None = None) -> Prompt:
        """Inputs for the target, and for the named drafter as its kind dictates."""
        target_inputs = self._inputs(self.processor, image, question)
        if drafter is None:
            return Prompt(target_inputs)
        d = self.drafter(drafter)
        if d.kind == "image-aware":
            drafter_inputs = self._inputs(self.drafter_processors[drafter], image, question)
        else:
            # The text-only drafter reads the same conversation minus the image placeholders
            # (and minus any id it lacks).
            ids = [i for i in target_inputs["input_ids"][0].tolist() if d.feedable(i)]
            drafter_inputs = {"input_ids": torch.tensor([ids], device=self.device)}
        return Prompt(target_inputs, drafter_inputs)

    def drafter(self, name: str) -> Drafter:
        with _LOCK:
            if name not in self.drafters:
                spec = next((s for s in self.preset.drafters if s.name == name), None)
                if spec is None:
                    known = ", ".join(s.name for s in self.preset.drafters)
                    raise KeyError(f"unknown drafter {name!r} for preset {self.preset.name!r} (known: {known})")
                self.drafters[name] = self._load_drafter(spec)
            return self.drafters[name]

    def _load_drafter(self, spec: DrafterSpec) -> Drafter:
        if spec.kind == "image-aware":
            model = LlavaForConditionalGeneration.from_pretrained(spec.path, dtype=self.target.model.dtype)
            processor = AutoProcessor.from_pretrained(spec.path)
            tokenizer = processor.tokenizer
            self.drafter_processors[spec.name] = processor
        else:
            model = AutoModelForCausalLM.from_pretrained(spec.path, dtype=self.target.model.dtype)
            tokenizer = AutoTokenizer.from_pretrained(spec.path)
        check_vocab_compatible(self.target.tokenizer, tokenizer, spec.name)
        model.to(self.device).eval()
        return Drafter(
            model,
            name=spec.name,
            kind=spec.kind,
            target_vocab_size=self.target.vocab_size,
            stop_ids=self.target.stop_ids,
            blocked_ids=image_placeholder_ids(self.processor),
        )


_LOCK = threading.RLock()
_LOADED: dict[str, Loaded] = {}


def load(name: str = DEFAULT_PRESET) -> Loaded:
    """Load a preset's target and processor once per process (drafters load on first use)."""
    with _LOCK:
        if name not in _LOADED:
            if name not in PRESETS:
                raise KeyError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
            preset = PRESETS[name]
            model = LlavaForConditionalGeneration.from_pretrained(preset.target, dtype=torch.float32).eval()
            processor = AutoProcessor.from_pretrained(preset.target)
            target = Target(
                model,
                processor.tokenizer,
                name=preset.name,
                stop_ids=stop_ids_of(processor.tokenizer, model),
            )
            _LOADED[name] = Loaded(preset, target, processor, model.device)
        return _LOADED[name]
