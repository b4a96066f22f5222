"""Drafters that read the target's hidden state: `feature` (a speculator) and `medusa` (heads).

Neither sees the image itself or reads the prompt's tokens: each reads the target's last hidden
states, which the engine hands to `propose` from the target forwards it runs anyway (the
prefill's every prompt position, then each round's accepted positions): the image reaches them
through the target's own eyes. Their networks and checkpoints are `demo.engine.heads`.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from demo.engine import feature_steps, heads
from demo.engine.drafters import Capabilities, DraftState


class FeatureDrafter(Capabilities):
    """A speculator or Medusa heads on a target; shared, read-only, by every run."""

    path = "torch (target features)"  # what drafts: a few matrix products, no transformer forward
    fallback_reason: str | None = None
    reads_features = True
    kind = "target-feature"

    def __init__(self, net, target_model, *, name: str, stop_ids: frozenset[int], blocked_ids: frozenset[int]):
        out = target_model.get_output_embeddings().weight.detach()  # [V, C]
        self.device: torch.device = out.device
        self.E = out.float()  # scores states: the target's own head (tied to its input embedding here)
        self.embed = target_model.get_input_embeddings().weight.detach().float()  # [V, C]
        self.net = net.to(self.device)
        self.model = None  # no language model: no context window of its own (as prompt lookup's)
        self.name = name
        self.stop_ids = stop_ids
        self.blocked_ids = blocked_ids
        self.n_params = sum(p.numel() for p in net.parameters())
        self.target_vocab_size = self.usable = out.shape[0]
        self.blocked = torch.zeros(self.usable, dtype=torch.bool, device=self.device)
        self.blocked[[i for i in blocked_ids if i < self.usable]] = True
        self.vocab = getattr(net, "vocab", None)  # a speculator's draftable ids (None: all)
        self.E_rows = self.E if self.vocab is None else self.E[self.vocab]  # [V or len(vocab), C]

    @classmethod
    def load(cls, path: Path, target, *, name: str, blocked_ids: frozenset[int] = frozenset()):
        """The checkpoint at `path` on `target` (a `decoding.Target`); a checkpoint trained for
        another hidden size is refused with a sentence (`heads.MismatchedCheckpoint`)."""
        hidden = target.model.get_output_embeddings().weight.shape[1]
        net = heads.load(path, hidden, target.device)
        kind = MedusaDrafter if isinstance(net, heads.MedusaHeads) else SpeculatorDrafter
        return kind(net, target.model, name=name, stop_ids=target.stop_ids, blocked_ids=blocked_ids)

    def feedable(self, token_id: int) -> bool:
        return token_id < self.usable and token_id not in self.blocked_ids

    def logits(self, s: torch.Tensor) -> torch.Tensor:
        """States [..., C] -> logits over the target's vocabulary [..., V] (`heads.logits`)."""
        return heads.logits(s, self.E_rows, self.vocab, self.usable)


class SpeculatorDrafter(FeatureDrafter):
    """On a CPU it steps in NumPy (`feature_steps`), where that step agrees with the torch one."""

    def __init__(self, net, target_model, **kw):
        super().__init__(net, target_model, **kw)
        self.numpy = None  # off a CPU the torch step is the one meant, not a fallback
        if feature_steps.supported(self.device, net):
            step = feature_steps.NumpySpeculator(net, self.E_rows, len(self.E), self.embed)
            self.fallback_reason = feature_steps.agrees(step, self, net)  # why the torch step drafts, if it does
            if self.fallback_reason is None:
                self.numpy = step
                self.path = "NumPy step (target features)"
                blocked = self.blocked.cpu().numpy()[step.rows]  # in the NumPy logits' order
                self._blocked_rows = blocked if blocked.any() else None  # a restricted speculator has none

    def start(self, inputs: dict | None) -> SpeculatorState:
        """A run's state; it reads no prompt of its own (the prefill's features come with `propose`)."""
        return SpeculatorState(self)


class MedusaDrafter(FeatureDrafter):
    kind = "target-heads"

    def start(self, inputs: dict | None) -> MedusaState:
        return MedusaState(self)


class _FeatureState(DraftState):
    """What both states share: the target's newest feature, and no cache."""

    def __init__(self, drafter: FeatureDrafter):
        self.drafter = drafter
        self.feature: torch.Tensor | None = None  # [C]: f at the position before the newest answer token
        self.base = 0  # len(answer) at the last catch_up

    def observe(self, features: torch.Tensor) -> None:
        self.feature = features[-1].float()

    def _ready(self) -> None:
        if self.feature is None:
            raise RuntimeError(f"{self.drafter.name} drafts only after the target's features reached it (observe)")


class SpeculatorState(_FeatureState):
    """The speculator's states along the drafted path: states[i] after feeding answer position
    base - 1 + i (NumPy arrays on the NumPy step, else tensors); with `look`, the prompt's keys
    and values, made from the prefill's rows (the first `observe`)."""

    def __init__(self, drafter: SpeculatorDrafter):
        super().__init__(drafter)
        self.states: list = []
        self.seen = None  # `look`'s keys and values of the prompt

    def observe(self, features: torch.Tensor) -> None:
        super().observe(features)
        d = self.drafter
        if d.net.look is not None and self.seen is None:  # the first rows are the prefill's: the whole prompt
            self.seen = d.numpy.prepare(features) if d.numpy else d.net.look.prepare(features.float())
        if d.numpy is not None:
            self.feature = self.feature.cpu().numpy()

    def _step(self, token) -> torch.Tensor:
        d, k = self.drafter, len(self.states)
        s = self.states[-1] if self.states else self.feature
        if d.numpy is not None:
            s, logits = d.numpy.step(k, s, int(token), self.seen)
            self.states.append(s)
            return torch.from_numpy(logits)
        s = d.net.step(k, s, d.embed[token], self.seen)
        self.states.append(s)
        return d.logits(s)

    def catch_up(self, answer: list[int]) -> torch.Tensor:
        """From f before the newest token and that token: logits for the first draft [V]."""
        self._ready()
        self.base, self.states = len(answer), []
        return self._step(answer[-1])

    def extend(self, token: int | torch.Tensor, position: int) -> torch.Tensor:
        """Feed a draft at answer position `position` (states up to it kept): logits after it [V]."""
        del self.states[position - self.base + 1 :]
        return self._step(token)

    def rollback(self, n_answer: int) -> None:
        del self.states[max(0, n_answer - self.base + 1) :]

    @torch.inference_mode()
    def propose(self, answer, n, sampling, generator, min_confidence: float = 0.0, features=None):
        """`DraftState.propose`; a greedy chain on the NumPy step stays in NumPy: each draft the
        argmax of the masked logits, q their softmax (what `warp` gives in greedy mode)."""
        d = self.drafter
        if features is not None:
            self.observe(features)
        if d.numpy is None or not sampling.greedy or n == 0:
            return super().propose(answer, n, sampling, generator, min_confidence)
        self._ready()
        self.base, self.states = len(answer), []
        s, token, drafts = self.feature, answer[-1], []
        q = np.zeros((n, d.usable), dtype=np.float32)  # zero off the ids it drafts from
        for step in range(n):  # the states kept as `propose`'s catch_up and extends keep them
            s, logits = d.numpy.step_rows(step, s, token, self.seen)  # over the draftable ids
            self.states.append(s)
            if d._blocked_rows is not None:
                logits[d._blocked_rows] = -np.inf
            top = logits.argmax()
            terms = np.exp(logits - logits[top])  # softmax's terms, the largest 1
            p_top = 1.0 / terms.sum()  # q's largest probability
            if step > 0 and min_confidence > 0 and p_top < min_confidence:
                break
            terms *= p_top
            q[step][d.numpy.rows] = terms
            token = int(d.numpy.rows[top])
            drafts.append(token)
        return torch.from_numpy(np.array(drafts, dtype=np.int64)), torch.from_numpy(q[: len(drafts)])


class MedusaState(_FeatureState):
    """The heads' logits for every draft position, computed once per round from f."""

    def __init__(self, drafter: MedusaDrafter):
        super().__init__(drafter)
        self.rows: torch.Tensor | None = None  # [k, V]

    def catch_up(self, answer: list[int]) -> torch.Tensor:
        self._ready()
        d = self.drafter
        self.base, self.rows = len(answer), d.logits(d.net(self.feature))
        return self.rows[0]

    def extend(self, token: int | torch.Tensor, position: int) -> torch.Tensor:
        """The next position's head (heads read f alone, not the token; past the last head, the
        last head again: trees deeper than the heads draft poorly, still exactly verified)."""
        return self.rows[min(position - self.base + 1, self.rows.shape[0] - 1)]

    def rollback(self, n_answer: int) -> None:
        """Nothing to forget: the rows depend on f only."""

    def propose(self, answer, n, sampling, generator, min_confidence: float = 0.0, features=None):
        """DraftState's chain, at most one draft per head."""
        n = min(n, len(self.drafter.net.heads))
        return super().propose(answer, n, sampling, generator, min_confidence, features)
