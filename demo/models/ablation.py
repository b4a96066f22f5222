"""Did the target use the image? One more target pass over the answer with the image blanked.

Attention (`demo.models.attention_pass`) says where the target looked; this says whether its answer
needed the picture. After a run, off its clocks, the target scores the run's answer twice, teacher
forced, in one forward each (no cache, no gradient): once with the image and once with a blank one
of the same size (uniform grey, `BLANK`), so the prompt keeps every position, the image's tokens
included, and only what they show is gone. For every answer token it gives its
probability with and without the image, and whether the image decided it.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from PIL import Image

from demo.models.attention_pass import sequence_positions, teacher_forced

BLANK = (128, 128, 128)  # the blank image's colour: mid grey, which each family's normalisation sends near 0
RATIO = 2.0  # the image at least doubles the token's probability: it depended on it (docs/grounding.md)


@dataclass(frozen=True)
class Ablation:
    """The target's answer scored with and without the image, token by token (empty: `unavailable`)."""

    p_with: tuple[float, ...] = ()
    p_without: tuple[float, ...] = ()
    choice_without: tuple[int, ...] = ()  # the target's argmax at each position, image blanked
    flips: tuple[bool, ...] = ()
    unavailable: str | None = None

    @property
    def log_ratio(self) -> tuple[float, ...]:
        """log p_with - log p_without per token (how much likelier the image made it)."""
        tiny = 1e-30
        return tuple(math.log(max(a, tiny)) - math.log(max(b, tiny)) for a, b in zip(self.p_with, self.p_without))

    @property
    def dependent(self) -> tuple[bool, ...]:
        limit = math.log(RATIO)
        return tuple(r >= limit for r in self.log_ratio)

    def to_dict(self) -> dict:
        return {
            "p_with": list(self.p_with),
            "p_without": list(self.p_without),
            "choice_without": list(self.choice_without),
            "flips": list(self.flips),
            "dependent": list(self.dependent),
            "ratio": RATIO,
            "unavailable": self.unavailable,
        }

    @classmethod
    def missing(cls, why: str) -> Ablation:
        return cls(unavailable=why)


def blank_like(image: Image.Image) -> Image.Image:
    return Image.new("RGB", image.size, BLANK)


def answer_logits(loaded, inputs: dict, answer_ids: list[int]) -> torch.Tensor:
    """The target's logits deciding each answer token, teacher forced: [n, V] (row i decided token
    i: the forward at the token before it). One forward over prompt + answer[:-1], no cache."""
    full = teacher_forced(inputs, answer_ids)
    full |= sequence_positions(loaded.target, full)
    with torch.no_grad():
        return loaded.target.model(**full, use_cache=False, logits_to_keep=len(answer_ids)).logits[0].float()


def ablate(loaded, image: Image.Image | None, question: str, answer_ids: list[int], with_image=None) -> Ablation:
    """Score `answer_ids` (the target's answer to `question` about `image`) with the image and with
    a blank one; `Ablation.missing` says why where it cannot. `with_image`: the race's own target
    inputs for `image`, so that only the blank image is processed here."""
    if image is None:
        return Ablation.missing("There is no image in this question, so nothing depends on it.")
    if not answer_ids:
        return Ablation.missing("The answer is empty.")
    with_image = with_image if with_image is not None else loaded.prompt(image, question).target_inputs
    blank = loaded.prompt(blank_like(image), question).target_inputs
    if not torch.equal(with_image["input_ids"], blank["input_ids"]):
        return Ablation.missing(
            "A blank image of the same size gave this model a different prompt, so the two cannot be compared."
        )
    ids = torch.tensor(answer_ids, device=with_image["input_ids"].device)
    rows = torch.arange(len(answer_ids), device=ids.device)
    seen = answer_logits(loaded, with_image, answer_ids)
    p_with = seen.softmax(-1)[rows, ids]
    choice_with = seen.argmax(-1)
    del seen
    unseen = answer_logits(loaded, blank, answer_ids)
    p_without = unseen.softmax(-1)[rows, ids]
    choice_without = unseen.argmax(-1)
    del unseen
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return Ablation(
        p_with=tuple(p_with.tolist()),
        p_without=tuple(p_without.tolist()),
        choice_without=tuple(choice_without.tolist()),
        flips=tuple((choice_with != choice_without).tolist()),
    )
