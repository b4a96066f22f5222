"""The target's image attention of finished runs, read afterwards, off their clocks: one extra target
forward over the answer (`attach`), and the image ablation (`dependence`: whether the image at
least doubles the target's p at each answer token). Runs that wrote the same answer share one
reading; nothing it allocates is kept."""

from __future__ import annotations

import logging

from demo.engine.grounding import ImageAttention

log = logging.getLogger(__name__)

NO_IMAGE = "There is no image in this question, so there is no attention on it to show."


def attach(prompts, traces: dict, question: str | None = None) -> dict:
    """Set `image_attention` on each finished trace of `traces` (lane -> Trace), whose runs
    read `prompts` (its image None: no image), and with `question` its `ablation`
    (`Ablation.to_dict()`); returns `traces`."""
    import torch

    from demo.models import ablation, attention_pass

    if prompts.image is None:
        for trace in traces.values():
            trace.image_attention = ImageAttention.missing(NO_IMAGE)
            trace.ablation = ablation.Ablation.missing(NO_IMAGE).to_dict() if question is not None else None
        return traces
    loaded, inputs = prompts.loaded, prompts.target_inputs
    read: dict[tuple[int, ...], tuple[ImageAttention, dict | None]] = {}
    for trace in traces.values():
        if trace.summary is None:
            continue
        ids = tuple(trace.summary.token_ids)
        if ids not in read:
            try:
                looked = attention_pass.image_attention(loaded, inputs, list(ids))
            except Exception as error:  # the run stands; only its attention view is lost
                log.warning("reading the image attention failed", exc_info=error)
                looked = ImageAttention.missing(
                    f"The target's attention could not be read ({type(error).__name__}: {str(error)[:120]})."
                )
            needed = None if question is None else _ablation(prompts, question, list(ids), inputs).to_dict()
            read[ids] = looked, needed
        trace.image_attention, trace.ablation = read[ids]
    del inputs  # the prompts keep theirs for the race: only this reading's are dropped
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return traces


def _ablation(prompts, question: str, ids: list[int], inputs=None):
    """The image ablation of answer `ids` (`inputs`: the race's target inputs, reused); a failed
    reading costs only its view, and is logged."""
    from demo.models import ablation

    try:
        return ablation.ablate(prompts.loaded, prompts.image, question, ids, inputs)
    except Exception as error:  # the run stands; only its ablation is lost
        log.warning("the image ablation failed", exc_info=error)
        return ablation.Ablation.missing(f"The image ablation could not be read ({type(error).__name__}).")


def dependence(prompts, question: str, ids: list[int]) -> tuple[bool, ...] | None:
    """Each answer token's image dependence (`Ablation.dependent`), or None where there is no image
    or the ablation cannot be read."""
    if prompts.image is None or not ids:
        return None
    read = _ablation(prompts, question, list(ids))
    return None if read.unavailable else read.dependent
