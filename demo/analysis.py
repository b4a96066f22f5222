"""Qualitative error analysis: where, and on which words, the target rejects the drafter.

Pure functions over speculative traces. Every answer position the drafter proposed a token for
is one observation: the target either accepted the draft there, or rejected it and resampled.
Each observation is tagged with the answer word it falls in and that word's category:

    image-grounded    colour, shape, size, count, position, yes/no: knowable only from the image
    letter            a multiple-choice option letter (A-D)
    function          articles, prepositions, pronouns, auxiliaries
    template          any other word (the answer's phrasing: "image", "shows", "answer", ...)
    punctuation       whitespace and punctuation
    end               the end-of-answer token

The category is the answer's (the target's) word at that position: a rejection on a colour word
means the drafter proposed something else where the target wrote a colour.
Positions after a rejection inside a round were never checked, so they are not observations;
the drafts there still tell what the drafter was writing (`Observation.draft_word`).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass

from demo.engine.events import RoundEvent, Trace
from demo.world.scenes import COLOURS, POSITION_PHRASES, POSITIONS, SHAPES, SIZES
from demo.world.tasks import NUMBERS, heldout_examples, plural

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
WORD = re.compile(r"[A-Za-z]+")
ARTICLE_AFTER = re.compile(r"\s+(?!says\b)[a-z]")  # "A simple drawing": an article, not option A
END = "(end)"  # how the end-of-answer token is named in tables


def category(word: str, is_end: bool = False, after: str = "") -> str:
    """The category of an answer word; `after` is the answer text following it (it tells the
    option letter A from the article A)."""
    if is_end:
        return "end"
    if not word:
        return "punctuation"
    if word in ("A", "B", "C", "D") and not (word == "A" and ARTICLE_AFTER.match(after)):
        return "letter"
    lower = word.lower()
    for name, words in GROUNDED.items():
        if lower in words:
            return name
    return "function" if lower in FUNCTION_WORDS else "template"


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


def _label(text: str) -> str:
    """A piece of text as a table shows it: stripped, or quoted when it is only whitespace."""
    return text.strip() or repr(text)


def _token_words(trace: Trace) -> list[tuple[str, str, str]]:
    """For each token: the answer word its first letter falls in ('' for none), the part of that
    word before the token (a token can start mid-word), and the answer text after the word."""
    starts, text = [], ""
    for tok in trace.tokens:
        starts.append(len(text))
        text += tok.text
    span_at = {i: m for m in WORD.finditer(text) for i in range(m.start(), m.end())}
    out = []
    for tok, start in zip(trace.tokens, starts):
        letter = WORD.search(tok.text)
        span = span_at.get(start + letter.start()) if letter else None
        if span is None:
            out.append(("", "", ""))
        else:
            out.append((span.group(), text[span.start() : start], text[span.end() :]))
    return out


def _drafter_word(prefix: str, drafts: tuple[str, ...], first_is_end: bool) -> str:
    """What the drafter was writing from a rejected draft on: the answer's word so far (prefix)
    continued by its rejected draft and the unchecked drafts after it, up to the word's end."""
    if first_is_end:
        return END
    said = prefix + "".join(drafts)
    match = re.match(r"\s*([A-Za-z]+|[^\sA-Za-z]+)", said)
    return match.group(1) if match else _label(drafts[0] if drafts else "")


def observations(trace: Trace, example: int = 0, stop_ids: frozenset[int] = frozenset()) -> list[Observation]:
    """One observation per drafted-and-checked answer position of a speculative trace."""
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
                category=category(word, is_end, after),
                accepted=accepted,
                draft=draft,
                draft_word=draft_word,
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


def heldout_mix(kinds, n: int, seed: int) -> list:
    """n held-out examples of the world, cycling through the task kinds `kinds` in turn."""
    per = -(-n // len(kinds))  # ceil
    pools = [heldout_examples(kind, per, seed) for kind in kinds]
    return [pool[i] for i in range(per) for pool in pools if i < len(pool)][:n]
