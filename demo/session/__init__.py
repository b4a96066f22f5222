"""The session layer: what every surface (the page, the API, the Analysis tab, the batch, the
benchmark, the tests) goes through to decode, with no Gradio in it.

A surface turns what it was sent into one `Request` (`parse`, by name, each field checked by
`validate`), then runs a `Race` or an `Analysis`; `offers` says whether it can run here at all,
`failures.message` what a failed request is told. Torch and transformers are imported on first
use, so a page can import this package before they are."""

from __future__ import annotations

# Re-exported: demo.session.X is how every surface knows them.
from demo.session.analysis import Analysis, decode_examples  # noqa: F401
from demo.session.lane_runs import Prompts, lanes, load, racing, run, run_lanes, warm_up  # noqa: F401
from demo.session.race import Race, RaceResult, Replay, _race_duration, gpu_race, prepare  # noqa: F401
from demo.session.race_events import Decoded, Lane, Loading, Ready, Running, Sweeping, Swept  # noqa: F401
from demo.session.request import DEFAULTS, LANES, SECOND, Request, lane_names, parse  # noqa: F401
