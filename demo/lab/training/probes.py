"""The probes stage 3 logs: does the target's LM read its slots, and copy multiple choice's options?

Contract: both are teacher-forced argmax checks on held-out questions, with slots in place of the
image (see slots.py), so they work before any projector exists. They change no weight and
draw from no shared random stream, so probing does not change what a run trains; `slot_probe`
leaves the model in training mode, as stage 3 has it.
`slot_probe` returns the share per short task and `option_probe`'s multiple-choice share, as
the training log records them.
"""

import torch

from demo.lab.training.data import check_row, collate, encode
from demo.lab.training.recipe import SHORT
from demo.lab.training.slots import embeds_with_slots, slot_ids, slot_vectors
from demo.lab.training.tokenization import word_of_each_token
from demo.world.tasks import examples, image_grounded_words
from demo.world.tasks_en import EARLY


@torch.no_grad()
def slot_probe(model, tok, image_id: int, n: int = 100) -> dict[str, float]:
    """Held-out short questions with slots for the image: the share of answers whose every
    image-grounded token (colour, shape, count, place words) is the LM's argmax given the
    reference prefix. The phrasing is free, the facts are not; this says whether the LM reads
    its image tokens before any projector exists."""
    model.eval()
    grounded = image_grounded_words() | {"yes"}  # and "no", a count word already
    out = option_probe(model, tok, image_id, n)
    for task in SHORT:
        exs = examples("heldout", task, n, seed=11, render_images=False)
        rows = [encode(tok, e.question, e.answer) for e in exs]
        batch = collate(rows, tok.pad_token_id)
        vectors = slot_vectors(model.get_input_embeddings(), *slot_ids(tok, [e.scene for e in exs]))
        del batch["labels"]
        pred = model(**embeds_with_slots(model, batch, vectors, image_id)).logits.argmax(-1)
        right = 0
        for i, (ids, labels) in enumerate(rows):
            start = labels.count(-100)
            words = word_of_each_token(tok, ids[start:])
            # the logit at position j predicts token j + 1
            right += all(pred[i, start + k - 1].item() == ids[start + k] for k, w in enumerate(words) if w in grounded)
        out[task] = round(right / len(rows), 3)
    model.train()
    return out


@torch.no_grad()
def option_probe(model, tok, image_id: int, n: int = 100) -> dict[str, float]:
    """Multiple choice's option checks and letter, teacher-forced: the share of held-out questions
    (slots for the image) whose checks, letter and end are the LM's argmax token by token, given
    the reference's prompt and reason before them."""
    training = model.training
    model.eval()
    exs = examples("heldout", "multiple_choice", n, seed=11, render_images=False, form=EARLY)  # 3b-5d's form
    rows = [check_row(tok, e.question, e.answer) for e in exs]
    vectors = slot_vectors(model.get_input_embeddings(), *slot_ids(tok, [e.scene for e in exs]))
    batch = collate(rows, tok.pad_token_id)
    del batch["labels"]
    pred = model(**embeds_with_slots(model, batch, vectors, image_id)).logits.argmax(-1)
    model.train(training)
    return {"multiple_choice": all_right(pred, rows, [labels.count(-100) for _, labels in rows])}


def all_right(pred: torch.Tensor, rows: list[tuple], starts: list[int]) -> float:
    """The share of rows whose every token from its start on is the argmax at the position before."""
    right = sum(
        all(pred[i, j - 1].item() == ids[j] for j in range(start, len(ids)))
        for i, ((ids, _), start) in enumerate(zip(rows, starts))
    )
    return round(right / len(rows), 3)
