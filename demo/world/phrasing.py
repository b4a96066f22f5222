"""Phrasing helpers every language of the world shares (English in `tasks`, German in
`tasks_de`, Chinese in `tasks_zh`): option letters, capitals, listings, and finding the one
object a question is about."""

from __future__ import annotations

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
