"""What each word of the other languages means in English, and their lookup facts.

Contract:
- `lexicon(language, function_words=False)` maps a word of German or Chinese (lower case, no
  spaces) to the English words it translates: every grounded word (colours in all their
  German endings, shapes and their plurals, sizes, places, counts), and with
  `function_words` the few words the answers' layouts are built of ("ist" -> "is", "的" ->
  "of"). Stage 10 starts each new token that spells one of them from its English translation's
  embedding (`multilingual.grow_embeddings`), so the lookup the target has already writes it.
- `facts(scene, rng, language, verify)` is `data.facts` in another language: every lookup the
  scene answers ("Kreis ist rot.", "圆形是红色。"), and with `verify` the verification facts
  ("ist der Kreis blau? nein."), as (question, answer) pairs: the loss goes on the answer.
Pure Python.
"""

import random

from . import tasks_de, tasks_zh
from .scenes import COLOURS, POSITIONS, SHAPES, SIZES, Obj, Scene
from .tasks import NUMBERS, plural

# The words a German place is made of, and the English they mean.
GERMAN_PLACE_WORDS = {"oben": "top", "unten": "bottom", "links": "left", "rechts": "right", "mitte": "centre"}
GERMAN_FUNCTION_WORDS = {
    "ist": "is",
    "der": "the",
    "die": "the",
    "das": "the",
    "ein": "a",
    "eine": "a",
    "einen": "a",
    "form": "shape",
    "formen": "shapes",
    "objekt": "object",
    "farbe": "colour",
    "und": "and",
    "also": "so",
    "es": "it",
    "er": "it",
    "sie": "it",
    "nicht": "not",
    "kein": "not a",
    "antwort": "answer",
    "bild": "image",
    "hier": "here",
    "anzahl": "number",
    "gibt": "there is",
    "ja": "yes",
    "nein": "no",
}
CHINESE_FUNCTION_WORDS = {
    "是": "is",
    "的": "of",
    "图形": "shape",
    "物体": "object",
    "颜色": "colour",
    "形状": "shape",
    "所以": "so",
    "它": "it",
    "不是": "is not",
    "答案": "answer",
    "有": "there is",
    "一个": "a",
    "没有": "no",
    "图中": "in the image",
}


def _german_forms(adjective: str) -> list[str]:
    return [tasks_de.inflect(adjective, e) for e in ("", "e", "er", "es", "en")]


def lexicon(language: str, function_words: bool = False) -> dict[str, str]:
    """Word (lower case) -> its English translation (module docstring)."""
    out: dict[str, str] = {}
    if language == "de":
        m = tasks_de
        for c, de in m.COLOURS.items():
            out |= dict.fromkeys(_german_forms(de), c)
        for s, size in m.SIZES.items():
            out |= dict.fromkeys(_german_forms(size), s)
        out |= {de.lower(): s for s, de in m.SHAPES.items()} | {de.lower(): plural(s) for s, de in m.PLURALS.items()}
        out |= GERMAN_PLACE_WORDS
        out |= {w: NUMBERS[i] for i, w in enumerate(m.NUMBERS)} | {"kein": "no"}
        if function_words:
            out = GERMAN_FUNCTION_WORDS | out
    elif language == "zh":
        m = tasks_zh
        out |= {zh: c for c, zh in m.COLOURS.items()} | {zh: s for s, zh in m.SHAPES.items()}
        out |= {zh: s for s, zh in m.SIZES.items()}
        out |= {zh: POSITIONS[cell] for cell, zh in enumerate(m.PLACES)}
        out |= {w: NUMBERS[i] for i, w in enumerate(m.NUMBERS)}
        if function_words:
            out = CHINESE_FUNCTION_WORDS | out
    else:
        raise ValueError(f"no lexicon for {language!r}; expected 'de' or 'zh'")
    return out


def facts(scene: Scene, rng: random.Random, language: str, verify: bool = False) -> list[tuple[str, str]]:
    """`data.facts` in `language`: (question, answer) pairs in a random order; a lookup fact has
    no question (its answer is the whole fact), a verification fact's question is random by
    design, so only its answer carries loss."""
    m = {"de": tasks_de, "zh": tasks_zh}[language]
    colour, shape = m.COLOURS, m.SHAPES
    place = m.PLACES
    objects = scene.objects
    shapes, colours = [o.shape for o in objects], [o.colour for o in objects]
    if language == "de":
        look = lambda key, value: ("", f"{key} ist {value}.")  # noqa: E731
        ask = lambda s, c: f"ist {tasks_de.definite(_obj(s), colour=False)} {colour[c]}?"  # noqa: E731
        there = lambda c, s: f"gibt es {tasks_de.indefinite(_obj(s, c), size=False, accusative=True)}?"  # noqa: E731
        yes, no, present_, absent = "ja.", "nein.", "ja.", "nein."
    else:
        look = lambda key, value: ("", f"{key}是{value}。")  # noqa: E731
        ask = lambda s, c: f"{shape[s]}是{colour[c]}吗？"  # noqa: E731
        there = lambda c, s: f"有{colour[c]}{shape[s]}吗？"  # noqa: E731
        yes, no, present_, absent = "是。", "不是。", "有。", "没有。"
    out = [look(shape[o.shape], colour[o.colour]) for o in objects if shapes.count(o.shape) == 1]
    out += [look(place[o.cell], colour[o.colour]) for o in objects]
    out += [look(colour[o.colour], shape[o.shape]) for o in objects if colours.count(o.colour) == 1]
    if verify:
        for o in objects:
            if shapes.count(o.shape) == 1:
                other = rng.choice([c for c in COLOURS if c != o.colour])
                out += [(ask(o.shape, o.colour), yes), (ask(o.shape, other), no)]
        shown = rng.choice(objects)
        out.append((there(shown.colour, shown.shape), present_))
        present = {(o.colour, o.shape) for o in objects}
        c, s = rng.choice([(c, s) for c in COLOURS for s in SHAPES if (c, s) not in present])
        out.append((there(c, s), absent))
    rng.shuffle(out)
    return out


def _obj(shape: str, colour: str = "red") -> Obj:
    return Obj(shape, colour, SIZES[0], 0)
