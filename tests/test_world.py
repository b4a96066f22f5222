"""Tests of the embedded multimodal world: data, scoring, tokenizer, shipped models. CPU, offline."""

import functools
import json
import os
import random
import re
import subprocess
import sys
from collections import Counter

import pytest

from demo.lab.training.data import encode
from demo.world import ASSETS
from demo.world.scenes import COLOURS, MAX_OBJECTS, SHAPES, sample_scenes, split_of
from demo.world.scoring import score
from demo.world.tasks import TASKS, heldout_examples, image_grounded_words, train_examples


def _swap(text: str, words: tuple[str, ...]) -> str:
    """Replace the first of `words` found in text by another of them."""
    for w in words:
        if f" {w}" in f" {text.lower()}":
            other = next(x for x in words if x != w and x not in text.lower())
            return text.replace(w, other).replace(w.capitalize(), other.capitalize())
    raise AssertionError(f"none of {words} in {text!r}")


def _wrong(task: str, answer: str) -> str:
    if task in ("vqa_colour", "caption", "description"):
        return _swap(answer, tuple(COLOURS))
    if task == "vqa_shape":
        return _swap(answer, SHAPES)
    if task == "vqa_count":
        return "There are two." if " no " in answer else "There are none."
    if task == "vqa_position":
        return "It is in the top left corner." if "top left" not in answer else "It is in the centre."
    if task == "vqa_yesno":
        return "No." if answer.startswith("Yes") else "Yes."
    if task == "multiple_choice":
        letter = answer[-2]
        return answer[:-2] + ("A" if letter != "A" else "B") + "."
    raise AssertionError(task)


def test_generator_is_deterministic_for_a_seed():
    for task in TASKS:
        a, b = heldout_examples(task, 3, seed=7), heldout_examples(task, 3, seed=7)
        assert [(x.question, x.answer, x.scene) for x in a] == [(x.question, x.answer, x.scene) for x in b]
        assert [x.image.tobytes() for x in a] == [x.image.tobytes() for x in b]
    assert heldout_examples("caption", 3, seed=7)[0].scene != heldout_examples("caption", 3, seed=8)[0].scene


def test_train_and_heldout_scenes_are_disjoint():
    train = {s.signature() for s in sample_scenes("train", 3000, seed=0)}
    heldout = {s.signature() for s in sample_scenes("heldout", 500, seed=0)}
    assert not train & heldout
    assert {split_of(s) for s in sample_scenes("heldout", 50, seed=1)} == {"heldout"}
    assert all(split_of(e.scene) == "train" for e in train_examples("vqa_shape", 20))


def test_scenes_have_one_to_max_objects_on_distinct_cells():
    scenes = sample_scenes("train", 500, seed=0)
    assert {len(s.objects) for s in scenes} == set(range(1, MAX_OBJECTS + 1))
    assert all(len({o.cell for o in s.objects}) == len(s.objects) for s in scenes)


@pytest.mark.parametrize("task", TASKS)
def test_reference_answers_score_correct_and_corrupted_ones_wrong(task):
    for ex in heldout_examples(task, 25, seed=3):
        assert score(task, ex, ex.answer), ex.answer
        assert not score(task, ex, _wrong(task, ex.answer)), _wrong(task, ex.answer)


@pytest.mark.parametrize("task", TASKS)
def test_every_task_answers_one_fact_in_several_phrasings(task):
    import random

    from demo.world.scenes import Obj, Scene
    from demo.world.tasks import qa

    scene = Scene((Obj("circle", "red", "large", 4),))  # one object: every answer states the same facts
    answers = {qa(task, scene, random.Random(seed))[1] for seed in range(40)}
    assert len(answers) >= 3, answers


def test_grounded_words_cover_colours_shapes_counts_positions():
    words = image_grounded_words()
    assert set(COLOURS) | set(SHAPES) | {"large", "small", "three", "left", "centre", "circles"} <= words
    assert not {"the", "image", "there", "is", "answer"} & words


def test_tokenizer_round_trips_corpus_text_and_splits_words():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ASSETS / "drafter-text")
    texts = [t for task in TASKS for e in heldout_examples(task, 5) for t in (e.question, e.answer)]
    for text in texts:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    words = {w for t in texts for w in t.split() if w.isalpha()}
    multi = {w for w in words if len(tok(" " + w, add_special_tokens=False)["input_ids"]) > 1}
    assert len(multi) >= 10


def test_chat_template_renders_one_image_token_and_ends_with_assistant_header():
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(ASSETS / "target")
    ex = heldout_examples("vqa_colour", 1)[0]
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": ex.question}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.count("<image>") == 1
    assert prompt.endswith("<|assistant|>\n")
    ids = processor(images=ex.image, text=prompt)["input_ids"][0]
    image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    assert list(ids).count(image_id) == 9
    assert list(ids) == encode(processor.tokenizer, ex.question, None)[0]  # what the models were trained on


@pytest.mark.slow
def test_shipped_models_load_with_transformers_alone_and_drafters_are_small():
    script = (
        "import json, time, torch\n"
        "from transformers import AutoModelForCausalLM, AutoProcessor, AutoTokenizer, LlavaForConditionalGeneration\n"
        f"d = {str(ASSETS)!r}\n"
        "t = time.perf_counter()\n"
        "ms = [LlavaForConditionalGeneration.from_pretrained(d + '/target', dtype=torch.float32),\n"
        "      LlavaForConditionalGeneration.from_pretrained(d + '/drafter-image', dtype=torch.float32),\n"
        "      AutoModelForCausalLM.from_pretrained(d + '/drafter-text', dtype=torch.float32)]\n"
        "AutoProcessor.from_pretrained(d + '/target'); AutoProcessor.from_pretrained(d + '/drafter-image')\n"
        "AutoTokenizer.from_pretrained(d + '/drafter-text')\n"
        "print(json.dumps({'s': time.perf_counter() - t, 'n': [sum(p.numel() for p in m.parameters()) for m in ms]}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd="/")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    target, image, text = result["n"]
    assert image * 10 <= target and text * 10 <= target
    assert result["s"] < 5.0


@functools.cache
def _shipped_target():
    from demo.lab.training.evaluate import load_target

    return load_target(ASSETS)  # loaded once for the tests below


def _shipped_target_accuracy(task: str) -> float:
    """The share `python -m demo.lab.training.evaluate` reports for the target: the same 100 held-out
    examples (seed 0), greedy, at most 200 new tokens."""
    from demo.lab.training.evaluate import answers

    examples, texts = answers(*_shipped_target(), task, 100, max_new_tokens=200, seed=0)
    return sum(score(task, e, t) for e, t in zip(examples, texts)) / len(examples)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["vqa_colour", "vqa_shape"])
def test_shipped_target_meets_the_95_percent_bar_on_heldout_colour_and_shape_questions(task):
    assert _shipped_target_accuracy(task) >= 0.95


@pytest.mark.slow
def test_shipped_target_names_every_object_in_90_percent_of_heldout_captions():
    assert _shipped_target_accuracy("caption") >= 0.90


@pytest.mark.slow
def test_shipped_target_answers_heldout_yes_no_questions_from_the_image():
    # No bar in the issue; the README's 91% (55% before the verification facts, "yes" to 94 of
    # 100) rests on it. About half the references are "no", so a constant answer reads ~50%.
    assert _shipped_target_accuracy("vqa_yesno") >= 0.85


@pytest.mark.slow
def test_shipped_target_meets_the_90_percent_bar_on_heldout_multiple_choice():
    assert _shipped_target_accuracy("multiple_choice") >= 0.90


@pytest.mark.slow
def test_quick_training_run_writes_models_that_load(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, LlavaForConditionalGeneration

    from demo.lab.training.multilingual import train_languages
    from demo.lab.training.recipe import QUICK
    from demo.lab.training.train import train
    from demo.world.gallery import PER_TASK

    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        if os.environ.get(
            "PYTEST_XDIST_WORKER"
        ):  # beside the other worker: one thread (two would spin waiting for the busy core)
            log = train(QUICK, tmp_path, seed=0, then=train_languages, threads=1)
            assert log["threads"] == 1 and torch.get_num_threads() == 3  # the caller's count is put back
        else:
            log = train(QUICK, tmp_path, seed=0, then=train_languages)  # on two threads, the default
            assert log["threads"] == 2 and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(threads)
    assert set(log["seconds"]) >= {
        "3b target option drills",
        "5 target end to end",
        "5b target captions",
        "5c target gentle captions",
        "5d target option drills on images",
        "5e target multiple choice, final form",
    }
    assert set(log["target_drill_probe"]) >= {"multiple_choice", "vqa_colour"}
    LlavaForConditionalGeneration.from_pretrained(tmp_path / "target")
    LlavaForConditionalGeneration.from_pretrained(tmp_path / "drafter-image")
    AutoModelForCausalLM.from_pretrained(tmp_path / "drafter-text")
    assert log["params_drafter-text"] * 10 <= log["params_target"]
    for name in ("multilingual", "de", "zh"):  # stages 10-12: the language drafters, the grown vocabulary
        assert AutoModelForCausalLM.from_pretrained(tmp_path / f"drafter-{name}").config.vocab_size == 1024
        assert log[f"params_drafter-{name}"] * 10 <= log["params_target"]
    assert LlavaForConditionalGeneration.from_pretrained(tmp_path / "target").config.text_config.vocab_size == 1024
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "drafter-text").config.vocab_size == 512  # as it was
    assert "10 target in three languages" in log["seconds"]
    split = [sum(log[f"languages_english_{s}"].values()) for s in ("kept", "corrected")]
    assert sum(split) == QUICK.languages.english_items  # every English question: kept or corrected
    gallery = json.loads((tmp_path / "examples" / "examples.json").read_text())
    assert Counter(e["task"] for e in gallery) == PER_TASK  # every task family, the long ones twice
    assert all((tmp_path / "examples" / e["image"]).is_file() for e in gallery)


def test_quick_recipe_is_the_full_one_with_fewer_steps_and_smaller_batches():
    from dataclasses import fields, is_dataclass

    from demo.lab.training.recipe import FULL, QUICK

    sizes = {
        "steps",
        "phase_steps",
        "finetune_steps",
        "scenes",
        "corpus_per_task",
        "items",
        "max_new_tokens",
        "tokens",
        "drafter_tokens",
        "probe_n",
        "english_items",
        "rows",
    }

    def differences(full, quick, path=""):
        """The fields (dotted paths) where QUICK differs from FULL, each smaller in QUICK."""
        out = set()
        for f in fields(full):
            a, b = getattr(full, f.name), getattr(quick, f.name)
            if is_dataclass(a):
                out |= differences(a, b, f"{path}{f.name}.")
            elif isinstance(a, dict) and all(is_dataclass(v) for v in a.values()):  # configs by name
                assert a.keys() == b.keys()
                for key in a:
                    out |= differences(a[key], b[key], f"{path}{f.name}.{key}.")
            elif a != b:
                assert f.name in sizes and (b < a if isinstance(a, int) else len(b) == len(a)), (path + f.name, a, b)
                out.add(path + f.name)
        return out

    changed = differences(FULL, QUICK)
    assert {
        "slots.phase_steps",
        "drills.steps",
        "image_drills.steps",
        "final_form.steps",
        "gentle.steps",
        "image_drafter.finetune_steps",
        "text_drafter.distill.steps",
        "tokens",
        "languages.phase_steps",
        "language_distill.zh.items",
        "language_drafters.de.distill.steps",
    } <= changed


@pytest.mark.slow
def test_the_recipe_and_the_evaluation_do_not_import_the_experiments():
    script = "import sys, demo.lab.training.train, demo.lab.training.evaluate; print(sorted(m for m in sys.modules if 'experiments' in m))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lookup_gap_shifts_only_the_positions_after_the_last_image_token():
    import torch

    from demo.lab.experiments.object_lookup import gapped_positions

    image = 7
    ids = torch.tensor([[1, image, image, 4, 5], [image, 3, 4, 5, 0]])
    assert gapped_positions(ids, image, 0).tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    assert gapped_positions(ids, image, 10).tolist() == [[0, 1, 2, 13, 14], [0, 11, 12, 13, 14]]


def test_lookup_splits_questions_by_key_and_knows_the_chance_of_a_random_object():
    from demo.lab.experiments.object_lookup import chance, key_of
    from demo.world.scenes import Obj, Scene
    from demo.world.tasks import Example

    assert key_of("What colour is the circle?") == "name"
    assert key_of("What shape is the red object?") == "name"
    assert key_of("What colour is the shape in the middle of the top row?") == "place"
    assert key_of("Which shape can you see in the top left corner?") == "place"
    scene = Scene(
        (Obj("circle", "red", "large", 0), Obj("square", "red", "small", 4), Obj("cross", "blue", "large", 8))
    )
    ex = Example(None, "What colour is the cross?", "The cross is blue.", "vqa_colour", scene)
    assert chance(ex, "colour", "blue") == 1 / 3 and chance(ex, "colour", "red") == 2 / 3
    assert chance(ex, "shape", "cross") == 1 / 3


def test_lookup_at_gap_zero_is_the_apps_teacher_forced_argmax():
    import torch
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    from demo.lab.experiments.object_lookup import predictions, probes
    from demo.lab.training.evaluate import encode_examples

    model = LlavaForConditionalGeneration.from_pretrained(ASSETS / "target", dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(ASSETS / "target")
    tok = processor.tokenizer
    items = probes(tok, "vqa_colour", 12)
    assert items and all(len(p.example.scene.objects) >= 2 for p in items)
    assert all(tok.decode([p.ids[p.at]]).strip() in COLOURS for p in items)
    # the app's path: the processor's prompt, the answer appended, one row at a time, default positions
    rows, pixels = encode_examples(processor, [p.example for p in items])
    expected = []
    with torch.inference_mode():
        for i, (row, p) in enumerate(zip(rows, items)):
            assert row == p.ids[: len(row)]
            logits = model(input_ids=torch.tensor([p.ids]), pixel_values=pixels[i : i + 1]).logits
            expected.append(logits[0, p.at - 1].argmax().item())
    assert predictions(model, processor, items, gap=0) == expected


def test_recall_facts_are_every_lookup_the_scene_answers():
    import random

    from demo.lab.experiments.recall import facts
    from demo.world.scenes import Obj, Scene

    scene = Scene(
        (Obj("circle", "red", "large", 0), Obj("circle", "blue", "small", 4), Obj("cross", "green", "large", 8))
    )
    got = facts(scene, random.Random(0))
    assert sorted(got) == sorted(
        [
            ("cross", "green", "name"),
            ("top left", "red", "place"),
            ("centre", "blue", "place"),
            ("bottom right", "green", "place"),
        ]
    )


@pytest.mark.parametrize("form", ["is", "direct"])
def test_recall_rows_mark_each_value_right_after_its_key(form):
    import random

    from demo.lab.experiments.recall import facts, row
    from demo.lab.training.tokenization import IMAGE_SEQ_LENGTH

    tok = _world_tokenizer()
    scene = sample_scenes("heldout", 20, 0)[7]
    ids, values = row(tok, scene, random.Random(3), form)
    expected = facts(scene, random.Random(3))
    assert ids[:IMAGE_SEQ_LENGTH] == [tok.pad_token_id] * IMAGE_SEQ_LENGTH
    assert [kind for _, kind in values] == [kind for _, _, kind in expected]
    text = tok.decode(ids[IMAGE_SEQ_LENGTH:])
    sep = " is" if form == "is" else ""
    assert text == "".join(f" {key}{sep} {value}." for key, value, _ in expected)
    for (at, _), (key, value, _) in zip(values, expected):
        assert tok.decode(ids[at:]).startswith(f" {value}.")
        assert tok.decode(ids[:at]).endswith(f" {key}{sep}")


def test_recall_experiment_is_deterministic():
    from demo.lab.experiments.recall import run

    first, second = (run(32, 1, 4, "is", every=2, heldout=40, pool=100) for _ in range(2))
    strip = [{k: v for k, v in entry.items() if k != "seconds"} for entry in first]
    assert strip == [{k: v for k, v in entry.items() if k != "seconds"} for entry in second]
    assert [entry["step"] for entry in first] == [2, 4]
    assert set(first[0]) == {"step", "seconds", "loss", "name, first", "name, later", "place, first", "place, later"}


def _world_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ASSETS / "target")


def test_lookup_facts_state_every_unique_key_once_and_rows_hold_them_after_the_image():
    import random

    from demo.lab.training.data import fact_batches, facts
    from demo.world.scenes import Obj, Scene

    scene = Scene(
        (Obj("circle", "red", "large", 0), Obj("circle", "blue", "small", 4), Obj("cross", "red", "large", 8))
    )
    assert sorted(facts(scene, random.Random(0))) == sorted(
        ["cross is red.", "top left is red.", "centre is blue.", "bottom right is red.", "blue is circle."]
    )

    class Pool:
        scenes = [scene]

    tok = _world_tokenizer()
    batch = next(fact_batches(Pool, tok, 2, random.Random(5)))
    assert batch["scenes"].tolist() == [0, 0]
    ids = batch["input_ids"][0][batch["attention_mask"][0] == 1].tolist()
    image = tok.convert_tokens_to_ids("<image>")
    assert ids[:9] == [image] * 9 and image not in ids[9:]
    rng = random.Random(5)
    rng.randrange(1)  # the scene draw
    assert tok.decode(ids[9:]) == "".join(" " + fact for fact in facts(scene, rng))
    labels = batch["labels"][0][: len(ids)].tolist()
    assert labels == [-100] * 9 + ids[9:]  # the loss on every fact token, none on the image


def test_verification_facts_say_yes_exactly_when_the_scene_agrees():
    import random
    import re

    from demo.lab.training.data import facts, verification_facts
    from demo.world.scenes import sample_scene

    scene_rng = random.Random(1)
    for i in range(200):
        scene = sample_scene(scene_rng)
        shapes = [o.shape for o in scene.objects]
        got = verification_facts(scene, random.Random(i))
        attribute = [f for f in got if f.startswith("is the ")]
        assert len(attribute) == 2 * sum(shapes.count(s) == 1 for s in shapes)  # one yes, one no each
        assert sorted(f[-4:] for f in got) == sorted([" no."] * (len(got) // 2) + ["yes."] * (len(got) // 2))
        for fact in got:
            if m := re.fullmatch(r"is the (\w+) (\w+)\? (yes|no)\.", fact):
                (o,) = [o for o in scene.objects if o.shape == m[1]]
                assert (o.colour == m[2]) == (m[3] == "yes"), (scene, fact)
            else:
                m = re.fullmatch(r"is there a (\w+) (\w+)\? (yes|no)\.", fact)
                present = any((o.colour, o.shape) == (m[1], m[2]) for o in scene.objects)
                assert present == (m[3] == "yes"), (scene, fact)
        # every lookup fact is still there, and the verification facts come only when asked for
        plain = facts(scene, random.Random(i))
        assert set(plain) < set(facts(scene, random.Random(i), verify=True))


def test_verification_questions_carry_no_loss_only_their_verdicts_do():
    import random

    from demo.lab.training.data import fact_batches, facts
    from demo.world.scenes import Obj, Scene

    scene = Scene((Obj("circle", "red", "large", 0), Obj("cross", "blue", "small", 4)))

    class Pool:
        scenes = [scene]

    tok = _world_tokenizer()
    batch = next(fact_batches(Pool, tok, 1, random.Random(3), verify=True))
    ids = batch["input_ids"][0].tolist()
    labels = batch["labels"][0].tolist()
    rng = random.Random(3)
    rng.randrange(1)  # the scene draw
    written = facts(scene, rng, verify=True)
    assert tok.decode(ids[9:]) == "".join(" " + fact for fact in written)
    # the labelled tokens, read back, are exactly the lookup facts and the verdicts, in order
    kept = tok.decode([t for t, l in zip(ids, labels) if l != -100])
    assert kept == "".join(" " + (fact.split("? ")[1] if "? " in fact else fact) for fact in written)
    assert kept.count(" yes.") == kept.count(" no.") == 3  # circle and cross asked right and wrong, one pair each


def test_diagnose_takes_a_caption_apart_item_by_item():
    from demo.lab.experiments.diagnose import caption_items, caption_tally
    from demo.world.scenes import Obj, Scene

    scene = Scene((Obj("circle", "blue", "large", 4), Obj("square", "blue", "small", 5)))
    text = (
        "A simple drawing: in the middle of the right side, a blue square; in the centre, a large red circle; "
        "and in the top left corner, a green cross."
    )
    assert caption_items(text) == [(5, ("blue", "square")), (4, ("red", "circle")), (0, ("green", "cross"))]
    assert caption_tally(scene, text) == Counter(
        {
            "captions": 1,
            "items": 3,
            "items at an occupied cell": 2,
            "items at an empty cell": 1,
            "  colour and shape right": 1,
            "  colour right": 1,
            "  shape right": 2,
        }
    )
    right = "In the centre, a blue circle; and in the middle of the right side, a small blue square."
    assert caption_tally(scene, right)["places are the occupied cells"] == 1
    assert caption_tally(scene, right)["number of items right"] == 1


def test_diagnose_flags_descriptions_with_broken_words_or_multiple_choice_phrasing():
    from demo.lab.experiments.diagnose import corpus_words, description_tally

    vocabulary = corpus_words(50)
    reference = heldout_examples("description", 3)
    assert sum((description_tally(e.answer, vocabulary) for e in reference), Counter()) == Counter(descriptions=3)
    broken = "Here we have a minimal illuststration of geometric shapes. The answer is B."
    assert description_tally(broken, vocabulary) == Counter(
        {"descriptions": 1, "with a word no training text uses": 1, "with multiple choice's 'answer is'": 1}
    )


def test_diagnose_takes_a_multiple_choice_answers_checks_apart():
    from demo.lab.experiments.diagnose import mc_tally, options_of
    from demo.world.scenes import SHAPES
    from demo.world.scoring import letter_in

    ex = next(
        e
        for e in heldout_examples("multiple_choice", 40)
        if e.question.startswith("Which shape") and not e.answer.endswith("The answer is A.")
    )
    reference = mc_tally(ex, ex.answer)
    checks = "ABCD".index(letter_in(ex.answer)) + 1
    assert reference == Counter(
        {
            ("shape", k): v
            for k, v in {
                "n": 1,
                "right letter": 1,
                "first sentence right": 1,
                "conclusion right": 1,
                "verdict agrees with conclusion": 1,
                "options read": checks,
                "options read right": checks,
                "verdicts right": checks,
            }.items()
        }
    )
    options = options_of(ex.question)
    assert sorted(options) == ["A", "B", "C", "D"] and sorted(options.values()) == sorted(SHAPES)
    right = options[letter_in(ex.answer)]
    wrong = next(s for s in SHAPES if s != right)
    # the image misread, an option misread, a wrong verdict ("is" for two different words), then
    # a verdict that agrees with the (wrong) conclusion
    text = (
        f"The object is a blue {wrong}, so it is a {wrong}. A. {wrong}: a {wrong} is not a {wrong}. "
        f"B. {options['B']}: a {wrong} is a {options['B']}. The answer is B."
    )
    t = mc_tally(ex, text)
    assert (t[("shape", "first sentence right")], t[("shape", "conclusion right")]) == (0, 0)
    assert t[("shape", "options read")] == 2
    assert t[("shape", "options read right")] == (options["A"] == wrong) + 1
    assert t[("shape", "verdicts right")] == (options["B"] == wrong)  # "is not" for equal words is wrong
    assert t[("shape", "verdict agrees with conclusion")] == (options["B"] == wrong)
    assert t[("shape", "right letter")] == (letter_in(ex.answer) == "B")
    assert (
        mc_tally(ex, f"The object is a circle, so it is a {right}. The answer is A.")[("shape", "conclusion right")]
        == 1
    )


def test_multiple_choice_checks_the_options_in_order_up_to_the_concluded_one():
    from demo.lab.experiments.diagnose import CHECK, options_of

    kinds = Counter()
    for e in heldout_examples("multiple_choice", 60):
        options, letter = options_of(e.question), e.answer[-2]
        reason, rest = e.answer.split(" A. ", 1)
        checks = CHECK.findall(" A. " + rest)
        assert [c[0] for c in checks] == list("ABCD"[: "ABCD".index(letter) + 1])
        said = {c[2] for c in checks}
        assert said == {options[letter]} and reason.endswith(f"{options[letter]}.")
        for _, option, _, negated, again in checks:
            assert option == again and (option == options[letter]) == (not negated)
        assert e.answer.endswith(f". The answer is {letter}.")
        kinds[e.question.split()[0]] += 1
    assert set(kinds) == {"Which", "What", "Where", "How"}


def test_brief_multiple_choice_is_the_early_question_with_yes_no_checks():
    from demo.world.scenes import scene_stream
    from demo.world.tasks import qa
    from demo.world.tasks_en import BRIEF, EARLY

    for i, scene in zip(range(40), scene_stream("train", 3)):
        (question, restated), (same, brief) = (qa(t, scene, random.Random(i)) for t in (EARLY, BRIEF))
        assert question == same
        reason, letter = restated.split(" A. ", 1)[0], restated[-2]
        options = dict(re.findall(r"([ABCD])\. ([a-z ]+?)[,.]", question.split("Options: ")[1]))
        checks = " ".join(
            f"{k}. {options[k]}: {'yes' if k == letter else 'no'}." for k in "ABCD"[: "ABCD".index(letter) + 1]
        )
        assert brief == f"{reason} {checks} The answer is {letter}."


def test_final_multiple_choice_counts_by_the_captions_listing_with_count_and_place_options_in_order():
    from demo.lab.experiments.diagnose import options_of
    from demo.world.scenes import POSITIONS, scene_stream
    from demo.world.tasks import qa
    from demo.world.tasks_en import EARLY, NUMBERS

    kinds = Counter()
    for i, scene in zip(range(200), scene_stream("train", 4)):
        (question, answer), (early_question, early_answer) = (
            qa(t, scene, random.Random(i)) for t in ("multiple_choice", EARLY)
        )
        options, early_options = options_of(question), options_of(early_question)
        right, early_right = options[answer[-2]], early_options[early_answer[-2]]
        assert right == early_right  # one question, one answer
        asked, reason = question.split("\n")[0], answer.split(" A. ")[0]
        kinds[asked.split()[0]] += 1
        if asked.startswith("How many"):
            n = len(scene.objects)
            items = [
                f"{o.position_phrase}, {'an' if o.colour == 'orange' else 'a'} {o.colour} {o.shape}"
                for o in scene.objects
            ]
            listed = items[0] if n == 1 else "; ".join(items[:-1]) + "; and " + items[-1]
            assert reason == listed[0].upper() + listed[1:] + f", so there {'is' if n == 1 else 'are'} {NUMBERS[n]}."
            assert list(options.values()) == ["one", "two", "three", "four"]
            assert f" {right} is {right}." in answer  # no article before a count
        elif asked.startswith("Where"):
            assert list(options.values()) == sorted(options.values(), key=POSITIONS.index)
            assert set(options.values()) == set(early_options.values())  # the early options, in order
            assert reason == early_answer.split(" A. ")[0]
        else:  # shapes and colours: the early question and answer, unchanged
            assert (question, answer) == (early_question, early_answer)
    assert min(kinds.values()) >= 30 and len(kinds) == 4


def test_the_lm_stage_and_the_tokenizer_see_only_brief_multiple_choice():
    from demo.lab.training.recipe import CURRICULUM, LM_MIX, MIX, in_form
    from demo.world.tasks import corpus
    from demo.world.tasks_en import BRIEF, EARLY

    assert list(LM_MIX.values()) == list(MIX.values()) and BRIEF in LM_MIX and "multiple_choice" not in LM_MIX
    early = in_form(MIX, EARLY)
    assert list(early.values()) == list(MIX.values()) and EARLY in early and "multiple_choice" not in early
    assert all("multiple_choice" not in mix for _, mix, _ in CURRICULUM if mix != "facts")
    texts = corpus(20)
    assert any(": yes. The answer is" in t for t in texts)
    assert not any(" is not a " in t for t in texts)


def test_a_check_row_puts_the_loss_on_the_checks_letter_and_end_with_the_reason_as_context():
    from demo.lab.training.data import check_row, encode

    tok = _world_tokenizer()
    for e in heldout_examples("multiple_choice", 12):
        ids, labels = check_row(tok, e.question, e.answer)
        start = labels.count(-100)
        assert all(l == -100 for l in labels[:start])  # the context is one prefix
        whole_ids, whole_labels = encode(tok, e.question, e.answer)
        assert ids == whole_ids and labels[start:] == whole_labels[start:]
        assert start > whole_labels.count(-100)  # the reason is context too
        reason, checks = e.answer.split(" A. ", 1)
        assert tok.decode(ids[start:]) == " A. " + checks + "<|end|>"
        assert tok.decode(ids[:start]).endswith(e.question + "<|end|>\n<|assistant|>\n" + reason)


def test_drill_batches_hold_whole_multiple_choice_turns_on_pool_scenes_with_their_slots():
    import random

    import torch

    from demo.lab.training.data import DRILLS_PER_ROW, check_row, drill_batches
    from demo.world.scenes import sample_scenes
    from demo.world.tasks import qa

    class Pool:
        scenes = sample_scenes("train", 5, seed=1)
        pixels = torch.arange(5, dtype=torch.float16).view(5, 1, 1, 1).expand(5, 3, 2, 2)

    tok = _world_tokenizer()
    batch = next(drill_batches(Pool, tok, 3, random.Random(3)))
    image = tok.convert_tokens_to_ids("<image>")
    assert batch["input_ids"].shape[0] == 3 and len(batch["scenes"]) == 3 * DRILLS_PER_ROW
    assert torch.equal(batch["pixel_values"], Pool.pixels[batch["scenes"]].float())  # each turn's image, in order
    assert ((batch["input_ids"] == image).sum(1) == 9 * DRILLS_PER_ROW).all()  # one image a turn, in row order
    rng, scenes = random.Random(3), batch["scenes"].tolist()
    for row in range(3):
        want_ids, want_labels = [], []
        for k in range(DRILLS_PER_ROW):
            while True:  # the draws drill_row makes, scene by scene
                s = rng.randrange(5)
                pair = qa("multiple_choice", Pool.scenes[s], rng)
                if pair:
                    break
            assert scenes[row * DRILLS_PER_ROW + k] == s
            ids, labels = check_row(tok, *pair)
            want_ids, want_labels = want_ids + ids, want_labels + labels
        size = int(batch["attention_mask"][row].sum())
        assert batch["input_ids"][row, :size].tolist() == want_ids
        assert batch["labels"][row, :size].tolist() == want_labels


def test_option_probe_counts_a_row_only_when_every_token_from_its_start_is_predicted():
    import torch

    from demo.lab.training.probes import all_right

    rows = [([5, 6, 7, 8], None), ([5, 9, 9, 9], None)]
    pred = torch.tensor([[6, 7, 8, 0], [9, 9, 4, 0]])  # the logit at j predicts token j + 1
    assert all_right(pred, rows, [1, 1]) == 0.5  # row 1 misses its last token
    assert all_right(pred, rows, [1, 3]) == 0.5
    assert all_right(pred, rows, [3, 3]) == 0.5
    assert all_right(pred, rows, [4, 4]) == 1.0  # nothing to predict


def test_copy_accuracy_is_one_on_the_second_copy_for_a_model_that_copies_and_zero_on_the_first():
    from types import SimpleNamespace

    import torch

    from demo.lab.experiments.diagnose import copy_accuracy

    length, vocab = 12, list(range(5, 50))

    class Copier(torch.nn.Module):
        """Predicts the token `length` places back, and token 0 (never drawn) before that: an
        induction head and nothing else."""

        def forward(self, input_ids):
            ahead = torch.zeros_like(input_ids)
            ahead[:, length - 1 :] = input_ids[:, : input_ids.shape[1] - length + 1]
            return SimpleNamespace(logits=torch.nn.functional.one_hot(ahead, 50).float())

    result = copy_accuracy(Copier(), vocab, n=8, length=length)
    assert result == {"first copy": 0.0, "second copy": 1.0, "sequences": 8, "length": length}
