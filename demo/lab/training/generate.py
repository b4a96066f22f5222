"""Batched greedy generation with transformers' `generate`, for distillation and evaluation.

Contract: `greedy(model, rows, pad_id, eos_id, image_id, pixel_values=None, ...)` takes prompt
id lists (already chat-templated and encoded), left-pads them in batches and returns, per
row, the generated ids up to and excluding `<|end|>`. The image token is never generated.
Rows keep their order. This is plain argmax decoding, the reference the SPD engine must match.
"""

import torch
from tqdm import tqdm

from demo.lab.training.data import collate


@torch.inference_mode()
def greedy(
    model,
    rows: list[list[int]],
    pad_id: int,
    eos_id: int,
    image_id: int,
    pixel_values: torch.Tensor | None = None,
    max_new_tokens: int = 200,
    batch_size: int = 48,
    desc: str = "generate",
) -> list[list[int]]:
    model.eval()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))  # similar prompt lengths together
    out: list[list[int]] = [[] for _ in rows]
    for start in tqdm(range(0, len(rows), batch_size), desc=desc, leave=False):
        idx = order[start : start + batch_size]
        batch = collate([(rows[i], rows[i]) for i in idx], pad_id, left=True)
        kwargs = {"pixel_values": pixel_values[idx].float()} if pixel_values is not None else {}
        gen = model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            **kwargs,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=eos_id,
            pad_token_id=pad_id,
            suppress_tokens=[image_id],
        )[:, batch["input_ids"].shape[1] :]
        for i, ids in zip(idx, gen.tolist()):
            out[i] = ids[: ids.index(eos_id)] if eos_id in ids else ids
    return out
