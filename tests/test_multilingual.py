"""The world in three languages: questions and answers, scoring, the grown tokenizer and embeddings.

Fast: pure Python, a tokenizer grown on a small corpus, tiny models. CPU, offline.
"""

import functools
import random

import pytest
import torch

from demo.world import ASSETS, tasks_de, tasks_zh
from demo.world.recipe import FULL, LANGUAGE_MIX
from demo.world.scenes import Obj, Scene
from demo.world.scoring import score
from demo.world.scoring_languages import CHINESE, GERMAN, count_in, pairs_in, position_in
from demo.world.tasks import LANGUAGES, TASKS, Example, corpus, heldout_examples, qa, split_task

OTHER = ("de", "zh")
TRANSLATED = {"de": tasks_de, "zh": tasks_zh}


def _example(task: str, language: str, answer: str, scene: Scene) -> Example:
    return Example(None, "", answer, task, scene, language)


SCENE = Scene((Obj("triangle", "red", "large", 0), Obj("circle", "blue", "small", 4)))


@pytest.mark.parametrize("language", OTHER)
def test_reference_answers_score_right_in_every_language_and_task(language):
    for task in TASKS:
        examples = heldout_examples(task, 40, language=language)
        assert len(examples) == 40 and all(e.language == language for e in examples)
        assert all(score(task, e, e.answer) for e in examples), task


def test_every_language_asks_about_the_same_scenes_in_its_own_words():
    for task in TASKS:
        en, de, zh = (heldout_examples(task, 5, language=lang) for lang in LANGUAGES)
        assert [e.scene for e in en] == [e.scene for e in de] == [e.scene for e in zh]
        assert [e.question for e in en] == [e.question for e in heldout_examples(task, 5)]  # English as before
        assert all(any("\u4e00" <= c <= "\u9fff" for c in e.question + e.answer) for e in zh)
        assert not any(w in e.answer.lower().split() for e in de for w in ("the", "is", "and"))


@pytest.mark.parametrize("language", OTHER)
def test_grounded_words_are_translated(language):
    """The scene's colours and shapes appear in its captions in the language's words."""
    lex = TRANSLATED[language]
    for e in heldout_examples("caption", 30, language=language):
        for o in e.scene.objects:
            assert lex.COLOURS[o.colour][:3].lower() in e.answer.lower()
            assert lex.SHAPES[o.shape] in e.answer


def test_wrong_answers_score_wrong_in_german():
    ex = _example("vqa_colour", "de", "Der Kreis ist blau.", SCENE)
    assert score("vqa_colour", ex, "Der Kreis ist blau hier.")
    assert not score("vqa_colour", ex, "Der Kreis ist rot.")
    assert not score("vqa_colour", ex, "Der Kreis ist blau und rot.")
    caption = _example("caption", "de", "", SCENE)
    assert score(
        "caption", caption, "Oben links, ein großes rotes Dreieck; und in der Mitte, ein kleiner blauer Kreis."
    )
    assert not score("caption", caption, "Oben links, ein rotes Dreieck; und in der Mitte, ein roter Kreis.")
    mc = _example("multiple_choice", "de", "... Die Antwort ist B.", SCENE)
    assert score("multiple_choice", mc, "A. Quadrat: ein Kreis ist kein Quadrat. Die Antwort ist B.")
    assert not score("multiple_choice", mc, "Die Antwort ist C.")
    yes = _example("vqa_yesno", "de", "Nein.", SCENE)
    assert score("vqa_yesno", yes, "Nein, es gibt kein rotes Quadrat.") and not score("vqa_yesno", yes, "Ja.")


def test_chinese_scoring_reads_words_without_spaces():
    assert count_in(CHINESE, "三角形有两个。") == 2  # the three in 三角形 is a shape's
    assert count_in(CHINESE, "图中没有十字形。") == 0
    assert position_in(CHINESE, "红色圆形在正中央。") == 4 and position_in(CHINESE, "在上方中间") == 1
    assert pairs_in(CHINESE, "左上角有一个大的红色三角形；中央有一个蓝色圆形。") == {
        ("red", "triangle"): 1,
        ("blue", "circle"): 1,
    }
    assert pairs_in(GERMAN, "ein großes oranges Quadrat und ein violetter Kreis") == {
        ("orange", "square"): 1,
        ("purple", "circle"): 1,
    }
    mc = _example("multiple_choice", "zh", "……答案：B。", SCENE)
    assert score("multiple_choice", mc, "A. 正方形：圆形不是正方形。B. 圆形：圆形是圆形。答案：B。")
    assert not score("multiple_choice", mc, "答案：A。")
    no = _example("vqa_yesno", "zh", "没有。", SCENE)
    assert score("vqa_yesno", no, "没有，图中没有绿色正方形。") and not score("vqa_yesno", no, "有。")


def test_german_adjectives_agree_with_their_noun():
    circle, square = Obj("circle", "orange", "large", 0), Obj("square", "red", "small", 0)
    assert tasks_de.indefinite(circle) == "ein großer oranger Kreis"
    assert tasks_de.indefinite(square) == "ein kleines rotes Quadrat"
    assert tasks_de.indefinite(circle, size=False, accusative=True) == "einen orangen Kreis"
    assert tasks_de.definite(square) == "das rote Quadrat"


def test_multiple_choice_keeps_its_layout_in_every_language():
    rng = random.Random(3)
    de_q, de_a = qa("de/multiple_choice", SCENE, rng)
    zh_q, zh_a = qa("zh/multiple_choice", SCENE, rng)
    assert "\nOptionen: A. " in de_q and de_a.endswith(tuple(f"Die Antwort ist {x}." for x in "ABCD"))
    assert "\n选项：A. " in zh_q and zh_a.endswith(tuple(f"答案：{x}。" for x in "ABCD"))
    assert (
        tasks_zh.checks(["正方形", "圆形", "三角形", "十字形"], "B")
        == "A. 正方形：圆形不是正方形。B. 圆形：圆形是圆形。"
    )


def test_task_keys_name_their_language():
    assert split_task("caption") == ("en", "caption") and split_task("zh/vqa_count") == ("zh", "vqa_count")
    with pytest.raises(ValueError):
        split_task("fr/caption")
    shares = {lang: sum(v for k, v in LANGUAGE_MIX.items() if split_task(k)[0] == lang) for lang in LANGUAGES}
    assert shares == pytest.approx({"en": 1 / 3, "de": 1 / 3, "zh": 1 / 3})


@functools.cache
def _grown():
    from transformers import AutoTokenizer

    from demo.world.text import extend_tokenizer

    english = AutoTokenizer.from_pretrained(ASSETS / "drafter-text")
    texts = corpus(40, 0, "de") + corpus(40, 0, "zh")
    return english, extend_tokenizer(english, texts, 96, corpus(40, 0))


def test_grown_tokenizer_keeps_english_as_it_was_and_shortens_the_new_languages():
    english, grown = _grown()
    assert len(grown) == len(english) + 96
    assert all(grown.convert_ids_to_tokens(i) == english.convert_ids_to_tokens(i) for i in range(len(english)))
    for text in corpus(60, 1):  # other English texts than the ones it was kept on
        assert grown(text)["input_ids"] == english(text)["input_ids"]
    for language in ("zh", "de"):
        texts = corpus(5, 1, language)
        assert all(grown.decode(grown(text)["input_ids"]) == text for text in texts)
        lengths = [(len(grown(t)["input_ids"]), len(english(t)["input_ids"])) for t in texts]
        assert all(a <= b for a, b in lengths) and sum(a for a, _ in lengths) < 0.8 * sum(b for _, b in lengths)


def test_grown_embeddings_start_at_the_mean_of_their_pieces():
    from demo.world.models import build
    from demo.world.multilingual import grow_embeddings

    english, grown = _grown()
    torch.manual_seed(0)
    model = build("drafter-text", english)
    before = model.get_input_embeddings().weight.detach().clone()
    grow_embeddings(model, english, grown)
    after = model.get_input_embeddings().weight
    assert after.shape[0] == len(grown) and torch.equal(after[: len(english)], before)
    assert model.lm_head.weight.data_ptr() == after.data_ptr()  # still tied
    token = len(english) + 5
    pieces = english(grown.decode([token]), add_special_tokens=False)["input_ids"]
    if grown.decode([token]).isprintable() and "\ufffd" not in grown.decode([token]):
        assert torch.allclose(after[token], before[pieces].mean(0))


def test_language_drafters_are_at_most_a_tenth_of_the_target():
    from demo.world.models import build

    _, grown = _grown()
    target = sum(p.numel() for p in build("target", grown).parameters())
    drafter = sum(p.numel() for p in build("drafter-text", grown).parameters())
    assert drafter * 10 <= target
    assert set(FULL.language_drafters) == {"multilingual", "de", "zh"}
    assert FULL.language_drafters["multilingual"].languages == LANGUAGES
    assert all(FULL.language_drafters[lang].languages == (lang,) for lang in OTHER)
