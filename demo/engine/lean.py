"""Lean drafting: the drafter's step at the cost of its arithmetic, behind the `Drafter` interface.

The same drafter without transformers' per-call framework overhead, in the style of gpt-fast's
`model.py`; checked against transformers at first use.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import logging
import threading

import torch

from demo.engine import lean_lm, lean_steps
from demo.engine.drafters import Drafter, DraftState
from demo.engine.lean_lm import LeanLM, StaticCache, unsupported

log = logging.getLogger(__name__)


class LeanDraftState(DraftState):
    """One run's drafting through LeanLM: the same bookkeeping as DraftState, on a StaticCache."""

    def __init__(self, drafter: LeanDrafter, cache: StaticCache, prompt_last: int):
        super().__init__(drafter, cache, prompt_last)
        self.lm = drafter.lean
        self.graph = lean_steps.GraphStep(self.lm, cache) if drafter.graphs else None
        self.numpy = drafter.numpy_step

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [n] (long, on the device) -> logits [V_d]; the NumPy step reads ids back (a CPU: no sync)."""
        if self.graph is not None and len(ids) == 1:
            return self.graph(ids)
        if self.numpy is not None:
            return self.numpy.forward(self.cache, ids.tolist())
        return self.lm.forward(self.cache, ids)

    def forward_all(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [n] -> the logits after each [n, V_d] (staged drafting): one token by the step
        above, several by one LeanLM forward over them."""
        return self._forward(ids)[None] if len(ids) == 1 else self.lm.forward(self.cache, ids, every=True)


class LeanDrafter(Drafter):
    """A Drafter that drafts through LeanLM where it can, else through transformers: decided once,
    at first use (`prepare`; inside the run, so on ZeroGPU on the real device), by its checks."""

    def __init__(self, model, *, graphs: bool | None = None, numpy: bool = True, **kwargs):
        super().__init__(model, **kwargs)
        self.lean: LeanLM | None = None
        self.fallback_reason = unsupported(model)
        self._want_graphs = graphs
        self.graphs = False
        self.graphs_reason: str | None = None  # why a CUDA device steps without graphs
        self.numpy_step: lean_steps.NumpyStep | None = None  # the CPU's step, where it passed its check
        self.numpy_reason: str | None = None  # why a CPU model steps through torch
        self._want_numpy = numpy  # False: the torch step on a CPU too (to compare the two)
        self._prepared = self.fallback_reason is not None
        self._prepare_lock = threading.Lock()

    @property
    def path(self) -> str:
        self.prepare()
        if self.lean is None:
            return "transformers"
        return "lean + CUDA graphs" if self.graphs else "lean + NumPy step" if self.numpy_step else "lean"

    def prepare(self) -> None:
        """Build and check the lean path once; on any failure, record why and use transformers."""
        if self._prepared:
            return
        with self._prepare_lock:
            if self._prepared:
                return
            try:
                lean = LeanLM(self.model)
                self._check(lean, lean.forward)
                self.lean = lean
                want = self._want_graphs if self._want_graphs is not None else self.device.type == "cuda"
                self.graphs = want and self._check_graphs()
                if not self.graphs and self._want_numpy:
                    self._prepare_numpy()
            except Exception as error:  # any failure: draft through transformers, and say why
                self.lean = None
                self.fallback_reason = f"lean path failed its check: {type(error).__name__}: {error}"[:300]
                log.warning("drafter %r drafts through transformers: %s", self.name, self.fallback_reason)
            self._prepared = True

    def _prepare_numpy(self) -> None:
        """On a CPU in float32, step through NumPy if its logits pass the same check (else torch)."""
        self.numpy_reason = lean_steps.supported(self.lean)
        if self.numpy_reason is None:
            try:
                step = lean_steps.NumpyStep(self.lean)
                self._check(self.lean, step.forward)
                self.numpy_step = step
            except Exception as error:
                self.numpy_reason = f"NumPy step failed its check: {type(error).__name__}: {error}"[:300]
                log.warning("drafter %r steps through torch: %s", self.name, self.numpy_reason)

    @torch.inference_mode()
    def _check(self, lean: LeanLM, forward) -> None:
        """Lean logits (`forward(cache, ids)`) against transformers' after a transformers prefill copied
        into a static cache (as `start` does), over steps of 1 and 2 tokens and a rollback."""
        from transformers import DynamicCache

        g = torch.Generator().manual_seed(0)
        usable = self.allowed[: self.usable].nonzero()[:, 0].cpu()
        ids = usable[torch.randint(len(usable), (12,), generator=g)].tolist()
        ref_cache = DynamicCache(config=self.model.config)
        self._forward_transformers(ref_cache, ids[:6])
        cache = lean.new_cache(16)
        cache.load(ref_cache)
        for chunk, rollback in ((ids[6:7], 0), (ids[7:9], 1), (ids[9:10], 0), (ids[10:12], 0)):
            if rollback:
                ref_cache.crop(-rollback)
                cache.crop(-rollback)
            lean_lm.check_close(forward(cache, chunk), self._forward_transformers(ref_cache, chunk), lean.dtype)

    def _forward_transformers(self, cache, ids: list[int]) -> torch.Tensor:
        input_ids = torch.tensor([ids], device=self.device)
        out = self.model(input_ids=input_ids, **{self.cache_kw: cache}, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1]

    @torch.inference_mode()
    def _check_graphs(self) -> bool:
        """Capture and replay one graph step against the eager step; False (eager) if that fails."""
        try:
            ids = self.allowed[: self.usable].nonzero()[:5, 0].tolist()
            eager, graphed = self.lean.new_cache(8), self.lean.new_cache(8)
            self.lean.forward(eager, ids[:4])
            self.lean.forward(graphed, ids[:4])
            step = lean_steps.GraphStep(self.lean, graphed)
            want = self.lean.forward(eager, ids[4:5])
            got = step(ids[4])
            torch.cuda.synchronize(self.device)
            if not lean_lm.replays_alike(got, want):
                raise ValueError("graph replay differs from the eager step")
            return True
        except Exception as error:
            self.graphs_reason = f"CUDA graphs unavailable ({type(error).__name__}: {error})"[:300]
            log.warning("drafter %r steps eagerly: %s", self.name, self.graphs_reason)
            return False

    @torch.inference_mode()
    def start(self, inputs: dict) -> DraftState:
        """A new run's state: the transformers prefill (the image too, if image-aware), copied into
        a static cache that the lean steps extend."""
        self.prepare()
        if self.lean is None:
            return super().start(inputs)
        prefilled = super().start(inputs)  # DraftState over a DynamicCache holding the prompt
        cache = self.lean.new_cache(prefilled.cache.get_seq_length() + lean_lm.CHUNK)
        cache.load(prefilled.cache)
        return LeanDraftState(self, cache, prefilled.prompt_last)


PATHS = ("lean", "lean-torch", "transformers")  # what `on_path` builds


def on_path(drafter: Drafter, path: str) -> Drafter:
    """The same drafter model on another forward, for comparing them on one loaded model: "lean"
    (the device's fastest checked step, falling back where it must), "lean-torch" (LeanLM's torch
    step even on a CPU, where "lean" takes the NumPy step) or "transformers"."""
    assert path in PATHS, path
    options = {"lean": {}, "lean-torch": {"numpy": False}}.get(path)
    return (Drafter if options is None else LeanDrafter)(
        drafter.model,
        **(options or {}),
        name=drafter.name,
        kind=drafter.kind,
        target_vocab_size=drafter.target_vocab_size,
        stop_ids=drafter.stop_ids,
        blocked_ids=drafter.blocked_ids,
    )
