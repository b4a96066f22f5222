"""Every shipped example holds: the target alone, greedy, within the page's default budget, answers
each example of the gallery right, in every language the world speaks, and in the question's
language.

"Right" is the world's own scoring (`demo.world.scoring` for English, `scoring_languages` for
German and Chinese) against the held-out example the gallery wrote the entry from
(`demo.world.gallery.picked`), and every fact sentence of a description or caption (counts, sizes,
colours, places) must be one the world states of that scene (`gallery.states_only_true_facts`:
the world's scoring reads a description's place, colour and shape triples only, issue 53); the
answer must end (not be cut by the budget), and an English or
German answer may hold no Chinese character and no U+FFFD. Chinese descriptions are the one
known exception to the last: the shipped target spells the rarer characters of their closing
sentence in byte pieces it learnt poorly (docs/world-languages.md measures it), so their text
holds U+FFFD; the test says so exactly, and fails the day that changes.

The description is the other known exception, in every language: its triples are right, and its
size sentence is not ("One of them is large and two are small" of two large shapes; German and
Chinese alike). No held-out scene was found whose description the shipped target states right in
every sentence in all three languages (issue 53, measured 2026-12-05 with batched greedy
generation: 1 of the first 32 one-shape scenes and 0 of 32 three-shape scenes of one large and two
small shapes right in English alone; the one, number 22, raced again: wrong in German and Chinese;
then 3 of 24 two-shape scenes of one large and one small right in English, none in German; 0 of 62
one-shape and 4 of 72 two-small-shape scenes right in German, none in English; English leans to
"One of them is large and ... small", German to "Alle ... Formen sind klein": docs/world-languages.md).
The test says so exactly, and fails the day that changes.
"""

from __future__ import annotations

import re

import pytest
import races
from PIL import Image

from demo.page.examples import load_examples
from demo.session.request import DEFAULTS
from demo.world import scoring, scoring_languages
from demo.world.gallery import PICKS, picked, states_only_true_facts
from demo.world.tasks import LANGUAGES

pytestmark = pytest.mark.slow

HAN = re.compile("[\u4e00-\u9fff]")
GARBLED = {("zh", "description")}  # known: byte pieces of rare characters (module docstring)
WRONG_FACTS = {"description"}  # known: a wrong size sentence in every language (module docstring)


def shipped() -> list[tuple[str, object, object]]:
    """(language, shipped entry, the held-out example it was written from) for every example."""
    out = []
    for language in LANGUAGES:
        written = {task: picked(task, language) for task in PICKS}
        seen = dict.fromkeys(PICKS, 0)
        for entry in load_examples(language=language):
            example = written[entry.task][seen[entry.task]]
            seen[entry.task] += 1
            out.append((language, entry, example))
    return out


def test_the_gallery_ships_every_picked_example_in_every_language():
    rows = shipped()
    assert len(rows) == len(LANGUAGES) * sum(len(p) for p in PICKS.values())
    for _, entry, example in rows:  # the shipped entry is the picked example, word for word
        assert (entry.question, entry.answer) == (example.question, example.answer)


@pytest.fixture(scope="module")
def world():
    from demo.models import loader

    return loader.load("embedded")


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_shipped_example_gets_a_right_answer_from_the_target(world, language):
    wrong = []
    for lang, entry, example in shipped():
        if lang != language:
            continue
        with Image.open(entry.image) as image:
            trace = races.ar(world, image.convert("RGB"), entry.question, max_new=DEFAULTS["max_new_tokens"])
        answer = trace.summary.text
        score = scoring.score if language == "en" else scoring_languages.score
        problems = []
        if not score(entry.task, example, answer):
            problems.append("wrong")
        elif states_only_true_facts(entry.task, example, answer) == (entry.task in WRONG_FACTS):
            problems.append(
                "no longer a wrong fact: update WRONG_FACTS" if entry.task in WRONG_FACTS else "a fact wrong"
            )
        if trace.summary.stop != "eos":
            problems.append("cut by the budget")
        if language != "zh" and HAN.search(answer):
            problems.append("slid into Chinese")
        if ("\ufffd" in answer) != ((language, entry.task) in GARBLED):
            problems.append("U+FFFD" if "\ufffd" in answer else "no longer garbled: update GARBLED and the docs")
        if problems:
            wrong.append((entry.image.rsplit("/", 1)[-1], entry.task, problems, answer))
    assert wrong == []
