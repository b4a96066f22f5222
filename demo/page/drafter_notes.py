"""One line for each drafter the page offers: what it is, what it sees, and what it costs, shown
under the Drafter menu (`describe`). Words only; no models are read."""

from __future__ import annotations

from demo.models import presets

KINDS = {
    "text-only": "a small language model that reads the question and the answer so far, but never the image",
    "image-aware": "a small LLaVA that sees the image too, so it guesses colours, shapes and counts far better",
}
LANGUAGES = {  # the world's drafters trained for its languages (`presets.WORLD_DRAFTERS`)
    "multilingual": "trained on English, German and Chinese answers",
    "german": "trained on German answers",
    "chinese": "trained on Chinese answers",
}


def describe(preset: str, drafter: str | None) -> str:
    """The drafter `drafter` of preset `preset` in one line ("" for a name the preset lacks)."""
    spec_of = {s.name: s for s in presets.PRESETS[preset].drafters} if preset in presets.PRESETS else {}
    if drafter == presets.PROMPT_LOOKUP:
        return (
            "Prompt lookup: no model at all; it copies what followed the same last words earlier in the question "
            "or the answer, so a draft costs almost nothing but is often missing."
        )
    if drafter == presets.LAYER_SKIP:
        layers = presets.PRESETS[preset].skip_layers or ()
        return (
            f"Layer-skip: the target itself with layers {', '.join(map(str, layers))} left out; it sees the image "
            "but thinks less, and costs most of a target step per draft."
        )
    if not drafter:
        return ""
    tree = drafter.endswith(presets.TREE)
    spec = spec_of.get(drafter.removesuffix(presets.TREE))
    if spec is None:
        return ""
    line = KINDS.get(spec.kind, spec.kind)
    if spec.name in LANGUAGES:
        line += f", {LANGUAGES[spec.name]}"
    line = line[0].upper() + line[1:] + "."
    if tree:
        line += (
            " As a token tree: several branches a round, all checked in one target forward; τ and α count the "
            "branch the target walked, the cost counts every node."
        )
    return line
