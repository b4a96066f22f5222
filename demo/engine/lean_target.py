"""The lean target: the target's decode forwards through a static KV cache and a minimal forward.

A target's decode forward in transformers pays per-call framework cost (argument handling, mask
construction, cache objects, output dataclasses) that the model's arithmetic does not need, and
on a GPU that cost is host time the device waits for. This module runs the target's three decode
forwards, one token (autoregressive), a chain of gamma + 1 (verify) and a token tree (tree
verify), as one function over a static cache, and on CUDA replays it as a CUDA graph:

    TargetCache   one run's cache: a `StaticCache` (lean_lm.py), the run's rope delta (M-RoPE), and
                  per-layer views so that `trees.keep_path` moves accepted nodes in place
    TargetLM      `LeanLM` (lean_lm.py: the model's own weights, fused q/k/v) with a forward over n
                  tokens at explicit rotary positions [A, n] (A = 3 for M-RoPE, else 1) and a
                  visibility mask [n, n] among them: logits [n, V]
    LeanTarget    decides once whether the lean path runs (architecture, then its logits against
                  transformers' at first use), keeps a few cache slots with one CUDA graph per
                  verify width captured by `prepare` (before any clock starts), and falls back
                  to transformers with the reason recorded

The prefill, with the image, stays in transformers; its DynamicCache is copied into the static
one (`TargetCache.load`). Rollback lowers the cache's length (`crop`), as `DynamicCache.crop`
does. Eager and graphed forwards are one function, `TargetLM.step`, capture and replay the only
difference: on CUDA both attend to every slot of the cache's capacity, the slots past the new
tokens masked (one shape per width); on a CPU the eager call attends to the cache's first slots
only, up to its new tokens.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from demo.engine import lean_lm
from demo.engine.events import TREE_SHAPE
from demo.engine.lean_lm import LeanLM, StaticCache

log = logging.getLogger(__name__)

MROPE = ("qwen2_5_vl_text", "qwen2_vl_text")  # Qwen2 language models with 3-section rotary positions
SLOTS = 2  # graphed cache slots: a race holds two runs at once (AR and SPD)
CAPACITY = 1024  # positions a graphed slot holds (prompt + answer + drafts); a longer run goes eager
# Verify widths graphed by default: 1 (AR), gamma + 1 for gamma 1..8, and the default tree's
# nodes + 1 for gamma 1..8 (a tree that drafts fewer nodes, or a wider verify, runs eagerly).
WIDTHS = tuple(sorted({*range(1, 10), *(TREE_SHAPE.nodes(g) + 1 for g in range(1, 9))}))


def unsupported(model) -> str | None:
    """Why TargetLM cannot run this target's language model, or None when it can."""
    config = getattr(model.config, "text_config", None) or model.config
    if config.model_type not in MROPE:
        return lean_lm.unsupported(model)
    rope = config.rope_parameters or {}
    if rope.get("rope_type", "default") != "default" or not rope.get("mrope_section"):
        return f"not covered by the lean path: M-RoPE with rotary {rope!r}"
    if getattr(config, "use_sliding_window", False):
        return "not covered by the lean path: sliding-window attention"
    return None


@dataclass
class _Layer:
    """One layer's keys and values [K, capacity, D], views of the cache (as DynamicCache.layers)."""

    keys: torch.Tensor
    values: torch.Tensor


class TargetCache(StaticCache):
    """One run's target cache on the lean path: a StaticCache and the run's rope delta.

    `layers` gives DynamicCache-like views, so code that moves cached rows (`trees.keep_path`)
    moves them in the static tensors. `graphs` is the slot's graph set when the cache is a pooled
    slot (its tensors are the ones the graphs were captured on)."""

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

    def new_cache(self, capacity: int) -> TargetCache:
        capacity = math.ceil(max(capacity, 1) / lean_lm.CHUNK) * lean_lm.CHUNK
        return TargetCache(len(self.layers), self.n_kv, self.head_dim, capacity, self.dtype, self.device)

    def _rotary(self, positions: torch.Tensor, tables) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [n, 1, D] for rotary positions [A, n]: dimension d reads axis axis[d]'s position
        (as transformers' M-RoPE recomposition; with A = 1 every dimension reads the one axis)."""
        index = positions[self.axis]  # [D, n]
        return tuple(t[index, self.dims].t()[:, None] for t in tables)

    def step(self, cache, ids, positions, start, visible, span: int, tables) -> torch.Tensor:
        """Feed ids [n] at cache slots start .. start + n - 1 -> logits [n, V].

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
        return torch.mm(self._rms(h, self.norm), self.head_t)  # [n, V]


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
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                for _ in range(self.WARMUP):
                    lm.step(*args)
            torch.cuda.current_stream(device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):  # other threads run on
                logits = lm.step(*args)
            self.graphs[n] = (graph, ids, positions, visible, logits)

    def covers(self, cache: TargetCache, n: int, top: int) -> bool:
        """Whether a graph can run n tokens on this cache now (top: the highest rotary position)."""
        return (
            n in self.graphs
            and cache.keys.data_ptr() == self.keys_ptr  # not reallocated by growing
            and cache.length + n <= self.capacity
            and 0 <= top < self.tables[0].shape[0]
        )

    def __call__(self, cache: TargetCache, ids, positions, visible) -> torch.Tensor:
        graph, ids_in, positions_in, visible_in, logits = self.graphs[ids.shape[0]]
        with self.lock:  # runs of other threads replay graphs of the same pool
            ids_in.copy_(ids, non_blocking=True)
            positions_in.copy_(positions, non_blocking=True)
            visible_in.copy_(visible, non_blocking=True)
            self.start.fill_(cache.length)
            graph.replay()
            self.replays += 1
            return logits.clone()  # the next replay of this graph overwrites its output


class LeanTarget:
    """The target's lean decode path, decided once; see the module docstring.

    `path` says which runs: "lean + CUDA graphs", "lean" or "transformers" (with
    `fallback_reason`). `prepare` builds and checks it and, on CUDA, captures the graphs; the
    session or benchmark calls it before any clock starts, and the first run calls it otherwise."""

    CHECK_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-8}  # relative to the logits' scale
    HALF_TOLERANCE = 5e-2  # bf16 / fp16

    def __init__(self, target, want: bool | None):
        self.target = target
        self.want = want if want is not None else target.device.type == "cuda"
        self.lm: TargetLM | None = None
        self.fallback_reason = None if self.want else "the lean target is off on this device"
        self.fallback_reason = self.fallback_reason or unsupported(target.model)
        self.graphs_reason: str | None = None  # why a CUDA device runs the lean path eagerly
        self._free: list[tuple[torch.Tensor, torch.Tensor, GraphSet]] = []  # idle graphed slots
        self._graphed = False  # whether graphed slots were built (all may be in use at a moment)
        self._prepared = self.fallback_reason is not None
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        self.prepare()
        if self.lm is None:
            return "transformers"
        return "lean + CUDA graphs" if self._graphed else "lean"

    def prepare(self, *, capacity: int = CAPACITY, widths=WIDTHS, slots: int = SLOTS) -> None:
        """Build and check the lean path once; on CUDA capture `slots` slots of `capacity`
        positions with one graph per width. Any failure: transformers (or eager), and why."""
        if self._prepared:
            return
        with self._lock:
            if self._prepared:
                return
            try:
                self.lm = TargetLM(self.target.model)
                self._check(self.lm)
            except Exception as error:
                self.lm = None
                self.fallback_reason = f"lean target failed its check: {type(error).__name__}: {error}"[:300]
                log.warning("target %r runs through transformers: %s", self.target.name, self.fallback_reason)
            if self.lm is not None and self.lm.device.type == "cuda":
                self._capture(capacity, widths, slots)
            self._prepared = True

    @torch.inference_mode()
    def _capture(self, capacity: int, widths, slots: int) -> None:
        try:
            pool, lock = torch.cuda.graph_pool_handle(), threading.Lock()
            built = []
            for _ in range(slots):
                cache = self.lm.new_cache(capacity)
                built.append((cache.keys, cache.values, GraphSet(self.lm, cache, widths, pool, lock)))
            self._check_graphs(built[0][2])
            self._free, self._graphed = built, True
        except Exception as error:
            self.graphs_reason = f"CUDA graphs unavailable ({type(error).__name__}: {error})"[:300]
            log.warning("target %r runs the lean path eagerly: %s", self.target.name, self.graphs_reason)

    def new_cache(self) -> TargetCache:
        """A run's cache: an idle graphed slot if there is one (returned when the run's cache is
        dropped), else a fresh one that grows as needed."""
        with self._lock:
            slot = self._free.pop() if self._free else None
        if slot is None:
            return self.lm.new_cache(lean_lm.CHUNK)
        keys, values, graphs = slot
        keys.zero_()  # finite values in every slot (a masked slot is multiplied by 0)
        values.zero_()
        cache = TargetCache.on(keys, values, graphs)
        weakref.finalize(cache, self._release, slot)
        return cache

    def _release(self, slot) -> None:
        with self._lock:
            self._free.append(slot)

    @torch.inference_mode()  # the cache and graph buffers are inference tensors, updated in place
    def forward(self, cache: TargetCache, ids: list[int], positions: torch.Tensor, visible) -> torch.Tensor:
        """Feed ids after the cache -> logits [n, V]; positions [A, n] rotary positions, visible
        [n, n] bool among the new tokens (None: causal, a chain). ids, positions and visible may be
        host tensors or lists: they reach the device by non-blocking copies, which do not wait for
        the device (a blocking host-to-device copy synchronises the stream)."""
        lm, n, start = self.lm, len(ids), cache.length
        device = lm.device
        visible = torch.ones(n, n, dtype=torch.bool).tril() if visible is None else visible
        ids, positions = torch.as_tensor(ids), torch.as_tensor(positions)
        graphs = cache.graphs
        top = start + cache.rope_delta + n  # above every rotary position of a chain or tree
        if graphs is not None and graphs.covers(cache, n, top):
            logits = graphs(cache, ids, positions, visible)  # copied straight into the graph's inputs
        else:
            ids, positions, visible = (x.to(device, non_blocking=True) for x in (ids, positions, visible))
            cache.reserve(start + n)
            start_t = torch.tensor([start]).to(device, non_blocking=True)
            tables = lm.rope(max(start + n, top + 1))
            # On CUDA attention spans the whole capacity, as a graph's does: one shape per width,
            # not one per step (an SDPA backend that plans per shape, as cuDNN's does, plans once).
            span = cache.capacity if device.type == "cuda" else start + n
            logits = lm.step(cache, ids, positions, start_t, visible, span, tables)
        cache.length = start + n
        return logits

    @torch.inference_mode()
    def _check(self, lm: TargetLM) -> None:
        """Lean logits against the target's transformers forwards, after one transformers prefill
        copied into a static cache: chains of 1 and 3 tokens, a rollback, and a tree."""
        target = self.target
        ids = self._sample_ids(24)
        reference = target.dynamic_cache()
        target.transformers_prefill({"input_ids": torch.tensor([ids[:8]], device=target.device)}, reference)
        cache = lm.new_cache(16)
        cache.load(reference)
        cache.rope_delta = getattr(reference, "rope_delta", 0)
        tolerance = self.CHECK_TOLERANCE.get(lm.dtype, self.HALF_TOLERANCE)
        parents = [-1, -1, 0, 0, 2]  # a tree: two roots, two children of the first, a grandchild
        depths = [0, 1, 1, 2, 2, 3]
        visible = torch.eye(6, dtype=torch.bool)
        visible[:, 0] = True
        for i, parent in enumerate(parents):
            visible[i + 1] |= visible[parent + 1]
        for chunk, rollback, tree in (
            (ids[8:9], 0, False),
            (ids[9:12], 2, False),
            (ids[12:13], 0, False),
            (ids[13:19], 0, True),
        ):
            if rollback:
                reference.crop(-rollback)
                cache.crop(-rollback)
            if tree:  # the target's own lean dispatch: the code a run takes
                want = target.transformers_forward_tree(chunk, depths, visible, reference)
                got = target.forward_tree(chunk, depths, visible, cache)
            else:
                want = target.transformers_forward(chunk, reference)
                got = target.forward(chunk, cache)
            scale = float(want.abs().max()) + 1.0
            error = float((got.float() - want.float()).abs().max())
            if not error <= tolerance * scale:
                raise ValueError(f"logits differ by {error:.3g} (allowed {tolerance * scale:.3g})")

    def _sample_ids(self, n: int) -> list[int]:
        """n seeded ids of ordinary text tokens: no added or special token (image placeholders)."""
        tokenizer = self.target.tokenizer
        skip = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
        usable = [i for i in range(min(len(tokenizer), self.target.vocab_size)) if i not in skip]
        g = torch.Generator().manual_seed(0)
        return [usable[int(i)] for i in torch.randint(len(usable), (n,), generator=g)]

    @torch.inference_mode()
    def _check_graphs(self, graphs: GraphSet) -> None:
        """Each width's replay against the eager step on a copy of the same cache."""
        lm = self.lm
        ids = self._sample_ids(8 + max(graphs.graphs))
        cache = graphs.cache
        cache.length = 0
        positions = torch.arange(8, device=lm.device).expand(lm.axes, -1)
        lm.step(
            cache,
            torch.tensor(ids[:8], device=lm.device),
            positions,
            torch.zeros(1, dtype=torch.long, device=lm.device),
            torch.ones(8, 8, dtype=torch.bool, device=lm.device).tril(),
            8,
            graphs.tables,
        )
        cache.length = 8
        for n in graphs.graphs:
            copy = lm.new_cache(cache.capacity)
            copy.keys.copy_(cache.keys)
            copy.values.copy_(cache.values)
            copy.length = 8
            chunk = ids[8 : 8 + n]
            pos = (8 + torch.arange(n, device=lm.device)).expand(lm.axes, -1)
            visible = torch.ones(n, n, dtype=torch.bool, device=lm.device).tril()
            want = lm.step(
                copy,
                torch.tensor(chunk, device=lm.device),
                pos,
                torch.full((1,), 8, device=lm.device),
                visible,
                8 + n,
                graphs.tables,
            )
            got = graphs(cache, torch.tensor(chunk, device=lm.device), pos, visible)
            torch.cuda.synchronize(lm.device)
            if not torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2 * (float(want.abs().max()) + 1)):
                raise ValueError(f"graph replay of width {n} differs from the eager step")
        cache.length = 0
