"""Can a language model learn to look things up in its image tokens?
`python -m demo.lab.experiments.recall [--hidden 128] [--layers 2] [--steps 4000] [--form is|direct]`

More, with its measurements: docs/modules.md.
"""

import argparse
import random
import time

import torch
from tqdm import tqdm

from demo.lab.training.data import collate
from demo.lab.training.fit import fit
from demo.lab.training.slots import slot_ids, slot_vectors
from demo.lab.training.tokenization import IMAGE_SEQ_LENGTH, train_tokenizer
from demo.world.scenes import POSITIONS, Scene, sample_scenes
from demo.world.tasks import corpus

SEPARATOR = {"is": " is", "direct": ""}


def facts(scene: Scene, rng: random.Random) -> list[tuple[str, str, str]]:
    """(key, value, kind) for every lookup the scene answers, shuffled: shape -> colour when the
    shape is unique in the scene, place -> colour always."""
    shapes = [o.shape for o in scene.objects]
    out = [(o.shape, o.colour, "name") for o in scene.objects if shapes.count(o.shape) == 1]
    out += [(POSITIONS[o.cell], o.colour, "place") for o in scene.objects]
    rng.shuffle(out)
    return out


def row(tok, scene: Scene, rng: random.Random, form: str) -> tuple[list[int], list[tuple[int, str]]]:
    """Token ids (IMAGE_SEQ_LENGTH placeholders for the slots, then the facts) and, per fact, the index
    of its value's first token with the fact's kind ("name" or "place")."""
    ids, values = [tok.pad_token_id] * IMAGE_SEQ_LENGTH, []
    for key, value, kind in facts(scene, rng):
        ids += tok(f" {key}{SEPARATOR[form]}", add_special_tokens=False)["input_ids"]
        values.append((len(ids), kind))
        ids += tok(f" {value}.", add_special_tokens=False)["input_ids"]
    return ids, values


def embed(lm, tok, scenes: list[Scene], rows: list) -> tuple[dict, torch.Tensor]:
    """The padded batch and its input embeddings, with the scenes' slots in the first positions."""
    batch = collate([(ids, ids) for ids, _ in rows], tok.pad_token_id)
    embedding = lm.get_input_embeddings()
    x = embedding(batch["input_ids"])
    x[:, :IMAGE_SEQ_LENGTH] = slot_vectors(embedding, *slot_ids(tok, scenes))
    return batch, x


@torch.no_grad()
def accuracy(lm, tok, scenes: list[Scene], rows: list) -> dict[str, float]:
    lm.eval()
    batch, x = embed(lm, tok, scenes, rows)
    pred = lm(inputs_embeds=x, attention_mask=batch["attention_mask"]).logits.argmax(-1)
    tally: dict[str, list[int]] = {}
    for i, (ids, values) in enumerate(rows):
        for j, (at, kind) in enumerate(values):
            cell = tally.setdefault(f"{kind}, {'first' if j == 0 else 'later'}", [0, 0])
            cell[0] += pred[i, at - 1].item() == ids[at]  # the logit at position t predicts token t + 1
            cell[1] += 1
    lm.train()
    return {k: round(right / n, 3) for k, (right, n) in sorted(tally.items())}


def run(
    hidden: int,
    layers: int,
    steps: int,
    form: str,
    lr: float = 2e-3,
    scenes_per_step: int = 32,
    every: int = 250,
    seed: int = 0,
    heldout: int = 600,
    pool: int = 16000,
) -> list[dict]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tok = train_tokenizer(corpus(300, seed))
    train = sample_scenes("train", pool, seed)
    held = [s for s in sample_scenes("heldout", heldout, seed) if len(s.objects) >= 2]
    held_rows = [row(tok, s, random.Random(i), form) for i, s in enumerate(held)]
    heads = max(2, hidden // 64)
    lm = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=hidden,
            intermediate_size=4 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            head_dim=hidden // heads,
            max_position_embeddings=512,
            tie_word_embeddings=True,
            pad_token_id=tok.pad_token_id,
        )
    )
    rng, log, start, latest = random.Random(seed + 1), [], time.perf_counter(), float("nan")

    def record(step: int, loss: float) -> None:
        log.append(
            {"step": step, "seconds": round(time.perf_counter() - start), "loss": round(loss, 3)}
            | accuracy(lm, tok, held, held_rows)
        )
        tqdm.write(str(log[-1]))

    def loss_of(step: int) -> torch.Tensor:
        nonlocal latest
        if step and step % every == 0:  # after `step` updates
            record(step, latest)
        scenes = [rng.choice(train) for _ in range(scenes_per_step)]
        batch, x = embed(lm, tok, scenes, [row(tok, s, rng, form) for s in scenes])
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        labels[:, :IMAGE_SEQ_LENGTH] = -100
        loss = lm(inputs_embeds=x, attention_mask=batch["attention_mask"], labels=labels).loss
        latest = loss.item()
        return loss

    fit(list(dict.fromkeys(lm.parameters())), steps, lr, loss_of, f"recall ({form})")
    record(steps, latest)
    return log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--form", choices=sorted(SEPARATOR), default="is")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--every", type=int, default=250)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run(args.hidden, args.layers, args.steps, args.form, args.lr, every=args.every)


if __name__ == "__main__":
    main()
