"""Every shipped example holds: the target alone, greedy, within the page's default budget, answers
each example of the gallery right, in every language the world speaks, and in the question's
language.

"Right" is the world's own scoring (`demo.world.scoring` for English, `scoring_languages` for
German and Chinese) against the held-out example the gallery wrote the entry from
(`demo.world.gallery.picked`), and every fact sentence of a description or caption (counts, sizes,
colours, places) must be one the world states of that scene (`gallery.states_only_true_facts`:
the world's scoring reads a description's place, colour and shape triples only, issue 53), and a
description must state every one the world always states (`gallery.describes_in_full`: each
shape, the count, the sizes and the colours, not one caption-like sentence); the answer must end
(not be cut by the budget), and an English or German answer may hold no Chinese character and no
U+FFFD.

Each language shows its own description scene (English number 88, German 250, Chinese 286;
`gallery.PICKS`): no scene was found that the target describes right in every sentence in all
three, each language leaning to its own wrong size sentence (docs/world-languages.md). Chinese
descriptions are the one known exception to the last rule: the shipped target spells the rarer
characters of their closing sentence in byte pieces it learnt poorly (docs/world-languages.md
measures it), so their text holds U+FFFD; the test says so exactly, and fails the day that
changes.
"""

from __future__ import annotations

import re

import pytest
import races
from PIL import Image

from demo.page.examples import load_examples
from demo.session.request import DEFAULTS
from demo.world import scoring
from demo.world.gallery import PER_TASK, PICKS, describes_in_full, picked, states_only_true_facts
from demo.world.tasks import LANGUAGES

pytestmark = pytest.mark.slow

HAN = re.compile("[\u4e00-\u9fff]")
GARBLED = {("zh", "description")}  # known: byte pieces of rare characters (module docstring)


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
    assert len(rows) == len(LANGUAGES) * sum(PER_TASK.values())
    for _, entry, example in rows:  # the shipped entry is the picked example, word for word, on its scene's image
        assert (entry.question, entry.answer) == (example.question, example.answer)
        with Image.open(entry.image) as image:
            assert image.convert("RGB").tobytes() == example.image.convert("RGB").tobytes()


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
        score = scoring.score
        problems = []
        if not score(entry.task, example, answer):
            problems.append("wrong")
        elif not states_only_true_facts(entry.task, example, answer):
            problems.append("a fact wrong")
        elif not describes_in_full(entry.task, example, answer):
            problems.append("not in full")
        if trace.summary.stop != "eos":
            problems.append("cut by the budget")
        if language != "zh" and HAN.search(answer):
            problems.append("slid into Chinese")
        if ("\ufffd" in answer) != ((language, entry.task) in GARBLED):
            problems.append("U+FFFD" if "\ufffd" in answer else "no longer garbled: update GARBLED and the docs")
        if problems:
            wrong.append((entry.image.rsplit("/", 1)[-1], entry.task, problems, answer))
    assert wrong == []


def test_the_page_shows_each_languages_own_description_image_and_thumbnails_when_the_language_changes():
    from demo.page import server

    fns = {f.name: f.fn for f in server.build_demo().fns.values()}
    asked_again, thumbnails = fns["on_example_language"], fns["thumbnails"]
    for language in LANGUAGES:
        entries = load_examples(language=language)
        description = next(i for i, e in enumerate(entries) if e.task == "description")
        caption = next(i for i, e in enumerate(entries) if e.task == "caption")
        question, _, image = asked_again(language, description)
        assert (question, image) == (entries[description].question, entries[description].image)
        assert image.endswith("description-0.png" if language == "en" else f"description-0-{language}.png")
        assert asked_again(language, caption)[2] == {"__type__": "update"}  # the same scene: the image stays
        shown = [item["image"]["orig_name"] for item in thumbnails(language).value]
        assert shown == [e.image.rsplit("/", 1)[-1] for e in entries]
