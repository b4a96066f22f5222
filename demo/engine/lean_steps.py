"""The lean drafter's one-token step on each device, at the cost of its arithmetic.

    GraphStep    CUDA: `LeanLM.static_step` captured as a CUDA graph and replayed
    NumpyStep    a CPU, float32: the step written in NumPy over the same memory

`demo.engine.lean.LeanDrafter` picks one after checking its logits against transformers' at
first use, and steps through `LeanLM.forward` (torch, eager) where neither applies.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from demo.engine import lean_lm


def supported(lm) -> str | None:
    """Why the NumPy step cannot run this LeanLM, or None when it can."""
    if lm.device.type != "cpu":
        return f"the model is on {lm.device.type}, not the CPU"
    if lm.dtype != torch.float32:
        return f"the weights are {lm.dtype}, not float32"
    return None


class GraphStep:
    """The one-token step of one run's cache, captured as a CUDA graph (re-captured when the cache
    grows, since a graph replays on fixed addresses)."""

    WARMUP = 3

    def __init__(self, lm, cache):
        self.lm, self.cache = lm, cache
        self.capacity = 0

    def _capture(self) -> None:
        cache, device = self.cache, self.lm.device
        self.token = torch.zeros(1, dtype=torch.long, device=device)
        # Warm-up and capture write at the last slot, which no step reads before writing it.
        self.position = torch.full((1,), cache.capacity - 1, dtype=torch.long, device=device)
        self.keys_index = torch.arange(cache.capacity, device=device)
        self.tables = self.lm.rope(cache.capacity)  # held here: the graph reads them by address
        args = (cache, self.token, self.position, self.keys_index, self.tables)
        self.graph, self.logits = lean_lm.capture(self.lm.static_step, args, device, self.WARMUP)
        self.capacity = cache.capacity

    def __call__(self, token: int | torch.Tensor) -> torch.Tensor:
        """Feed one token (an id, or ids [1] on the device: copied in place, no host read) after
        the cache's; return the logits for the next one: [V] (the graph's own output buffer)."""
        cache = self.cache
        cache.reserve(cache.length + 1)
        if cache.capacity != self.capacity:
            self._capture()
        if isinstance(token, torch.Tensor):
            self.token.copy_(token.reshape(1))
        else:
            self.token.fill_(token)
        self.position.fill_(cache.length)
        self.graph.replay()
        cache.length += 1
        return self.logits


def _array(tensor: torch.Tensor) -> np.ndarray:
    """A NumPy view of a tensor's memory (a parameter outside inference mode needs detaching)."""
    return tensor.detach().numpy()


def _arrays(projection: tuple) -> tuple:
    """LeanLM's (W^T, bias or None) as NumPy views."""
    weight_t, bias = projection
    return _array(weight_t), None if bias is None else _array(bias)


def _mm(x: np.ndarray, weight_t: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """x @ W^T (+ b), W^T a view of the transposed weight."""
    y = x @ weight_t
    if bias is not None:
        y += bias
    return y


class NumpyStep:
    """LeanLM's one-token step over a StaticCache, in NumPy. Shapes: C hidden, H query heads, K kv
    heads, D head dim, I intermediate, V vocab, L positions attended (the cache's and the new one)."""

    def __init__(self, lm):
        assert supported(lm) is None, supported(lm)
        self.lm = lm
        self.H, self.K, self.D, self.I = lm.n_heads, lm.n_kv, lm.head_dim, lm.intermediate
        self.eps = lm.eps
        self.scale = np.float32(self.D**-0.5)
        self.embed = _array(lm.embed)  # [V, C]
        self.norm = _array(lm.norm)  # [C]
        self.head_t = _array(lm.head_t)  # [C, V], a transposed view
        self.layers = [
            (_array(norm1), _arrays(qkv), _arrays(o), _array(norm2), _arrays(gate_up), _arrays(down))
            for norm1, qkv, o, norm2, gate_up, down in lm.layers
        ]
        self.rotation = _array(lm.rotation)  # [D, D]: x @ R == rotate_half(x), exactly
        self._rope = (None, None, None)  # LeanLM's tables, and NumPy views of them

    def _rms(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """RMSNorm of x [C], as LlamaRMSNorm: x / sqrt(mean(x^2) + eps), then the gain (the scalar
        in float64, rounded to float32 when it scales x)."""
        return x * (1.0 / math.sqrt(float(np.dot(x, x)) / x.shape[0] + self.eps)) * weight

    def _tables(self, end: int) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin [positions, D] covering [0, end), as views of LeanLM's shared tables."""
        tables = self.lm.rope(end)
        if tables is not self._rope[0]:  # LeanLM grew them: view the new ones
            self._rope = (tables, tables[0].numpy(), tables[1].numpy())
        return self._rope[1], self._rope[2]

    def __call__(self, cache, token: int) -> torch.Tensor:
        """Feed one token after the cache's tokens; return the logits for the next one: [V]."""
        pos = cache.length
        cache.reserve(pos + 1)
        cos, sin = self._tables(pos + 1)
        cos, sin = cos[pos], sin[pos]  # [D] each
        keys, values = cache.keys.numpy(), cache.values.numpy()  # [layers, K, capacity, D]
        H, K, D, I = self.H, self.K, self.D, self.I
        h = self.embed[token]  # [C]: a row view; the first residual add makes a new array
        for i, (norm1, qkv_t, o_t, norm2, gate_up_t, down_t) in enumerate(self.layers):
            qkv = _mm(self._rms(h, norm1), *qkv_t).reshape(H + 2 * K, D)
            qk = qkv[: H + K]  # queries and keys rotate alike
            rotated = qk @ self.rotation  # rotate_half(qk)
            qk *= cos
            rotated *= sin
            qk += rotated
            keys[i, :, pos] = qk[H:]  # [K, D]: this token's key and value, at its position
            values[i, :, pos] = qkv[H + K :]
            q = qk[:H].reshape(K, H // K, D)  # [K, g, D]
            scores = np.matmul(q, keys[i, :, : pos + 1].transpose(0, 2, 1))  # [K, g, L]
            scores *= self.scale
            scores -= scores.max(-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(-1, keepdims=True)
            attended = np.matmul(scores, values[i, :, : pos + 1]).reshape(H * D)  # [H D]
            h = h + _mm(attended, *o_t)
            gate_up = _mm(self._rms(h, norm2), *gate_up_t)  # [2 I]
            gate = gate_up[:I]
            h = h + _mm(gate / (np.float32(1.0) + np.exp(-gate)) * gate_up[I:], *down_t)  # SiLU(gate) * up
        cache.length = pos + 1
        return torch.from_numpy(self._rms(h, self.norm) @ self.head_t)  # [V]

    def forward(self, cache, ids: list[int]) -> torch.Tensor:
        """Feed ids one at a time (the same causal attention as a forward over all of them); return
        the logits for the token after the last: [V]."""
        for token in ids:
            logits = self(cache, token)
        return logits
