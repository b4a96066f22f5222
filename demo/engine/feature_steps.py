"""The speculator's draft step in NumPy, for a CPU and float32 (`feature.SpeculatorDrafter`).

It computes what `heads.Speculator.step` computes, its affine maps folded ahead of time, in
another order, without torch's per-operation dispatch.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from demo.engine import heads


def _np(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().float().cpu().numpy())


EXP_SAFE = 80.0  # |x| <= 80: exp(x) is a normal float32 (and 1,000 of them sum below its max)


def _centring(w: torch.Tensor) -> torch.Tensor:
    """A map W [n, C] -> [W - W's row means; 1/C] [n + 1, C]: its product with x is W's with x's
    centred copy, then x's mean, so a step never makes the centred copy."""
    C = w.shape[1]
    return torch.cat([w - w.mean(1, keepdim=True), torch.full((1, C), 1.0 / C)])


def _scale(x: np.ndarray, mean, eps: float = 1e-5) -> float:
    """LayerNorm's 1 / std of x, from its mean: the caller multiplies a product of x by it. The
    variance as E[x^2] - mean^2 loses no precision that counts here: on the target's states the
    squared mean is at most 4% of E[x^2], and the load-time check (`agrees`) compares the result."""
    mean = float(mean)
    return 1.0 / math.sqrt(max(float(x @ x) / len(x) - mean * mean, 0.0) + eps)


class _Stage:
    """One `heads.Stage`, folded."""

    def __init__(self, stage: heads.Stage, embed: torch.Tensor):
        C = stage.norm_s.normalized_shape[0]
        up, bias = stage.up.weight.detach().float(), stage.up.bias.detach().float()  # [I, 2C], [I]
        on_s, on_e = up[:, :C], up[:, C:]
        # rows centred, so that on_s @ s is on_s @ (s - mean(s)), and a last row that gives mean(s)
        self.on_s = _np(_centring(on_s * stage.norm_s.weight.detach().float()))  # [I + 1, C]
        bias = bias + on_s @ stage.norm_s.bias.detach().float() + on_e @ stage.norm_e.bias.detach().float()
        with torch.no_grad():  # every token's half of the product, and the bias, once: [V, I]
            scaled = on_e * stage.norm_e.weight.detach().float()
            normed = torch.nn.functional.layer_norm(embed.float(), (C,))
            self.token_rows = _np(normed @ scaled.T + bias)
        self.down, self.down_bias = _np(stage.down.weight), _np(stage.down.bias)  # [C, I], [C]

    def __call__(self, s: np.ndarray, token: int) -> np.ndarray:
        h = self.on_s @ s
        h, mean = h[:-1], h[-1]
        h *= _scale(s, mean)
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

    def __init__(self, net: heads.Speculator, E_rows: torch.Tensor, V: int, embed: torch.Tensor):
        """E_rows: the output embedding's rows of the ids it drafts from (E[net.vocab], or all of E),
        float32 on the CPU: read in place, not copied; V: the target's vocabulary size."""
        self.stages = [_Stage(stage, embed) for stage in net.stages]
        self.V = V
        self.restricted = net.vocab is not None  # `heads.Speculator.restrict`
        self.rows = net.vocab.cpu().numpy() if self.restricted else np.arange(self.V)  # the ids it scores, in order
        self.E = _np(E_rows)  # [len(rows), C]
        self.look = net.look
        if net.look is not None:
            self.heads, self.dim = net.look.heads, net.look.dim
            q, norm = net.look.q.weight.detach().float() / self.dim**0.5, net.look.norm_s  # scores' scale folded in
            self.q_w = _np(q * norm.weight.detach().float())  # [h*d, C]
            self.q_b = _np(q @ norm.bias.detach().float())

    @torch.inference_mode()
    def prepare(self, rows: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """The prompt's rows [P, C] -> what a step reads of them: the query's map and the keys
        folded into one matrix, scores = (K_h Wq_h) norm(s) + K_h q_b_h, [h * P + 1, C] (its rows
        centred, `_centring`) and [h * P], the values times the output projection [h * P, C], and
        whether a step must subtract each head's largest score before exp (`EXP_SAFE`)."""
        keys, values = self.look.prepare(rows.float())  # [h, P, d] each
        q_w = torch.from_numpy(self.q_w).unflatten(0, (self.heads, self.dim))  # [h, d, C]
        q_b = torch.from_numpy(self.q_b).unflatten(0, (self.heads, self.dim))  # [h, d]
        out = self.look.out.weight.detach().float().unflatten(1, (self.heads, self.dim))  # [C, h, d]
        seen = torch.einsum("hpd,chd->hpc", values, out)  # [h, P, C]
        scores = torch.einsum("hpd,hdc->hpc", keys, q_w)  # [h, P, C]
        bias = torch.einsum("hpd,hd->hp", keys, q_b)
        scores, bias = _centring(scores.flatten(0, 1)), bias.flatten()
        # |a score| <= |its row| |norm(s)| + |its bias|, and |norm(s)| <= sqrt(C): within EXP_SAFE,
        # exp cannot overflow or flush a head's every weight to zero, so no head's max is subtracted
        bound = scores[:-1].norm(dim=1).max() * scores.shape[1] ** 0.5 + bias.abs().max()
        return _np(scores), _np(bias), _np(seen.flatten(0, 1)), bool(bound > EXP_SAFE or len(bias) > 1000)

    def step_rows(self, k: int, s: np.ndarray, token: int, seen) -> tuple[np.ndarray, np.ndarray]:
        """The state after the k-th draft step from state s [C] and the token just drafted, and
        its logits over the ids it drafts from [len(vocab)] (all V without a vocabulary)."""
        if self.look is not None:
            scores_w, scores_b, values, shift = seen
            scores = scores_w @ s
            scores, mean = scores[:-1], scores[-1]
            scores *= _scale(s, mean)
            scores += scores_b
            scores = scores.reshape(self.heads, -1)  # [h, P]
            if shift:  # only where exp could overflow (`prepare`): softmax is the same either way
                scores -= scores.max(-1, keepdims=True)
            w = np.exp(scores)
            w /= w.sum(-1, keepdims=True)
            s = s + w.reshape(-1) @ values
        s = self.stages[min(k, len(self.stages) - 1)](s, token)
        return s, self.E @ s

    def step(self, k: int, s: np.ndarray, token: int, seen) -> tuple[np.ndarray, np.ndarray]:
        """`step_rows` with the logits over the whole vocabulary [V] (-inf off the vocabulary)."""
        s, rows = self.step_rows(k, s, token, seen)
        if not self.restricted:
            return s, rows
        logits = np.full(self.V, -np.inf, dtype=np.float32)
        logits[self.rows] = rows
        return s, logits


def supported(device: torch.device, net) -> bool:
    """Whether the NumPy step can run this speculator: a speculator on the CPU."""
    return device.type == "cpu" and isinstance(net, heads.Speculator)


def agrees(numpy_step: NumpySpeculator, drafter, net: heads.Speculator) -> str | None:
    """Check the NumPy step against the torch step (`drafter.logits` of `net.step`) on a seeded
    state and prompt, over three chained steps: None where the logits agree (to 1e-3 of their
    scale, and -inf at the same ids) and pick the same token, else why not."""
    g = torch.Generator().manual_seed(0)
    C = drafter.E.shape[1]
    s = torch.randn(C, generator=g) * 3
    rows = torch.randn(7, C, generator=g) * 3
    with torch.inference_mode():
        seen = net.look.prepare(rows) if net.look is not None else None
        seen_np = numpy_step.prepare(rows) if net.look is not None else None
        s_np, token = _np(s), 1
        for k in range(3):
            s = net.step(k, s, drafter.embed[token].float(), seen)
            logits = drafter.logits(s).numpy()
            s_np, logits_np = numpy_step.step(k, s_np, token, seen_np)
            there = np.isfinite(logits)
            if (there != np.isfinite(logits_np)).any():
                return f"the NumPy step scores other ids than the torch step at step {k}"
            gap = float(np.abs(logits_np[there] - logits[there]).max())
            if gap > 1e-3 * max(float(np.abs(logits[there]).max()), 1.0) or logits.argmax() != logits_np.argmax():
                return f"the NumPy step's logits differ from the torch step's by {gap:.2e} at step {k}"
            token = int(logits.argmax())
    return None
