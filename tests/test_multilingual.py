"""The world in three languages: questions and answers, scoring, the grown tokenizer and embeddings.

Fast: pure Python, a tokenizer grown on a small corpus, tiny models. CPU, offline.
"""

import functools
import random

import pytest
import torch

from demo.lab.training.recipe import FULL, LANGUAGE_MIX
from demo.world import ASSETS, phrasing, tasks_de, tasks_zh
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
    no = _example("vqa_yesno", "zh", "没有。", SCENE)
    assert score("vqa_yesno", no, "没有，图中没有绿色正方形。") and not score("vqa_yesno", no, "有。")
    mc = _example("multiple_choice", "zh", "……答案：B。", SCENE)
    assert score("multiple_choice", mc, "A. 正方形：圆形不是正方形。B. 圆形：圆形是圆形。答案：B。")
    assert not score("multiple_choice", mc, "答案：A。")


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
        phrasing.checks(tasks_zh, "shape", ["正方形", "圆形", "三角形", "十字形"], "B")
        == "A. 正方形：圆形不是正方形。B. 圆形：圆形是圆形。"
    )


def test_task_keys_name_their_language():
    assert split_task("caption") == ("en", "caption") and split_task("zh/vqa_count") == ("zh", "vqa_count")
    with pytest.raises(ValueError):
        split_task("fr/caption")
    shares = {lang: sum(v for k, v in LANGUAGE_MIX.items() if split_task(k)[0] == lang) for lang in LANGUAGES}
    assert shares == pytest.approx({"en": 0, "de": 1 / 2, "zh": 1 / 2})  # English comes in batches of its own


@functools.cache
def _grown():
    from transformers import AutoTokenizer

    from demo.lab.training.tokenization import extend_tokenizer

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
    from demo.lab.training.models import build
    from demo.lab.training.new_tokens import grow_embeddings

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
    from demo.lab.training.models import build

    _, grown = _grown()
    target = sum(p.numel() for p in build("target", grown).parameters())
    drafter = sum(p.numel() for p in build("drafter-text", grown).parameters())
    assert drafter * 10 <= target
    assert set(FULL.language_drafters) == {"multilingual", "de", "zh"}
    assert FULL.language_drafters["multilingual"].languages == LANGUAGES
    assert all(FULL.language_drafters[lang].languages == (lang,) for lang in OTHER)


def test_translated_words_start_from_their_english_rows_each_language_with_its_own_direction():
    from demo.lab.training.models import build
    from demo.lab.training.new_tokens import TRANSLATED_SCALE, grow_embeddings, token_language
    from demo.world import translation

    english, grown = _grown()
    lexicons = translation.lexicon("de") | translation.lexicon("zh")
    torch.manual_seed(0)
    plain, offset = build("drafter-text", english), build("drafter-text", english)
    offset.load_state_dict(plain.state_dict())
    before = plain.get_input_embeddings().weight.detach().clone()
    directions = {"de": torch.eye(128)[3], "zh": torch.eye(128)[7]}
    grow_embeddings(plain, english, grown, lexicons)
    grow_embeddings(offset, english, grown, lexicons, offset=0.5, directions=directions)
    rows, shifted = plain.get_input_embeddings().weight, offset.get_input_embeddings().weight
    translated = {}  # a new token of each language that spells a word of the lexicon
    for i in range(len(english), len(grown)):
        text = grown.decode([i])
        if text.strip().lower() in lexicons:
            translated.setdefault(token_language(text), (i, lexicons[text.strip().lower()]))
    assert set(translated) == {"de", "zh"}
    for i, meaning in translated.values():
        old = english(" " + meaning, add_special_tokens=False)["input_ids"]
        assert torch.allclose(rows[i], TRANSLATED_SCALE * before[old].mean(0))
    assert (token_language(" rot"), token_language("红色"), token_language("。")) == ("de", "zh", "zh")
    norm = before.norm(dim=1).mean()
    for language, (i, _) in translated.items():
        assert torch.allclose(shifted[i] - rows[i], 0.5 * norm * directions[language], atol=1e-6)
    # the English argmax stays English: the English word outscores its translation where it scores above zero
    i, meaning = translated["de"]
    old = english(" " + meaning, add_special_tokens=False)["input_ids"]
    hidden = before[old].mean(0)
    assert hidden @ rows[old].mean(0) > hidden @ rows[i]


def test_quiet_directions_leave_every_english_answer_token_the_targets_argmax():
    """Grown from an English LLaVA of the shipped world (the image-aware drafter: stage 10 grows
    the target itself, and the drafter keeps the English vocabulary) with every word of the lexicon
    translated and the languages' directions added, no new token outscores the English one at any
    English answer position."""
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    from demo.lab.training.data import ScenePool, item_batch, sample_items
    from demo.lab.training.new_tokens import grow_embeddings, quiet_directions
    from demo.lab.training.recipe import ENGLISH_KEEP
    from demo.world import translation

    english, grown = _grown()
    processor = AutoProcessor.from_pretrained(ASSETS / "drafter-image")
    llava = LlavaForConditionalGeneration.from_pretrained(ASSETS / "drafter-image", dtype=torch.float32)
    pool = ScenePool.build("train", 48, 3, processor)
    items = sample_items(pool, ENGLISH_KEEP, 24, 5)
    batches = [item_batch(pool, english, items[i : i + 12]) for i in (0, 12)]
    directions = quiet_directions(llava, batches)
    assert (
        torch.allclose(directions["de"].norm(), torch.tensor(1.0)) and abs(directions["de"] @ directions["zh"]) < 1e-5
    )
    with torch.no_grad():
        before = [llava(**{k: v for k, v in b.items() if k != "scenes"}).logits.argmax(-1) for b in batches]
        lexicons = translation.lexicon("de", True) | translation.lexicon("zh", True)
        grow_embeddings(llava, english, grown, lexicons, 0.5, directions)
        after = [llava(**{k: v for k, v in b.items() if k != "scenes"}).logits.argmax(-1) for b in batches]
    for b, x, y in zip(batches, before, after):
        answer = b["labels"][:, 1:] != -100
        assert torch.equal(x[:, :-1][answer], y[:, :-1][answer])


def test_stage_ten_keeps_the_english_targets_right_answers_and_the_worlds_answer_for_its_wrong_ones():
    """Taught by a teacher that is often wrong (the image-aware drafter, an English LLaVA: colour
    60%, count 42%), each question goes to one set in order: the teacher's greedy answer where it
    scores right, else the world's answer, token for token."""
    from dataclasses import replace

    from transformers import AutoProcessor, LlavaForConditionalGeneration

    from demo.lab.training.data import ScenePool, encode, sample_items
    from demo.lab.training.multilingual import english_answers
    from demo.lab.training.stage_tools import World

    english, _ = _grown()
    processor = AutoProcessor.from_pretrained(ASSETS / "drafter-image")
    teacher = LlavaForConditionalGeneration.from_pretrained(ASSETS / "drafter-image", dtype=torch.float32).eval()
    pool = ScenePool.build("train", 48, 3, processor)
    c, mix = replace(FULL.languages, english_items=16), {"vqa_colour": 1.0, "vqa_count": 1.0}
    kept, corrected = english_answers(World(english, processor, pool), teacher, english, c, 0, mix)
    assert kept.tasks and corrected.tasks  # this teacher is right on some and wrong on others
    eos, k, r = english.eos_token_id, 0, 0
    for it in sample_items(pool, mix, 16, c.english_seed):
        prompt = encode(english, it.question, None)[0]
        example = Example(None, it.question, it.answer, it.task, pool.scenes[it.scene])
        world_answer = english(it.answer, add_special_tokens=False)["input_ids"] + [eos]
        if r < len(corrected.tasks) and (corrected.scenes[r], corrected.prompts[r]) == (it.scene, prompt):
            assert corrected.answers[r] == world_answer and corrected.tasks[r] == it.task
            r += 1
        else:
            assert (kept.scenes[k], kept.prompts[k], kept.tasks[k]) == (it.scene, prompt, it.task)
            assert kept.answers[k][-1] == eos and score(it.task, example, english.decode(kept.answers[k][:-1]))
            k += 1
    assert (k, r) == (len(kept.tasks), len(corrected.tasks))


def test_lookup_facts_in_other_languages_state_the_scene():
    from demo.world import translation

    rng = random.Random(0)
    de = translation.facts(SCENE, rng, "de", verify=True)
    zh = translation.facts(SCENE, rng, "zh", verify=True)
    assert ("", "Dreieck ist rot.") in de and ("", "oben links ist rot.") in de and ("", "blau ist Kreis.") in de
    assert ("", "三角形是红色。") in zh and ("", "中央是蓝色。") in zh and ("", "蓝色是圆形。") in zh
    assert ("ist der Kreis blau?", "ja.") in de and ("圆形是蓝色吗？", "是。") in zh
    assert (
        sum(a in ("nein.", "不是。", "没有。") for _, a in de + zh) == 6
    )  # per language a wrong colour per object, an absent pair
    assert translation.lexicon("de")["roter"] == "red" and translation.lexicon("zh")["左上角"] == "top left"


def test_only_the_new_rows_learn_beside_the_body_at_its_own_rate():
    from demo.lab.training.fit import fit
    from demo.lab.training.models import build
    from demo.lab.training.new_tokens import grow_embeddings, new_rows_only

    english, grown = _grown()
    torch.manual_seed(0)
    target = build("target", english)
    grow_embeddings(target, english, grown)
    before = {k: v.detach().clone() for k, v in target.named_parameters()}
    groups, handle = new_rows_only(target, len(english), embedding_scale=10.0)
    ids = torch.tensor([[len(english) + 3, 5, len(english) + 7, 9]])
    fit(groups, 3, 1e-3, lambda s: target.model.language_model(input_ids=ids).last_hidden_state.pow(2).mean(), "test")
    handle.remove()
    emb = target.get_input_embeddings().weight
    assert torch.equal(emb[: len(english)], before["model.language_model.embed_tokens.weight"][: len(english)])
    assert not torch.equal(emb[len(english) :], before["model.language_model.embed_tokens.weight"][len(english) :])
    assert not torch.equal(
        target.model.language_model.layers[0].mlp.up_proj.weight,
        before["model.language_model.layers.0.mlp.up_proj.weight"],
    )
    now = dict(target.named_parameters())
    tower = [k for k in before if k.startswith("model.vision_tower")]
    assert tower and all(torch.equal(now[k], before[k]) for k in tower)  # frozen


def test_agreement_reads_ids_past_a_drafters_vocabulary_as_unknown_and_never_right():
    """An English drafter (512 ids) beside the target grown for German and Chinese: the ids it
    lacks are read as <unk> (0), and where the target wrote one the drafter is never right."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from demo.lab.training.evaluate import agreement

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    drafter = LlamaForCausalLM(config).eval()
    prompt, answer, eos = [3, 4, 5], [6, 20, 7], 2
    flags = agreement(drafter, [prompt], [answer], None, pad_id=1, image_id=99, eos_id=eos)[0]
    with torch.no_grad():
        pred = drafter(input_ids=torch.tensor([[3, 4, 5, 6, 0, 7, 2]])).logits.argmax(-1)[0].tolist()
    assert flags == [pred[2] == 6, False, pred[4] == 7, pred[5] == 2]
