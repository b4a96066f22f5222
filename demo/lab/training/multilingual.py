"""The world in three languages: the recipe's stages 10-12, after the English world of stages 1-9.

More, with its measurements: docs/modules.md.
"""

import argparse
import copy
import json
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from demo.lab.training.data import ScenePool, batches, encode, item_batch, sample_items
from demo.lab.training.evaluate import encode_examples
from demo.lab.training.fit import fit
from demo.lab.training.generate import greedy
from demo.lab.training.models import build, n_params
from demo.lab.training.new_tokens import grow_embeddings, kept_english_loss, new_rows_only, quiet_directions
from demo.lab.training.recipe import (
    ENGLISH_KEEP,
    FULL,
    LANGUAGE_CURRICULUM,
    QUICK,
    LanguageDrafter,
    Recipe,
    in_languages,
)
from demo.lab.training.stage_tools import Distill, World, distilled
from demo.lab.training.tokenization import IMAGE_TOKEN, build_processor, extend_tokenizer
from demo.lab.training.train import train
from demo.world import translation
from demo.world.scoring import score
from demo.world.tasks import LANGUAGES, Example, corpus, heldout_examples

PROBED = {
    "en": ("vqa_colour", "caption", "multiple_choice"),
    "de": ("vqa_colour", "vqa_shape"),
    "zh": ("vqa_colour", "vqa_shape"),
}
PROBE_TOKENS = {"vqa_colour": 40, "vqa_shape": 40, "caption": 90, "multiple_choice": 200}


@torch.no_grad()
def language_probe(target, processor, n: int) -> dict[str, dict[str, float]]:
    """Held-out questions answered greedily on the real images, n of each: colour and shape in
    each language, and English's captions and multiple choice (the most fragile), the share
    right (the training log's record of how the lookups come, and of English holding)."""
    tok = processor.tokenizer
    out = {}
    for language, tasks in PROBED.items():
        out[language] = {}
        for task in tasks:
            examples = heldout_examples(task, n, seed=7, language=language)
            rows, pixels = encode_examples(processor, examples)
            image_id = target.config.image_token_id
            ids = greedy(target, rows, tok.pad_token_id, tok.eos_token_id, image_id, pixels, PROBE_TOKENS[task])
            texts = tok.batch_decode(ids, skip_special_tokens=True)
            out[language][task] = round(sum(score(task, e, t) for e, t in zip(examples, texts)) / n, 3)
    target.train()
    return out


def english_answers(w: World, teacher, english, c, seed: int, mix=ENGLISH_KEEP) -> tuple[Distill, Distill]:
    """The English target's greedy answers to `c.english_items` English training questions in
    `mix`'s shares: what stage 10 keeps it saying, at the states the app visits. Split by
    `scoring.score` against the world's answer: the right ones as the English target said them
    (kept by the KL divergence to its distribution), and for each wrong one the world's answer
    (learnt by cross-entropy). With its wrong answers copied too, the trilingual target could at
    best match the English one, whose captions and multiple choice sit at their bars."""
    items = sample_items(w.pool, mix, c.english_items, seed + c.english_seed)
    prompts = [encode(english, it.question, None)[0] for it in items]
    scenes = [it.scene for it in items]
    eos = english.eos_token_id
    image_id = english.convert_tokens_to_ids(IMAGE_TOKEN)
    answers = greedy(
        teacher,
        prompts,
        english.pad_token_id,
        eos,
        image_id,
        w.pool.pixels[scenes],
        200,
        desc="10 English answers kept",
    )
    kept, corrected = Distill([], [], [], []), Distill([], [], [], [])
    for it, prompt, answer in zip(items, prompts, answers):
        example = Example(None, it.question, it.answer, it.task, w.pool.scenes[it.scene])
        if score(it.task, example, english.decode(answer, skip_special_tokens=True)):
            into, ids = kept, answer + [eos]
        else:  # the world's answer as the training conversations tokenise it (ending in <|end|>)
            into, ids = corrected, encode(english, it.question, it.answer)[0][len(prompt) :]
        into.scenes.append(it.scene)
        into.tasks.append(it.task)
        into.prompts.append(prompt)
        into.answers.append(ids)
    return kept, corrected


def stage_target_languages(w: World, recipe: Recipe, seed: int, log: dict) -> None:
    """10. the grown tokenizer and embeddings, then the target in three languages."""
    c = recipe.languages
    english = w.tok
    teacher = copy.deepcopy(w.target).eval()  # the English target, whose English answers are kept
    for p in teacher.parameters():
        p.requires_grad_(False)
    texts = [t for lang in LANGUAGES[1:] for t in corpus(c.corpus_per_task, seed + c.corpus_seed, lang)]
    keep = corpus(recipe.data.corpus_per_task, seed + recipe.data.seed)  # stage 1's corpus: English as before
    w.tok = extend_tokenizer(english, texts, c.new_tokens, keep)
    w.processor = build_processor(w.tok)
    target = w.target
    lexicons = translation.lexicon("de", function_words=True) | translation.lexicon("zh", function_words=True)
    items = sample_items(w.pool, ENGLISH_KEEP, 64, seed + c.offset_seed)
    directions = quiet_directions(target, [item_batch(w.pool, english, items[i : i + 16]) for i in range(0, 64, 16)])
    grow_embeddings(target, english, w.tok, lexicons, c.offset, directions)
    log["languages_vocabulary"] = len(w.tok)
    log["languages_glossed_tokens"] = sum(
        translation.gloss(w.tok.decode([i]), lexicons) is not None for i in range(len(english), len(w.tok))
    )
    kept, corrected = english_answers(w, teacher, english, c, seed)
    log["languages_english_answer_tokens"] = sum(map(len, kept.answers + corrected.answers))
    log["languages_english_corrected"] = dict(Counter(corrected.tasks))
    log["languages_english_kept"] = dict(Counter(kept.tasks))
    kept_stream, corrected_stream = (
        d.batches(w.pool, english, recipe.tokens, random.Random(seed + s), True) if d.tasks else None
        for d, s in ((kept, c.english_seed), (corrected, c.correct_seed + 1))
    )
    # An English step takes a batch of the world's answers as often as the English target was wrong.
    pick = random.Random(seed + c.correct_seed)
    share = len(corrected.tasks) / c.english_items
    params, hook = new_rows_only(target, len(english), c.embedding_scale)
    streams = [
        batches(w.pool, w.tok, mix, recipe.tokens, random.Random(seed + c.seed + k))
        for k, (_, mix) in enumerate(LANGUAGE_CURRICULUM)
    ]
    ends = [sum(c.phase_steps[: k + 1]) for k in range(len(LANGUAGE_CURRICULUM))]
    probes = log["target_languages_probe"] = {}

    def loss_of(step):
        phase = next(k for k, end in enumerate(ends) if step < end)
        if step and step in ends:  # how the lookups come, in the log
            probes[step] = language_probe(target, w.processor, c.probe_n)
            tqdm.write(f"language probe at step {step} (end of {LANGUAGE_CURRICULUM[phase - 1][0]}): {probes[step]}")
        english_step = step % c.english_every == c.english_every - 1
        world = english_step and pick.random() < share  # the world's answer where the English target was wrong
        batch = next(corrected_stream if world else kept_stream if english_step else streams[phase])
        batch.pop("scenes")
        return target(**batch).loss if world else kept_english_loss(target, teacher, batch, len(english))

    log["target_languages_loss"] = fit(params, ends[-1], c.lr, loss_of, "10 target, three languages")
    hook.remove()
    target.half().float()  # what ships is fp16: distil from exactly that
    probes[ends[-1]] = language_probe(target, w.processor, c.probe_n)
    tqdm.write(f"language probe at the end: {probes[ends[-1]]}")


def distill_set(w: World, language: str, recipe: Recipe, seed: int) -> Distill:
    """11a. the target's greedy answers to fresh questions in `language` on training scenes."""
    return distilled(w, recipe.language_distill[language], seed, f"11 distillation set, {language}")


def joined(sets: list[Distill]) -> Distill:
    return Distill(*(sum((getattr(d, f) for d in sets), []) for f in ("scenes", "tasks", "prompts", "answers")))


def language_drafter(w: World, c: LanguageDrafter, answers: Distill, recipe: Recipe, seed: int, name: str):
    """11b. a text drafter: corpus text in its languages (image removed, every token's loss),
    then the target's answers in them; returns it (fp16-rounded) and its two losses."""
    torch.manual_seed(seed + c.init_seed)
    drafter = build("drafter-text", w.tok)
    params = list(dict.fromkeys(drafter.parameters()))
    mix = in_languages(recipe.text_drafter.pretrain_mix, c.languages)
    stream = batches(w.pool, w.tok, mix, recipe.drafter_tokens, random.Random(seed + c.pretrain.seed), image=False)

    def corpus_loss(step):
        batch = next(stream)
        batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)  # all text
        return drafter(**batch).loss

    pretrain = fit(params, c.pretrain.steps, c.pretrain.lr, corpus_loss, f"11 drafter-{name} pretrain")
    stream = answers.batches(w.pool, w.tok, recipe.drafter_tokens, random.Random(seed + c.distill.seed), image=False)
    distill = fit(
        params, c.distill.steps, c.distill.lr, lambda s: drafter(**next(stream)).loss, f"11 drafter-{name} distil"
    )
    drafter.half().float()
    return drafter, pretrain, distill


def save_languages(w: World, drafters: dict, out: Path, log: dict) -> None:
    """12. the target with the grown tokenizer and processor; each language drafter with the tokenizer."""
    out.mkdir(parents=True, exist_ok=True)
    for name, model in [("target", w.target)] + [(f"drafter-{k}", m) for k, m in drafters.items()]:
        for p in model.parameters():
            p.requires_grad_(True)
        model.to(torch.float16).save_pretrained(out / name)
        model.float()
        (w.processor if name == "target" else w.tok).save_pretrained(out / name)
        log[f"params_{name}"] = n_params(model)


def train_languages(w: World, recipe: Recipe, seed: int, out: Path, log: dict, lap) -> None:
    """Stages 10-12 (module docstring)."""
    stage_target_languages(w, recipe, seed, log)
    lap("10 target in three languages")
    sets = {lang: distill_set(w, lang, recipe, seed) for lang in recipe.language_distill}
    log["languages_distill_answer_tokens"] = {k: sum(map(len, d.answers)) for k, d in sets.items()}
    lap("11a distillation sets")
    drafters = {}
    for name, c in recipe.language_drafters.items():
        answers = joined([sets[lang] for lang in c.languages])
        drafters[name], *losses = language_drafter(w, c, answers, recipe, seed, name)
        log[f"drafter_{name}_losses"] = losses
        lap(f"11 drafter-{name}")
    save_languages(w, drafters, out, log)
    lap("12 save")


def load_world(directory: Path, recipe: Recipe, seed: int) -> World:
    """The English world saved in `directory` (stages 1-9, English tokenizer), with stage 1's
    training pool rendered anew, as stage 10 takes it."""
    from transformers import AutoModelForCausalLM, AutoProcessor, LlavaForConditionalGeneration

    processor = AutoProcessor.from_pretrained(directory / "target")
    tok = processor.tokenizer
    if len(tok) != 512:
        raise ValueError(f"{directory} holds a world of {len(tok)} tokens; stage 10 starts from the English one (512)")
    pool = ScenePool.build("train", recipe.data.scenes, seed + recipe.data.seed, processor)
    target = LlavaForConditionalGeneration.from_pretrained(directory / "target", dtype=torch.float32)
    text = AutoModelForCausalLM.from_pretrained(directory / "drafter-text", dtype=torch.float32)
    image = LlavaForConditionalGeneration.from_pretrained(directory / "drafter-image", dtype=torch.float32)
    assert tok.convert_tokens_to_ids(IMAGE_TOKEN) == target.config.image_token_id
    return World(tok, processor, pool, target=target, text_drafter=text, image_drafter=image)


def copy_english(source: Path, out: Path) -> dict:
    """The English drafters, the gallery and the training log of `source`, into `out`; the log."""
    if source.resolve() != out.resolve():
        for name in ("drafter-text", "drafter-image", "examples"):
            shutil.copytree(source / name, out / name, dirs_exist_ok=True)
    return json.loads((source / "training_log.json").read_text())


def train_from(recipe: Recipe, source: Path, out: Path, seed: int, threads: int = 2) -> dict:
    """Stages 10-12 only, from the English world saved in `source` (stages 1-9); the log is
    `source`'s with theirs added, and the seconds of both."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        random.seed(seed)
        clock, timings = time.perf_counter(), {}
        w = load_world(source, recipe, seed)
        log = copy_english(source, out)
        log["recipe"], log["started_from"] = asdict(recipe), str(source)
        timings["10 load the English world"] = round(time.perf_counter() - clock, 1)

        def lap(stage: str):
            nonlocal clock
            timings[stage] = round(time.perf_counter() - clock, 1)
            print(f"[{stage}] {timings[stage]:.1f} s", flush=True)
            clock = time.perf_counter()

        clock = time.perf_counter()
        train_languages(w, recipe, seed, out, log, lap)
        log["seconds"] = log["seconds"] | timings
        log["seconds_total"] = round(sum(log["seconds"].values()), 1)
        log["seconds_languages"] = round(sum(timings.values()), 1)
        (out / "training_log.json").write_text(json.dumps(log, indent=1) + "\n")
        return log
    finally:
        torch.set_num_threads(before)


def main() -> None:
    parser = argparse.ArgumentParser(description="The world in three languages: stages 1-9, then 10-12.")
    parser.add_argument("--quick", action="store_true", help="recipe.QUICK: a few steps per stage, into a temp dir")
    parser.add_argument("--out", type=Path, default=None, help="output directory (required unless --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads; results are exact for a given count")
    parser.add_argument(
        "--from", dest="source", type=Path, default=None, help="run stages 10-12 only, from this English world"
    )
    args = parser.parse_args()
    if args.out is None and not args.quick:
        parser.error("--out is required: the shipped world (assets/world) is stages 1-9's")
    out = args.out or Path(tempfile.mkdtemp(prefix="world-languages-quick-"))
    recipe = QUICK if args.quick else FULL
    if args.source:
        log = train_from(recipe, args.source, out, args.seed, args.threads)
    else:
        log = train(recipe, out, args.seed, args.threads, then=train_languages)
    print(json.dumps({"out": str(out), "seconds_total": log["seconds_total"]}))


if __name__ == "__main__":
    main()
