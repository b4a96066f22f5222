"""Presets: which target and drafters to load, where, and how to turn (image, question) into inputs.

A preset names one multimodal target, the family it belongs to (`demo.models.families`), and the drafters
that may assist it. Loading is lazy (`load(name)` on first use, with optional progress callbacks),
done once per process and shared by every user: models are read-only at inference, each request
gets its own KV caches, and `Loaded.drafter(name)` hands every run its own drafter state around the
shared drafter model. Switching drafter never reloads the target. Nothing loads at import time.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from PIL import Image
from transformers import AutoModelForImageTextToText

from demo.engine.drafters import Drafter
from demo.engine.events import TREE_SHAPE
from demo.engine.speculative import Prompt, Target
from demo.engine.trees import TreeDrafter
from demo.models import devices, drafter_kinds, drafter_loaders, hub
from demo.models.devices import NotEnoughMemory  # noqa: F401  (re-exported: load() raises it)
from demo.models.families import FAMILIES
from demo.models.hub import Availability, Unavailable  # noqa: F401  (re-exported: load() raises Unavailable)
from demo.models.presets import (  # noqa: F401  (re-exported)
    ASSETS,
    DEFAULT_PRESET,
    LAYER_SKIP,
    PRESETS,
    PROMPT_LOOKUP,
    TREE,
    DrafterSpec,
    Preset,
    base_name,
)
from demo.models.vocab import as_text, image_placeholder_ids, stop_ids_of

log = logging.getLogger(__name__)

Progress = Callable[[float, str], None]  # (fraction done in [0, 1], what is happening)


def _silent(fraction: float, message: str) -> None:
    pass


@dataclass
class Loaded:
    """A preset in memory: the target with its processor, and its drafters (loaded on demand)."""

    preset: Preset
    target: Target
    processor: object
    device: torch.device
    drafters: dict[str, Drafter] = field(default_factory=dict)
    drafter_processors: dict[str, object] = field(default_factory=dict)
    plan: devices.Plan | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def conversation(self, question: str, with_image: bool) -> list[dict]:
        content = ([{"type": "image"}] if with_image else []) + [{"type": "text", "text": question}]
        return [{"role": "user", "content": content}]

    def _inputs(self, processor, image: Image.Image | None, question: str) -> dict:
        question = as_text(question, processor.tokenizer)
        text = processor.apply_chat_template(
            self.conversation(question, image is not None), add_generation_prompt=True, tokenize=False
        )
        if image is None:
            inputs = processor(text=text, return_tensors="pt")
        else:
            inputs = processor(images=[image], text=text, return_tensors="pt", **self.preset.image_kwargs)
        dtype = self.target.model.dtype
        return {k: v.to(self.device, dtype) if v.is_floating_point() else v.to(self.device) for k, v in inputs.items()}

    def prompt(
        self, image: Image.Image | None, question: str, drafter: str | None = None, *, target_inputs=None
    ) -> Prompt:
        """Inputs for the target, and for the named drafter as its kind dictates. `target_inputs`:
        the target's inputs of this image and question, made already (not processed again)."""
        if target_inputs is None:
            target_inputs = self._inputs(self.processor, image, question)
        if drafter is None:
            return Prompt(target_inputs)
        d = self.drafter(drafter)
        reads = drafter_kinds.of(d.kind).reads
        if reads == "image":
            drafter_inputs = self._inputs(self.drafter_processors[base_name(drafter)], image, question)
        elif reads == "target":  # e.g. the target drafting for itself reads the target's own inputs
            drafter_inputs = target_inputs
        else:
            # "text" (the text-only drafter, prompt lookup): the same conversation minus the image
            # placeholders (and minus any id the drafter lacks).
            ids = [i for i in target_inputs["input_ids"][0].tolist() if d.feedable(i)]
            drafter_inputs = {"input_ids": torch.tensor([ids], device=self.device)}
        return Prompt(target_inputs, drafter_inputs)

    def drafter(self, name: str, progress: Progress | None = None) -> Drafter:
        """The named drafter, loaded once and shared; each run makes its own state (`Drafter.start`)."""
        with self._lock:
            return self._drafter(name, progress or _silent)

    def _drafter(self, name: str, progress: Progress):
        if name not in self.drafters:
            self.drafters[name] = self._make_drafter(name, progress)
        return self.drafters[name]

    def _make_drafter(self, name: str, progress: Progress):
        """A drafter of any name `Preset.drafter_names` gives, by its kind's registered loader
        (`demo.models.drafter_kinds`); a "+tree" name is its base drafter drafting trees."""
        if name.endswith(TREE):
            return TreeDrafter(self._drafter(base_name(name), progress), TREE_SHAPE, name=name)
        why = self.preset.unusable().get(name)
        if why:
            raise KeyError(f"drafter {name!r} is not offered for preset {self.preset.name!r}: {why}")
        offer = self.preset.drafter(name)
        if offer is None:
            known = ", ".join(self.preset.drafter_names())
            raise KeyError(f"unknown drafter {name!r} for preset {self.preset.name!r} (known: {known})")
        return offer.kind.load(self, name, offer.spec, progress)

    def placeholder_ids(self) -> frozenset[int]:
        """The target prompt's image placeholder ids, which no drafter reads or proposes."""
        return image_placeholder_ids(self.processor, FAMILIES[self.preset.family].placeholder_tokens)

    def notes(self, drafter: str) -> tuple[str, ...]:
        """Facts about this target-drafter pairing that the UI should state (loads the drafter)."""
        d, tokenizer = self.drafter(drafter), self.target.tokenizer
        note = drafter_kinds.of(d.kind).note
        notes = [note(d, self.target)] if note else []
        if d.tree is not None:
            notes.append(
                f"Token tree, {d.tree.describe()} ({d.tree.nodes(4)} nodes at gamma 4): one target forward scores "
                "every node, each attending to its own ancestors only, and the longest path the target accepts is kept."
            )
        if d.fallback_reason:
            notes.append(f"The {d.name} drafter drafts through transformers: {d.fallback_reason}.")
        unreachable = sorted(i for i in self.target.stop_ids if i >= d.usable or i in d.blocked_ids)
        if unreachable:
            names = ", ".join(f"{tokenizer.convert_ids_to_tokens(i)} (id {i})" for i in unreachable)
            notes.append(
                f"The {d.name} drafter cannot propose {names}: it is outside its {d.usable}-token vocabulary, "
                "so it never proposes stopping there; the target ends the answer itself, exactly as it would alone."
            )
        if d.usable < self.target.vocab_size:
            notes.append(
                f"The {d.name} drafter can propose the target's first {d.usable} of {self.target.vocab_size} ids; "
                "ids beyond them (words its vocabulary lacks, image tokens, padding) come from the target only."
            )
        return tuple(notes)


_REGISTRY = threading.Lock()  # guards the two dicts below, never held while loading
_LOADED: dict[str, Loaded] = {}
_LOADING: dict[str, threading.Lock] = {}  # one lock per preset: loading one never blocks serving another


def _preset(name: str) -> Preset:
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    return PRESETS[name]


def _refs(preset: Preset) -> list[str]:
    return [preset.target] + [s.path for s in preset.drafters]


def availability(name: str) -> Availability:
    """Whether `load(name)` can work now, and a message for the UI. Answers within seconds, loads nothing."""
    preset = _preset(name)
    if is_loaded(name):
        return Availability(True, True, "Loaded.")
    found = hub.availability(_refs(preset))
    if not found.ok:
        return found

    def params(ref: str, estimate: int) -> int:  # counted from the files when they are here
        path = hub.local(ref)
        return (hub.count_params(path) if path else 0) or estimate

    target_params = params(preset.target, preset.params)
    drafter_params = max((params(s.path, s.params) for s in preset.drafters), default=0)
    try:
        plan = devices.plan(target_params, drafter_params, devices.probe(), what=f"preset {name!r}")
    except NotEnoughMemory as error:
        return Availability(False, found.local, f"{error}.")
    return Availability(True, found.local, f"{found.message.removesuffix('.')}; it will run on {plan.summary}.")


def is_loaded(name: str) -> bool:
    with _REGISTRY:
        return name in _LOADED


def load(name: str = DEFAULT_PRESET, progress: Progress | None = None) -> Loaded:
    """Load a preset's target and processor once per process (drafters load on first use); raises
    hub.Unavailable or devices.NotEnoughMemory, each with a message for the UI."""
    report = progress or _silent
    preset = _preset(name)
    with _REGISTRY:
        if name in _LOADED:
            return _LOADED[name]
        lock = _LOADING.setdefault(name, threading.Lock())
    with lock:
        with _REGISTRY:
            if name in _LOADED:  # another request loaded it while this one waited
                return _LOADED[name]
        family = FAMILIES[preset.family]
        report(0.0, f"finding the files of {preset.target}")
        path = hub.resolve(preset.target)
        target_params = hub.count_params(path) or preset.params
        drafter_params = max((s.params for s in preset.drafters), default=0)
        report(0.05, "checking memory")
        plan = devices.plan(target_params, drafter_params, devices.probe(), what=f"preset {name!r}")
        report(0.1, f"loading the target {preset.target} ({target_params / 1e9:.2f}B parameters; {plan.summary})")
        model = drafter_loaders.load_model(AutoModelForImageTextToText, path, plan, drafter=False)
        report(0.85, "loading the processor")
        processor = family.processor(path)
        target = family.target_class(
            model, processor.tokenizer, name=preset.name, stop_ids=stop_ids_of(processor.tokenizer, model)
        )
        loaded = Loaded(preset, target, processor, plan.device, plan=plan)
        with _REGISTRY:
            _LOADED[name] = loaded
        report(1.0, f"{preset.name} ready")
        return loaded
