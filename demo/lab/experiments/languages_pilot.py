"""Short pilots of stage 10 (the target in three languages), to choose between ideas before a full run.

`python -m demo.lab.experiments.languages_pilot --from assets/world --steps 300 [--init grounded]
[--facts 100] [--fact-share 0.2] [--mix short] [--n 40]`

More, with its measurements: docs/modules.md.
"""

import argparse
import json
import random
import time
from pathlib import Path

import torch

from demo.lab.training.data import ScenePool, batches, collate, item_batch, sample_items
from demo.lab.training.evaluate import answers
from demo.lab.training.fit import fit
from demo.lab.training.new_tokens import grow_embeddings, kept_english_loss, new_rows_only, quiet_directions
from demo.lab.training.recipe import ENGLISH_KEEP, MIX, SHORT
from demo.lab.training.stage_tools import loss_on, set_trainable
from demo.lab.training.tokenization import IMAGE_SEQ_LENGTH, IMAGE_TOKEN, build_processor, extend_tokenizer
from demo.world import translation
from demo.world.scoring import score
from demo.world.tasks import LANGUAGES, corpus, in_language

EVAL_TASKS = ("vqa_colour", "vqa_shape", "caption", "multiple_choice")
MAX_TOKENS = {"vqa_colour": 40, "vqa_shape": 40, "caption": 90, "multiple_choice": 200}


def pilot_mix(kind: str, english: float) -> dict[str, float]:
    new = {t: 1.0 for t in SHORT} | {"caption": 2.0} if kind == "short" else dict(MIX)
    total = sum(new.values())
    out = {in_language(t, lang): (1 - english) / 2 * w / total for lang in LANGUAGES[1:] for t, w in new.items()}
    return out | {t: english * w for t, w in ENGLISH_KEEP.items()}


@torch.no_grad()
def quick_eval(target, processor, n: int, tasks=EVAL_TASKS) -> dict:
    out = {}
    for lang in LANGUAGES:
        out[lang] = {}
        for task in tasks:
            examples, texts = answers(target, processor, task, n, MAX_TOKENS[task], seed=3, language=lang)
            out[lang][task] = round(sum(score(task, e, t) for e, t in zip(examples, texts)) / len(texts), 3)
            out[lang].setdefault("samples", []).append(texts[0])
    target.train()
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="source", type=Path, required=True)
    p.add_argument("--init", choices=("pieces", "grounded", "lexicon"), default="grounded")
    p.add_argument("--offset", type=float, default=0.0, help="each language's direction in its new rows")
    p.add_argument("--directions", choices=("quiet", "random"), default="quiet")
    p.add_argument("--facts", type=int, default=0, help="steps of lookup facts in German and Chinese first")
    p.add_argument("--fact-scenes", type=int, default=24)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--fact-share", type=float, default=0.0)
    p.add_argument("--mix", choices=("short", "full"), default="short")
    p.add_argument("--english", type=float, default=1 / 3)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--embedding-scale", type=float, default=0.0, help="only new rows learn, at this times --lr")
    p.add_argument("--kl", action="store_true", help="English batches: KL to the English target")
    p.add_argument("--scenes", type=int, default=4000)
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-mc", action="store_true", help="multiple choice too, at the end (slow: long answers)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    clock = time.perf_counter()
    english = AutoProcessor.from_pretrained(args.source / "target").tokenizer
    target = LlavaForConditionalGeneration.from_pretrained(args.source / "target", dtype=torch.float32)
    teacher = LlavaForConditionalGeneration.from_pretrained(args.source / "target", dtype=torch.float32).eval()
    for q in teacher.parameters():
        q.requires_grad_(False)
    texts = [t for lang in LANGUAGES[1:] for t in corpus(2000, 0, lang)]
    tok = extend_tokenizer(english, texts, 512, corpus(2000, 0))
    processor = build_processor(tok)
    lex = None
    if args.init != "pieces":
        lex = translation.lexicon("de", args.init == "lexicon") | translation.lexicon("zh", args.init == "lexicon")
    pool = ScenePool.build("train", args.scenes, args.seed + 100, processor)
    if args.directions == "quiet":
        items = sample_items(pool, ENGLISH_KEEP, 64, args.seed + 4)
        directions = quiet_directions(target, [item_batch(pool, tok, items[i : i + 16]) for i in range(0, 64, 16)])
    else:
        g = torch.Generator().manual_seed(args.seed + 5)
        directions = {lang: torch.randn(target.config.text_config.hidden_size, generator=g) for lang in ("de", "zh")}
        directions = {lang: d / d.norm() for lang, d in directions.items()}
    grow_embeddings(target, english, tok, lex, args.offset, directions)
    image_id = tok.convert_tokens_to_ids("<image>")
    params = set_trainable(target, target.model.multi_modal_projector, target.model.language_model, target.lm_head)
    if args.embedding_scale:
        params, _ = new_rows_only(target, len(english), args.embedding_scale)
    log = {"args": {k: str(v) for k, v in vars(args).items()}, "setup_s": round(time.perf_counter() - clock, 1)}
    evals = log["evals"] = {}
    facts = language_fact_batches(pool, tok, args.fact_scenes, random.Random(args.seed + 1), ("de", "zh"))
    if args.facts:
        clock = time.perf_counter()
        log["facts_loss"] = fit(
            params, args.facts, args.lr, lambda s: loss_on(target, next(facts), pool, image_id), "facts"
        )
        log["facts_s"] = round(time.perf_counter() - clock, 1)
        evals["after facts"] = quick_eval(target, processor, args.n, ("vqa_colour", "vqa_shape"))
        print(json.dumps(evals["after facts"], ensure_ascii=False), flush=True)
    stream = batches(pool, tok, pilot_mix(args.mix, args.english), 800, random.Random(args.seed + 2))
    fact_rng = random.Random(args.seed + 3)

    def loss_of(step):
        if step and args.eval_every and step % args.eval_every == 0:
            evals[step] = quick_eval(target, processor, args.n, ("vqa_colour", "vqa_shape"))
            print(step, json.dumps(evals[step], ensure_ascii=False), flush=True)
        use_facts = fact_rng.random() < args.fact_share
        batch = next(facts if use_facts else stream)
        if args.kl and not use_facts:
            batch.pop("scenes")
            return kept_english_loss(target, teacher, batch, len(english))
        return loss_on(target, batch, pool, image_id)

    clock = time.perf_counter()
    log["tasks_loss"] = fit(params, args.steps, args.lr, loss_of, "tasks")
    log["tasks_s"] = round(time.perf_counter() - clock, 1)
    evals["end"] = quick_eval(target, processor, args.n, EVAL_TASKS if args.eval_mc else EVAL_TASKS[:3])
    print(json.dumps(log, ensure_ascii=False))
    if args.save:
        target.half().save_pretrained(args.save / "target")
        processor.save_pretrained(args.save / "target")


if __name__ == "__main__":
    main()
