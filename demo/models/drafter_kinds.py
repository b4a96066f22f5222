"""The drafter kinds: one registration per kind, read by the menu, the loader, the budget, the
strategy table and the bench. Plain data (no torch at import): the page reads it before any model.

How to add a drafter (one call, in one place; nothing else needs touching):

    from demo.models.drafter_kinds import Kind, register

    register(Kind(
        kind="feature",                       # what its runs report (RunStart.drafter.kind)
        line="a small network that reads the target's hidden state",   # the menu's one line
        load="demo.models.feature_loader:load",   # "module:function", imported at first use
        step=0.05,                            # one drafter step, in target steps (the budget)
        reads="text",                         # its prompt: "text", "image" or "target" (below)
        name="feature",                       # the menu name; None: presets' DrafterSpecs name it
        tree=False,                           # also offered as "feature+tree"
        languages=("en", "de", "zh"),         # trained for these ("": any the target speaks)
        unusable=why_not,                     # (preset) -> the reason it is not offered, or None
    ))

Call `register` in this module (below the built-in kinds) so that every process has it; a test
may register a kind of its own and `unregister` it after.

The loader is `function(loaded, name, spec, progress) -> drafter`: `loaded` is the preset in
memory (`demo.models.loader.Loaded`: its target, processor, device, `placeholder_ids()`),
`name` the menu name, `spec` the preset's `DrafterSpec` for a kind that presets name (None for
a kind with a `name` of its own), `progress(fraction, message)` reports loading. The drafter it
returns has the attributes the engine reads (see `demo.engine.drafters.Drafter` and
`demo.engine.lookup.PromptLookup`: name, kind, n_params, path, fallback_reason, tree, stop_ids,
device, feedable, start) and its `kind` is this registration's `kind`.

What each field feeds:
- `name`, `tree`, `unusable`: the drafters a preset offers, in registration order
  (`Preset.drafter_names`, hence the Drafter menus, the API's validation, the table of
  strategies, the γ sweep and `python -m demo.lab.bench --drafters all`), and the reasons shown for
  those it cannot offer (`Preset.unusable`).
- `line`, `languages`: the line under the Drafter menu (`demo.page.drafter_notes.describe`).
- `load`: `demo.models.loader.Loaded.drafter`.
- `reads`: the drafter's prompt (`Loaded.prompt`): "image", its own processor's inputs with
  the image; "text", the target's ids without the image placeholders; "target", the target's
  own inputs, image included.
- `step`: the work budget (`demo.session.budget.drafter_step`) of its lanes and replays.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from demo.models import feature_assets

Reads = Literal["image", "text", "target"]
TREE = "+tree"  # a drafter's name + TREE: the same drafter, drafting a token tree


@dataclass(frozen=True, kw_only=True)
class Kind:
    """One kind of drafter, everything the app needs to offer, describe, load and budget it."""

    kind: str  # what its runs report (`DrafterInfo.kind`)
    line: str | Callable[[object], str]  # the menu's one line, or (preset) -> that line
    load: str  # "module:function", the loader (see the module's docstring), imported at first use
    step: float  # one drafter step, in target steps: the budget's cost of a draft
    reads: Reads  # what its prompt holds (see the module's docstring)
    name: str | None = None  # the menu name; None: each preset's DrafterSpecs of this kind name it
    tree: bool = False  # also offered as name + TREE, drafting token trees
    languages: tuple[str, ...] = ()  # the languages it was trained for (empty: any the target speaks)
    unusable: Callable[[object], str | None] | None = None  # (preset) -> why not offered, or None

    def loader(self) -> Callable:
        module, _, function = self.load.partition(":")
        return getattr(importlib.import_module(module), function)

    def describe(self, preset) -> str:
        return self.line(preset) if callable(self.line) else self.line

    def why_not(self, preset) -> str | None:
        return self.unusable(preset) if self.unusable else None


KINDS: dict[str, Kind] = {}  # by kind, in registration order (the menu's order)


def register(kind: Kind) -> Kind:
    if kind.kind in KINDS:
        raise ValueError(f"drafter kind {kind.kind!r} is registered already")
    KINDS[kind.kind] = kind
    return kind


def unregister(kind: str) -> None:
    KINDS.pop(kind)


def of(kind: str) -> Kind:
    """The registration of `kind` (KeyError naming the registered ones if none)."""
    if kind not in KINDS:
        raise KeyError(f"unknown drafter kind {kind!r} (registered: {', '.join(KINDS)})")
    return KINDS[kind]


def named() -> dict[str, Kind]:
    """The kinds with a menu name of their own, by that name."""
    return {k.name: k for k in KINDS.values() if k.name}


def kind_of(preset, drafter: str) -> Kind | None:
    """The registration drafter `drafter` (a menu name, "+tree" or not) of `preset` is a kind of."""
    base = drafter.removesuffix(TREE)
    if base in named():
        return named()[base]
    spec = next((s for s in getattr(preset, "drafters", ()) if s.name == base), None)
    return KINDS.get(spec.kind) if spec else None


def _layer_skip_line(preset) -> str:
    layers = ", ".join(map(str, getattr(preset, "skip_layers", None) or ()))
    return (
        f"Layer-skip: the target itself with layers {layers} left out; it sees the image but thinks less, and "
        "costs most of a target step per draft."
    )


def _no_skip_search(preset) -> str | None:
    if preset.skip_layers is None:
        return "no search for the layers to skip is stored for this preset's target"
    return None


# The built-in kinds. Step costs, measured on an idle 2-core CPU (docs/benchmark.md): a text-only
# drafter step 0.96 ms against a target step of 6.66 ms (0.15); layer-skip runs most of the
# target's layers (0.7); a lookup is a list search (0.02).
MODELS = "demo.models.drafter_loaders"
MODEL_KINDS = {  # the drafter models a preset names (`DrafterSpec.kind`), by what their prompt holds
    "text-only": ("text", "a small language model that reads the question and the answer so far, but never the image"),
    "image-aware": (
        "image",
        "a small LLaVA that sees the image too, so it guesses colours, shapes and counts far better",
    ),
}
for kind, (reads, line) in MODEL_KINDS.items():
    register(Kind(kind=kind, line=line, load=f"{MODELS}:model", step=0.15, reads=reads, tree=True))
register(
    Kind(
        kind="prompt-lookup",
        name="prompt-lookup",
        line="Prompt lookup: no model at all; it copies what followed the same last words earlier in the question "
        "or the answer, so a draft costs almost nothing but is often missing.",
        load=f"{MODELS}:prompt_lookup",
        step=0.02,
        reads="text",
    )
)
register(
    Kind(
        kind="self",
        name="layer-skip",
        line=_layer_skip_line,
        load=f"{MODELS}:layer_skip",
        step=0.7,
        reads="target",
        unusable=_no_skip_search,
    )
)
# The drafters that read the target's hidden state, trained for the embedded target only, and the
# text-only drafter staged by lookup (issue 55; `demo.models.feature_loaders`). A draft of the two
# first is a few small matrix products: 0.02 target steps (docs/drafters-feature.md).
FEATURE = "demo.models.feature_loaders"
register(
    Kind(
        kind="target-feature",
        name="feature",
        line="Feature: reads the target's hidden state, so it sees the image through the target's eyes; "
        "a small network chains its drafts on its own predicted state.",
        load=f"{FEATURE}:feature",
        step=0.02,
        reads="text",
        tree=True,  # "feature+tree": EAGLE-2's form, top-k of its own chained states through trees.py
        languages=("en", "de", "zh"),
        unusable=feature_assets.no_checkpoint("feature"),
    )
)
register(
    Kind(
        kind="target-heads",
        name="medusa",
        line="Medusa: k heads on the target, each guessing one more token ahead from its hidden state.",
        load=f"{FEATURE}:medusa",
        step=0.02,
        reads="text",
        tree=True,
        languages=("en", "de", "zh"),
        unusable=feature_assets.no_checkpoint("medusa"),
    )
)
register(
    Kind(
        kind="staged",
        name="staged",
        line="Staged: a drafter drafted by lookup; the text-only drafter, its own steps guessed by prompt lookup.",
        load=f"{FEATURE}:staged",
        step=0.15,
        reads="text",
        unusable=feature_assets.no_text_drafter,
    )
)
