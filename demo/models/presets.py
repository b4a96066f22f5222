"""The presets: which target and drafters each names, as plain data.

Kept apart from `demo.models.loader` (which imports torch and transformers) so the page can be built,
and its selector filled, before any heavy import: the app is usable sooner after launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from demo import ASSETS
from demo.engine.events import TREE_SHAPE, tree_refusal
from demo.models import drafter_kinds
from demo.models.drafter_kinds import TREE

SECONDS_PER_TOKEN = 0.1  # the default per-token budget of a run on ZeroGPU (see Preset.seconds_per_token)
CPU_SECONDS_PER_TOKEN = 0.25  # and on a CPU: a 0.5B target's step on 2 cores (see Preset.cpu_seconds_per_token)


@dataclass(frozen=True)
class DrafterSpec:
    name: str  # shown in the UI
    kind: str  # a registered kind that presets name (`demo.models.drafter_kinds`): "text-only", "image-aware"
    path: str  # local directory or hub id
    params: int = 0  # parameter count, for the memory check before the files are here (0: count them)


PROMPT_LOOKUP = "prompt-lookup"  # drafts by copying from the prompt and answer: no model
LAYER_SKIP = "layer-skip"  # the target drafting for itself with some decoder layers skipped


def base_name(drafter: str) -> str:
    """The drafter model a name drafts with: "text-only" for "text-only+tree"."""
    return drafter.removesuffix(TREE)


@dataclass(frozen=True)
class Offer:
    """What a drafter name of a preset is (`Preset.drafter`)."""

    kind: drafter_kinds.Kind
    spec: DrafterSpec | None  # the preset's drafter model it drafts with (None: none of the preset's)
    tree: bool  # the name's "+tree" option


@dataclass(frozen=True)
class Preset:
    name: str
    target: str  # local directory or hub id
    drafters: tuple[DrafterSpec, ...]
    description: str = ""
    family: str = "llava"  # a key of demo.models.families.FAMILIES
    params: int = 0  # target parameter count, for the memory check before the files are here
    note: str = ""  # a caveat the UI states next to the preset
    image_kwargs: dict = field(default_factory=dict, hash=False)  # passed to the processor with each image
    # Seconds per target step that a ZeroGPU call budgets (`demo.session.budget.step_seconds`): a
    # generous allowance for the duration it asks for, not a measured speed.
    seconds_per_token: float = SECONDS_PER_TOKEN
    # Seconds one target step (one new token) is allowed on a CPU: the work budget's unit there
    # (`demo.session.budget`), an allowance above the measured speed, as the one above is on ZeroGPU.
    cpu_seconds_per_token: float = CPU_SECONDS_PER_TOKEN
    # The decoder layers the "layer-skip" drafter skips, chosen by a search on training-split
    # prompts (None: no search stored for this preset, so it is not offered).
    skip_layers: tuple[int, ...] | None = None
    # The most new tokens the page's slider offers: what the smallest context window holds after
    # the shortest prompt (the image and a one-word question). The API's range stays 1-512.
    max_new_tokens: int = 512

    def drafter_names(self) -> tuple[str, ...]:
        """Every drafter a race on this preset may name, in display order: each model drafter (and
        its tree option), then the registered kinds with a name of their own that it can offer."""
        names = []
        for spec in self.drafters:
            tree = drafter_kinds.KINDS[spec.kind].tree if spec.kind in drafter_kinds.KINDS else False
            names += [spec.name] + ([spec.name + TREE] if tree else [])
        for name, kind in drafter_kinds.named().items():
            if kind.why_not(self) is None:
                names += [name] + ([name + TREE] if kind.tree else [])
        return tuple(names)

    def drafter(self, name: str) -> Offer | None:
        """What drafter `name` ("+tree" or not) of this preset is: its kind and the model it drafts
        with; None for a name of no registered kind. Whether it is offered is `unusable`'s."""
        base = base_name(name)
        kind = drafter_kinds.named().get(base)
        spec = next((s for s in self.drafters if s.name == base), None)
        if kind is None and spec is not None:
            kind = drafter_kinds.KINDS.get(spec.kind)
        elif kind is not None:
            spec = next((s for s in self.drafters if s.kind == kind.base), None) if kind.base else None
        return Offer(kind, spec, name.endswith(TREE)) if kind else None

    def refusal(self, drafter: str, gamma: int, min_confidence: float = 0.0) -> str | None:
        """Why this preset cannot race `drafter`, one of the names it offers, at these settings (a
        token tree too large or with a confidence threshold), the limit in the sentence; else None."""
        if drafter.endswith(TREE):
            return tree_refusal(TREE_SHAPE, gamma, min_confidence)
        return None

    def unusable(self) -> dict[str, str]:
        """Drafters this preset cannot offer, each with the reason (shown where drafters are picked)."""
        reasons = {name: kind.why_not(self) for name, kind in drafter_kinds.named().items()}
        return {name: why for name, why in reasons.items() if why}


# An embedded world's drafters, by the name a preset gives them (`demo.session.languages.SPECIALISED`), their
# kind and their directory in the world: the English ones (stages 7-8), then the second seed's
# (stage 11), saved with the target that stage 10 taught German and Chinese.
WORLD_DRAFTERS = (
    ("text-only", "text-only", "drafter-text"),
    ("image-aware", "image-aware", "drafter-image"),
    ("multilingual", "text-only", "drafter-multilingual"),
    ("german", "text-only", "drafter-de"),
    ("chinese", "text-only", "drafter-zh"),
)
WORLD_LANGUAGES = (("de", "drafter-de"), ("zh", "drafter-zh"))  # a language, and the drafter saved with it


def world_drafters(directory: Path) -> tuple[DrafterSpec, ...]:
    """The drafters the world saved in `directory` holds, in `WORLD_DRAFTERS`' order (a look at
    the directory's names: nothing is read)."""
    return tuple(
        DrafterSpec(n, kind, str(directory / sub)) for n, kind, sub in WORLD_DRAFTERS if (directory / sub).is_dir()
    )


def world_languages(directory: Path = ASSETS) -> tuple[str, ...]:
    """The languages the world in `directory` speaks: English, and each language stage 10 taught
    its target (stage 12 saves that language's drafter beside it)."""
    return ("en",) + tuple(lang for lang, sub in WORLD_LANGUAGES if (directory / sub).is_dir())


PRESETS: dict[str, Preset] = {
    "embedded": Preset(
        name="embedded",
        target=str(ASSETS / "target"),
        drafters=world_drafters(ASSETS),
        description="The project's own LLaVA (trained on synthetic scenes) and its drafters, on CPU.",
        seconds_per_token=0.05,
        cpu_seconds_per_token=0.02,  # a target step: 6.7-8.7 ms on an idle 2-core CPU (docs/benchmark.md)
        skip_layers=(2, 3),  # `python -m demo.lab.bench.layerskip_search --preset embedded` chose them
        max_new_tokens=495,  # 512 positions less the shortest prompt's 17 (9 of them the image's)
    ),
    "llava-1.5-7b": Preset(
        name="llava-1.5-7b",
        target="llava-hf/llava-1.5-7b-hf",
        drafters=(DrafterSpec("vicuna-68m", "text-only", "double7/vicuna-68m", params=68_000_000),),
        description="Paper-like (GPU): LLaVA-1.5-7B drafted by the text-only Vicuna-68M.",
        params=7_063_000_000,
        note="Needs a GPU (about 16 GiB in bf16). The drafter's 32000-token vocabulary is the target's "
        "first 32000 ids; the image token (32000) is never drafted.",
    ),
    "qwen2.5-vl-3b": Preset(
        name="qwen2.5-vl-3b",
        target="Qwen/Qwen2.5-VL-3B-Instruct",
        drafters=(DrafterSpec("qwen2.5-0.5b", "text-only", "Qwen/Qwen2.5-0.5B-Instruct", params=494_000_000),),
        description="Best small pair: Qwen2.5-VL-3B drafted by the text-only Qwen2.5-0.5B (same vocabulary).",
        family="qwen2_5_vl",
        params=3_755_000_000,
        note="Images are scaled to at most 768 x 28 x 28 pixels (up to 768 image tokens).",
        image_kwargs={"size": {"shortest_edge": 56 * 56, "longest_edge": 768 * 28 * 28}},  # pixels, as min/max_pixels
    ),
    "smolvlm-500m": Preset(
        name="smolvlm-500m",
        family="idefics3",
        target="HuggingFaceTB/SmolVLM-500M-Instruct",
        params=507_500_000,
        drafters=(DrafterSpec("smollm2-135m", "text-only", "HuggingFaceTB/SmolLM2-135M-Instruct", params=134_500_000),),
        description="CPU-friendly: SmolVLM-500M drafted by the text-only SmolLM2-135M.",
        note="The drafter's vocabulary lacks the target's <end_of_utterance>, so it can never propose "
        "stopping; the target still stops exactly, with its own token. Images are scaled to at most "
        "1024 px (2 x 2 tiles + 1 thumbnail).",
        image_kwargs={"size": {"longest_edge": 1024}},
    ),
}
DEFAULT_PRESET = "embedded"


def seconds_per_token(name: str) -> float:
    """Preset `name`'s per-token budget on ZeroGPU (the default for a name it does not know)."""
    preset = PRESETS.get(name)
    return preset.seconds_per_token if preset else SECONDS_PER_TOKEN
