"""Scoring a model's answer against the scene: the evaluation's definition of "correct".

Contract: `score(task, example, answer) -> bool` for every task in `tasks.TASKS`.
- vqa_colour / vqa_shape: the answer names exactly the reference's colours (shapes), no more.
- vqa_count: the first number word matches; vqa_position: the position phrase names the right
  cell; vqa_yesno: the first word is the right yes or no.
- caption: the (colour, shape) pairs named equal the scene's objects, as a multiset.
- description: the (position, colour, shape) triples, one per sentence, equal the scene's.
- multiple_choice: the letter in "The answer is X" is the right one.
Sizes are not scored. Pure Python; the bench and the tests reuse it. An example in another
language is read by `scoring_languages.readers`, with the same rules.
"""

import re
from collections import Counter

from demo.world import scoring_languages
from demo.world.scenes import COLOURS, POSITION_PHRASES, POSITIONS, SHAPES
from demo.world.tasks import Example
from demo.world.tasks_en import NUMBERS, plural

_COLOUR = "|".join(COLOURS)
_SHAPE = "|".join(sorted(list(SHAPES) + [plural(s) for s in SHAPES], key=len, reverse=True))
_PAIR = re.compile(rf"\b({_COLOUR})\s+({_SHAPE})\b")
_SINGULAR = {plural(s): s for s in SHAPES} | {s: s for s in SHAPES}
_COUNT = {"no": 0, "none": 0, "zero": 0} | {w: i for i, w in enumerate(NUMBERS) if i}
# Surface forms of each cell, longest first so "top left" wins over "top".
_PLACES = sorted(
    [(p, cell) for cell, p in enumerate(POSITION_PHRASES)] + [(p, cell) for cell, p in enumerate(POSITIONS)],
    key=lambda pc: len(pc[0]),
    reverse=True,
)


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def colours_in(text: str) -> set[str]:
    return {w for w in words(text) if w in COLOURS}


def shapes_in(text: str) -> set[str]:
    return {_SINGULAR[w] for w in words(text) if w in _SINGULAR}


def count_in(text: str) -> int | None:
    return next((_COUNT[w] for w in words(text) if w in _COUNT), None)


def position_in(text: str) -> int | None:
    low = " ".join(words(text))
    for phrase, cell in _PLACES:
        if re.search(rf"\b{phrase}\b", low):
            return cell
    return None


def pairs_in(text: str) -> Counter:
    return Counter((c, _SINGULAR[s]) for c, s in _PAIR.findall(text.lower()))


def triples_in(text: str) -> Counter:
    """(cell, colour, shape) for every sentence that names exactly one object and one place."""
    found = Counter()
    for sentence in re.split(r"(?<=\.)\s+", text):
        objs = list(pairs_in(sentence).elements())
        cell = position_in(sentence)
        if len(objs) == 1 and cell is not None:
            found[(cell, *objs[0])] += 1
    return found


def letter_in(text: str) -> str | None:
    hits = re.findall(r"answer is \(?([ABCD])\b", text)
    return hits[-1] if hits else None


# What each task reads of a text (`score`), in English; `scoring_languages.readers` gives the same
# readers of German and Chinese.
ENGLISH = {
    "vqa_colour": colours_in,
    "vqa_shape": shapes_in,
    "vqa_count": count_in,
    "vqa_position": position_in,
    "vqa_yesno": lambda text: next(iter(words(text)), None),  # the first word
    "caption": pairs_in,
    "description": triples_in,
    "multiple_choice": letter_in,
}


def score(task: str, example: Example, answer: str) -> bool:
    if task not in ENGLISH:
        raise ValueError(f"unknown task {task!r}")
    read = ENGLISH[task] if example.language == "en" else scoring_languages.readers(example.language)[task]
    scene = example.scene
    if task == "caption":
        return read(answer) == Counter((o.colour, o.shape) for o in scene.objects)
    if task == "description":
        return read(answer) == Counter((o.cell, o.colour, o.shape) for o in scene.objects)
    if task in ("vqa_colour", "vqa_shape"):  # exactly the reference's, none included
        return read(answer) == read(example.answer)
    return read(answer) is not None and read(answer) == read(example.answer)  # found, and the reference's
