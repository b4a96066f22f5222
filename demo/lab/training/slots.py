"""Symbolic image tokens ("slots"): the teacher signal that aligns a projector to its LM.

Contract: a scene's slot for grid cell k is the sum of the LM's input embeddings of the words
that describe that cell: its position name ("top left") and, if an object is there, its size,
colour and shape ("large red circle"). `slot_ids(tok, scenes)` gives those word ids per cell
(padded, with a mask); `slot_vectors(embedding, ids, mask)` sums them, [S, 9, H].
Training uses slots twice: the LM first learns the tasks with slots in place of the image
tokens (clean inputs, cheap, and with tied embeddings copying a word out of a slot works from
the first step), then the projector is regressed onto the slots, so that the vision tower's
features arrive in the form the LM already reads. The shipped models never see a slot.
"""

import torch

from demo.world.scenes import GRID, POSITIONS, Scene


def slot_ids(tok, scenes: list[Scene]) -> tuple[torch.Tensor, torch.Tensor]:
    """Word ids per cell: ids [S, 9, K] (0 where padded) and mask [S, 9, K]."""
    rows = []
    for scene in scenes:
        cells = {o.cell: o for o in scene.objects}
        row = []
        for k in range(GRID * GRID):
            words = " " + POSITIONS[k]
            if k in cells:
                o = cells[k]
                words += f" {o.size} {o.colour} {o.shape}"
            row.append(tok(words, add_special_tokens=False)["input_ids"])
        rows.append(row)
    width = max(len(ids) for row in rows for ids in row)
    ids = torch.zeros((len(scenes), GRID * GRID, width), dtype=torch.long)
    mask = torch.zeros((len(scenes), GRID * GRID, width))
    for s, row in enumerate(rows):
        for k, cell_ids in enumerate(row):
            ids[s, k, : len(cell_ids)] = torch.tensor(cell_ids)
            mask[s, k, : len(cell_ids)] = 1.0
    return ids, mask


def slot_vectors(embedding: torch.nn.Embedding, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (embedding(ids) * mask.unsqueeze(-1)).sum(-2)  # [S, 9, K, H] -> [S, 9, H]


def embeds_with_slots(model, batch: dict, slots: torch.Tensor, image_id: int) -> dict:
    """The batch with `inputs_embeds` in place of `input_ids`: text embedded, image tokens = slots."""
    embedding = model.get_input_embeddings()
    ids = batch["input_ids"]
    x = embedding(ids)  # [B, T, H]
    x = x.masked_scatter((ids == image_id).unsqueeze(-1), slots.reshape(-1, slots.shape[-1]).to(x.dtype))
    out = {k: v for k, v in batch.items() if k not in ("input_ids", "pixel_values")}
    out["inputs_embeds"] = x
    return out
