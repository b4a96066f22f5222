"""Train the world's models from scratch: `python -m demo.lab.training.train [--quick] [--out DIR] [--from WORLD]`.

Contract: deterministic for a seed and a thread count (default 2: alone on a 2-core machine two
threads make a training step 1.83x faster than one; the result does not depend on the load).
Writes, under OUT (default assets/world): target/, drafter-text/, drafter-image/ (fp16
safetensors, config, generation config, tokenizer; processor for the LLaVA models), examples/
and training_log.json (the recipe, parameter counts, probes, losses, seconds per stage).
`--quick` runs `recipe.QUICK`, a few steps per stage, into a temporary directory (the tests);
otherwise `recipe.FULL`, which makes the shipped weights.

More, with its measurements: docs/modules.md.
"""

import argparse
import json
import random
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from demo.lab.training.data import ScenePool, batches, drill_batches, fact_batches
from demo.lab.training.fit import fit
from demo.lab.training.models import build, n_params
from demo.lab.training.probes import slot_probe
from demo.lab.training.recipe import CURRICULUM, FULL, QUICK, Data, Distillation, Drills, Recipe
from demo.lab.training.stage_tools import World, align_projector, distilled, loss_on, pretrain_tower, set_trainable
from demo.lab.training.tokenization import build_processor, train_tokenizer
from demo.world import ASSETS
from demo.world.gallery import write_examples
from demo.world.tasks import corpus
from demo.world.tasks_en import EARLY


def stage_data(config: Data, seed: int) -> World:
    """1. corpus and tokenizer (pure Python), then the rendered training scene pool."""
    tok = train_tokenizer(corpus(config.corpus_per_task, seed + config.seed))
    processor = build_processor(tok)
    return World(tok, processor, ScenePool.build("train", config.scenes, seed + config.seed, processor))


def stage_target(w: World, recipe: Recipe, seed: int, log: dict, lap) -> None:
    """2-5c. tower pretraining, LM on slots, option drills, projector regression, end-to-end fine-tunes."""
    torch.manual_seed(seed + recipe.target_init_seed)
    target = w.target = build("target", w.tok)
    tower, projector = target.model.vision_tower, target.model.multi_modal_projector
    lm = (target.model.language_model, target.lm_head)
    # 2. target tower
    c = recipe.target_tower
    log["target_tower_cell_accuracy"] = pretrain_tower(tower, w.pool, c.steps, c.lr, seed + c.seed, "2 target tower")
    lap("2 target tower")
    # 3. target LM on slots, phase by phase (one optimiser and one schedule across the phases)
    params = set_trainable(target, *lm)
    c = recipe.slots
    streams = [
        fact_batches(w.pool, w.tok, c.fact_scenes, random.Random(seed + c.seed + k), verify=True)
        if mix == "facts"
        else batches(w.pool, w.tok, mix, recipe.tokens, random.Random(seed + c.seed + k), max_objects=most)
        for k, (_, mix, most) in enumerate(CURRICULUM)
    ]
    ends = [sum(c.phase_steps[: k + 1]) for k in range(len(CURRICULUM))]
    probes = log["target_slot_probe"] = {}
    fact_rng = random.Random(seed + c.fact_seed)

    def loss_of(step):
        phase = next(k for k, end in enumerate(ends) if step < end)
        if step and (step % c.probe_every == 0 or step in ends):  # progress of the lookup, in the log
            probes[step] = slot_probe(target, w.tok, w.image_id, c.probe_n)
            tqdm.write(f"slot probe at step {step} ({CURRICULUM[phase][0]}): {probes[step]}")
        if phase and fact_rng.random() < c.fact_share:  # keep the lookup in practice
            return loss_on(target, next(streams[0]), w.pool, w.image_id, slots=True)
        return loss_on(target, next(streams[phase]), w.pool, w.image_id, slots=True)

    log["target_slot_loss"] = fit(params, ends[-1], c.lr, loss_of, "3 target LM on slots")
    probes[ends[-1]] = slot_probe(target, w.tok, w.image_id, c.probe_n)
    tqdm.write(f"slot probe at the end: {probes[ends[-1]]}")
    lap("3 target LM on slots")
    # 3b. the restated option checks and letter that end multiple choice, once the LM reads its
    # slots, every other batch the task mix
    log["target_drill_loss"] = drill(
        w, recipe.drills, recipe.tokens, seed, params, "3b target option drills", slots=True
    )
    log["target_drill_probe"] = slot_probe(target, w.tok, w.image_id, recipe.slots.probe_n)
    tqdm.write(f"slot probe after the drills: {log['target_drill_probe']}")
    lap("3b target option drills")
    # 4. target projector regression onto the slots
    set_trainable(target, projector)
    c = recipe.projector
    log["target_projector_r2"] = align_projector(target, w.pool, c.steps, c.lr, seed + c.seed, "4 target projector")
    lap("4 target projector")
    # 5. target end to end on real images (tower frozen); 5b. the same, leaning on captions;
    # 5c. the caption mix again at a third of the peak learning rate. Each has its own schedule.
    params = set_trainable(target, projector, *lm)
    for key, c, name in (
        ("target_finetune_loss", recipe.finetune, "5 target end to end"),
        ("target_caption_loss", recipe.captions, "5b target captions"),
        ("target_gentle_loss", recipe.gentle, "5c target gentle captions"),
    ):
        stream = batches(w.pool, w.tok, c.mix, recipe.tokens, random.Random(seed + c.seed))
        log[key] = fit(params, c.steps, c.lr, lambda s: loss_on(target, next(stream), w.pool, w.image_id), name)
        lap(name)
    target.set_attn_implementation("sdpa")  # as shipped
    target.half().float()  # fp16, where worlds were once saved (module docstring): the shipped weights hold it


def drill(w: World, config: Drills, tokens: int, seed: int, params: list, desc: str, slots: bool) -> float:
    """3b and 5d: option drills (multiple choice's early form) every even step, `config.mix`
    every odd one, on slots or on real images; returns the loss."""
    drills = drill_batches(w.pool, w.tok, config.rows, random.Random(seed + config.drill_seed), task=EARLY)
    mixed = batches(w.pool, w.tok, config.mix, tokens, random.Random(seed + config.mix_seed))
    return fit(
        params,
        config.steps,
        config.lr,
        lambda s: loss_on(w.target, next(mixed if s % 2 else drills), w.pool, w.image_id, slots=slots),
        desc,
    )


def stage_image_drills(w: World, recipe: Recipe, seed: int, log: dict) -> None:
    """5d. stage 3b's option drills again, on real images, every other batch stage 5's mix."""
    target = w.target
    params = set_trainable(target, target.model.multi_modal_projector, target.model.language_model, target.lm_head)
    log["target_image_drill_loss"] = drill(
        w, recipe.image_drills, recipe.tokens, seed, params, "5d target option drills on images", slots=False
    )
    target.half().float()  # fp16, where worlds were once saved (module docstring): the shipped weights hold it


def stage_final_form(w: World, recipe: Recipe, seed: int, log: dict) -> None:
    """5e. multiple choice in its final form (`tasks_en.EARLY` says how it differs), whole answers
    (the loss on the explanation too), on real images, with a fresh schedule: in every five
    batches two of multiple choice, two of stage 5's mix and one of multiple choice on
    one-object scenes."""
    target, c = w.target, recipe.final_form
    params = set_trainable(target, target.model.multi_modal_projector, target.model.language_model, target.lm_head)
    mc = batches(w.pool, w.tok, {"multiple_choice": 1.0}, recipe.tokens, random.Random(seed + c.mc_seed))
    mixed = batches(w.pool, w.tok, c.mix, recipe.tokens, random.Random(seed + c.mix_seed))
    one = batches(
        w.pool, w.tok, {"multiple_choice": 1.0}, recipe.tokens, random.Random(seed + c.one_object_seed), max_objects=1
    )
    streams = (mc, mixed, mc, mixed, one)
    log["target_final_form_loss"] = fit(
        params,
        c.steps,
        c.lr,
        lambda s: loss_on(target, next(streams[s % len(streams)]), w.pool, w.image_id),
        "5e target multiple choice, final form",
    )
    target.half().float()  # what ships is fp16: distil from exactly that


def stage_distill(w: World, config: Distillation, seed: int, log: dict) -> None:
    """6. the target's greedy answers to fresh questions on training scenes."""
    w.distill = distilled(w, config, seed, "6 distillation set")
    log["distill_answer_tokens"] = sum(len(a) for a in w.distill.answers)


def stage_text_drafter(w: World, recipe: Recipe, seed: int, log: dict) -> None:
    """7. corpus pretraining, then the target's answers with the image tokens removed."""
    c = recipe.text_drafter
    torch.manual_seed(seed + c.init_seed)
    drafter = w.text_drafter = build("drafter-text", w.tok)
    params = list(dict.fromkeys(drafter.parameters()))
    stream = batches(
        w.pool, w.tok, c.pretrain_mix, recipe.drafter_tokens, random.Random(seed + c.pretrain.seed), image=False
    )

    def corpus_loss(step):
        batch = next(stream)
        batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)  # all text
        return drafter(**batch).loss

    log["drafter_text_pretrain_loss"] = fit(
        params, c.pretrain.steps, c.pretrain.lr, corpus_loss, "7a text drafter pretrain"
    )
    stream = w.distill.batches(w.pool, w.tok, recipe.drafter_tokens, random.Random(seed + c.distill.seed), image=False)
    log["drafter_text_distill_loss"] = fit(
        params, c.distill.steps, c.distill.lr, lambda s: drafter(**next(stream)).loss, "7b text drafter distil"
    )
    drafter.half().float()


def stage_image_drafter(w: World, recipe: Recipe, seed: int, log: dict) -> None:
    """8. own tower, the text drafter's LM, the target's answers on slots, projector, real images."""
    c = recipe.image_drafter
    torch.manual_seed(seed + c.init_seed)
    drafter = w.image_drafter = build("drafter-image", w.tok)
    lm = (drafter.model.language_model, drafter.lm_head)
    projector = drafter.model.multi_modal_projector
    # a. tower
    log["drafter_image_tower_cell_accuracy"] = pretrain_tower(
        drafter.model.vision_tower, w.pool, c.tower.steps, c.tower.lr, seed + c.tower.seed, "8a image drafter tower"
    )
    # b. LM: the text drafter's weights, then the target's answers with slots for the image
    drafter.model.language_model.load_state_dict(w.text_drafter.model.state_dict())
    drafter.lm_head.load_state_dict(w.text_drafter.lm_head.state_dict())
    params = set_trainable(drafter, *lm)
    stream = w.distill.batches(w.pool, w.tok, recipe.drafter_tokens, random.Random(seed + c.slots.seed), image=True)
    log["drafter_image_slot_loss"] = fit(
        params,
        c.slots.steps,
        c.slots.lr,
        lambda s: loss_on(drafter, next(stream), w.pool, w.image_id, slots=True),
        "8b image drafter on slots",
    )
    # c. projector regression onto its slots
    set_trainable(drafter, projector)
    log["drafter_image_projector_r2"] = align_projector(
        drafter, w.pool, c.projector.steps, c.projector.lr, seed + c.projector.seed, "8c image drafter projector"
    )
    # d. the target's answers on real images, b's stream going on
    params = set_trainable(drafter, projector, *lm)
    log["drafter_image_finetune_loss"] = fit(
        params,
        c.finetune_steps,
        c.finetune_lr,
        lambda s: loss_on(drafter, next(stream), w.pool, w.image_id),
        "8d image drafter fine-tune",
    )
    drafter.set_attn_implementation("sdpa")
    drafter.half().float()


def save(w: World, out: Path, log: dict) -> None:
    """9. fp16 weights, the tokenizer everywhere, the processor with the LLaVA models, the gallery."""
    out.mkdir(parents=True, exist_ok=True)
    for name, model in (("target", w.target), ("drafter-text", w.text_drafter), ("drafter-image", w.image_drafter)):
        for p in model.parameters():
            p.requires_grad_(True)
        model.to(torch.float16).save_pretrained(out / name)
        model.float()
        (w.processor if name != "drafter-text" else w.tok).save_pretrained(out / name)
        log[f"params_{name}"] = n_params(model)
    write_examples(out / "examples")


def train(recipe: Recipe, out: Path, seed: int, threads: int = 2, then=None) -> dict:
    """Stages 1-9 into `out`; `then(w, recipe, seed, out, log, lap)` runs more stages after them
    (`multilingual.train_languages`: stages 10-12), before the log is written."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _train(recipe, out, seed, threads, then)
    finally:
        torch.set_num_threads(before)  # a caller's (the tests') setting is not ours to change


def _train(recipe: Recipe, out: Path, seed: int, threads: int, then) -> dict:
    timings = {}
    log = {"seed": seed, "threads": threads, "recipe": asdict(recipe)}
    clock = time.perf_counter()

    def lap(stage: str):
        nonlocal clock
        timings[stage] = round(time.perf_counter() - clock, 1)
        print(f"[{stage}] {timings[stage]:.1f} s", flush=True)
        clock = time.perf_counter()

    random.seed(seed)
    w = stage_data(recipe.data, seed)
    lap("1 data + tokenizer")
    stage_target(w, recipe, seed, log, lap)
    stage_image_drills(w, recipe, seed, log)
    lap("5d target option drills on images")
    stage_final_form(w, recipe, seed, log)
    lap("5e target multiple choice, final form")
    stage_distill(w, recipe.distill, seed, log)
    lap("6 distillation set")
    stage_text_drafter(w, recipe, seed, log)
    lap("7 text drafter")
    stage_image_drafter(w, recipe, seed, log)
    lap("8 image drafter")
    save(w, out, log)
    lap("9 save")
    if then is not None:  # stages 10-12, not yet in the shipped world (docs/world-languages.md)
        then(w, recipe, seed, out, log, lap)
    log["seconds"] = timings
    log["seconds_total"] = round(sum(timings.values()), 1)
    (out / "training_log.json").write_text(json.dumps(log, indent=1) + "\n")
    return log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="recipe.QUICK: a few steps per stage, into a temp dir")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default assets/world)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads; results are exact for a given count")
    args = parser.parse_args()
    out = args.out or (Path(tempfile.mkdtemp(prefix="world-quick-")) if args.quick else ASSETS)
    recipe = QUICK if args.quick else FULL
    log = train(recipe, out, args.seed, args.threads)
    print(json.dumps({"out": str(out), "seconds_total": log["seconds_total"]}))


if __name__ == "__main__":
    main()
