"""Qualitative error analysis: where, and on which words, the target rejects the drafter. Every answer
position the drafter proposed a token for is an `Observation`, tagged with the target's word there
and its category (image-grounded, letter, function, template, punctuation, end); German and
Chinese answers are split and tagged through the world's lexicon (docs/modules.md)."""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass

from demo.engine.detokenize import END_TOKENS
from demo.engine.events import RoundEvent, Trace
from demo.world.scenes import COLOURS, POSITION_PHRASES, POSITIONS, SHAPES, SIZES
from demo.world.tasks import heldout_examples
from demo.world.tasks_en import NUMBERS, plural
from demo.world.translation import lexicon

FUNCTION_WORDS = set(
    "a an the of in on at to for with and or but so is are was were be been it its this that these "
    "those there here they them their we you i he she his her as by from into than then which what "
    "where who how all each every other not do does has have had can".split()
)
GROUNDED = {
    "colour": set(COLOURS),
    "shape": set(SHAPES) | {plural(s) for s in SHAPES},
    "size": set(SIZES),
    "count": set(NUMBERS[1:]) | {"single", "none", "zero"},
    "position": {w for p in POSITIONS + POSITION_PHRASES for w in p.split()} - FUNCTION_WORDS,
    # "yes"/"no" answer whether something is in the image ("No, there is no purple cross",
    # "B says blue: yes"); "no" as a count ("there are no stars") lands here too.
    "yes/no": {"yes", "no"},
}
OTHER = ("letter", "function", "template", "punctuation", "end")
CATEGORIES = (*GROUNDED, *OTHER)
LETTERS = "A-Za-zÄÖÜäöüß"
HAN = "\u4e00-\u9fff"  # CJK unified ideographs: the world's Chinese
WORD = re.compile(rf"[{LETTERS}]+|[{HAN}]+")  # a Latin word, or a run of Chinese words
ALONE = {"有": "yes", "是": "yes", "没有": "no", "不是": "no", "一个": "one"}  # a Chinese word's meaning alone
ARTICLE_AFTER = re.compile(r"\s+(?!says\b)[a-z]")  # "A simple drawing": an article, not option A
END = "(end)"  # how the end-of-answer token is named in tables


@functools.cache
def glosses(language: str) -> dict[str, str]:
    """Word (lower case) -> its English gloss, for German or Chinese words (their lexicon)."""
    return lexicon(language, function_words=True)


def _is_han(text: str) -> bool:
    return bool(text) and all("\u4e00" <= c <= "\u9fff" for c in text)


def _english_category(words: str) -> str:
    """The category of one English word, or of a gloss of several: its first grounded word's,
    else function when every word is one (an empty gloss, a particle, too), else template."""
    for w in words.split():
        for name, grounded in GROUNDED.items():
            if w in grounded:
                return name
    return "function" if all(w in FUNCTION_WORDS for w in words.split()) else "template"


def category(word: str, is_end: bool = False, after: str = "", language: str = "en") -> str:
    """The category of an answer word in `language`; `after` is the answer text following it (it
    tells the option letter A from the article A, and a Chinese yes standing alone)."""
    if is_end:
        return "end"
    if not word:
        return "punctuation"
    if word in ("A", "B", "C", "D") and not (word == "A" and ARTICLE_AFTER.match(after)):
        return "letter"
    lower = word.lower()
    if _is_han(word):
        if word in ALONE and not _is_han(after[:1]):
            return _english_category(ALONE[word])
        return _english_category(glosses("zh").get(word, word))
    if language == "de" and lower in glosses("de"):
        return _english_category(glosses("de")[lower])
    return _english_category(lower)


def is_grounded(cat: str) -> bool:
    return cat in GROUNDED


@dataclass(frozen=True)
class Observation:
    example: int  # which trace of the batch
    index: int  # answer position
    rel: float  # index / answer length, in [0, 1)
    token: str  # the answer's token text at this position
    word: str  # the answer word that token is part of ('' for punctuation and the end)
    category: str
    accepted: bool
    draft: str  # the drafter's token here (the answer's token when accepted)
    draft_word: str  # the word the drafter was writing here: its token plus the drafts after it
    image_attention: float | None = None  # the target's share of attention on the image here, if read
    image_dependent: bool | None = None  # the image at least doubles the target's p here (`ablation.RATIO`), if read


def _label(text: str) -> str:
    """A piece of text as a table shows it: stripped, or quoted when it is only whitespace."""
    return text.strip() or repr(text)


def _chinese_words(run: str) -> list[str]:
    """A run of Han characters cut into the world's Chinese words, longest first from the left;
    a character no word covers is a word of its own."""
    known = glosses("zh")
    longest = max(map(len, known))
    out, k = [], 0
    while k < len(run):
        size = next((n for n in range(min(longest, len(run) - k), 1, -1) if run[k : k + n] in known), 1)
        out.append(run[k : k + size])
        k += size
    return out


def words(text: str) -> list[tuple[int, int]]:
    """The (start, end) of each word of a text, in order: Latin words, and Chinese words cut from a
    run of Han characters (`_chinese_words`)."""
    spans = []
    for m in WORD.finditer(text):
        if not _is_han(m.group()):
            spans.append(m.span())
            continue
        k = m.start()
        for w in _chinese_words(m.group()):
            spans.append((k, k + len(w)))
            k += len(w)
    return spans


def _token_words(trace: Trace) -> list[tuple[str, str, str]]:
    """For each token: the answer word its first letter falls in ('' for none), the part of that
    word before the token (a token can start mid-word), and the answer text after the word."""
    starts, text = [], ""
    for tok in trace.tokens:
        starts.append(len(text))
        text += tok.text
    span_at = {i: (a, b) for a, b in words(text) for i in range(a, b)}
    out = []
    for tok, start in zip(trace.tokens, starts):
        letter = WORD.search(tok.text)
        span = span_at.get(start + letter.start()) if letter else None
        if span is None:
            out.append(("", "", ""))
        else:
            a, b = span
            out.append((text[a:b], text[a:start], text[b:]))
    return out


def token_categories(
    trace: Trace, stop_ids: frozenset[int] = frozenset(), language: str = "en"
) -> list[tuple[str, str]]:
    """(word, category) of every answer token of any trace, autoregressive ones included."""
    return [
        (word, category(word, tok.token_id in stop_ids, after, language))
        for tok, (word, _, after) in zip(trace.tokens, _token_words(trace))
    ]


GERMAN = re.compile(r"[äöüß]|\b(?:ist|der|die|das|ein|eine|einen|und|nicht|auf|im|ja|nein)\b", re.IGNORECASE)


def language_of(text: str) -> str:
    """The world's language an answer is written in, read off its text: Chinese where it has Han
    characters, German where it has German letters or function words, else English."""
    if re.search(f"[{HAN}]", text):
        return "zh"
    return "de" if GERMAN.search(text) else "en"


def at_rejection(trace: Trace, index: int) -> tuple[str, str]:
    """(word, category) of the target's answer at position `index`: what a rejection there is
    about. The answer's language is read off its text (`language_of`); a token that ends the
    answer (an end spelling, or the empty last token of an answer that ended) is the end."""
    last = len(trace.tokens) - 1
    ended = trace.summary is not None and trace.summary.stop == "eos"
    stops = frozenset(
        t.token_id for i, t in enumerate(trace.tokens) if t.text in END_TOKENS or (ended and i == last and not t.text)
    )
    language = language_of("".join(t.text for t in trace.tokens))
    return token_categories(trace, stops, language)[index]


def _drafter_word(prefix: str, drafts: tuple[str, ...], first_is_end: bool) -> str:
    """What the drafter was writing from a rejected draft on: the answer's word so far (prefix)
    continued by its rejected draft and the unchecked drafts after it, up to the word's end (or
    the run of other characters there)."""
    if first_is_end:
        return END
    said = prefix + "".join(drafts)
    first = len(said) - len(said.lstrip())
    word = next((said[a:b] for a, b in words(said) if a == first), None)
    if word:
        return word
    other = re.match(rf"[^\s{LETTERS}{HAN}]+", said[first:])
    return other.group() if other else _label(drafts[0] if drafts else "")


def observations(
    trace: Trace, example: int = 0, stop_ids: frozenset[int] = frozenset(), language: str = "en"
) -> list[Observation]:
    """One observation per drafted-and-checked answer position of a speculative trace, whose
    answer is in `language` ("en", "de" or "zh")."""
    rounds: dict[int, RoundEvent] = {r.index: r for r in trace.rounds}
    n = len(trace.tokens)
    out = []
    for tok, (word, prefix, after) in zip(trace.tokens, _token_words(trace)):
        if tok.kind not in ("accepted", "resampled"):
            continue
        accepted = tok.kind == "accepted"
        is_end = tok.token_id in stop_ids
        if accepted:
            draft, draft_word = tok.text, END if is_end else word or _label(tok.text)
        else:
            draft = tok.rejection.text
            r = rounds.get(tok.round)
            later = r.drafted_texts[r.n_accepted :] if r else (draft,)
            draft_word = _drafter_word(prefix, later, tok.rejection.id in stop_ids)
        out.append(
            Observation(
                example=example,
                index=tok.index,
                rel=tok.index / n,
                token=tok.text,
                word=word,
                category=category(word, is_end, after, language),
                accepted=accepted,
                draft=draft,
                draft_word=draft_word,
                image_attention=trace.image_share(tok.index),
            )
        )
    return out


def by_category(obs: list[Observation]) -> dict[str, dict]:
    """Per category: drafted positions, rejections, rejection rate (categories with data only)."""
    drafted, rejected = Counter(), Counter()
    for o in obs:
        drafted[o.category] += 1
        rejected[o.category] += not o.accepted
    return {
        c: {"drafted": drafted[c], "rejected": rejected[c], "rejection_rate": rejected[c] / drafted[c]}
        for c in CATEGORIES
        if drafted[c]
    }


def grounded_share(obs: list[Observation]) -> dict:
    """How much of the rejecting falls on image-grounded words, against their share of drafting,
    and how often each side is rejected. Undefined ratios are NaN."""

    def ratio(a: int, b: int) -> float:
        return a / b if b else float("nan")

    drafted = len(obs)
    rejected = sum(not o.accepted for o in obs)
    grounded_drafted = sum(is_grounded(o.category) for o in obs)
    grounded_rejected = sum(is_grounded(o.category) and not o.accepted for o in obs)
    return {
        "drafted": drafted,
        "rejected": rejected,
        "grounded_drafted": grounded_drafted,
        "grounded_rejected": grounded_rejected,
        "grounded_share_of_drafted": ratio(grounded_drafted, drafted),
        "grounded_share_of_rejections": ratio(grounded_rejected, rejected),
        "grounded_rejection_rate": ratio(grounded_rejected, grounded_drafted),
        "other_rejection_rate": ratio(rejected - grounded_rejected, drafted - grounded_drafted),
    }


def _key(o: Observation) -> str:
    """The word an observation counts under in `most_rejected` (case folded, letters kept)."""
    if o.category == "end":
        return END
    if o.category == "letter":
        return o.word
    return o.word.lower() if o.word else _label(o.token)


def most_rejected(obs: list[Observation], k: int = 15) -> list[dict]:
    """The k words the target rejected the drafter on most often (ties: the higher rejection
    rate, then alphabetical), each with the three words the drafter most often wrote instead."""
    rejected, drafted, categories = Counter(), Counter(), {}
    instead: dict[str, Counter] = defaultdict(Counter)
    for o in obs:
        key = _key(o)
        drafted[key] += 1
        categories.setdefault(key, o.category)
        if not o.accepted:
            rejected[key] += 1
            instead[key][o.draft_word if o.category == "letter" else o.draft_word.lower()] += 1
    ranked = sorted(rejected, key=lambda w: (-rejected[w], -rejected[w] / drafted[w], w))[:k]
    return [
        {
            "word": w,
            "category": categories[w],
            "rejected": rejected[w],
            "drafted": drafted[w],
            "rejection_rate": rejected[w] / drafted[w],
            "drafter_said": ", ".join(f"{said} ({c})" for said, c in instead[w].most_common(3)),
        }
        for w in ranked
    ]


def by_answer_position(obs: list[Observation], bins: int = 10) -> list[dict]:
    """Rejection rate by where in the answer the position lies (bins of relative position)."""
    drafted, rejected = [0] * bins, [0] * bins
    for o in obs:
        b = min(int(o.rel * bins), bins - 1)
        drafted[b] += 1
        rejected[b] += not o.accepted
    return [
        {"from": i / bins, "to": (i + 1) / bins, "drafted": d, "rejected": r, "rejection_rate": r / d if d else None}
        for i, (d, r) in enumerate(zip(drafted, rejected))
    ]


def summary(obs: list[Observation], k: int = 15, bins: int = 10) -> dict:
    """Every aggregate of one batch: what the report and the app's Analysis tab show."""
    return {
        "by_category": by_category(obs),
        "grounded": grounded_share(obs),
        "most_rejected": most_rejected(obs, k),
        "by_answer_position": by_answer_position(obs, bins),
    }


def rows(obs: list[Observation]) -> list[dict]:
    """Flat rows for CSV/JSON export."""
    return [asdict(o) for o in obs]


def heldout_mix(kinds, n: int, seed: int, languages=("en",)) -> list:
    """n held-out examples of the world, cycling through the task kinds `kinds` in turn; with
    several languages, each example of that mix is asked in each language in turn (the same
    scene, the same task), so the languages share the n as evenly as n allows."""
    base = -(-n // len(languages))  # ceil: examples of the mix needed
    per = -(-base // len(kinds))
    pools = {lang: [heldout_examples(kind, per, seed, language=lang) for kind in kinds] for lang in languages}
    mixed = {lang: [pool[i] for i in range(per) for pool in pools[lang] if i < len(pool)] for lang in languages}
    return [mixed[lang][i] for i in range(base) for lang in languages if i < len(mixed[lang])][:n]
