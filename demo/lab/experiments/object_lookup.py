"""How the target picks an object: `python -m demo.lab.experiments.object_lookup [--dir DIR] [--n N]`.

Contract: for held-out colour and shape questions about scenes of two or more objects, feeds
the reference answer to the target (teacher forcing, the real image through the shipped
processor, as the app does) and looks at one token: the looked-up colour or shape word. Prints,
per question kind, how often the argmax there is right, how often it names another object on
show instead, and the chance level of naming a random object on show. Questions are split by
their key: a *name* ("What colour is the circle?") or a *place* ("... the shape in the centre?").

More, with its measurements: docs/modules.md.
"""

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from demo.lab.training.data import collate, encode
from demo.lab.training.evaluate import command_line
from demo.lab.training.tokenization import word_of_each_token
from demo.world.scenes import COLOURS, SHAPES
from demo.world.scoring import position_in
from demo.world.tasks import Example, heldout_examples

GAPS = (0, 3, 10)
ATTRIBUTE = {"vqa_colour": ("colour", set(COLOURS)), "vqa_shape": ("shape", set(SHAPES))}


@dataclass(frozen=True)
class Probe:
    """One question: where its looked-up word is, and what a right or a near miss looks like."""

    example: Example
    ids: list[int]  # prompt (image tokens expanded) + reference answer + <|end|>
    at: int  # index in ids of the looked-up word's first token (predicted from at - 1)
    key: str  # "name" or "place"
    on_show: frozenset[str]  # the asked attribute of every object in the scene


def key_of(question: str) -> str:
    return "place" if position_in(question) is not None else "name"


def chance(example: Example, attribute: str, answer: str) -> float:
    """The share right when naming the attribute of a random object on show."""
    objects = example.scene.objects
    return sum(getattr(o, attribute) == answer for o in objects) / len(objects)


def probes(tok, task: str, n: int) -> list[Probe]:
    attribute, vocab = ATTRIBUTE[task]
    out = []
    for ex in heldout_examples(task, n):
        if len(ex.scene.objects) < 2:
            continue
        ids, labels = encode(tok, ex.question, ex.answer)
        start = labels.count(-100)
        words = word_of_each_token(tok, ids[start:])
        at = start + next(k for k, w in enumerate(words) if w in vocab)
        out.append(Probe(ex, ids, at, key_of(ex.question), frozenset(getattr(o, attribute) for o in ex.scene.objects)))
    return out


def gapped_positions(input_ids: torch.Tensor, image_id: int, gap: int) -> torch.Tensor:
    """Position ids 0..T-1, shifted by `gap` for every token after the row's last image token."""
    t = torch.arange(input_ids.shape[1])
    last = ((input_ids == image_id).long() * t).amax(1, keepdim=True)  # [B, 1]
    return t + gap * (t > last)


@torch.inference_mode()
def predictions(model, processor, items: list[Probe], gap: int, batch_size: int = 32) -> list[int]:
    """The target's argmax at each probe's looked-up word (right-padded batches, real images)."""
    tok = processor.tokenizer
    image_id = tok.convert_tokens_to_ids(tok.image_token)
    out = []
    for s in range(0, len(items), batch_size):
        chunk = items[s : s + batch_size]
        batch = collate([(p.ids, p.ids) for p in chunk], tok.pad_token_id)
        pixels = processor.image_processor([p.example.image for p in chunk], return_tensors="pt")["pixel_values"]
        kwargs = {"position_ids": gapped_positions(batch["input_ids"], image_id, gap)} if gap else {}
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], pixel_values=pixels, **kwargs
        ).logits
        out += [logits[i, p.at - 1].argmax().item() for i, p in enumerate(chunk)]
    return out


def lookup(directory: Path, n: int) -> dict:
    from demo.lab.training.evaluate import load_target

    model, processor = load_target(directory)
    model.eval()
    tok = processor.tokenizer
    result = {}
    for task, (attribute, _) in ATTRIBUTE.items():
        items = probes(tok, task, n)
        for gap in GAPS:
            tally = Counter()
            for p, pred in zip(items, predictions(model, processor, items, gap)):
                said = word_of_each_token(tok, [pred])[0]
                right = pred == p.ids[p.at]
                tally[p.key, "n"] += 1
                tally[p.key, "right"] += right
                tally[p.key, "other object"] += not right and said in p.on_show
                if gap == 0:
                    tally[p.key, "chance"] += chance(p.example, attribute, tok.decode([p.ids[p.at]]).strip())
            for key in ("name", "place"):
                row = result.setdefault(task, {}).setdefault(key, {"n": tally[key, "n"]})
                total = max(1, tally[key, "n"])
                row[f"right at gap {gap}"] = round(tally[key, "right"] / total, 3)
                if gap == 0:
                    row["other object on show"] = round(tally[key, "other object"] / total, 3)
                    row["chance"] = round(tally[key, "chance"] / total, 3)
    return result


def print_table(result: dict) -> None:
    print("\nThe looked-up word, teacher-forced (held-out scenes of 2-3 objects)")
    columns = ["n", "chance", "other object on show"] + [f"right at gap {g}" for g in GAPS]
    print(f"{'question':<22}" + "".join(f"{c:>22}" for c in columns))
    for task, rows in result.items():
        for key, row in rows.items():
            cells = [f"{row[c]:>22}" if c == "n" else f"{row[c]:>22.1%}" for c in columns]
            print(f"{task + ' by ' + key:<22}" + "".join(cells))
    print("\n'gap g': g unused positions between the image tokens and the text; gap 0 is the app.\n")


def main() -> None:
    description = __doc__.split("\n\n")[0]
    command_line(description, lookup, print_table, 300, "held-out questions per task (one-object scenes dropped)")


if __name__ == "__main__":
    main()
