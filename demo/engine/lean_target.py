"""The lean target: the target's decode forwards through a static KV cache and a minimal forward.

The target's three decode forwards, one token (autoregressive), a chain of gamma + 1 (verify) and
a token tree (tree verify), as one function over a static cache without transformers' per-call
framework cost; on CUDA replayed as a CUDA graph.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import logging
import threading
import weakref

import torch

from demo.engine import lean_lm
from demo.engine.events import TREE_SHAPE
from demo.engine.target_lm import GraphSet, TargetCache, TargetLM, unsupported, visibility

log = logging.getLogger(__name__)

SLOTS = 2  # graphed cache slots: a race holds two runs at once (AR and SPD)
CAPACITY = 1024  # positions a graphed slot holds (prompt + answer + drafts); a longer run goes eager
# Verify widths graphed by default: 1 (AR), gamma + 1 for gamma 1..8, and the default tree's
# nodes + 1 for gamma 1..8 (a tree that drafts fewer nodes, or a wider verify, runs eagerly).
WIDTHS = tuple(sorted({*range(1, 10), *(TREE_SHAPE.nodes(g) + 1 for g in range(1, 9))}))


class LeanTarget:
    """The target's lean decode path, decided once (`prepare`: before any clock starts, or at the
    first run); `path` says which runs: "lean + CUDA graphs", "lean" or "transformers"."""

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
        return "transformers" if self.lm is None else "lean + CUDA graphs" if self._graphed else "lean"

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
    def forward(self, cache: TargetCache, ids: list[int], positions: torch.Tensor, visible, features: bool = False):
        """Feed ids after the cache -> logits [n, V] (and with `features` hidden states [n, C]);
        positions [A, n], visible [n, n] bool (None: causal). Host tensors or lists reach the device
        by non-blocking copies (a blocking host-to-device copy synchronises the stream)."""
        lm, n, start = self.lm, len(ids), cache.length
        device = lm.device
        visible = torch.ones(n, n, dtype=torch.bool).tril() if visible is None else visible
        ids, positions = torch.as_tensor(ids), torch.as_tensor(positions)
        graphs = cache.graphs
        top = start + cache.rope_delta + n  # above every rotary position of a chain or tree
        if graphs is not None and graphs.covers(cache, n, top):
            out = graphs(cache, ids, positions, visible, features)  # copied straight into the graph's inputs
        else:
            ids, positions, visible = (x.to(device, non_blocking=True) for x in (ids, positions, visible))
            cache.reserve(start + n)
            start_t = torch.tensor([start]).to(device, non_blocking=True)
            tables = lm.rope(max(start + n, top + 1))
            # On CUDA attention spans the whole capacity, as a graph's does: one shape per width,
            # not one per step (an SDPA backend that plans per shape, as cuDNN's does, plans once).
            span = cache.capacity if device.type == "cuda" else start + n
            logits, hidden = lm.step(cache, ids, positions, start_t, visible, span, tables)
            out = (logits, hidden) if features else logits
        cache.length = start + n
        return out

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
        parents = [-1, -1, 0, 0, 2]  # a tree: two roots, two children of the first, a grandchild
        depths = [0, 1, 1, 2, 2, 3]
        visible = visibility(parents)
        for chunk, rollback, tree in (
            (ids[8:9], 0, False),
            (ids[9:12], 2, False),
            (ids[12:13], 0, False),
            (ids[13:19], 0, True),
        ):
            if rollback:
                reference.crop(-rollback)
                cache.crop(-rollback)
            # The target's own lean dispatch (the code a run takes), logits and the hidden states
            # a feature drafter reads.
            if tree:
                want = target.transformers_forward_tree(chunk, depths, visible, reference, True)
                got = target.forward_tree(chunk, depths, visible, cache, True)
            else:
                want = target.transformers_forward(chunk, reference, True)
                got = target.forward(chunk, cache, True)
            for name, w, g in zip(("logits", "hidden states"), want, got, strict=True):
                lean_lm.check_close(g, w, lm.dtype, name)

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
        lm.step(  # fills the first 8 slots
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
            want, _ = lm.step(
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
            if not lean_lm.replays_alike(got, want):
                raise ValueError(f"graph replay of width {n} differs from the eager step")
        cache.length = 0
