"""Prompt lookup: a drafter with no model, drafting by copying what followed an earlier match.

After the answer so far, take its last n tokens (n from `max_ngram` down to 1) and look for the
same n tokens earlier in the history (the prompt, image placeholders left out, then the answer);
at the first (leftmost) match, propose the tokens that followed it, up to the round's draft
length and cut after a stop token. This is transformers' prompt lookup (`PromptLookupCandidateGenerator`,
max_matching_ngram_size and num_output_tokens) and vLLM's n-gram drafter. It proposes nothing
when no n-gram of the tail occurs earlier: that round is then a plain target step.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import torch

from demo.engine.drafters import Capabilities, OnDevice, cut_after_stop

MAX_NGRAM = 3  # longest tail matched; the prompt-lookup-decoding reference uses 3 (transformers: 2)


def lookup(history: list[int], n: int, max_ngram: int = MAX_NGRAM) -> list[int]:
    """Up to n tokens that followed the leftmost earlier occurrence of the longest tail of
    `history` (tails of max_ngram tokens down to 1) that has one; [] when none has."""
    length = len(history)
    for size in range(min(max_ngram, length - 1), 0, -1):
        tail = history[length - size :]
        # Occurrences that start before the tail itself, so that something follows them; the
        # search jumps between occurrences of the tail's first token (list.index runs in C).
        start = -1
        while True:
            try:
                start = history.index(tail[0], start + 1, length - size)
            except ValueError:
                break
            if history[start : start + size] == tail:
                return history[start + size : min(start + size + n, length)]
    return []


class PromptLookup(Capabilities):
    """The prompt-lookup drafter (a `LoadedDrafter`): no weights, no cache, so nothing to load and
    nothing to roll back; `model` is None."""

    kind = "prompt-lookup"
    path = "n-gram lookup"  # what drafts: no forward at all
    fallback_reason: str | None = None
    model = None
    n_params = 0

    def __init__(
        self,
        *,
        name: str,
        target_vocab_size: int,
        stop_ids: frozenset[int],
        blocked_ids: frozenset[int],
        device: torch.device,
        max_ngram: int = MAX_NGRAM,
    ):
        self.name = name
        self.target_vocab_size = self.usable = target_vocab_size
        self.stop_ids = stop_ids
        self.blocked_ids = blocked_ids  # image placeholders: left out of the history it searches
        self.device = torch.device(device)
        self.max_ngram = max_ngram

    def feedable(self, token_id: int) -> bool:
        """Whether a prompt id belongs in the history it searches (image placeholders do not)."""
        return token_id not in self.blocked_ids

    def start(self, inputs: dict) -> PromptLookupState:
        """A run's state over its prompt ids (input_ids [1, L]; placeholders are dropped here too)."""
        ids = [i for i in inputs["input_ids"][0].tolist() if i not in self.blocked_ids]
        return PromptLookupState(self, ids)


class PromptLookupState(OnDevice):
    """One run's prompt lookup: the prompt's ids; the answer comes with every `draft` call."""

    def __init__(self, lookup_drafter: PromptLookup, prompt_ids: list[int]):
        self.drafter = lookup_drafter
        self.prompt_ids = prompt_ids

    def draft(
        self, answer, n, sampling, generator, min_confidence=0.0, features=None
    ) -> tuple[list[int], torch.Tensor]:
        """Up to n drafts copied from the history, cut after a stop token, and their q: one-hot
        rows [len(drafts), target_vocab_size]. Draws nothing from the generator, and its top
        probability is always 1, so min_confidence never cuts it short."""
        d = self.drafter
        drafts = lookup(self.prompt_ids + answer, n, d.max_ngram) if n > 0 else []
        drafts = drafts[: cut_after_stop(drafts, d.stop_ids)]  # never past the end of the answer
        q = torch.zeros(len(drafts), d.target_vocab_size, device=d.device)
        if drafts:
            q[torch.arange(len(drafts)), torch.tensor(drafts)] = 1.0
        return drafts, q

    def rollback(self, n_answer: int) -> None:
        """Nothing to forget: the history is rebuilt from the answer at every `draft`."""
