"""The target's image attention of finished runs, for every surface: the page, /trace, the
Analysis tab and the benchmark (no Gradio here).

A run's clocks and outputs are its own: this reads the attention afterwards, from one extra target
forward over the answer (`demo.models.grounding`), and sets `Trace.image_attention`. Runs that wrote
the same answer from the same prompt share one reading. What it allocates is freed before it
returns (no cache is kept; the weights are reduced to per-token shares and maps at once).

    attach(loaded, question, image, traces)  set image_attention on each finished trace
    of_race(request, image_payload, uploads, traces) -> {lane: ImageAttention}
                                             the same after a page's race (on ZeroGPU: one more
                                             GPU call, as the gamma sweep makes)
    read_race(request, image_payload, uploads, traces) -> traces
                                             of_race's readings set on the finished traces; a
                                             failure costs only the heatmaps, and says why
"""

from __future__ import annotations

import logging
from pathlib import Path

from demo.engine.grounding import ImageAttention
from demo.models import zerogpu
from demo.session import validate

log = logging.getLogger(__name__)

NO_IMAGE = "There is no image in this question, so there is no attention on it to show."


def attach(loaded, question: str, image, traces: dict) -> dict:
    """Set `image_attention` on each finished trace of `traces` (lane -> Trace), whose runs
    answered `question` about `image` (None: no image); returns `traces`."""
    import torch

    from demo.models import grounding

    if image is None:
        for trace in traces.values():
            trace.image_attention = ImageAttention.missing(NO_IMAGE)
        return traces
    inputs = loaded.prompt(image, question).target_inputs
    read: dict[tuple[int, ...], ImageAttention] = {}
    for trace in traces.values():
        if trace.summary is None:
            continue
        ids = tuple(trace.summary.token_ids)
        if ids not in read:
            try:
                read[ids] = grounding.image_attention(loaded, inputs, list(ids))
            except Exception as error:  # the run stands; only its attention view is lost
                log.warning("reading the image attention failed", exc_info=error)
                read[ids] = ImageAttention.missing(
                    f"The target's attention could not be read ({type(error).__name__}: {str(error)[:120]})."
                )
        trace.image_attention = read[ids]
    del inputs
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return traces


def _duration(request, image_payload, uploads, traces) -> int:
    return zerogpu.duration(max(1, request.max_new_tokens // 8), len(traces), 0.05)


@zerogpu.GPU(duration=_duration)
def of_race(request, image_payload, uploads: str | Path, traces: dict) -> dict[str, ImageAttention]:
    """The image attention of a finished race's lanes (lane -> ImageAttention), plain data."""
    from demo.models import loader

    loaded = loader.load(request.preset)
    path = validate.image_path(image_payload, uploads)
    image = validate.open_image(path)[0] if path is not None else None
    attach(loaded, request.question, image, traces)
    return {lane: trace.image_attention for lane, trace in traces.items() if trace.image_attention is not None}


def read_race(request, image_payload, uploads: str | Path, traces: dict) -> dict:
    """Each finished lane's image attention (`of_race`), set on its trace; returns `traces`."""
    done = {lane: t for lane, t in traces.items() if t.done}
    try:
        read = of_race(request, image_payload, uploads, done)
    except Exception as error:  # the race stands; only where the target looked is lost
        log.warning("reading the image attention failed", exc_info=error)
        line = (str(error).strip().splitlines() or [""])[0][:160]
        read = dict.fromkeys(done, ImageAttention.missing(f"The target's attention could not be read ({line})."))
    for lane, attention in read.items():
        traces[lane].image_attention = attention
    return traces
