"""The world's questions and reference answers in English: every task family of `tasks.py`, and
multiple choice's earlier forms (`BRIEF`, `EARLY`).

Contract: the phrase tables (the prompts `DESCRIBE`, `CAPTION`) and `FORMS`, over which `tasks.qa` writes (question,
answer) in English. Phrasings vary (drawn from `rng`), the facts never do: every answer is true of the scene.
The count words and plurals (`NUMBERS`, `plural`) are read by the scorer and the translations
too; `tasks_de` and `tasks_zh` write multiple choice's checks as `checks` does.
"""

import functools
import random
import sys

from demo.world import scenes
from demo.world.phrasing import LETTERS, cap, checks, counted, draw_options, forms, listing, restated, unique
from demo.world.scenes import POSITION_PHRASES, POSITIONS, SHAPES, Obj, Scene

NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
COLOURS = {c: c for c in scenes.COLOURS}  # English says each colour by its name (`phrasing`'s tables)
SIZES = {"large": "large", "small": "small"}
PLACES, PLACE_PHRASES = POSITIONS, POSITION_PHRASES


def plural(shape: str) -> str:
    return shape + ("es" if shape.endswith("s") else "s")


def name(o: Obj, size: bool = True) -> str:
    """'large red circle' (or 'red circle' without the size)."""
    return f"{o.size} {o.colour} {o.shape}" if size else f"{o.colour} {o.shape}"


def article(words: str) -> str:
    return f"an {words}" if words[0] in "aeiou" else f"a {words}"


# --- (a) detailed description -------------------------------------------------------------

DESCRIBE = (
    "Describe this image in detail.",
    "What do you see in this picture? Describe it in detail.",
    "Give a detailed description of the scene.",
    "Can you describe everything that is in this image?",
)


INTROS = (
    "The image is a simple drawing on a plain, light background.",
    "This picture shows a flat, colourful drawing on a pale, uniform background.",
    "Here we have a minimal illustration of geometric shapes on a light background.",
)
CLOSINGS = (
    "The other {} places on the grid are empty, so the scene looks simple and tidy.",
    "Apart from these shapes the background is empty, and the overall scene is simple and uncluttered.",
    "There is nothing else in the image, which gives it a clean and minimal look.",
)
CLOSING_FIRST, SPACE, STOP, LISTING = False, " ", ".", (", ", " and ")
TOTALS = ("In total, there is a single shape in the picture.", "In total, there are {} shapes in the picture.")
SIZE_SENTENCES = ("The shape is {}.", "All {} shapes are {}.")
COLOUR_SENTENCES = (
    "The only colour in the picture is {}.",
    "Every shape in the picture is {}.",
    "The colours in the picture are {}.",
)


def object_sentences(o: Obj) -> tuple[str, ...]:
    """One object, its place first: the words the attributes depend on come just before them."""
    pp, thing = o.position_phrase, article(name(o))
    return (
        f"{cap(pp)}, there is {thing}.",
        f"{cap(pp)}, we can see {thing}.",
        f"{cap(pp.removeprefix('in '))} holds {thing}.",
    )


def mixed_sizes(large: int, small: int) -> str:
    verb = lambda k: "is" if k == 1 else "are"  # noqa: E731
    return f"{cap(NUMBERS[large])} of them {verb(large)} large and {NUMBERS[small]} {verb(small)} small."


# --- (b) short caption ----------------------------------------------------------------------

CAPTION = (
    "Write a short caption for this image.",
    "Caption this picture in one sentence.",
    "Give a brief caption of the image.",
)
CAPTION_LEADS, CAPTION_LISTING = ("", "A simple drawing: ", "On a light background: "), ("; ", "; and ")


def caption_item(o: Obj, sized: bool) -> str:
    return f"{o.position_phrase}, {article(name(o, sized))}"


# --- (c) multiple choice with explanation ---------------------------------------------------


# Multiple choice has three forms, one question: the LM stage's (`BRIEF`), stages 3b-5d's (`EARLY`)
# and the final one (`multiple_choice`); why they differ: docs/world.md, "The task forms".
EARLY = "multiple_choice_early"


def _multiple_choice(L, scene: Scene, rng: random.Random, form: str = "multiple_choice") -> tuple[str, str]:
    final = form == "multiple_choice"
    o = rng.choice(scene.objects)
    kind = rng.choice(("shape", "colour", "position", "count"))
    # The explanation reads the asked object first (its place or name, then what is there), then
    # draws the conclusion from its own words: the look-up form the short answers use.
    if kind == "shape":
        question = f"Which shape is {o.position_phrase}?"
        options, letter = draw_options(o.shape, list(SHAPES), rng)
        reason = f"The object {o.position_phrase} is {article(name(o))}, so it is a {o.shape}."
    elif kind == "colour":
        question = f"What colour is the shape {o.position_phrase}?"
        options, letter = draw_options(o.colour, list(COLOURS), rng)
        reason = f"The shape {o.position_phrase} is {article(name(o))}, so it is {o.colour}."
    elif kind == "position" and unique(scene, colour=o.colour, shape=o.shape):
        question = f"Where is the {name(o, False)}?"
        options, letter = draw_options(o.position, list(POSITIONS), rng, ordered=final)
        reason = f"The {name(o, False)} is {o.position_phrase}, so it is at the {o.position}."
    else:
        n = len(scene.objects)
        kind = "count" if final else kind  # `EARLY`'s slip, above
        question = "How many shapes are in the image?"
        are = f"there {'is' if n == 1 else 'are'} {NUMBERS[n]}"
        if final:  # the counts one to four, as an exam lists them; the caption's listing
            options = list(NUMBERS[1:5])
            letter = LETTERS[options.index(NUMBERS[n])]
            listed = listing([f"{x.position_phrase}, {article(name(x, False))}" for x in scene.objects], "; ", "; and ")
            reason = cap(f"{listed}, so {are}.")
        else:
            options, letter = draw_options(NUMBERS[n], list(NUMBERS[1:6]), rng)
            reason = f"The image contains {listing([article(name(x, False)) for x in scene.objects])}, so {are}."
    # The options on one line, so each letter is the same token (" A") as in the answer's checks;
    # on lines of their own the question's "A" and the answer's " A" were two unrelated tokens.
    listed = ", ".join(f"{letter_}. {text}" for letter_, text in zip(LETTERS, options))
    question = f"{question}\nOptions: {listed}.\nExplain briefly, then give the letter of the correct option."
    said = brief_checks(options, letter) if form == BRIEF else checks(L, kind, options, letter)
    return question, f"{reason} {said} The answer is {letter}."


# The word each kind's conclusion restates, with its article ("a circle", "the centre", "red").
ARTICLE = {"shape": "a ", "colour": "", "position": "the ", "count": ""}


def verdict(kind: str, said: str, text: str) -> str:
    """One option's check (`phrasing.checks`): ": a circle is not a square."."""
    a = ARTICLE[kind]
    return f": {a}{said} {'is' if text == said else 'is not'} {a}{text}."


# The LM stage (train.py, stage 3) and the tokenizer's corpus keep the brief checks, "A. square:
# no. B. circle: yes."; the restated form is taught once the lookups are in place (docs/modules.md).
BRIEF = "multiple_choice_brief"


def brief_checks(options: list[str], letter: str) -> str:
    """The options in order up to the right one, each with its verdict: "A. square: no. B. circle: yes." """
    return " ".join(
        f"{letter_}. {text}: {'yes' if letter_ == letter else 'no'}."
        for letter_, text in zip(LETTERS[: LETTERS.index(letter) + 1], options)
    )


# --- short VQA ------------------------------------------------------------------------------


TAILS = ("", " here", " in this image", " in the picture")  # a short answer's (`phrasing.restated`)
IS, AT, THINGS = "is {}", "is {}", ("shape", "object")
COLOUR_QUESTIONS = ("What colour is {}?", "What is the colour of {}?")
WHERE_QUESTIONS = ("Where is {}?", "Where in the image is {}?")
YESNO_QUESTIONS, YES, NO = (
    ("Is there {} in the image?", "Can you see {}?"),
    ("Yes.", "Yes, there is {} {}."),
    ("No.", "No, there is no {1}."),
)
COLOUR_FIRST = True  # a yes/no question's thing: English draws its colour first


def the_shape(o: Obj) -> str:
    return f"the {o.shape}"


def the_thing_at(noun: str, o: Obj) -> str:
    return f"the {noun} {o.position_phrase}"


def named(o: Obj) -> str:
    return f"the {name(o, False)}"


def asked_thing(o: Obj) -> str:
    return article(f"{o.colour} {o.shape}")


def _vqa_shape(L, scene: Scene, rng: random.Random) -> tuple[str, str]:
    o = rng.choice(scene.objects)
    if unique(scene, colour=o.colour) and rng.random() < 0.5:
        noun = rng.choice(("shape", "object"))
        question = rng.choice((f"What shape is the {o.colour} {noun}?", f"Which shape is {o.colour}?"))
        return question, restated(L, f"the {o.colour} {noun}", f"is a {o.shape}", rng)
    question = rng.choice((f"What shape is {o.position_phrase}?", f"Which shape can you see {o.position_phrase}?"))
    return question, restated(L, f"the shape {o.position_phrase}", f"is a {o.shape}", rng)


def _vqa_count(L, scene: Scene, rng: random.Random) -> tuple[str, str]:
    kind, counting, n = counted(scene, rng)
    what = "shapes" if kind == "all" else f"{counting} shapes" if kind == "colour" else plural(counting)
    question = rng.choice((f"How many {what} are there?", f"How many {what} are in the image?"))
    if n == 0:
        return question, restated(L, "there", f"are no {what}", rng)
    return question, restated(L, f"the number of {what}", f"is {NUMBERS[n]}", rng)


# Each task's form (its `_<task>` above, else `phrasing`'s); multiple choice's earlier forms besides.
FORMS = forms(sys.modules[__name__])
FORMS |= {form: functools.partial(FORMS["multiple_choice"], form=form) for form in (BRIEF, EARLY)}
