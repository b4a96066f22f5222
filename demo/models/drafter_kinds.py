"""The drafter kinds: one registration per kind, all the app says and does about a drafter of that
kind. Plain data (no torch at import): the page reads it before any model.

Adding a drafter is one `register(Kind(...))` call (below the built-in kinds, so that every
process has it; a test may register a kind of its own and `unregister` it after) and a loader:
`load(loaded, name, spec, progress) -> LoadedDrafter` (`demo.engine.drafters.LoadedDrafter`, whose
`kind` is this registration's), importing what it needs when called. `loaded` is the preset in
memory (`demo.models.loader.Loaded`), `name` the menu name, `spec` the preset's `DrafterSpec` the
drafter drafts with (None for a kind with no model of the preset's), `progress(fraction, message)`.
Its readers: `Preset.drafter` (name, tree, base, unusable), the menu (line, languages), `Loaded`
(reads, note), the page's teaching (teach, silent), the budget (step), `scale` (paper_step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from demo.engine import scale
from demo.models import drafter_loaders as loaders
from demo.models import feature_assets

Reads = Literal["image", "text", "target"]
TREE = "+tree"  # a drafter's name + TREE: the same drafter, drafting a token tree


@dataclass(frozen=True, kw_only=True)
class Kind:
    """One kind of drafter, everything the app needs to offer, describe, load, teach and price it."""

    kind: str  # what its runs report (`DrafterInfo.kind`)
    line: str | Callable[[object], str]  # the menu's one line, or (preset) -> that line
    load: Callable  # its loader (the module's docstring)
    step: float  # one drafter step, in target steps: the budget's cost of a draft
    # One drafter step at the paper's scale, in T1 (`demo.engine.scale`); None: the share of the
    # target's parameters it runs (the target drafting for itself).
    paper_step: float | None
    # its prompt: "image", its own processor's inputs with the image; "text", the target's ids
    # without the image placeholders; "target", the target's own inputs, image included
    reads: Reads
    teach: str  # why it missed an image-grounded word, said where the page explains a rejection
    name: str | None = None  # the menu name; None: each preset's DrafterSpecs of this kind name it
    base: str | None = None  # the kind of the preset's drafter model it drafts with (its `spec`)
    tree: bool = False  # also offered as name + TREE, drafting token trees
    languages: tuple[str, ...] = ()  # the languages it was trained for (empty: any the target speaks)
    unusable: Callable[[object], str | None] | None = None  # (preset) -> why not offered, or None
    note: Callable[[object, object], str] | None = None  # (drafter, target) -> a fact the page states
    silent: str = "token budget"  # why one of its rounds may draft nothing
    paper_measured: bool = True  # False: paper_step is the 68M drafter's, never measured for this kind

    def describe(self, preset) -> str:
        return self.line(preset) if callable(self.line) else self.line

    def why_not(self, preset) -> str | None:
        return self.unusable(preset) if self.unusable else None


KINDS: dict[str, Kind] = {}  # by kind, in registration order (the menu's order)


def register(kind: Kind) -> Kind:
    if kind.kind in KINDS:
        raise ValueError(f"drafter kind {kind.kind!r} is registered already")
    KINDS[kind.kind] = kind
    scale.STEP_RATIOS[kind.kind] = kind.paper_step
    if not kind.paper_measured:
        scale.UNMEASURED.add(kind.kind)
    return kind


def unregister(kind: str) -> None:
    KINDS.pop(kind)
    scale.STEP_RATIOS.pop(kind)
    scale.UNMEASURED.discard(kind)


def of(kind: str) -> Kind:
    """The registration of `kind` (KeyError naming the registered ones if none)."""
    if kind not in KINDS:
        raise KeyError(f"unknown drafter kind {kind!r} (registered: {', '.join(KINDS)})")
    return KINDS[kind]


def named() -> dict[str, Kind]:
    """The kinds with a menu name of their own, by that name."""
    return {k.name: k for k in KINDS.values() if k.name}


def _layer_skip_line(preset) -> str:
    return (
        f"Layer-skip: the target itself with layers {', '.join(map(str, preset.skip_layers or ()))} left out; it "
        "sees the image but thinks less, and costs most of a target step per draft."
    )


def _layer_skip_note(d, target) -> str:
    return (
        f"The layer-skip drafter is the target itself with decoder layers {', '.join(map(str, d.skip))} of "
        f"{len(d.keep) + len(d.skip)} skipped (chosen by a search on training prompts): it reads the image as the "
        f"target does and runs {d.n_params / target.n_params:.0%} of the target's parameters per step, with a KV "
        "cache of its own."
    )


def _lookup_note(d, target) -> str:
    return (
        f"Prompt lookup has no model: it drafts the tokens that followed the last {d.max_ngram} "
        "tokens (or fewer) where they occur earlier in the question or the answer, and drafts nothing "
        "in a round where they do not (that round is one plain target step). Its q is 1 on each draft, "
        "so in sampling mode a draft is accepted with probability p."
    )


# The built-in kinds; their budget step costs were measured on an idle 2-core CPU (docs/benchmark.md).
BLIND = "the text-only drafter cannot see the image, so it guessed from the words alone"
SIGHTED = "the image-aware drafter sees the image, but it is a far smaller model than the target and reads it less well"
MODEL_KINDS = (  # the drafter models a preset names (`DrafterSpec.kind`), by what their prompt holds
    (
        "text-only",
        "text",
        BLIND,
        "a small language model that reads the question and the answer so far, but never the image",
    ),
    (
        "image-aware",
        "image",
        SIGHTED,
        "a small LLaVA that sees the image too, so it guesses colours, shapes and counts far better",
    ),
)
for kind, reads, teach, line in MODEL_KINDS:
    register(
        Kind(
            kind=kind,
            line=line,
            load=loaders.model,
            step=0.15,
            paper_step=scale.DRAFT_RATIO,
            reads=reads,
            teach=teach,
            tree=True,
        )
    )
register(
    Kind(
        kind="prompt-lookup",
        name="prompt-lookup",
        line="Prompt lookup: no model at all; it copies what followed the same last words earlier in the question "
        "or the answer, so a draft costs almost nothing but is often missing.",
        load=loaders.prompt_lookup,
        step=0.02,
        paper_step=0.0,
        reads="text",
        teach="prompt lookup only copies what followed the same words earlier in the question or the answer",
        note=_lookup_note,
        silent="no earlier match to copy",
    )
)
register(
    Kind(
        kind="self",
        name="layer-skip",
        line=_layer_skip_line,
        load=loaders.layer_skip,
        step=0.7,
        paper_step=None,
        reads="target",
        teach="the layer-skip drafter is the target with some of its layers left out, so it sees the image but "
        "reads it less well",
        unusable=lambda preset: (
            None
            if preset.skip_layers is not None
            else "no search for the layers to skip is stored for this preset's target"
        ),
        note=_layer_skip_note,
    )
)
# The drafters that read the target's hidden state (trained for the embedded target only), and
# the text-only drafter staged by lookup.
# `feature`: EAGLE-2's form as "feature+tree", top-k of its own chained states through trees.py.
FEATURE_KINDS = (
    (
        "target-feature",
        "feature",
        loaders.heads("feature"),
        "Feature: reads the target's hidden state, so it sees the image through the target's eyes; a small network chains its drafts on its own predicted state.",
    ),
    (
        "target-heads",
        "medusa",
        loaders.heads("medusa"),
        "Medusa: k heads on the target, each guessing one more token ahead from its hidden state.",
    ),
)
for kind, name, load, line in FEATURE_KINDS:
    teach = f"the {name} drafter reads the target's hidden state, so it sees the image only through the target's eyes, and a small network guesses from it less well than the target reads it"
    register(
        Kind(
            kind=kind,
            name=name,
            line=line,
            load=load,
            step=0.02,
            paper_step=scale.DRAFT_RATIO,
            paper_measured=False,
            reads="text",
            teach=teach,
            tree=True,
            languages=("en", "de", "zh"),
            unusable=feature_assets.no_checkpoint(name),
        )
    )
register(
    Kind(
        kind="staged",
        name="staged",
        line="Staged: a drafter drafted by lookup; the text-only drafter, its own steps guessed by prompt lookup.",
        load=loaders.staged,
        step=0.15,
        paper_step=scale.DRAFT_RATIO,
        paper_measured=False,
        reads="text",
        teach=BLIND.replace("text-only drafter", "staged drafter (the text-only one, drafting faster)"),
        base="text-only",
        unusable=feature_assets.no_text_drafter,
    )
)
