"""Scoring an answer in German or Chinese: `scoring.score`'s definition of correct, per language.

Contract: `readers(language)`, what `scoring.score` reads of an answer in "de" or "zh", with the
rules of `scoring.py` (English): colour / shape questions name exactly the reference's
colours (shapes); count: the first number word; position: the place phrase names the right
cell; yes/no: the first word; caption: the (colour, shape) pairs named equal the scene's, as a
multiset; description: one (place, colour, shape) triple per sentence; multiple choice: the
letter after "Die Antwort ist" / "答案：". German words are matched whole, in any of their
endings ("rot", "roter", "rotes", ...); Chinese has no spaces, so its words are matched as
substrings, longest first, shape names taken out before numbers are read (三角形, 十字形).
Pure Python.
"""

import functools
import re
from collections import Counter
from dataclasses import dataclass

from demo.world import tasks_de, tasks_zh


@dataclass(frozen=True)
class Lexicon:
    colours: dict[str, str]  # surface form (lower case) -> colour
    shapes: dict[str, str]  # surface form (lower case) -> shape
    places: list[tuple[str, int]]  # (surface form, cell), longest first
    counts: dict[str, int]  # number word -> count
    yes: str  # the first word of a yes
    no: str
    letter: re.Pattern  # the final letter
    sentence: re.Pattern  # splits sentences
    spaced: bool  # words are separated by spaces (matched whole)


def _places(language, fold=str) -> list[tuple[str, int]]:
    """Every place phrase and place name of a language's phrase tables (`tasks_de`, `tasks_zh`),
    `fold`ed (lower case for German), with its cell: longest first, so that a longer one matches
    before a name inside it ("oben in der Mitte" before "oben")."""
    tables = (language.PLACE_PHRASES, language.PLACES)
    pairs = [(fold(p), cell) for table in tables for cell, p in enumerate(table)]
    return sorted(pairs, key=lambda pc: len(pc[0]), reverse=True)


GERMAN = Lexicon(
    colours={form: c for c, de in tasks_de.COLOURS.items() for form in tasks_de.endings(de)},
    shapes={s.lower(): k for k, s in tasks_de.SHAPES.items()} | {s.lower(): k for k, s in tasks_de.PLURALS.items()},
    places=_places(tasks_de, str.lower),
    counts={"kein": 0, "keine": 0, "null": 0} | {w: i for i, w in enumerate(tasks_de.NUMBERS) if i},
    yes="ja",
    no="nein",
    letter=re.compile(r"antwort ist \(?([abcd])\b"),
    sentence=re.compile(r"(?<=\.)\s+"),
    spaced=True,
)
CHINESE = Lexicon(
    spaced=False,  # words are not spaced: read by substring
    yes="有",
    no="没有",
    colours={z: c for c, z in tasks_zh.COLOURS.items()},
    shapes={z: s for s, z in tasks_zh.SHAPES.items()},
    places=_places(tasks_zh),
    counts={"没有": 0, "零": 0, "二": 2} | {w: i for i, w in enumerate(tasks_zh.NUMBERS) if i},
    letter=re.compile(r"答案[：:]\s*\(?([abcd])\b"),
    sentence=re.compile(r"(?<=。)"),
)
LEXICONS = {"de": GERMAN, "zh": CHINESE}


def _alternation(forms) -> str:
    return "|".join(sorted(map(re.escape, forms), key=len, reverse=True))


def _find(lex: Lexicon, forms, text: str) -> list[str]:
    """The forms found in `text` (lower case), in order; whole words where words are spaced."""
    pattern = _alternation(forms)
    return re.findall(rf"\b(?:{pattern})\b" if lex.spaced else pattern, text)


def colours_in(lex: Lexicon, text: str) -> set[str]:
    return {lex.colours[w] for w in _find(lex, lex.colours, text.lower())}


def shapes_in(lex: Lexicon, text: str) -> set[str]:
    return {lex.shapes[w] for w in _find(lex, lex.shapes, text.lower())}


def count_in(lex: Lexicon, text: str) -> int | None:
    text = text.lower()
    for shape in lex.shapes:  # 三角形 holds a three, 十字形 a ten
        text = text.replace(shape, " ")
    found = _find(lex, lex.counts, text)
    return lex.counts[found[0]] if found else None


def position_in(lex: Lexicon, text: str) -> int | None:
    text = text.lower()
    for phrase, cell in lex.places:
        if re.search(rf"\b{phrase}\b" if lex.spaced else re.escape(phrase), text):
            return cell
    return None


def pairs_in(lex: Lexicon, text: str) -> Counter:
    """(colour, shape) for each colour word followed by a shape word ('roter Kreis', '红色圆形')."""
    colour, shape = _alternation(lex.colours), _alternation(lex.shapes)
    pattern = rf"\b({colour})\s+({shape})\b" if lex.spaced else rf"({colour})的?({shape})"
    return Counter((lex.colours[c], lex.shapes[s]) for c, s in re.findall(pattern, text.lower()))


def triples_in(lex: Lexicon, text: str) -> Counter:
    found = Counter()
    for sentence in lex.sentence.split(text):
        objs = list(pairs_in(lex, sentence).elements())
        cell = position_in(lex, sentence)
        if len(objs) == 1 and cell is not None:
            found[(cell, *objs[0])] += 1
    return found


def yes_or_no(lex: Lexicon, text: str) -> str | None:
    text = text.strip().lower()
    if text.startswith(lex.no):  # before yes: 没有 ends in 有
        return "no"
    return "yes" if text.startswith(lex.yes) else None


def letter_in(lex: Lexicon, text: str) -> str | None:
    hits = lex.letter.findall(text.lower())
    return hits[-1] if hits else None


def readers(language: str) -> dict:
    """What each task reads of a text in `language` (`scoring.score`)."""
    read = dict(vqa_colour=colours_in, vqa_shape=shapes_in, vqa_count=count_in, vqa_position=position_in)
    read |= dict(vqa_yesno=yes_or_no, caption=pairs_in, description=triples_in, multiple_choice=letter_in)
    return {task: functools.partial(f, LEXICONS[language]) for task, f in read.items()}
