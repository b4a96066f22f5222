"""Phrasing helpers every language of the world shares (English in `tasks_en`, German in
`tasks_de`, Chinese in `tasks_zh`): the task families, option letters and drawing the options,
capitals, listings, finding the one object a question is about, what a count question counts,
`forms`, which builds a language's task -> form table from its form functions, and `ask`, the
one dispatcher over a language's phrase tables."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from demo.world.scenes import COLOURS, SHAPES, Obj, Scene

# The task families every language writes (`tasks.TASKS` is this tuple; see `tasks`).
TASKS = (
    "description",
    "caption",
    "multiple_choice",
    "vqa_colour",
    "vqa_shape",
    "vqa_count",
    "vqa_position",
    "vqa_yesno",
)
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


def nameable(scene: Scene, rng: random.Random) -> Obj | None:
    """One of the objects no other one shares both colour and shape with (a question can name it
    by them: "Where is the red circle?"), drawn; None when there is none."""
    candidates = [o for o in scene.objects if unique(scene, colour=o.colour, shape=o.shape)]
    return rng.choice(candidates) if candidates else None


def draw_options(correct: str, pool: list[str], rng: random.Random, ordered: bool = False) -> tuple[list[str], str]:
    """Multiple choice's options: the right one and three others from `pool`, shuffled; with
    `ordered`, then put in `pool`'s order. Returns them and the right one's letter."""
    drawn = [correct] + rng.sample([p for p in pool if p != correct], 3)
    rng.shuffle(drawn)
    if ordered:
        drawn.sort(key=pool.index)
    return drawn, LETTERS[drawn.index(correct)]


def counted(scene: Scene, rng: random.Random) -> tuple[str, str, int]:
    """What a count question counts and how many there are: ("all", "", n) for every shape,
    ("colour", colour, n) or ("shape", shape, n), the colour or shape (English names) drawn from
    the scene's own and every one there is, so that a count of none is asked too."""
    kind = rng.choice(("all", "colour", "shape"))
    if kind == "all":
        return kind, "", len(scene.objects)
    if kind == "colour":
        colour = rng.choice([o.colour for o in scene.objects] + list(COLOURS))
        return kind, colour, sum(o.colour == colour for o in scene.objects)
    shape = rng.choice([o.shape for o in scene.objects] + list(SHAPES))
    return kind, shape, sum(o.shape == shape for o in scene.objects)


def asked(scene: Scene, rng: random.Random) -> tuple[Obj, Obj | None]:
    """A yes/no question's thing (German's and Chinese's: English draws its colour first): half
    the time one of the scene's objects, else any shape and colour; and the first object of the
    scene with its colour and shape, or None when there is none."""
    if rng.random() < 0.5:
        thing = rng.choice(scene.objects)
    else:
        thing = Obj(rng.choice(SHAPES), rng.choice(list(COLOURS)), "small", 0)
    hits = [o for o in scene.objects if o.colour == thing.colour and o.shape == thing.shape]
    return thing, hits[0] if hits else None


def forms(namespace: Mapping[str, Callable]) -> dict[str, Callable]:
    """A language's task -> form table, from its form functions: the form of `task` is the
    function `_<task>` of the language's module (`namespace` is that module's `globals()`)."""
    return {task: namespace[f"_{task}"] for task in TASKS}


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
