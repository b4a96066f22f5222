"""A question's language, and the drafter its race uses by default (demo/session/languages.py). Pure Python, fast."""

from pathlib import Path

import pytest

from demo.session.languages import MULTILINGUAL, SPECIALISED, detect, pick
from demo.world.tasks import LANGUAGES, TASKS, heldout_examples

EMBEDDED = ("text-only", "image-aware", "multilingual", "german", "chinese")


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_held_out_question_of_the_world_is_told_in_its_language(language):
    for task in TASKS:
        for e in heldout_examples(task, 60, language=language):
            assert detect(e.question).language == language, e.question


@pytest.mark.parametrize(
    "question, language, found",
    [
        ("What Farbe is the Kreis?", "mixed", ("en", "de")),
        ("这个 circle 是什么颜色？", "mixed", ("en", "zh")),
        ("What colour is the circle? 圆形是什么颜色？", "mixed", ("en", "zh")),
        ("Welche Farbe hat der Kreis? 圆形", "mixed", ("de", "zh")),
        ("Quelle est la couleur du cercle ?", "unknown", ()),
        ("¿De qué color es el círculo?", "unknown", ()),
        ("Welke kleur heeft de cirkel?", "unknown", ()),
        ("Какого цвета круг?", "unknown", ()),
        ("円は何色ですか？", "unknown", ()),  # Han beside kana: Japanese
        ("", "unknown", ()),
        ("1 2 3 ?", "unknown", ()),
        ("Tell me about it", "en", ("en",)),
        ("Gibt es hier etwas Ungewöhnliches?", "de", ("de",)),
        ("Welche Form ist orange?", "de", ("de",)),  # "orange" is both languages' word
        ("有几个图形？", "zh", ("zh",)),
    ],
)
@pytest.mark.fast
def test_mixed_and_unknown_questions_are_told_apart(question, language, found):
    d = detect(question)
    assert (d.language, d.found) == (language, found)


@pytest.mark.fast
def test_each_language_picks_its_specialised_drafter_and_says_so():
    assert pick("What colour is the circle?", EMBEDDED, "text-only").drafter == "text-only"
    german = pick("Welche Farbe hat der Kreis?", EMBEDDED, "text-only")
    assert german.drafter == SPECIALISED["de"] == "german"
    assert german.reason == "The question is in German, so the German drafter drafts."
    chinese = pick("圆形是什么颜色？", EMBEDDED, "text-only")
    assert (chinese.drafter, chinese.reason) == (
        "chinese",
        "The question is in Chinese, so the Chinese drafter drafts.",
    )
    english = pick("What colour is the circle?", EMBEDDED, "text-only")
    assert english.reason == "The question is in English, so the English text-only drafter drafts."


@pytest.mark.fast
def test_mixed_and_unknown_questions_get_the_multilingual_drafter_with_the_reason():
    mixed = pick("这个 circle 是什么颜色？", EMBEDDED, "text-only")
    assert mixed.drafter == MULTILINGUAL
    assert mixed.reason.startswith("The question mixes English and Chinese, so the multilingual drafter drafts")
    assert "The target answers it all the same" in mixed.reason
    unknown = pick("Quelle est la couleur du cercle ?", EMBEDDED, "text-only")
    assert unknown.drafter == MULTILINGUAL
    assert unknown.reason.startswith("The question is in none of English, German and Chinese")


@pytest.mark.fast
def test_a_preset_without_the_language_drafters_keeps_its_default_and_says_why():
    hub = ("vicuna-68m",)
    german = pick("Welche Farbe hat der Kreis?", hub, "vicuna-68m")
    assert german.drafter == "vicuna-68m"
    assert german.reason == "The question is in German, but this preset has no German drafter, so vicuna-68m drafts."
    assert pick("Quelle couleur ?", hub, "vicuna-68m").drafter == "vicuna-68m"
    no_german = pick("Welche Farbe hat der Kreis?", ("text-only", "multilingual"), "text-only")
    assert no_german.drafter == MULTILINGUAL and "no German drafter" in no_german.reason


@pytest.fixture
def languages_preset(tmp_path):
    """A preset of a world that holds every drafter stage 12 saves (the directory's names are
    what the preset reads; nothing is loaded)."""
    from demo.models import presets

    for _, _, sub in presets.WORLD_DRAFTERS:
        (tmp_path / sub).mkdir()
    name = "world-in-three-languages"
    presets.PRESETS[name] = presets.Preset(name, str(tmp_path / "target"), presets.world_drafters(tmp_path))
    yield name
    presets.PRESETS.pop(name)


@pytest.mark.fast
def test_the_page_picks_a_drafter_once_per_language_and_says_why_except_in_english(languages_preset):
    from demo.session.offers import for_language

    world = languages_preset
    # English, the language the page starts in: nothing changes, a drafter picked by hand stays
    assert for_language("What colour is the circle?", world, "image-aware", "en") is None
    # German: its own drafter, and the page says why
    german = for_language("Welche Farbe hat der Kreis?", world, "image-aware", "en")
    assert (german.drafter, german.language) == ("german", "de")
    assert german.note == "The question is in German, so the German drafter drafts."
    assert for_language("Welche Farbe hat das Quadrat?", world, "text-only", "de") is None  # same language
    chinese = for_language("圆形是什么颜色？", world, "german", "de")
    assert (chinese.drafter, chinese.note) == ("chinese", "The question is in Chinese, so the Chinese drafter drafts.")
    # back to English: its drafter, and no note
    back = for_language("What colour is it?", world, "chinese", "zh")
    assert (back.drafter, back.note, back.language) == ("text-only", "", "en")
    # a question being typed is no language yet; one in another language is, from three words on
    assert for_language("Wh", world, "text-only", "en") is None
    assert for_language("Quelle couleur ?", world, "text-only", "en") is None
    french = for_language("Quelle est la couleur ?", world, "text-only", "en")
    assert french.language == "unknown" and french.drafter == "multilingual"
    assert french.note.startswith("The question is in none of English, German and Chinese, so the multilingual drafter")


@pytest.mark.fast
def test_a_preset_without_a_drafter_for_the_language_keeps_the_pick_and_says_why():
    from demo.session.offers import for_language

    hub = for_language("Welche Farbe hat der Kreis?", "smolvlm-500m", "smollm2-135m", "en")
    assert (hub.drafter, hub.language) == ("smollm2-135m", "de")
    assert hub.note == "The question is in German, but this preset has no German drafter, so smollm2-135m drafts."
    french = for_language("Quelle est la couleur ?", "smolvlm-500m", "smollm2-135m", "en")
    assert french.drafter == "smollm2-135m"
    assert french.note.startswith("The question is in none of English, German and Chinese, and this preset")


@pytest.mark.fast
def test_a_world_speaks_english_and_each_language_whose_drafter_stage_12_saved_beside_its_target(tmp_path):
    from demo.models.presets import world_drafters, world_languages

    for sub in ("target", "drafter-text", "drafter-image"):
        (tmp_path / sub).mkdir()
    assert world_languages(tmp_path) == ("en",)
    assert [d.name for d in world_drafters(tmp_path)] == ["text-only", "image-aware"]
    for sub in ("drafter-multilingual", "drafter-zh", "drafter-de"):
        (tmp_path / sub).mkdir()
    assert world_languages(tmp_path) == ("en", "de", "zh")
    assert [(d.name, d.kind, Path(d.path).name) for d in world_drafters(tmp_path)] == [
        ("text-only", "text-only", "drafter-text"),
        ("image-aware", "image-aware", "drafter-image"),
        ("multilingual", "text-only", "drafter-multilingual"),
        ("german", "text-only", "drafter-de"),
        ("chinese", "text-only", "drafter-zh"),
    ]


def test_the_page_examples_are_the_same_scenes_in_each_language_but_the_description_and_each_finds_its_reference(
    tmp_path,
):
    from demo.page.examples import load_examples, reference_for
    from demo.world.gallery import write_examples

    write_examples(tmp_path)
    english, german, chinese = (load_examples(tmp_path, lang) for lang in LANGUAGES)
    assert len(english) == len(german) == len(chinese) > 0
    for e, d, z in zip(english, german, chinese):
        assert e.task == d.task == z.task
        own = e.task == "description"  # each language describes its own scene (demo.world.gallery.PICKS)
        assert (len({e.image, d.image, z.image}) == 3) if own else (e.image == d.image == z.image)
        assert (e.language, d.language, z.language) == LANGUAGES
        assert detect(d.question).language == "de" and detect(z.question).language == "zh"
        assert reference_for(d.image, d.question, tmp_path) == d.answer != e.answer
    assert reference_for(english[0].image, german[1].question, tmp_path) is None  # another scene's question
    assert load_examples(tmp_path / "nowhere", "de") == []
