"""What the training stages are made of and what they hand on to each other (`train.py`'s stages
1-9, `multilingual.py`'s 10-12, the experiments).

    loss_on          the LM loss of a batch: on the real image, with slots in place of the image
                     (`slots.py`), or with no image
    pretrain_tower   per-cell attribute pretraining of a vision tower (`fit.CellHeads`)
    align_projector  the projector regressed onto the slots
    set_trainable    only the given modules' parameters learn
    Distill          the target's greedy answers, and endless batches of them
    World            the tokenizer, processor, scene pool and models the stages hand on
    distilled        a distillation set: the target's greedy answers to fresh questions (stages 6, 11a)
"""

import random
from dataclasses import dataclass

import torch

from demo.lab.training.data import ScenePool, collate, encode, sample_items
from demo.lab.training.fit import CellHeads, fit
from demo.lab.training.generate import greedy
from demo.lab.training.slots import embeds_with_slots, slot_vectors
from demo.lab.training.tokenization import IMAGE_TOKEN


def loss_on(model, batch: dict, pool: ScenePool, image_id: int, slots: bool = False) -> torch.Tensor:
    """LM loss of a batch: on the real image, with slots in place of the image, or with no image."""
    scenes = batch.pop("scenes", None)
    if slots:
        vectors = slot_vectors(model.get_input_embeddings(), pool.slot_ids[scenes], pool.slot_mask[scenes])
        batch = embeds_with_slots(model, batch, vectors, image_id)
    return model(**batch).loss


def pretrain_tower(tower, pool: ScenePool, steps: int, lr: float, seed: int, desc: str) -> float:
    """Per-cell attribute pretraining; returns the held-back cell accuracy."""
    heads = CellHeads(tower.config.hidden_size)
    g = torch.Generator().manual_seed(seed)
    n_fit = len(pool.scenes) - min(512, len(pool.scenes) // 8)  # the last scenes are held back

    def loss_of(step):
        idx = torch.randint(0, n_fit, (64,), generator=g)
        feats = tower(pixel_values=pool.pixels[idx].float()).last_hidden_state[:, 1:]  # [B, 9, H], CLS dropped
        return heads.loss(feats, pool.cells[idx])

    fit(list(tower.parameters()) + list(heads.parameters()), steps, lr, loss_of, desc)
    with torch.no_grad():
        feats = tower(pixel_values=pool.pixels[n_fit:].float()).last_hidden_state[:, 1:]
    return heads.accuracy(feats, pool.cells[n_fit:])


def align_projector(model, pool: ScenePool, steps: int, lr: float, seed: int, desc: str) -> float:
    """Regress the projector's outputs onto the slots; returns the held-back R^2."""
    with torch.no_grad():
        feats = torch.cat(
            [
                model.model.vision_tower(pixel_values=pool.pixels[i : i + 256].float()).last_hidden_state[:, 1:]
                for i in range(0, len(pool.scenes), 256)
            ]
        )  # [S, 9, Hv]
        targets = slot_vectors(model.get_input_embeddings(), pool.slot_ids, pool.slot_mask)  # [S, 9, H]
    projector = model.model.multi_modal_projector
    g = torch.Generator().manual_seed(seed)
    n_fit = len(pool.scenes) - min(512, len(pool.scenes) // 8)

    def loss_of(step):
        idx = torch.randint(0, n_fit, (256,), generator=g)
        return torch.nn.functional.mse_loss(projector(feats[idx]), targets[idx])

    fit(list(projector.parameters()), steps, lr, loss_of, desc, weight_decay=0.0)
    with torch.no_grad():
        held = targets[n_fit:]
        mse = torch.nn.functional.mse_loss(projector(feats[n_fit:]), held)
        return 1.0 - (mse / held.var(dim=(0, 1)).mean()).item()


def set_trainable(model, *modules) -> list[torch.nn.Parameter]:
    for p in model.parameters():
        p.requires_grad_(False)
    params = list(dict.fromkeys(p for m in modules for p in m.parameters()))  # tied weights once
    for p in params:
        p.requires_grad_(True)
    return params


@dataclass
class Distill:
    """The target's greedy answers: prompt ids (with image tokens), answer ids (+ <|end|>)."""

    scenes: list[int]
    tasks: list[str]
    prompts: list[list[int]]
    answers: list[list[int]]

    def batches(self, pool: ScenePool, tok, tokens: int, rng: random.Random, image: bool):
        """Endless batches of one task each; with `image`, pixels and pool indices."""
        pad_id, image_id = tok.pad_token_id, tok.convert_tokens_to_ids(IMAGE_TOKEN)
        by_task = {t: [i for i, x in enumerate(self.tasks) if x == t] for t in dict.fromkeys(self.tasks)}
        tasks, weights = list(by_task), [len(v) for v in by_task.values()]
        while True:
            group = by_task[rng.choices(tasks, weights)[0]]
            mean_len = sum(len(self.prompts[i]) + len(self.answers[i]) for i in group) / len(group)
            idx = rng.sample(group, min(len(group), max(1, int(tokens / mean_len))))
            rows = []
            for i in idx:
                prompt = self.prompts[i] if image else [t for t in self.prompts[i] if t != image_id]
                rows.append((prompt + self.answers[i], [-100] * len(prompt) + self.answers[i]))
            batch = collate(rows, pad_id)
            if image:
                batch["scenes"] = torch.tensor([self.scenes[i] for i in idx])
                batch["pixel_values"] = pool.pixels[batch["scenes"]].float()
            yield batch


@dataclass
class World:
    """Everything the stages hand on to each other."""

    tok: object
    processor: object
    pool: ScenePool
    target: object = None
    distill: Distill = None
    text_drafter: object = None
    image_drafter: object = None

    @property
    def image_id(self) -> int:
        return self.tok.convert_tokens_to_ids(IMAGE_TOKEN)


def distilled(w: World, config, seed: int, desc: str) -> Distill:
    """The target's greedy answers to `config.items` fresh questions of `config.mix` on training
    scenes (`recipe.Distillation`: stage 6's, and stage 11a's per language), each ended by <|end|>."""
    items = sample_items(w.pool, config.mix, config.items, seed + config.seed)
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
        max_new_tokens=config.max_new_tokens,
        desc=desc,
    )
    return Distill(scenes, [it.task for it in items], prompts, [a + [eos] for a in answers])
