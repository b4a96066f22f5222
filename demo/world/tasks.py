"""Questions and reference answers about scenes, one family per evaluation of the paper.

More, with its measurements: docs/modules.md.
"""

import random
from dataclasses import dataclass

from PIL import Image

from demo.world import tasks_en
from demo.world.phrasing import TASKS, ask
from demo.world.scenes import COLOURS, POSITION_PHRASES, POSITIONS, SHAPES, SIZES, Scene, render, scene_stream
from demo.world.tasks_en import BRIEF, NUMBERS, plural

# The languages the world speaks: English in `tasks_en`, German in `tasks_de`, Chinese in
# `tasks_zh`. A task of another language than English is named "de/caption" in a mix
# (`split_task`).
LANGUAGES = ("en", "de", "zh")
LANGUAGE_NAMES = {"en": "English", "de": "German", "zh": "Chinese"}


@dataclass
class Example:
    image: Image.Image  # display resolution
    question: str
    answer: str  # reference answer
    task: str
    scene: Scene
    language: str = "en"  # of the question and its answer (`LANGUAGES`)


def image_grounded_words() -> set[str]:
    """Colour, shape, size, count and position words (lower case, plurals included)."""
    words = set(COLOURS) | set(SHAPES) | {plural(s) for s in SHAPES} | set(SIZES)
    words |= set(NUMBERS) | {"single", "none", "zero"}
    words |= {w for p in POSITIONS + POSITION_PHRASES for w in p.split()} - {"in", "the", "of"}
    return words


def split_task(key: str) -> tuple[str, str]:
    """'de/caption' -> ('de', 'caption'); an English task has no prefix: 'caption' -> ('en', 'caption')."""
    language, _, task = key.rpartition("/")
    if (language or "en") not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}; expected one of {LANGUAGES}")
    return language or "en", task


def in_language(task: str, language: str) -> str:
    """The mix key of `task` in `language` (`split_task`'s inverse)."""
    return task if language == "en" else f"{language}/{task}"


def qa(task: str, scene: Scene, rng: random.Random) -> tuple[str, str] | None:
    """(question, reference answer), or None when the task does not apply to the scene. `task`
    may name another language ("de/caption", `split_task`); only English has multiple choice's
    earlier forms."""
    language, task = split_task(task)
    if language != "en":  # imported here: the language modules import this one
        from demo.world import tasks_de, tasks_zh

        tables = {"de": tasks_de, "zh": tasks_zh}[language]
    else:
        tables = tasks_en
    return ask(tables, task, scene, rng)


def examples(
    split: str,
    task: str,
    n: int,
    seed: int = 0,
    render_images: bool = True,
    form: str = "multiple_choice",
    language: str = "en",
) -> list[Example]:
    """n examples of one task on distinct scenes of one split, deterministic; multiple choice in
    `form` (`BRIEF`, `EARLY` or the final one). Every language asks about the same scenes."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")
    key = in_language(form if task == "multiple_choice" else task, language)
    out = []
    for i, scene in enumerate(scene_stream(split, seed * len(TASKS) + TASKS.index(task))):
        if len(out) == n:
            break
        stream = f"{split}:{task}:{seed}:{i}" + ("" if language == "en" else f":{language}")
        pair = qa(key, scene, random.Random(stream))
        if pair is not None:
            image = render(scene) if render_images else None
            out.append(Example(image, pair[0], pair[1], task, scene, language))
    return out


def corpus(n: int, seed: int = 0, language: str = "en") -> list[str]:
    """Every question and answer of n training examples per task: the text the tokenizer is
    trained on. English's multiple choice in its brief form (`BRIEF`); other languages, the final."""
    form = BRIEF if language == "en" else "multiple_choice"
    return [
        text
        for t in TASKS
        for e in examples("train", t, n, seed, render_images=False, form=form, language=language)
        for text in (e.question, e.answer)
    ]


def heldout_examples(task: str, n: int, seed: int = 0, language: str = "en") -> list[Example]:
    return examples("heldout", task, n, seed, language=language)


def train_examples(task: str, n: int, seed: int = 0, language: str = "en") -> list[Example]:
    return examples("train", task, n, seed, language=language)
