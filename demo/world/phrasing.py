"""Phrasing helpers every language of the world shares (English in `tasks_en`, German in
`tasks_de`, Chinese in `tasks_zh`): option letters, capitals, listings, finding the one object
a question is about, and `ask`, the one dispatcher over a language's phrase tables."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from .scenes import Obj, Scene

LETTERS = "ABCD"


def cap(text: str) -> str:
    return text[0].upper() + text[1:]


def listing(items: list[str], sep: str = ", ", last: str = " and ") -> str:
    """'a, b and c'; other separators for longer items ('a; b; and c')."""
    return items[0] if len(items) == 1 else sep.join(items[:-1]) + last + items[-1]


def unique(scene: Scene, **attrs) -> Obj | None:
    """The only object with these attributes, or None."""
    hits = [o for o in scene.objects if all(getattr(o, k) == v for k, v in attrs.items())]
    return hits[0] if len(hits) == 1 else None


def ask(
    prompts: Mapping[str, Sequence[str]], forms: Mapping[str, Callable], task: str, scene: Scene, rng: random.Random
) -> tuple[str, str] | None:
    """(question, reference answer) of `task` from a language's phrase tables, or None when the
    task does not apply to the scene. A task in `prompts` (description, caption) draws its question
    from that list first and its answer from forms[task](scene, rng) then; every other task's form
    writes both, drawing from `rng` as it goes."""
    if task in prompts:
        return rng.choice(prompts[task]), forms[task](scene, rng)
    return forms[task](scene, rng)
