"""Qualitative error analysis: where, and on which words, the target rejects the drafter.

Pure functions over speculative traces. Every answer position the drafter proposed a token for
is one observation: the target either accepted the draft there, or rejected it and resampled.
Each observation is tagged with the word it falls in and that word's category:

    image-grounded    colour, shape, size, count, position: knowable only from the image
    letter            a multiple-choice answer letter (A-D)
    function          articles, prepositions, pronouns, auxiliaries
    template          any other word (the answer's phrasing: "image", "shows", "answer", ...)
    punctuation       whitespace and punctuation
    end               the end-of-answer token

Positions after a rejection inside a round were never checked, so they are not observations.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass

from demo.events import Trace
from demo.world.scenes import COLOURS, POSITIONS, SHAPES, SIZES
from demo.world.tasks import NUMBERS, plural

GROUNDED = {
    "colour": set(COLOURS),
    "shape": set(SHAPES) | {plural(s) for s in SHAPES},
    "size": set(SIZES),
    "count": set(NUMBERS[1:]) | {"single", "none", "zero"},
    "position": {w for p in POSITIONS for w in p.split()} | {"middle", "corner", "row", "side"},
}
FUNCTION_WORDS = set(
    "a an the of in on at to for with and or but so is are was were be been it its this that these "
    "those there here they them their we you i he she his her as by from into than then which what "
    "where who how all each every other no not yes do does has have had can one".split()
)
CATEGORIES = (*GROUNDED, "letter", "function", "template", "punctuation", "end")
WORD = re.compile(r"[A-Za-z]+")


def category(word: str | None, is_end: bool = False) -> str:
    if is_end:
        return "end"
    if not word:
        return "punctuation"
    if word in "ABCD" and len(word) == 1:
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
    word: str  # the word that token is part of ('' for punctuation and the end)
    category: str
    accepted: bool
    draft: str  # what the drafter proposed here


def _words_of_tokens(trace: Trace) -> list[str]:
    """The word each token falls in, by character offsets into the answer."""
    text, offsets = "", []
    for tok in trace.tokens:
        offsets.append(len(text))
        text += tok.text
    spans = [(m.start(), m.end(), m.group()) for m in WORD.finditer(text)]
    words, j = [], 0
    for tok, start in zip(trace.tokens, offsets):
        # the token's first letter decides; a token with none is punctuation or whitespace
        first = next((start + k for k, ch in enumerate(tok.text) if ch.isalpha()), None)
        while j < len(spans) and first is not None and spans[j][1] <= first:
            j += 1
        words.append(spans[j][2] if first is not None and j < len(spans) and spans[j][0] <= first else "")
    return words


def observations(trace: Trace, example: int = 0, stop_ids: frozenset[int] = frozenset()) -> list[Observation]:
    """One observation per drafted-and-checked answer position of a speculative trace."""
    words = _words_of_tokens(trace)
    n = len(trace.tokens)
    out = []
    for tok, word in zip(trace.tokens, words):
        if tok.kind not in ("accepted", "resampled"):
            continue
        accepted = tok.kind == "accepted"
        is_end = tok.token_id in stop_ids
        out.append(
            Observation(
                example=example,
                index=tok.index,
                rel=tok.index / n,
                token=tok.text,
                word=word,
                category=category(word, is_end),
                accepted=accepted,
                draft=tok.text if accepted else (tok.rejected_text or ""),
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
    """How much of the rejecting falls on image-grounded words, against their share of drafting."""
    grounded = [o for o in obs if is_grounded(o.category)]
    rejections = [o for o in obs if not o.accepted]
    return {
        "grounded_share_of_drafted": len(grounded) / len(obs) if obs else float("nan"),
        "grounded_share_of_rejections": (
            sum(is_grounded(o.category) for o in rejections) / len(rejections) if rejections else float("nan")
        ),
    }


def most_rejected(obs: list[Observation], k: int = 15) -> list[dict]:
    """Words the target rejected the drafter on most often, with what the drafter said instead."""
    rejected, drafted = Counter(), Counter()
    instead: dict[str, Counter] = defaultdict(Counter)
    for o in obs:
        key = o.word or o.token.strip() or repr(o.token)
        drafted[key] += 1
        if not o.accepted:
            rejected[key] += 1
            instead[key][o.draft.strip() or repr(o.draft)] += 1
    rows = []
    for key, n in rejected.most_common(k):
        rows.append(
            {
                "word": key,
                "category": next(o.category for o in obs if (o.word or o.token.strip() or repr(o.token)) == key),
                "rejected": n,
                "drafted": drafted[key],
                "rejection_rate": n / drafted[key],
                "drafter_said": ", ".join(f"{w} ({c})" for w, c in instead[key].most_common(3)),
            }
        )
    return rows


def by_answer_position(obs: list[Observation], bins: int = 10) -> list[dict]:
    """Rejection rate by where in the answer the position lies (deciles of answer length)."""
    drafted, rejected = [0] * bins, [0] * bins
    for o in obs:
        b = min(int(o.rel * bins), bins - 1)
        drafted[b] += 1
        rejected[b] += not o.accepted
    return [
        {"from": i / bins, "to": (i + 1) / bins, "drafted": d, "rejected": r, "rejection_rate": r / d if d else None}
        for i, (d, r) in enumerate(zip(drafted, rejected))
    ]


def rows(obs: list[Observation]) -> list[dict]:
    """Flat rows for CSV/JSON export."""
    return [asdict(o) for o in obs]
