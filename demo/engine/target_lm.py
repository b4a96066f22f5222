"""The lean target's forward: its language model over a static cache, and that forward's CUDA graphs.

The mechanism under `demo.engine.lean_target.LeanTarget` (which decides whether it runs, keeps
the graphed cache slots and dispatches each forward).

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from demo.engine import lean_lm
from demo.engine.lean_lm import LeanLM, StaticCache

MROPE = ("qwen2_5_vl_text", "qwen2_vl_text")  # Qwen2 language models with 3-section rotary positions


def unsupported(model) -> str | None:
    """Why TargetLM cannot run this target's language model, or None when it can."""
    config = lean_lm.text_config(model)
    if config.model_type not in MROPE:
        return lean_lm.unsupported(model)
    rope = config.rope_parameters or {}
    if rope.get("rope_type", "default") != "default" or not rope.get("mrope_section"):
        return f"not covered by the lean path: M-RoPE with rotary {rope!r}"
    if getattr(config, "use_sliding_window", False):
        return "not covered by the lean path: sliding-window attention"
    return None


def visibility(parents: list[int]) -> torch.Tensor:
    """[n + 1, n + 1] bool: row 0 is the answer's last token, row i + 1 node i, which sees the last
    token, its ancestors and itself (parents come before their children)."""
    n = len(parents)
    seen = torch.eye(n + 1, dtype=torch.bool)
    seen[:, 0] = True
    for i, parent in enumerate(parents):
        seen[i + 1] |= seen[parent + 1]
    return seen


@dataclass
class _Layer:
    """One layer's keys and values [K, capacity, D], views of the cache (as DynamicCache.layers)."""

    keys: torch.Tensor
    values: torch.Tensor
    is_initialized: bool = True  # as a DynamicCache layer says whether it was ever written


class TargetCache(StaticCache):
    """One run's target cache on the lean path: a StaticCache, the run's rope delta, DynamicCache-like
    `layers` views (`trees.keep_path` moves rows through them), and its slot's `graphs` if pooled."""

    rope_delta: int = 0  # M-RoPE: text position = cache index + rope_delta
    graphs: GraphSet | None = None

    @classmethod
    def on(cls, keys: torch.Tensor, values: torch.Tensor, graphs: GraphSet) -> TargetCache:
        """An empty cache over a slot's tensors (no allocation)."""
        cache = cls.__new__(cls)
        cache.keys, cache.values, cache.graphs, cache.length = keys, values, graphs, 0
        return cache

    @property
    def layers(self) -> list[_Layer]:
        return [_Layer(self.keys[i], self.values[i]) for i in range(self.keys.shape[0])]


class TargetLM(LeanLM):
    """LeanLM with a forward over n tokens at given positions with a visibility mask among them."""

    cache_class = TargetCache

    def __init__(self, model):
        super().__init__(model)
        config = self.config
        section = (getattr(config, "rope_parameters", None) or {}).get("mrope_section")
        half = self.head_dim // 2
        # The axis (t, h, w) each rotary dimension reads: M-RoPE splits the D/2 frequencies into
        # sections taken from axes 0, 1, 2 in turn, and both halves of D repeat them.
        axis = torch.zeros(half, dtype=torch.long)
        if section:
            axis = torch.cat([torch.full((s,), i % 3) for i, s in enumerate(section)])
            assert len(axis) == half, (section, half)
        self.axes = 3 if section else 1
        self.axis = torch.cat([axis, axis]).to(self.device)  # [D]
        self.dims = torch.arange(self.head_dim, device=self.device)[:, None]  # [D, 1]

    def _rotary(self, positions: torch.Tensor, tables) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [n, 1, D] for rotary positions [A, n]: dimension d reads axis axis[d]'s position
        (as transformers' M-RoPE recomposition; with A = 1 every dimension reads the one axis)."""
        index = positions[self.axis]  # [D, n]
        return tuple(t[index, self.dims].t()[:, None] for t in tables)

    def step(self, cache, ids, positions, start, visible, span: int, tables) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed ids [n] at cache slots start .. start + n - 1 -> logits [n, V] and the last hidden
        states [n, C] they were read from (after the final norm: what a feature drafter reads).

        positions [A, n]: rotary positions; start [1] long (a device tensor, so that a graph
        replays it); visible [n, n] bool: visible[i, j] when token i attends to new token j (every
        token attends to the cache's first `start` slots); span: how many slots attention reads
        (a CPU: start + n; CUDA: the capacity, the slots past start + n masked); tables:
        `rope(...)` covering every position. Shapes depend only on n and span."""
        n, H, K, D = ids.shape[0], self.n_heads, self.n_kv, self.head_dim
        cos, sin = self._rotary(positions, tables)
        h = F.embedding(ids, self.embed)  # [n, C]
        slots = start + torch.arange(n, device=self.device)  # [n] cache slot of each new token
        rel = torch.arange(span, device=self.device) - start  # [span] slot index relative to start
        inside = (rel >= 0) & (rel < n)
        among = visible.index_select(1, rel.clamp(0, n - 1))  # [n, span]: visible[i, slot - start]
        g = H // K
        mask = ((rel < 0)[None] | (inside[None] & among)).repeat(g, 1)[None, None]  # [1, 1, g*n, span]

        def write(i, k, v):  # [n, K, D] each, at the new tokens' slots
            cache.keys[i].index_copy_(1, slots, k.transpose(0, 1))
            cache.values[i].index_copy_(1, slots, v.transpose(0, 1))

        def attend(i, q):  # q [n, H, D] over the first span slots, masked
            # Query head j*g + r reads kv head j (g = H / K, as transformers' repeat_kv): the g heads
            # of a kv head go in as g*n query rows of it, so every SDPA backend takes it (no enable_gqa).
            q = q.view(n, K, g, D).permute(1, 2, 0, 3).reshape(1, K, g * n, D)
            keys, values = cache.keys[i, None, :, :span], cache.values[i, None, :, :span]  # [1, K, span, D]
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # [1, K, g*n, D]
            return y.view(K, g, n, D).permute(2, 0, 1, 3).reshape(n, H * D)

        for i in range(len(self.layers)):
            h = self._layer(i, h, cos, sin, write, attend)
        hidden = self._rms(h, self.norm)  # [n, C]
        return torch.mm(hidden, self.head_t), hidden  # [n, V], [n, C]


class GraphSet:
    """One cache slot's CUDA graphs of `TargetLM.step`, one per verify width, over its whole capacity."""

    WARMUP = 2

    def __init__(self, lm: TargetLM, cache: TargetCache, widths, pool, lock: threading.Lock):
        self.lm, self.cache, self.capacity = lm, cache, cache.capacity
        self.lock = lock  # one per memory pool: a replay and the copy of its output, enqueued together
        self.keys_ptr = cache.keys.data_ptr()
        device = lm.device
        self.tables = lm.rope(self.capacity + lean_lm.CHUNK)  # read by address: held as long as the graphs
        self.start = torch.zeros(1, dtype=torch.long, device=device)
        self.replays = 0  # graph replays so far (the check's included)
        self.graphs: dict[int, tuple] = {}
        for n in widths:
            ids = torch.zeros(n, dtype=torch.long, device=device)
            # Warm-up and capture write the last n slots (no run is using the slot yet).
            positions = torch.full((lm.axes, n), self.capacity - n, dtype=torch.long, device=device)
            visible = torch.ones(n, n, dtype=torch.bool, device=device).tril()
            self.start.fill_(self.capacity - n)
            args = (cache, ids, positions, self.start, visible, self.capacity, self.tables)
            # other threads run on while it captures; outputs: logits [n, V], hidden [n, C]
            graph, outputs = lean_lm.capture(
                lm.step, args, device, self.WARMUP, pool=pool, capture_error_mode="thread_local"
            )
            self.graphs[n] = (graph, ids, positions, visible, outputs)

    def covers(self, cache: TargetCache, n: int, top: int) -> bool:
        """Whether a graph can run n tokens on this cache now (top: the highest rotary position)."""
        return (
            n in self.graphs
            and cache.keys.data_ptr() == self.keys_ptr  # not reallocated by growing
            and cache.length + n <= self.capacity
            and 0 <= top < self.tables[0].shape[0]
        )

    def __call__(self, cache: TargetCache, ids, positions, visible, features: bool = False):
        """Replay the width's graph -> logits [n, V], and with `features` (logits, hidden [n, C])."""
        graph, ids_in, positions_in, visible_in, (logits, hidden) = self.graphs[ids.shape[0]]
        with self.lock:  # runs of other threads replay graphs of the same pool
            ids_in.copy_(ids, non_blocking=True)
            positions_in.copy_(positions, non_blocking=True)
            visible_in.copy_(visible, non_blocking=True)
            self.start.fill_(cache.length)
            graph.replay()
            self.replays += 1
            # The next replay of this graph overwrites its outputs: copies, of the hidden states only when asked.
            return (logits.clone(), hidden.clone()) if features else logits.clone()
