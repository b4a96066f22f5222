"""The small training toolkit shared by every stage: an optimiser loop and the per-cell head.

Contract:
- `fit(params, steps, lr, loss_of, desc)` runs AdamW with a linear warm-up and a cosine decay
  to a tenth of `lr`, clips gradients at 1.0, shows a tqdm bar, and returns the mean loss of
  the last tenth of the steps. `loss_of(step)` builds a batch and returns a scalar loss.
  `params` may be AdamW's parameter groups, each with its own "scale" of `lr` (default 1).
- `CellHeads` predicts, for every image token of a vision tower, the shape, colour and size of
  the object in that grid cell (or "empty") and which cell it is: the auxiliary loss that
  pretrains the towers, so every attribute and the place are linearly readable.
"""

import math
from collections.abc import Callable

import torch
from torch import nn
from tqdm import tqdm

from demo.world.scenes import COLOURS, GRID, SHAPES, SIZES


def fit(
    params: list[nn.Parameter] | list[dict],
    steps: int,
    lr: float,
    loss_of: Callable[[int], torch.Tensor],
    desc: str,
    weight_decay: float = 0.01,
) -> float:
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.98), weight_decay=weight_decay)
    clipped = [p for group in opt.param_groups for p in group["params"]]
    warmup = max(1, steps // 20)
    losses = []
    bar = tqdm(range(steps), desc=desc, mininterval=2.0)
    for step in bar:
        # 1. learning rate: linear warm-up, then cosine from lr down to lr / 10
        t = (
            min(1.0, (step + 1) / warmup)
            if step < warmup
            else 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
        )
        for group in opt.param_groups:
            group["lr"] = lr * t * group.get("scale", 1.0)
        # 2. forward and backward
        loss = loss_of(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        # 3. clip and update
        torch.nn.utils.clip_grad_norm_(clipped, 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{sum(losses[-10:]) / len(losses[-10:]):.3f}")
    tail = losses[-max(1, steps // 10) :]
    return sum(tail) / len(tail)


class CellHeads(nn.Module):
    """Linear read-outs of shape / colour / size (+ empty) and of the cell's place, per image token."""

    def __init__(self, hidden: int):
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(hidden, n + 1) for n in (len(SHAPES), len(COLOURS), len(SIZES)))
        self.place = nn.Linear(hidden, GRID * GRID)

    def loss(self, feats: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
        # feats [B, 9, H]; cells [B, 9, 3] with -1 for an empty cell, mapped to the last class
        places = torch.arange(GRID * GRID).expand(feats.shape[0], -1)  # [B, 9]: token k sits in cell k
        total = nn.functional.cross_entropy(self.place(feats).flatten(0, 1), places.flatten())
        for k, head in enumerate(self.heads):
            logits = head(feats)  # [B, 9, n+1]
            target = torch.where(cells[..., k] < 0, logits.shape[-1] - 1, cells[..., k])
            total = total + nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
        return total

    @torch.no_grad()
    def accuracy(self, feats: torch.Tensor, cells: torch.Tensor) -> float:
        """Fraction of cells whose every attribute (or emptiness) is read correctly."""
        ok = torch.ones(cells.shape[:2], dtype=torch.bool)
        for k, head in enumerate(self.heads):
            pred = head(feats).argmax(-1)
            ok &= pred == torch.where(cells[..., k] < 0, len(head.bias) - 1, cells[..., k])
        return ok.float().mean().item()
