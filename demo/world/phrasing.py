"""The one dispatcher over the world's languages' phrase tables (English in `tasks_en`, German in
`tasks_de`, Chinese in `tasks_zh`): `ask`, and the forms every language writes alike from its
tables (a description, a caption, the colour, position and yes/no questions); a language writes
its own form of a task only where its grammar needs one (`_<task>` in its module). Beside them,
the helpers the languages share: the task families, option letters and drawing the options,
capitals, listings, the one object a question is about, and what a count question counts."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

from demo.world.scenes import COLOURS, GRID, SHAPES, Obj, Scene

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


def asked(scene: Scene, rng: random.Random, colour_first: bool = False) -> tuple[Obj, Obj | None]:
    """A yes/no question's thing: half the time one of the scene's objects, else any shape and
    colour (English draws the colour first); and the first object of the scene with its colour
    and shape, or None when there is none."""
    if rng.random() < 0.5:
        thing = rng.choice(scene.objects)
    elif colour_first:
        colour = rng.choice(list(COLOURS))
        thing = Obj(rng.choice(SHAPES), colour, "small", 0)
    else:
        thing = Obj(rng.choice(SHAPES), rng.choice(list(COLOURS)), "small", 0)
    hits = [o for o in scene.objects if o.colour == thing.colour and o.shape == thing.shape]
    return thing, hits[0] if hits else None


# --- the forms every language writes alike, from its phrase tables (`L`, the language's module) ----


def sizes(L, scene: Scene) -> str:
    n = len(scene.objects)
    large = sum(o.size == "large" for o in scene.objects)
    if n == 1:
        return L.SIZE_SENTENCES[0].format(L.SIZES[scene.objects[0].size])
    if large in (0, n):
        return L.SIZE_SENTENCES[1].format(L.NUMBERS[n], L.SIZES["large" if large else "small"])
    return L.mixed_sizes(large, n - large)


def colours(L, scene: Scene) -> str:
    said = list(dict.fromkeys(L.COLOURS[o.colour] for o in scene.objects))
    one, every, several = L.COLOUR_SENTENCES
    if len(scene.objects) == 1:
        return one.format(said[0])
    return every.format(said[0]) if len(said) == 1 else several.format(listing(said, *L.LISTING))


def description(L, scene: Scene, rng: random.Random) -> str:
    """An introduction, each object at its place, the count, sizes, colours and a closing line
    (German and Chinese draw the closing line first)."""
    n, empty = len(scene.objects), GRID * GRID - len(scene.objects)
    closing = lambda: rng.choice(L.CLOSINGS).format(L.NUMBERS[empty])  # noqa: E731
    first = closing() if L.CLOSING_FIRST else None
    parts = [rng.choice(L.INTROS)] + [rng.choice(L.object_sentences(o)) for o in scene.objects]
    total = L.TOTALS[0] if n == 1 else L.TOTALS[1].format(L.NUMBERS[n])
    return L.SPACE.join(parts + [total, sizes(L, scene), colours(L, scene), first or closing()])


def caption(L, scene: Scene, rng: random.Random) -> str:
    """Each object after its place, in reading order: the place is the key its words are read by."""
    sized = rng.random() < 0.5
    things = listing([L.caption_item(o, sized) for o in scene.objects], *L.CAPTION_LISTING)
    return cap(f"{rng.choice(L.CAPTION_LEADS)}{things}{L.STOP}")


def restated(L, subject: str, rest: str, rng: random.Random) -> str:
    """A short answer: its subject, the looked-up words right after it, then a varying tail
    ("The circle is red here."), the form a model reads an image token fastest in (docs/world.md)."""
    return cap(f"{subject}{L.SPACE}{rest}{rng.choice(L.TAILS)}{L.STOP}")


def checks(L, kind: str, options: list[str], letter: str) -> str:
    """Multiple choice's checks: the options in order up to the right one, each copied, then
    compared with the concluded word restated next to it (`L.verdict`): "A. square: a circle is
    not a square. B. circle: a circle is a circle." With both words a few tokens back the verdict
    is a local comparison; checks against the conclusion a sentence earlier were not learnt."""
    said, out = options[LETTERS.index(letter)], []
    for letter_, text in zip(LETTERS, options):
        out.append(f"{letter_}. {text}{L.verdict(kind, said, text)}")
        if text == said:
            return L.SPACE.join(out)
    raise ValueError(f"{letter} is not among {options}")


def vqa_colour(L, scene: Scene, rng: random.Random) -> tuple[str, str]:
    o = rng.choice(scene.objects)
    if unique(scene, shape=o.shape) and rng.random() < 0.5:
        subject = L.the_shape(o)
    else:
        subject = L.the_thing_at(rng.choice(L.THINGS), o)
    question = rng.choice(L.COLOUR_QUESTIONS).format(subject)
    return question, restated(L, subject, L.IS.format(L.COLOURS[o.colour]), rng)


def vqa_position(L, scene: Scene, rng: random.Random) -> tuple[str, str] | None:
    o = nameable(scene, rng)
    if o is None:
        return None
    question = rng.choice(L.WHERE_QUESTIONS).format(L.named(o))
    return question, restated(L, L.named(o), L.AT.format(L.PLACE_PHRASES[o.cell]), rng)


def vqa_yesno(L, scene: Scene, rng: random.Random) -> tuple[str, str]:
    thing, hit = asked(scene, rng, L.COLOUR_FIRST)
    said = L.asked_thing(thing)
    question = rng.choice(L.YESNO_QUESTIONS).format(said)
    if hit:
        return question, rng.choice(L.YES).format(said, L.PLACE_PHRASES[hit.cell], L.PLACES[hit.cell])
    return question, rng.choice(L.NO).format(said, f"{thing.colour} {thing.shape}")


def multiple_choice(L, scene: Scene, rng: random.Random) -> tuple[str, str]:
    """A question on one object (or the count), four options, then the reason, the checks and the
    letter (`tasks_en` writes English's own, with its earlier forms)."""
    o = rng.choice(scene.objects)
    kind = rng.choice(("shape", "colour", "position", "count"))
    if kind == "shape":
        options, letter = draw_options(L.SHAPES[o.shape], list(L.SHAPES.values()), rng)
    elif kind == "colour":
        options, letter = draw_options(L.COLOURS[o.colour], list(L.COLOURS.values()), rng)
    elif kind == "position" and unique(scene, colour=o.colour, shape=o.shape):
        options, letter = draw_options(L.PLACES[o.cell], list(L.PLACES), rng, ordered=True)
    else:  # the counts one to four, as an exam lists them
        kind, options, letter = "count", list(L.COUNT_OPTIONS), LETTERS[len(scene.objects) - 1]
    question, reason = L.choice_words(kind, o, scene)
    listed = L.OPTION_SEP.join(f"{x}. {text}" for x, text in zip(LETTERS, options))
    return L.CHOICE.format(question, listed), L.CHOICE_ANSWER.format(reason, checks(L, kind, options, letter), letter)


ALIKE = {"description": description, "caption": caption, "vqa_colour": vqa_colour, "multiple_choice": multiple_choice}
ALIKE |= {"vqa_position": vqa_position, "vqa_yesno": vqa_yesno}


def forms(L) -> dict[str, Callable]:
    """A language's task -> form table: its own `_<task>` where it has one, else the form every
    language writes alike; each over the language's tables."""
    return {task: functools.partial(getattr(L, f"_{task}", None) or ALIKE[task], L) for task in TASKS}


def ask(L, task: str, scene: Scene, rng: random.Random) -> tuple[str, str] | None:
    """(question, reference answer) of `task` in the language of module L, or None when the task
    does not apply to the scene. A description or a caption draws its question from L's prompts
    first, then its answer; every other task's form writes both, drawing from `rng` as it goes."""
    prompts = {"description": L.DESCRIBE, "caption": L.CAPTION}.get(task)
    if prompts:
        return rng.choice(prompts), L.FORMS[task](scene, rng)
    return L.FORMS[task](scene, rng)
