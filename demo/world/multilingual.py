"""The world in three languages: the recipe's stages 10-12, after the English world of stages 1-9.

Contract: `train_languages(w, recipe, seed, out, log, lap)` takes the English world (in memory,
as stage 9 leaves it, or loaded from a saved one by `load_world`) and
 10. grows the tokenizer for German and Chinese (`text.extend_tokenizer`: English tokenises as
     before) and the target's embeddings with it, each new token's row the mean of its pieces'
     old rows; then trains the target end to end on real images (tower frozen) on
     `recipe.languages.mix`, English a third of it, and rounds it to fp16;
 11. writes each language's distillation set (the target's greedy answers on training scenes)
     and trains the text drafters of the seed's recipe (`recipe.language_drafters`): each
     pretrained on corpus text in its languages, then fine-tuned on the target's answers in them;
 12. saves the target (grown tokenizer and processor) and drafter-NAME for each of them under
     `out`. The English-only drafters stay as stages 7-8 made them, with the English tokenizer:
     their vocabulary is the first 512 ids of the target's, which the engine accepts.
The result depends only on the English world and the seed: every stream is seeded here, so
going on from a saved world equals going on in memory (its weights were saved in fp16, as they
were held). Each stage is timed through `lap`.
"""

import argparse
import json
import random
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

from . import translation
from .data import ScenePool, batches, collate, encode, sample_items
from .fit import fit
from .generate import greedy
from .models import build, n_params
from .recipe import FULL, QUICK, LanguageDrafter, Recipe, in_languages
from .tasks import LANGUAGES, corpus
from .text import IMAGE_SEQ_LENGTH, IMAGE_TOKEN, build_processor, extend_tokenizer
from .train import Distill, World, loss_on, set_trainable, train

# A translated word starts a little shorter than its English one: the embeddings are tied, so
# where the target would write " green" its logit stays the larger, and English answers are
# what they were (with equal rows, the first pilot's English answers took " grün" for " green").
TRANSLATED_SCALE = 0.9


def grow_embeddings(model, old_tok, new_tok, lexicons: dict[str, str] | None = None) -> None:
    """Resize `model`'s (tied) embeddings to `new_tok`. A new token that spells a word of
    `lexicons` (word -> English, `translation.lexicon`) starts as the mean of the old rows of
    its English translation's tokens (" Kreis" as " circle", "红色" as " red"), times
    `TRANSLATED_SCALE`, so the lookup the target has writes it; any other new token as the mean of the old rows of the pieces
    the old tokenizer splits it into, so it starts where its text was."""
    emb = model.get_input_embeddings().weight
    n_old = emb.shape[0]
    rows = []
    with torch.no_grad():
        for i in range(n_old, len(new_tok)):
            word = new_tok.decode([i]).strip().lower()
            if lexicons and word in lexicons:
                old = old_tok(" " + lexicons[word], add_special_tokens=False)["input_ids"]
                rows.append(TRANSLATED_SCALE * emb[old].mean(0))
            else:
                pieces = old_tok.backend_tokenizer.model.tokenize(new_tok.convert_ids_to_tokens(i))
                rows.append(emb[[old_tok.convert_tokens_to_ids(p.value) for p in pieces]].mean(0))
    model.resize_token_embeddings(len(new_tok), mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[n_old:] = torch.stack(rows)
    model.tie_weights()


def translated_words(old_tok, new_tok, lexicons: dict[str, str]) -> dict[str, str]:
    """The new tokens that `grow_embeddings` starts from a translation: token text -> English."""
    out = {}
    for i in range(len(old_tok), len(new_tok)):
        word = new_tok.decode([i]).strip().lower()
        if word in lexicons:
            out[new_tok.decode([i])] = lexicons[word]
    return out


def language_fact_batches(pool: ScenePool, tok, scenes_per_batch: int, rng: random.Random, languages, verify=True):
    """Endless batches of `data.fact_batches`' rows in `languages` (`translation.facts`; one
    language per row, drawn), on the real images: the image tokens, then every fact, the loss
    on each fact's answer (all of a lookup fact)."""
    image_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    while True:
        rows, scenes = [], []
        for _ in range(scenes_per_batch):
            s, language = rng.randrange(len(pool.scenes)), rng.choice(languages)
            ids, labels = [image_id] * IMAGE_SEQ_LENGTH, [-100] * IMAGE_SEQ_LENGTH
            space = " " if language == "de" else ""
            for question, answer in translation.facts(pool.scenes[s], rng, language, verify):
                q = tok(space + question, add_special_tokens=False)["input_ids"] if question else []
                a = tok(space + answer, add_special_tokens=False)["input_ids"]
                ids, labels = ids + q + a, labels + [-100] * len(q) + a
            rows.append((ids, labels))
            scenes.append(s)
        batch = collate(rows, tok.pad_token_id)
        batch["scenes"] = torch.tensor(scenes)
        batch["pixel_values"] = pool.pixels[batch["scenes"]].float()
        yield batch


def stage_target_languages(w: World, recipe: Recipe, seed: int, log: dict) -> None:
    """10. the grown tokenizer and embeddings, then the target in three languages."""
    c = recipe.languages
    english = w.tok
    texts = [t for lang in LANGUAGES[1:] for t in corpus(c.corpus_per_task, seed + c.corpus_seed, lang)]
    keep = corpus(recipe.data.corpus_per_task, seed + recipe.data.seed)  # stage 1's corpus: English as before
    w.tok = extend_tokenizer(english, texts, c.new_tokens, keep)
    w.processor = build_processor(w.tok)
    target = w.target
    grow_embeddings(target, english, w.tok)
    log["languages_vocabulary"] = len(w.tok)
    model = target.model
    params = set_trainable(target, model.multi_modal_projector, model.language_model, target.lm_head)
    stream = batches(w.pool, w.tok, c.mix, recipe.tokens, random.Random(seed + c.seed))
    log["target_languages_loss"] = fit(
        params, c.steps, c.lr, lambda s: loss_on(target, next(stream), w.pool, w.image_id), "10 target, three languages"
    )
    target.half().float()  # what ships is fp16: distil from exactly that


def distill_set(w: World, language: str, recipe: Recipe, seed: int) -> Distill:
    """11a. the target's greedy answers to fresh questions in `language` on training scenes."""
    c = recipe.language_distill[language]
    items = sample_items(w.pool, c.mix, c.items, seed + c.seed)
    prompts = [encode(w.tok, it.question, None)[0] for it in items]
    scenes = [it.scene for it in items]
    eos = w.tok.eos_token_id
    answers = greedy(
        w.target,
        prompts,
        w.tok.pad_token_id,
        eos,
        w.image_id,
        pixel_values=w.pool.pixels[scenes],
        max_new_tokens=c.max_new_tokens,
        desc=f"11 distillation set, {language}",
    )
    return Distill(scenes, [it.task for it in items], prompts, [a + [eos] for a in answers])


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
