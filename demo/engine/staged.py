"""Staged speculative decoding (Spector & Re 2023; the second seed): a drafter drafted by lookup.

The text-only drafter drafts as always, but prompt lookup guesses its next drafts and one forward
over [its token] + the guesses gives its logits at each; it drafts on while its own choice equals
the guess. A guess only decides which logits are computed ahead, never a draft, so the target
sees exactly the text-only drafter's drafts and q; staging saves drafter forwards. `stages` is
each round's (guesses, confirmed).

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import torch

from demo.engine.drafters import Drafter, DraftState, OnBase, ReadBack, ids_on
from demo.engine.lookup import MAX_NGRAM, lookup
from demo.engine.sampling import Sampling, sample


class StagedDrafter(OnBase):
    """A text-only (or image-aware) drafter's model drafting through `StagedState`; its runs are
    the base drafter's states (transformers or lean) with the lookup stage around them."""

    kind = "staged"
    staged, reads_features, tree = True, False, None  # chains of a text drafter, with `stages`

    def __init__(self, base: Drafter, *, name: str, max_ngram: int = MAX_NGRAM):
        super().__init__(base, name=name)
        self.max_ngram = max_ngram

    @property
    def path(self) -> str:
        return f"{self.base.path} + lookup stage"

    def start(self, inputs: dict) -> StagedState:
        prompt = [int(i) for i in inputs["input_ids"][0].tolist() if self.feedable(int(i))]
        return StagedState(self, self.base.start(inputs), prompt)  # the drafter's own prompt, prefilled


class StagedState(ReadBack):
    """One run: the base drafter's state (`inner`), drafted through the lookup stage; `stages`
    holds the last round's (guesses, confirmed)."""

    def __init__(self, drafter: StagedDrafter, inner: DraftState, prompt_ids: list[int]):
        self.drafter = drafter
        self.inner = inner
        self.prompt_ids = prompt_ids
        self.stages: tuple[int, int] = (0, 0)

    def _pick(self, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator):
        q = self.inner.q(logits, sampling)  # [V_d]
        return (q.argmax() if sampling.greedy else sample(q, generator)), q

    @torch.inference_mode()
    def propose(
        self, answer, n, sampling, generator, min_confidence=0.0, features=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """n drafts of the drafter's own and their q (`DraftState.propose`), with fewer forwards."""
        d, inner = self.drafter, self.inner
        self.stages = (0, 0)
        if n == 0:
            return torch.zeros(0, dtype=torch.long, device=d.device), inner.widen([])
        rows = [inner.catch_up(answer)]  # logits computed ahead: rows[0] is for the next draft
        guesses: list[int] = []  # the fed guesses not yet confirmed: rows[1:] follow them
        drafts, qs, ids = [], [], []
        guessed = confirmed = 0
        while True:
            token, q = self._pick(rows.pop(0), sampling, generator)
            if drafts and min_confidence > 0 and float(q.max()) < min_confidence:
                break
            drafts.append(token)
            qs.append(q)
            ids.append(int(token))  # the read back: compared with the guess
            if len(drafts) == n:
                break
            if guesses:  # the next row was computed after guesses[0]: usable if the drafter chose it
                if ids[-1] == guesses[0]:
                    confirmed += 1
                    guesses.pop(0)
                    continue
                inner.rollback(inner.fed_positions[-len(guesses)])  # the wrong guess and the ones after it
                rows, guesses = [], []
            # Stage 2 guesses what follows the drafter's token; stage 1 feeds its token and the
            # guesses in one forward, which gives the logits after each.
            position = len(answer) + len(drafts) - 1
            guesses = [g for g in lookup(self.prompt_ids + answer + ids, n - len(drafts), d.max_ngram)]
            guesses = guesses[: next((i for i, g in enumerate(guesses) if not d.feedable(g)), len(guesses))]
            guessed += len(guesses)
            fed = torch.cat([token.reshape(1), ids_on(d.device, guesses)])  # [1 + len(guesses)]
            inner.fed_positions += list(range(position, position + len(fed)))
            inner.fed_tokens += [token] + guesses
            inner.consumed = position + len(fed)
            rows = list(inner.forward_all(fed))
        if guesses:
            inner.rollback(inner.fed_positions[-len(guesses)])  # computed ahead, never drafted
        self.stages = (guessed, confirmed)
        return torch.stack(drafts), inner.widen(qs)

    def rollback(self, n_answer: int) -> None:
        self.inner.rollback(n_answer)
