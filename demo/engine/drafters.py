"""Drafters: what proposes the next tokens, and the contract every drafter keeps.

`LoadedDrafter` is a loaded drafter's whole contract (typed attributes and its capabilities:
reads the target's features, stages, tree), shared read-only by every run; `Drafting` is one
run's state (`start`, then `propose` / `draft` / `rollback`), so two runs never share a cache.
`Drafter` is a drafter model (text-only: the conversation without the image; image-aware: with
it); `propose` drafts n tokens on the device with nothing read back, from a step API that token
trees use directly (`catch_up`, `extend`, `q`, `rollback`; a subclass overrides `_forward`).
The drafter's vocabulary may be a prefix of the target's: ids it lacks get q = 0.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import bisect
from typing import Protocol, runtime_checkable

import torch
from transformers import DynamicCache

from demo.engine.compat import cache_keyword
from demo.engine.events import TreeShape
from demo.engine.sampling import Sampling, sample, warp


def ids_on(device: torch.device, ids: list[int]) -> torch.Tensor:
    """Host ids -> a long tensor [len(ids)] on the device. On CUDA through pinned memory and a
    non-blocking copy, so the host does not wait for the device to take them."""
    if torch.device(device).type != "cuda":
        return torch.tensor(ids, dtype=torch.long, device=device)
    return torch.tensor(ids, dtype=torch.long, pin_memory=True).to(device, non_blocking=True)


def cut_after_stop(drafts: list[int], stop_ids: frozenset[int]) -> int:
    """How many of the drafts count: up to and including the first stop (a drafter never drafts
    past the end of the answer)."""
    return next((i + 1 for i, token in enumerate(drafts) if token in stop_ids), len(drafts))


@runtime_checkable
class Drafting(Protocol):
    """One run's drafting state, whatever drafts: `DraftState` (a model drafter through
    transformers), `demo.engine.lean.LeanDraftState`, `demo.engine.layerskip.LayerSkipState` and
    `demo.engine.lookup.PromptLookupState` (no model)."""

    def propose(
        self,
        answer: list[int],
        n: int,
        sampling: Sampling,
        generator: torch.Generator,
        min_confidence: float = 0.0,
        features: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Drafts [m] (long, on the device) and their q [m, V], m <= n; nothing read back.
        `features`: the target's hidden states it has not seen yet, for a drafter that reads them
        (`LoadedDrafter.reads_features`): the prompt's rows first, then each round's accepted rows."""
        ...

    def draft(
        self, answer, n, sampling, generator, min_confidence=0.0, features=None
    ) -> tuple[list[int], torch.Tensor]:
        """`propose` read back: the drafts cut after a stop, and their q [len(drafts), V]."""
        ...

    def rollback(self, n_answer: int) -> None:
        """Forget everything after the first n_answer answer tokens."""
        ...


class LoadedDrafter(Protocol):
    """A loaded drafter, whatever drafts (`Drafter`, `lookup.PromptLookup`, `feature.FeatureDrafter`,
    `staged.StagedDrafter`, `trees.TreeDrafter`): shared, read-only, by every run."""

    name: str  # the menu name
    kind: str  # its registered kind (`demo.models.drafter_kinds`)
    model: object | None  # its language model (None: no context window of its own)
    n_params: int
    path: str  # what drafts: "transformers", "lean", "n-gram lookup", ...
    fallback_reason: str | None  # why it drafts through a slower path than it could, if it does
    device: torch.device
    stop_ids: frozenset[int]
    usable: int  # it may propose the target's first `usable` ids
    blocked_ids: frozenset[int]  # never proposed (image placeholders)
    # Its capabilities, declared by its class and read once where a run starts:
    reads_features: bool  # its states take the target's hidden states, handed to `propose`
    staged: bool  # its states report their lookup stage's (guesses, confirmed) per round: `stages`
    tree: TreeShape | None  # it drafts token trees of this shape (`demo.engine.trees`); None: chains

    def feedable(self, token_id: int) -> bool: ...

    def start(self, inputs: dict | None) -> Drafting: ...


class Capabilities:
    """What a drafter can do beyond proposing chains: nothing, unless its class says so."""

    reads_features = False
    staged = False
    tree: TreeShape | None = None


class OnBase:
    """A drafter that drafts with another's model (`base`): every fact it does not set, its
    capabilities included, is the base's."""

    def __init__(self, base: LoadedDrafter, *, name: str):
        self.base = base
        self.name = name

    def __getattr__(self, attr: str):  # `feedable` too
        return getattr(self.base, attr)


class Drafter(Capabilities):
    """A loaded drafter model and what it may propose; shared, read-only, by every run. `path`:
    the forward its runs draft with ("transformers"; `lean.LeanDrafter`'s say "lean ...")."""

    path = "transformers"
    fallback_reason: str | None = None

    def __init__(
        self,
        model,
        *,
        name: str,
        kind: str,
        target_vocab_size: int,
        stop_ids: frozenset[int],
        blocked_ids: frozenset[int] = frozenset(),
    ):
        self.model, self.name, self.kind, self.stop_ids = model, name, kind, stop_ids
        self.device: torch.device = model.device  # read once: transformers' model.device walks the parameters
        self.n_params, self.target_vocab_size = sum(p.numel() for p in model.parameters()), target_vocab_size
        vocab_size = model.get_output_embeddings().weight.shape[0]
        # Ids the drafter may propose: those it has, that the target can verify, minus the
        # blocked ones (image placeholders: a drafted placeholder is never meaningful text).
        self.usable = min(vocab_size, target_vocab_size)
        allowed = torch.zeros(vocab_size, dtype=torch.bool)
        allowed[: self.usable] = True
        allowed[[i for i in blocked_ids if i < vocab_size]] = False
        self.allowed = allowed.to(model.device)
        self.blocked = ~self.allowed  # computed once: the draft loop masks with it at every step
        self.blocked_ids = blocked_ids
        self.cache_kw = cache_keyword(model)  # "cache", or "past_key_values" before transformers 5.2x

    def feedable(self, token_id: int) -> bool:
        return token_id < self.usable and token_id not in self.blocked_ids

    @torch.inference_mode()
    def start(self, inputs: dict) -> DraftState:
        """A new run's state: prefill the drafter's own prompt (its input_ids, plus pixel_values if
        image-aware) into a fresh cache."""
        state = DraftState(self, DynamicCache(config=self.model.config), int(inputs["input_ids"][0, -1]))
        self.model(**inputs, **{self.cache_kw: state.cache}, use_cache=True, logits_to_keep=1)
        return state


class ReadBack:
    """`Drafting.draft` for a state that drafts on the device (its `propose`)."""

    def draft(
        self, answer, n, sampling, generator, min_confidence=0.0, features=None
    ) -> tuple[list[int], torch.Tensor]:
        """`propose`, read back: (drafts, q [len(drafts), target_vocab_size]), the drafts cut
        after the first stop token (the state may hold drafts past it; `rollback` forgets them)."""
        drafts, q = self.propose(answer, n, sampling, generator, min_confidence, features)
        ids = drafts.tolist()
        keep = cut_after_stop(ids, self.drafter.stop_ids)
        return ids[:keep], q[:keep]


class OnDevice:
    """`Drafting.propose` for a state that drafts on the host (its `draft`)."""

    def propose(
        self, answer, n, sampling, generator, min_confidence=0.0, features=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`draft`'s drafts as a long tensor [m] on the device, and their q [m, target_vocab_size]."""
        drafts, q = self.draft(answer, n, sampling, generator, min_confidence, features)
        return ids_on(self.drafter.device, drafts), q


class DraftState(ReadBack):
    """One run's drafting: the drafter's KV cache and which answer tokens it holds."""

    def __init__(self, drafter: Drafter, cache: DynamicCache, prompt_last: int):
        self.drafter = drafter
        self.cache = cache
        self.prompt_last = prompt_last  # the prompt's last id, re-fed when nothing new is readable
        self.fed_positions: list[int] = []  # answer position of each answer token in the cache
        self.fed_tokens: list = []  # and its id: an int, or a 0-d device tensor for a draft `propose` fed
        self.consumed = 0  # answer positions already fed or skipped

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Feed ids [n] (long, on the device), return the logits for the token after them: [V_d]."""
        d = self.drafter
        out = d.model(input_ids=ids[None], **{d.cache_kw: self.cache}, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1]

    def forward_all(self, ids: torch.Tensor) -> torch.Tensor:
        """Feed ids [n] -> the logits after each of them [n, V_d] (staged drafting, `demo.engine.staged`)."""
        d = self.drafter
        return d.model(input_ids=ids[None], **{d.cache_kw: self.cache}, use_cache=True).logits[0]

    # --- the step API: what `draft` is made of, and what token trees draft with -----------------

    def catch_up(self, answer: list[int]) -> torch.Tensor:
        """Feed the answer tokens this drafter has not seen (usually the target's last token, or
        a bonus pair), skipping ids it lacks; return the logits for the token after the answer: [V_d]."""
        d = self.drafter
        pending = [(i, answer[i]) for i in range(self.consumed, len(answer)) if d.feedable(answer[i])]
        self.consumed = len(answer)
        if pending:
            self.fed_positions += [i for i, _ in pending]
            self.fed_tokens += [tok for _, tok in pending]
            return self._forward(ids_on(d.device, [tok for _, tok in pending]))
        # Nothing new it can read: re-feed its last cached token to get fresh logits.
        self.cache.crop(-1)
        return self._forward(self._one(self.fed_tokens[-1] if self.fed_tokens else self.prompt_last))

    def extend(self, token: int | torch.Tensor, position: int) -> torch.Tensor:
        """Feed one drafted token (an id, or a 0-d long tensor on the device) at answer position
        `position` (the cache must hold every fed position before it); return the logits for the
        token after it: [V_d]."""
        self.fed_positions.append(position)
        self.fed_tokens.append(token)
        self.consumed = position + 1
        return self._forward(self._one(token))

    def _one(self, token: int | torch.Tensor) -> torch.Tensor:
        """One token (an id, or a 0-d tensor on the device) as ids [1] on the device."""
        return token.reshape(1) if isinstance(token, torch.Tensor) else ids_on(self.drafter.device, [token])

    def q(self, logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
        """The drafter's distribution [V_d] from its logits [V_d], warped, zero on ids it may not propose."""
        return warp(logits.masked_fill(self.drafter.blocked, float("-inf")), sampling)

    def widen(self, qs: list[torch.Tensor]) -> torch.Tensor:
        """Distributions [V_d] each -> [len(qs), target_vocab_size], zero on ids the drafter lacks."""
        d = self.drafter
        q = torch.zeros(len(qs), d.target_vocab_size, device=d.device)
        if qs:
            q[:, : d.usable] = torch.stack(qs)[:, : d.usable]
        return q

    @torch.inference_mode()
    def propose(
        self, answer, n, sampling, generator, min_confidence=0.0, features=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Propose n tokens to follow `answer`, on the device (the arguments: `Drafting.propose`).

        Returns (drafts [m], q [m, target_vocab_size]), q zero on ids it cannot propose. m = n,
        drafting on past a stop (the round cuts there), except with adaptive length: after the
        first draft it stops where q's top probability falls below min_confidence, decided from q
        before sampling, so every draft is still an exact sample of q (one number read back a step).
        """
        if features is not None:
            self.observe(features)
        if n == 0:
            return torch.zeros(0, dtype=torch.long, device=self.drafter.device), self.widen([])
        # 1. catch up on the answer.
        logits = self.catch_up(answer)  # [V_d]
        # 2. draft one token at a time; each is fed back except the last. No value leaves the device.
        drafts, qs = [], []
        for step in range(n):
            q = self.q(logits, sampling)  # [V_d]
            if step > 0 and min_confidence > 0 and float(q.max()) < min_confidence:
                break
            token = q.argmax() if sampling.greedy else sample(q, generator)  # [] long
            drafts.append(token)
            qs.append(q)
            if step < n - 1:
                logits = self.extend(token, len(answer) + step)
        return torch.stack(drafts), self.widen(qs)

    def observe(self, features: torch.Tensor) -> None:
        """Take the target's hidden states [k, C] (`feature` drafters' states; others read none)."""
        raise TypeError(f"{type(self.drafter).__name__} reads no target features")

    def rollback(self, n_answer: int) -> None:
        """Keep only what the cache holds for the first n_answer answer tokens."""
        keep = bisect.bisect_left(self.fed_positions, n_answer)
        drop = len(self.fed_positions) - keep
        if drop:
            self.cache.crop(-drop)  # crop(-k) removes the last k cached tokens
            del self.fed_positions[keep:]
            del self.fed_tokens[keep:]
        self.consumed = min(self.consumed, n_answer)
