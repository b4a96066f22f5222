"""One line for each drafter the page offers: what it is, what it sees, and what it costs, shown
under the Drafter menu (`describe`). The lines are the drafter kinds' own
(`demo.models.drafter_kinds`); words only, no models are read."""

from __future__ import annotations

from demo.models import presets
from demo.world.tasks import LANGUAGE_NAMES

LANGUAGES = {  # the world's drafters trained for its languages (`presets.WORLD_DRAFTERS`)
    "multilingual": "trained on English, German and Chinese answers",
    "german": "trained on German answers",
    "chinese": "trained on Chinese answers",
}
TREE_LINE = (
    " As a token tree: several branches a round, all checked in one target forward; τ and α count the "
    "branch the target walked, the cost counts every node."
)


def describe(preset: str, drafter: str | None) -> str:
    """The drafter `drafter` of preset `preset` in one line ("" for a name the preset lacks)."""
    known = presets.PRESETS.get(preset)
    offer = known.drafter(drafter) if known and drafter else None
    if offer is None:
        return ""
    kind = offer.kind
    line = kind.describe(known)
    base = drafter.removesuffix(presets.TREE)
    trained = LANGUAGES.get(base) or (
        "trained on " + ", ".join(LANGUAGE_NAMES.get(lang, lang) for lang in kind.languages) + " answers"
        if kind.languages
        else ""
    )
    if trained:
        line = f"{line.removesuffix('.')}, {trained}"
    line = line[0].upper() + line[1:] + ("" if line.endswith(".") else ".")
    return line + (TREE_LINE if drafter.endswith(presets.TREE) else "")
