"""What each word of the other languages means in English, and their lookup facts.

More, with its measurements: docs/modules.md.
"""

import random

from demo.world import tasks_de, tasks_zh
from demo.world.scenes import COLOURS, POSITIONS, SHAPES, SIZES, Obj, Scene
from demo.world.tasks_en import NUMBERS, plural

# The words a German place is made of, and the English they mean.
GERMAN_PLACE_WORDS = {"oben": "top", "unten": "bottom", "links": "left", "rechts": "right", "mitte": "centre"}
# The other words the answers' and questions' layouts are made of, and what they mean.
GERMAN_FUNCTION_WORDS = {
    "ist": "is",
    "sind": "are",
    "der": "the",
    "die": "the",
    "das": "the",
    "den": "the",
    "dem": "the",
    "ein": "a",
    "eine": "a",
    "einen": "a",
    "einem": "a",
    "form": "shape",
    "formen": "shapes",
    "objekt": "object",
    "farbe": "colour",
    "farben": "colours",
    "welche": "which",
    "wie": "how",
    "viele": "many",
    "wo": "where",
    "was": "what",
    "und": "and",
    "also": "so",
    "es": "it",
    "er": "it",
    "sie": "it",
    "nicht": "not",
    "antwort": "answer",
    "bild": "picture",
    "szene": "scene",
    "hier": "here",
    "im": "in the",
    "auf": "on",
    "hat": "has",
    "diesem": "this",
    "du": "you",
    "wir": "we",
    "anzahl": "number",
    "gibt": "there is",
    "ja": "yes",
    "nein": "no",
    "option": "option",
    "optionen": "options",
    "buchstaben": "letter",
    "richtigen": "correct",
    "nenne": "give",
    "dann": "then",
    "kurz": "briefly",
    "erkläre": "explain",
    "insgesamt": "in total",
    "hintergrund": "background",
    "zeichnung": "drawing",
    "einfache": "simple",
    "helle": "light",
    "hellen": "light",
    "schlicht": "plain",
    "leer": "empty",
    "wirkt": "looks",
    "liegt": "is",
    "befindet": "is",
    "bildunterschrift": "caption",
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
    "不": "not",
    "答案": "answer",
    "有": "there is",
    "一个": "a",
    "没有": "no",
    "图中": "in the picture",
    "在": "in",
    "这张图片": "this picture",
    "图片": "picture",
    "这": "this",
    "什么": "what",
    "哪里": "where",
    "几": "how many",
    "里": "in",
    "背景": "background",
    "背景上": "on the background",
    "浅色": "light",
    "简单": "simple",
    "描述": "describe",
    "详细": "in detail",
    "请": "please",
    "选项": "options",
    "字母": "letter",
    "正确": "correct",
    "解释": "explain",
    "简要": "briefly",
    "然后": "then",
    "给出": "give",
    "看到": "see",
    "能": "can",
    "你": "you",
    "中间": "middle",
    "位置": "position",
    "共有": "there are",
    "总共": "in total",
    "图画": "drawing",
    "一幅": "a",
    "和": "and",
    "都": "all",
    "大的": "large",
    "小的": "small",
    "个": "",
    "吗": "",
    "就在这里": "here",
    "左": "left",
    "右": "right",
    "上": "top",
    "下": "bottom",
    "中": "centre",
    "角": "corner",
    "侧": "side",
}


def lexicon(language: str, function_words: bool = False) -> dict[str, str]:
    """Word (lower case) -> its English translation (module docstring)."""
    out: dict[str, str] = {}
    if language == "de":
        m = tasks_de
        for c, de in m.COLOURS.items():
            out |= dict.fromkeys(tasks_de.endings(de), c)
        for s, size in m.SIZES.items():
            out |= dict.fromkeys(tasks_de.endings(size), s)
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


def gloss(token: str, lexicons: dict[str, str]) -> str | None:
    """The English a token of the grown tokenizer means, or None: the lexicon's entry for the
    word it spells; for a Chinese token (runs of words, no spaces: "是什么颜色"), its words
    found longest first from the left, each one's English in turn ("is what colour"), when
    they cover the token."""
    word = token.strip().lower()
    if word in lexicons:
        return lexicons[word] or None
    if not word or not all("\u4e00" <= c <= "\u9fff" for c in word):
        return None
    out, k = [], 0
    longest = max(map(len, lexicons))
    while k < len(word):
        hit = next(
            (word[k : k + n] for n in range(min(longest, len(word) - k), 0, -1) if word[k : k + n] in lexicons), None
        )
        if hit is None:
            return None
        out.append(lexicons[hit])
        k += len(hit)
    return " ".join(w for w in out if w) or None


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
