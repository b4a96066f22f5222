"""Networks that draft from the target's own last hidden state, and their checkpoints.

Both read f_j, the target's last hidden state at answer position j (after its final norm, so the
target's logits there are f_j @ E^T, E its tied output embedding), and both score tokens through
the target's own output embedding, frozen and not stored: a checkpoint holds only what it adds.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F


class Stage(nn.Module):
    """g(s, e) -> s': the next state from the previous state and the embedding of the token just sampled."""

    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.norm_s = nn.LayerNorm(hidden)
        self.norm_e = nn.LayerNorm(hidden)
        self.up = nn.Linear(2 * hidden, inner)
        self.down = nn.Linear(inner, hidden)

    def forward(self, s: torch.Tensor, e: torch.Tensor) -> torch.Tensor:  # [..., C] each
        x = torch.cat([self.norm_s(s), self.norm_e(e)], dim=-1)
        return s + self.down(F.silu(self.up(x)))


class Look(nn.Module):
    """s -> s + attention(s, the prompt's rows): `heads` heads of size `dim` from the speculator's
    state to the target's last hidden states over the prompt (keys and values made once per run,
    `prepare`). `out` starts at zero: an untrained Look is the identity."""

    def __init__(self, hidden: int, heads: int, dim: int):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.norm_p = nn.LayerNorm(hidden)
        self.norm_s = nn.LayerNorm(hidden)
        self.q = nn.Linear(hidden, heads * dim, bias=False)
        self.k = nn.Linear(hidden, heads * dim, bias=False)
        self.v = nn.Linear(hidden, heads * dim, bias=False)
        self.out = nn.Linear(heads * dim, hidden, bias=False)
        nn.init.zeros_(self.out.weight)

    def prepare(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompt's rows [..., P, C] -> keys and values [..., heads, P, dim]."""
        p = self.norm_p(rows)
        split = lambda x: x.unflatten(-1, (self.heads, self.dim)).transpose(-3, -2)  # noqa: E731
        return split(self.k(p)), split(self.v(p))

    def forward(self, s: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask=None) -> torch.Tensor:
        """States s [..., n, C] that read the same prompt, its `prepare`d keys and values
        [..., heads, P, dim] (and mask [..., P], True on the rows there, for padded batches)
        -> s plus what each read [..., n, C]."""
        q = self.q(self.norm_s(s)).unflatten(-1, (self.heads, self.dim))  # [..., n, heads, dim]
        scores = torch.einsum("...nhd,...hpd->...nhp", q, keys) / self.dim**0.5
        if mask is not None:
            scores = scores.masked_fill(~mask[..., None, None, :], float("-inf"))
        read = torch.einsum("...nhp,...hpd->...nhd", scores.softmax(-1), values)
        return s + self.out(read.flatten(-2))


class Speculator(nn.Module):
    """See the module docstring. `stages` g's (1 when shared); `look` heads of attention over the
    prompt's rows before every stage (0: none)."""

    def __init__(
        self, hidden: int, inner: int, stages: int, shared: bool, look: int = 0, look_dim: int = 64, vocab: int = 0
    ):
        super().__init__()
        self.hidden, self.inner, self.shared = hidden, inner, shared
        self.stages = nn.ModuleList(Stage(hidden, inner) for _ in range(1 if shared else stages))
        self.look = Look(hidden, look, look_dim) if look else None
        # the token ids it drafts from (`restrict`); None: the target's whole vocabulary
        self.register_buffer("vocab", torch.zeros(vocab, dtype=torch.long) if vocab else None)

    def restrict(self, ids: torch.Tensor) -> None:
        """Draft only from `ids` (the tokens the target wrote in the training answers): its
        logits elsewhere are -inf, so its q is zero there and a step scores only those rows of
        the output embedding."""
        self.vocab = ids.detach().long().unique().to(self.stages[0].up.weight.device)

    def settings(self) -> dict:
        out = dict(kind="feature", hidden=self.hidden, inner=self.inner, stages=len(self.stages), shared=self.shared)
        out |= dict(look=self.look.heads, look_dim=self.look.dim) if self.look else {}
        return out | (dict(vocab=len(self.vocab)) if self.vocab is not None else {})

    def step(self, k: int, s: torch.Tensor, e: torch.Tensor, seen=None) -> torch.Tensor:
        """The state after the k-th draft step (0-based) from state s and the token's embedding e;
        with `look`, `seen` is the prompt's (keys, values[, mask]) from `look.prepare`."""
        if self.look is not None:  # the states that read one prompt side by side: [*lead, n, C]
            lead = seen[0].shape[:-3]
            s = self.look(s.reshape(*lead, -1, s.shape[-1]), *seen).reshape(s.shape)
        return self.stages[min(k, len(self.stages) - 1)](s, e)


class MedusaHeads(nn.Module):
    """k residual heads: head i maps f to f + W_i silu(f) style features, scored by E."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.hidden = hidden
        self.heads = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(heads))

    def settings(self) -> dict:
        return dict(kind="medusa", hidden=self.hidden, heads=len(self.heads))

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        """f [..., C] -> the heads' features [..., k, C] (each scored by the target's E)."""
        return torch.stack([f + F.silu(head(f)) for head in self.heads], dim=-2)


def logits(s: torch.Tensor, E_rows: torch.Tensor, vocab: torch.Tensor | None, V: int) -> torch.Tensor:
    """States [..., C] -> logits over the target's vocabulary [..., V]: s @ E^T, where a speculator
    restricted to `vocab` (`Speculator.restrict`) scores only those rows (E_rows = E[vocab]) and is
    -inf elsewhere, so its q is zero there. Unrestricted (vocab None), E_rows is E."""
    if vocab is None:
        return s @ E_rows.T
    out = s.new_full((*s.shape[:-1], V), float("-inf"))
    out[..., vocab] = s @ E_rows.T
    return out


def build(settings: dict) -> Speculator | MedusaHeads:
    if settings["kind"] == "feature":
        look = dict(look=settings["look"], look_dim=settings["look_dim"]) if settings.get("look") else {}
        shape = (settings["hidden"], settings["inner"], settings["stages"], settings["shared"])
        return Speculator(*shape, **look, vocab=settings.get("vocab", 0))
    if settings["kind"] == "medusa":
        return MedusaHeads(settings["hidden"], settings["heads"])
    raise ValueError(f"unknown head kind {settings['kind']!r}")


def save(module: Speculator | MedusaHeads, path: Path, extra: dict | None = None) -> None:
    """fp16 weights (token ids as they are) and the settings (plus `extra`, e.g. the training
    figures) in the header."""
    from safetensors.torch import save_file

    half = lambda v: v.to(torch.float16) if v.is_floating_point() else v  # noqa: E731
    tensors = {k: half(v.detach()).contiguous() for k, v in module.state_dict().items()}
    meta = {"settings": json.dumps(module.settings()), "extra": json.dumps(extra or {})}
    save_file(tensors, str(path), metadata=meta)


class MismatchedCheckpoint(ValueError):
    """A checkpoint made for a target of another hidden size."""


def load(path: Path, hidden_size: int, device: torch.device | str = "cpu") -> Speculator | MedusaHeads:
    """The checkpoint at `path`, in float32 on `device`, for a target of `hidden_size`; refused
    with a sentence when it was trained for another hidden size."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        settings = json.loads(f.metadata()["settings"])
    if settings["hidden"] != hidden_size:
        raise MismatchedCheckpoint(
            f"{Path(path).name} reads hidden states of size {settings['hidden']}, but this target's are "
            f"{hidden_size}: it was trained for another target and cannot draft for this one."
        )
    module = build(settings)
    module.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in load_file(str(path)).items()})
    return module.to(device).eval().requires_grad_(False)
