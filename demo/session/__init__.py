"""The session layer: what every surface goes through to decode, with no Gradio in it.

The page, the API, the Analysis tab, the benchmark and the tests all turn what they were sent
into one `Request` (`parse`, by name: every field is checked by `validate` and refused with its
name and valid range), and then use the calls below:

    Race(request, image, uploads)  a race as one object: `events()` yields Loading / Ready /
                                   Lane / Sweeping items, then one RaceResult with its `ending`;
                                   `stop()`; `traces`; its budget armed by itself (`race`)
    gpu_race(request, image, ...)  the race's accelerator call (prepare, race, γ sweep, table of
                                   strategies, image attention), plain data only
    Analysis(request, items)       an analysis as one object, the same shape (`analysis`)
    Replay(timeline, slowdown)     a recorded race again, each event at its measured time x slowdown
    load(request, progress)        the preset and drafters, loaded once per process
    Prompts(loaded, question, image)  one race's prompts, each made once (`lane_runs`)
    lanes(loaded, request, image)  the race's seeded runs, not started: lane -> event generator
                                   (`lane_names(request)`: one speculative lane per drafter, then
                                   the autoregressive one)
    racing(lanes)                  the race as (lane, event) pairs, compute-fair; closes the runs
                                   (and frees their KV caches) however it is left
    run_lanes(...), run(...)       a request's lanes (or one) decoded whole -> Trace
    warm_up(preset)                load and decode a few tokens with each drafter
What a failed request is told is `failures.message(error)`. Whether a preset and a request's
lanes can run here at all is `offers`'s to say (a race asks it first, before any work).

The package's other modules: `request` (`Request`, `parse`, `lane_names`, `DEFAULTS`), `race_events`
(what `gpu_race` and `decode_examples` yield), `validate` (every value checked before any work),
`offers`, `failures`, `budget` (the work budget and the `Deadline`), `languages` (a question's
language and the drafter it gets), `gamma_sweep`, `strategies`, `image_attention` and
`rejections` (where drafts are rejected, by word category).

Torch and transformers are imported on first use, so a page can import this module and be
usable before they are.
"""

from __future__ import annotations

from demo.session.analysis import Analysis, decode_examples  # noqa: F401  (re-exported)
from demo.session.lane_runs import (  # noqa: F401  (re-exported)
    Prompts,
    close,
    lanes,
    load,
    racing,
    run,
    run_lanes,
    warm_up,
)
from demo.session.race import (  # noqa: F401  (re-exported)
    Race,
    RaceResult,
    Replay,
    _race_duration,
    gpu_race,
    prepare,
)
from demo.session.race_events import Decoded, Lane, Loading, Ready, Running, Sweeping, Swept  # noqa: F401
from demo.session.request import (  # noqa: F401  (re-exported: demo.session.X is how every surface knows them)
    DEFAULTS,
    LANES,
    SECOND,
    Request,
    lane_names,
    parse,
)
from demo.session.validate import InvalidInput  # noqa: F401
