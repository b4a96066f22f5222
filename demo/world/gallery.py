"""The example gallery shipped with the models: held-out scenes for every task family.

Contract: `write_examples(dir)` writes PNGs at display resolution and `examples.json`, a list of
{"image", "task", "question", "answer"} (image is the file name in the same directory), and the
same examples in the other languages the world speaks, `examples-de.json` and
`examples-zh.json` (`language_file`), each entry with its "language" too, in the same order, the
same number of each task. Every task shows the same scenes, so the same images, asked and
answered in each language, but the description: each language shows its own scene
(`picks(task, language)`), with its own image where the scene differs from English's
(`image_name`: "description-0-de.png"). Pure function of the held-out generator and `PICKS`: the
same files every time.
"""

import json
import random
import re
from collections import Counter
from functools import cache
from pathlib import Path

from demo.world import scoring_languages, tasks_de, tasks_en, tasks_zh
from demo.world.scenes import COLOURS, POSITION_PHRASES, POSITIONS, SHAPES
from demo.world.tasks import LANGUAGES, TASKS, heldout_examples, in_language, qa

# Which held-out examples of each task the gallery shows (indices into `heldout_examples`): each the
# first the shipped target answers right, in full (`tests/test_examples_hold.py`); how: docs/world.md.
PICKS = {
    "description": {"en": (88,), "de": (250,), "zh": (286,)},  # a scene per language
    "caption": (0, 1),
    "multiple_choice": (0, 1),
    "vqa_yesno": (1,),
    "vqa_colour": (0,),
    "vqa_shape": (0,),
    "vqa_count": (6,),
    "vqa_position": (1,),
}


def picks(task: str, language: str) -> tuple[int, ...]:
    """The held-out indices the gallery shows of `task` in `language` (`PICKS`)."""
    chosen = PICKS[task]
    return chosen[language] if isinstance(chosen, dict) else chosen


PER_TASK = {task: len(picks(task, "en")) for task in PICKS}  # the same in every language
SEED = 1000


def picked(task: str, language: str, seed: int = SEED) -> list:
    """The gallery's examples of `task` in `language`, in the gallery's order (`picks`)."""
    chosen = picks(task, language)
    pool = heldout_examples(task, max(chosen) + 1, seed=seed, language=language)
    return [pool[i] for i in chosen]


def image_name(task: str, i: int, language: str) -> str:
    """The file of the gallery's `i`-th example of `task` in `language`: English's scene's file
    ("caption-1.png"), unless the language shows another scene there ("description-0-de.png")."""
    shared = picks(task, language)[i] == picks(task, "en")[i]
    return f"{task}-{i}.png" if shared else f"{task}-{i}-{language}.png"


def language_file(language: str) -> str:
    """The gallery's index of examples in `language`: examples.json for English (as it always was)."""
    return "examples.json" if language == "en" else f"examples-{language}.json"


def write_examples(directory: Path, seed: int = SEED) -> list[dict]:
    """Every language's gallery; returns the English entries."""
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for language in LANGUAGES:
        entries = []
        for task in TASKS:
            for i, ex in enumerate(picked(task, language, seed)):
                name = image_name(task, i, language)
                if language == "en" or name != image_name(task, i, "en"):
                    ex.image.save(directory / name, optimize=True)
                entry = {"image": name, "task": task, "question": ex.question, "answer": ex.answer}
                entries.append(entry if language == "en" else entry | {"language": language})
        (directory / language_file(language)).write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")
        out[language] = entries
    return out["en"]


# Every fact sentence, checked: the world's scoring reads a description's (place, colour,
# shape) triples only, and a description also states how many shapes there are, their sizes, its
# colours and, in some forms, how many cells are empty. `facts(language, text)` reads each sentence's
# fact words (numbers, sizes, colours, shapes, places, each as its canonical value); a sentence is
# true of a scene when the world itself states it of that scene in one of its forms (the reference
# answers of FORMS_READ seeds, `tasks.qa`); `states_only_true_facts` asks that of every fact
# sentence of an answer, so "Alle zwei Formen sind klein" of two large shapes fails.
CHECKED = ("description", "caption")  # the tasks whose every sentence states facts of the whole scene
FORMS_READ = 64


@cache
def _lexicon(language: str) -> tuple[dict[str, tuple[str, object]], re.Pattern]:
    """Surface form -> (kind, value) of a language's fact words, and one pattern matching them,
    longest first (so "三角形" is a shape before "三" is a number, "top left" a place before "top")."""
    if language == "en":
        shapes = {s: s for s in SHAPES} | {tasks_en.plural(s): s for s in SHAPES}
        places = [(p, cell) for table in (POSITION_PHRASES, POSITIONS) for cell, p in enumerate(table)]
        forms = {c: ("colour", c) for c in COLOURS} | {w: ("shape", v) for w, v in shapes.items()}
        forms |= {w: ("count", i) for i, w in enumerate(tasks_en.NUMBERS) if i}
        forms |= {"large": ("size", "large"), "small": ("size", "small")}
    else:
        lex = scoring_languages.LEXICONS[language]
        places = lex.places
        forms = {w: ("colour", c) for w, c in lex.colours.items()} | {w: ("shape", v) for w, v in lex.shapes.items()}
        if language == "de":
            forms |= {w: ("count", i) for i, w in enumerate(tasks_de.NUMBERS) if i}
        else:  # a number counts with its measure word: 一幅 (an intro's "a drawing") is no fact
            forms |= {f"{w}个": ("count", i) for i, w in enumerate(tasks_zh.NUMBERS) if i} | {"两个": ("count", 2)}
        if language == "de":
            sizes = {f: v for v, de in tasks_de.SIZES.items() for f in tasks_de.endings(de)}
        else:
            sizes = {"大的": "large", "小的": "small"}
        forms |= {w: ("size", v) for w, v in sizes.items()}
    forms |= {p.lower(): ("place", cell) for p, cell in places}
    alternation = "|".join(sorted(map(re.escape, forms), key=len, reverse=True))
    return forms, re.compile(rf"\b(?:{alternation})\b" if language != "zh" else alternation)


def facts(language: str, text: str) -> Counter:
    """The fact sentences of `text`: each sentence's fact words as a sorted tuple, counted."""
    forms, pattern = _lexicon(language)
    split = r"(?<=。)" if language == "zh" else r"(?<=\.)\s+"
    found = Counter()
    for sentence in re.split(split, text):
        words = tuple(sorted(map(str, (forms[w] for w in pattern.findall(sentence.lower())))))
        if words:
            found[words] += 1
    return found


def true_facts(task: str, example) -> set:
    """Every fact sentence the world states of the example's scene for `task`, in its language."""
    answers = (qa(in_language(task, example.language), example.scene, random.Random(k)) for k in range(FORMS_READ))
    return {sentence for pair in answers if pair for sentence in facts(example.language, pair[1])}


def states_only_true_facts(task: str, example, answer: str) -> bool:
    """Whether every fact sentence of `answer` is one the world states of the scene (CHECKED tasks;
    the others are true)."""
    return task not in CHECKED or set(facts(example.language, answer)) <= true_facts(task, example)


def describes_in_full(task: str, example, answer: str) -> bool:
    """Whether `answer` states every fact sentence that every form of the world's answer states of
    the scene (for a description: each shape, the count, the sizes and the colours; only the
    closing sentence's count of empty places varies): a description answered with one sentence, a
    caption's form, is not one. Other tasks: True."""
    if task != "description":
        return True
    forms = (qa(in_language(task, example.language), example.scene, random.Random(k)) for k in range(FORMS_READ))
    every = set.intersection(*(set(facts(example.language, pair[1])) for pair in forms))
    return every <= set(facts(example.language, answer))
