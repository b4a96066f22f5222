"""The speculator's draft step in NumPy, for a CPU and float32 (`feature.SpeculatorDrafter`).

On a CPU a speculator's step is a few small matrix-vector products, and each torch operation
costs a few microseconds of dispatch (a step makes about twenty): the same step in NumPy, its
affine maps folded ahead of time, takes about a third of the time (docs/drafters-feature.md
measures it). It computes what `heads.Speculator.step` computes, in another order:

    look      z = norm(s); q = Wq (g * z + b) / sqrt(d) = (Wq * g / sqrt(d)) z + Wq b / sqrt(d);
              scores_h = K_h q_h (every head in one product with the keys as a block-diagonal
              matrix); s += sum_h softmax(scores_h) (V_h Wout_h^T): the values are made and
              multiplied by the output projection once per run (`prepare`), so a step reads them
              in one product
    stage     x = [g_s * norm(s) + b_s, g_e * norm(e) + b_e], s' = s + Wd silu(Wu x + bu) + bd:
              the norms' scales and shifts go into Wu and bu, and Wu's token half times
              norm(e), plus bu, is a table over the vocabulary, made once: a step adds one row
    logits    E s' (the target's own output embedding)

`norm` is LayerNorm without its affine part (eps 1e-5, as nn.LayerNorm), applied as a scalar on
the product it feeds. Rounding differs from
the torch modules' in the last bits; `SpeculatorDrafter` checks the two agree at load and keeps
the torch step where they do not.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from demo.engine import heads


def _np(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().float().cpu().numpy())


def _centred(x: np.ndarray, eps: float = 1e-5) -> tuple[np.ndarray, float]:
    """LayerNorm without its scale and shift, as (x - mean, 1 / std): the caller multiplies a
    product of the centred vector by the scalar, which saves a pass over it."""
    c = x - x.mean()
    return c, 1.0 / math.sqrt(float(c @ c) / len(c) + eps)


class _Stage:
    """One `heads.Stage`, folded."""

    def __init__(self, stage: heads.Stage, embed: torch.Tensor):
        C = stage.norm_s.normalized_shape[0]
        up, bias = stage.up.weight.detach().float(), stage.up.bias.detach().float()  # [I, 2C], [I]
        on_s, on_e = up[:, :C], up[:, C:]
        self.on_s = _np(on_s * stage.norm_s.weight.detach().float())  # [I, C]
        bias = bias + on_s @ stage.norm_s.bias.detach().float() + on_e @ stage.norm_e.bias.detach().float()
        with torch.no_grad():  # every token's half of the product, and the bias, once: [V, I]
            scaled = on_e * stage.norm_e.weight.detach().float()
            normed = torch.nn.functional.layer_norm(embed.float(), (C,))
            self.token_rows = _np(normed @ scaled.T + bias)
        self.down, self.down_bias = _np(stage.down.weight), _np(stage.down.bias)  # [C, I], [C]

    def __call__(self, s: np.ndarray, token: int) -> np.ndarray:
        c, r = _centred(s)
        h = self.on_s @ c
        h *= r
        h += self.token_rows[token]
        t = np.exp(-h)
        t += 1.0
        h /= t  # SiLU: h * sigmoid(h)
        out = self.down @ h
        out += s
        out += self.down_bias
        return out


class NumpySpeculator:
    """`heads.Speculator`'s step for one drafter: weights folded once, a run's prompt once."""

    def __init__(self, net: heads.Speculator, E: torch.Tensor, embed: torch.Tensor):
        self.stages = [_Stage(stage, embed) for stage in net.stages]
        self.E = _np(E)  # [V, C]
        self.look = net.look
        if net.look is not None:
            self.heads, self.dim = net.look.heads, net.look.dim
            q, norm = net.look.q.weight.detach().float() / self.dim**0.5, net.look.norm_s  # scores' scale folded in
            self.q_w = _np(q * norm.weight.detach().float())  # [h*d, C]
            self.q_b = _np(q @ norm.bias.detach().float())

    @torch.inference_mode()
    def prepare(self, rows: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """The prompt's rows [P, C] -> the keys as one block-diagonal matrix [h * P, h * d] (each
        head's scores in one product) and the values times the output projection [h * P, C]."""
        keys, values = self.look.prepare(rows.float())  # [h, P, d] each
        out = self.look.out.weight.detach().float().unflatten(1, (self.heads, self.dim))  # [C, h, d]
        seen = torch.einsum("hpd,chd->hpc", values, out)  # [h, P, C]
        return _np(torch.block_diag(*keys)), _np(seen.flatten(0, 1))

    def step(self, k: int, s: np.ndarray, token: int, seen) -> tuple[np.ndarray, np.ndarray]:
        """The state after the k-th draft step from state s [C] and the token just drafted, and
        its logits [V]."""
        if self.look is not None:
            keys, values = seen
            c, r = _centred(s)
            q = self.q_w @ c
            q *= r
            q += self.q_b
            scores = (keys @ q).reshape(self.heads, -1)  # [h, P]
            scores -= scores.max(-1, keepdims=True)
            w = np.exp(scores)
            w /= w.sum(-1, keepdims=True)
            s = s + w.reshape(-1) @ values
        s = self.stages[min(k, len(self.stages) - 1)](s, token)
        return s, self.E @ s


def supported(device: torch.device, net) -> str | None:
    """Why the NumPy step cannot run this speculator, or None when it can."""
    if device.type != "cpu":
        return f"the drafter is on {device.type}, not the CPU"
    if not isinstance(net, heads.Speculator):
        return "not a speculator"
    return None


def agrees(numpy_step: NumpySpeculator, net: heads.Speculator, E: torch.Tensor, embed: torch.Tensor) -> str | None:
    """Check the NumPy step against the torch modules on a seeded state and prompt, over three
    chained steps: None where the logits agree (to 1e-3 of their scale) and pick the same token,
    else why not."""
    g = torch.Generator().manual_seed(0)
    C = E.shape[1]
    s = torch.randn(C, generator=g) * 3
    rows = torch.randn(7, C, generator=g) * 3
    with torch.inference_mode():
        seen = net.look.prepare(rows) if net.look is not None else None
        seen_np = numpy_step.prepare(rows) if net.look is not None else None
        s_np, token = _np(s), 1
        for k in range(3):
            s = net.step(k, s, embed[token].float(), seen)
            logits = s @ E.float().T
            s_np, logits_np = numpy_step.step(k, s_np, token, seen_np)
            scale = float(logits.abs().max())
            gap = float(np.abs(logits_np - logits.numpy()).max())
            if gap > 1e-3 * max(scale, 1.0) or int(logits.argmax()) != int(logits_np.argmax()):
                return f"the NumPy step's logits differ from the torch step's by {gap:.2e} at step {k}"
            token = int(logits.argmax())
    return None
