"""The world's questions and reference answers in English: every task family of `tasks.py`, and
multiple choice's earlier forms (`BRIEF`, `EARLY`).

Contract: the phrase tables `PROMPTS` and `FORMS`, over which `tasks.qa` writes (question,
answer) in English. Phrasings vary (drawn from `rng`), the facts never do: every answer is true of the scene.
The count words and plurals (`NUMBERS`, `plural`) are read by the scorer and the translations
too; `tasks_de` and `tasks_zh` write multiple choice's checks as `checks` does.
"""

import random
import sys

from demo.world import scenes
from demo.world.phrasing import LETTERS, cap, counted, draw_options, forms, listing, unique
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


def _multiple_choice(scene: Scene, rng: random.Random, form: str = "multiple_choice") -> tuple[str, str]:
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
    said = brief_checks(options, letter) if form == BRIEF else checks(kind, options, letter)
    return question, f"{reason} {said} The answer is {letter}."


# The word each kind's conclusion restates, with its article ("a circle", "the centre", "red").
ARTICLE = {"shape": "a ", "colour": "", "position": "the ", "count": ""}


def checks(kind: str, options: list[str], letter: str) -> str:
    """The options in order up to the right one, each copied, then compared with the concluded
    word restated next to it: "A. square: a circle is not a square. B. circle: a circle is a
    circle." With both words a few tokens back the verdict is a local comparison; checks against
    the conclusion a sentence earlier ("A. square: no.") were not learnt (README)."""
    said, a = options[LETTERS.index(letter)], ARTICLE[kind]
    out = []
    for letter_, text in zip(LETTERS, options):
        verdict = "is" if text == said else "is not"
        out.append(f"{letter_}. {text}: {a}{said} {verdict} {a}{text}.")
        if text == said:
            return " ".join(out)
    raise ValueError(f"{letter} is not among {options}")


# The LM stage (train.py, stage 3) and the tokenizer's corpus keep the brief checks, "A. square:
# no. B. circle: yes.": every run that trained the restated form from the start read its image
# slots slower (colour 75-87% at the end of the LM stage against 95%, README), before multiple
# choice was even in its mix. The restated form is taught once the lookups are in place.
BRIEF = "multiple_choice_brief"


def brief_checks(options: list[str], letter: str) -> str:
    """The options in order up to the right one, each with its verdict: "A. square: no. B. circle: yes." """
    return " ".join(
        f"{letter_}. {text}: {'yes' if letter_ == letter else 'no'}."
        for letter_, text in zip(LETTERS[: LETTERS.index(letter) + 1], options)
    )


# --- short VQA ------------------------------------------------------------------------------


# Short answers name their subject, then the looked-up word right after it, then a varying tail
# ("The circle is red here."): the form a model reads an image token fastest in (docs/world.md).
TAILS = ("", " here", " in this image", " in the picture")


def restated(subject: str, rest: str, rng: random.Random) -> str:
    """'The circle is red here.': the subject, the looked-up words, then a varying tail."""
    return cap(f"{subject} {rest}{rng.choice(TAILS)}.")


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


def _vqa_shape(scene: Scene, rng: random.Random) -> tuple[str, str]:
    o = rng.choice(scene.objects)
    if unique(scene, colour=o.colour) and rng.random() < 0.5:
        noun = rng.choice(("shape", "object"))
        question = rng.choice((f"What shape is the {o.colour} {noun}?", f"Which shape is {o.colour}?"))
        return question, restated(f"the {o.colour} {noun}", f"is a {o.shape}", rng)
    question = rng.choice((f"What shape is {o.position_phrase}?", f"Which shape can you see {o.position_phrase}?"))
    return question, restated(f"the shape {o.position_phrase}", f"is a {o.shape}", rng)


def _vqa_count(scene: Scene, rng: random.Random) -> tuple[str, str]:
    kind, counting, n = counted(scene, rng)
    what = "shapes" if kind == "all" else f"{counting} shapes" if kind == "colour" else plural(counting)
    question = rng.choice((f"How many {what} are there?", f"How many {what} are in the image?"))
    if n == 0:
        return question, restated("there", f"are no {what}", rng)
    return question, restated(f"the number of {what}", f"is {NUMBERS[n]}", rng)


# The phrase tables `tasks.qa` dispatches over (`phrasing.ask`): the tasks whose question is drawn
# from a list of prompts, and each task's form (its `_<task>` above, else `phrasing`'s), which writes
# its answer (or question and answer); multiple choice's earlier forms besides.
PROMPTS = {"description": DESCRIBE, "caption": CAPTION}
FORMS = forms(sys.modules[__name__]) | {
    BRIEF: lambda scene, rng: _multiple_choice(scene, rng, BRIEF),
    EARLY: lambda scene, rng: _multiple_choice(scene, rng, EARLY),
}
