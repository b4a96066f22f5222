"""The lanes of a race, from the loaded models to closed runs: `load` (once per process), `Prompts`
(the image processed once per model that reads it), `lanes` (the seeded runs), `racing`
(compute-fair, closing every run however it is left), `run_lanes` / `run`, `warm_up`."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from PIL import Image

from demo.engine.race import race
from demo.models import presets
from demo.session import budget, failures, validate
from demo.session.request import Request, lane_names
from demo.session.validate import InvalidInput

if TYPE_CHECKING:
    from demo.engine.events import Event, Trace
    from demo.engine.speculative import Prompt

log = logging.getLogger(__name__)

_WARMING = threading.Lock()  # held while the background warm-up decodes


def load(request: Request, progress=None):
    """The request's preset and drafters, loaded once per process (`progress(fraction, message)`
    hears about each stage). Waits for a running warm-up, so that a race never shares the CPU
    with one and its clocks stay honest."""
    from demo.models import loader  # torch and transformers: imported on first use

    with _WARMING:
        pass
    loaded = loader.load(request.preset, progress)
    for drafter in request.drafters:
        loaded.drafter(drafter, progress)
    return loaded


def loading(request: Request, show) -> Iterator:
    """Load in a thread, yielding show(fraction, message) for each progress report; returns the
    Loaded, or raises what `failures.load_failed` makes of the error."""
    reports = queue.Queue()

    def work():
        try:
            reports.put(load(request, lambda fraction, message: reports.put((fraction, message))))
        except Exception as error:  # handed over to the request's thread
            reports.put(error)

    threading.Thread(target=work, name=f"load-{request.preset}", daemon=True).start()
    while True:
        item = reports.get()
        if isinstance(item, Exception):
            raise failures.load_failed(request.preset, item)
        if not isinstance(item, tuple):
            return item
        yield show(*item)


class Prompts:
    """One race's prompts, each made once: the target's inputs (the image processed once), and
    each drafter's (a drafter with a processor of its own processes the image once more). The
    lanes, the γ sweep, the table of strategies and the image attention all read them here."""

    def __init__(self, loaded, question: str, image: Image.Image | None):
        self.loaded, self.question, self.image = loaded, question, image
        self._target_inputs = None
        self._made: dict[str, Prompt] = {}
        self._features: tuple[tuple[int, ...], object] | None = None  # (answer, its target features)

    @property
    def target_inputs(self) -> dict:
        if self._target_inputs is None:
            self._target_inputs = self.loaded.prompt(self.image, self.question).target_inputs
        return self._target_inputs

    def __call__(self, drafter: str) -> Prompt:
        """Drafter `drafter`'s prompt beside the target's (made on first use; a "+tree" drafter
        reads its base drafter's)."""
        base = presets.base_name(drafter)
        if base not in self._made:
            made = self.loaded.prompt(self.image, self.question, base, target_inputs=self._target_inputs)
            self._target_inputs = made.target_inputs
            self._made[base] = made
        return self._made[base]

    def features(self, drafter: str, answer: list[int]):
        """The target's hidden states behind `answer` (`sweep.answer_features`: one target forward,
        made once per answer) where `drafter` reads them to replay it, else None."""
        if not self.loaded.drafter(drafter).reads_features:
            return None
        if self._features is None or self._features[0] != tuple(answer):
            from demo.engine import sweep  # torch: imported on first use

            made = sweep.answer_features(self.loaded.target, self(drafter).target_inputs, answer)
            self._features = (tuple(answer), made)
        return self._features[1]

    def checked(self, drafter: str, max_new_tokens: int) -> Prompt:
        """`self(drafter)`, refused (InvalidInput) where the models cannot read the image and
        question or the answer would not fit their context windows."""
        try:
            prompt = self(drafter)
        except Exception as error:
            log.warning("the processor refused a request", exc_info=error)
            raise InvalidInput(
                f"This model could not read the image and question ({failures.first_line(error)})."
            ) from error
        tokens = {"target": prompt.target_inputs["input_ids"].shape[1]}
        windows = {"target": validate.context_window(self.loaded.target.model.config)}
        model = self.loaded.drafter(drafter).model  # None for prompt lookup: no context to fill
        if prompt.drafter_inputs is not None and model is not None:
            tokens["drafter"] = prompt.drafter_inputs["input_ids"].shape[1]
            windows["drafter"] = validate.context_window(model.config)
        validate.check_context(tokens, windows, max_new_tokens)
        return prompt


def lanes(
    loaded,
    request: Request,
    image: Image.Image | None,
    names: tuple[str, ...] | None = None,
    drafter=None,
    *,
    prompts: Prompts | None = None,
) -> dict[str, Iterator[Event]]:
    """The runs of a race, not started: lane name -> the engine's event generator, each with its
    own generator seeded with the request's seed. `names`: the lanes to build, in race order
    (default `lane_names(request)`). Every lane reads `prompts` (default: made here from
    `image`), made outside every clock. `drafter` replaces the first speculative lane's drafter
    (the benchmark's drafter on another forward path)."""
    import torch

    from demo.engine.speculative import Prompt, autoregressive_generate, speculative_generate

    prompts = Prompts(loaded, request.question, image) if prompts is None else prompts
    names = lane_names(request) if names is None else names
    for d in dict.fromkeys(request.lane_drafter(n) for n in names if n != "autoregressive"):
        prompts.checked(d, request.max_new_tokens)
    if "autoregressive" in names:  # the target's inputs, checked with the race's first drafter
        prompts.checked(request.drafter, request.max_new_tokens)
    s = request.sampling

    def seeded():
        return torch.Generator(device=loaded.device).manual_seed(s.seed)

    def make(name: str):
        if name == "autoregressive":
            return autoregressive_generate(
                loaded.target,
                Prompt(prompts.target_inputs),
                sampling=s,
                max_new_tokens=request.max_new_tokens,
                generator=seeded(),
            )
        d = request.lane_drafter(name)
        return speculative_generate(
            loaded.target,
            drafter if drafter is not None and name == "speculative" else loaded.drafter(d),
            prompts(d),
            gamma=request.gamma,
            sampling=s,
            max_new_tokens=request.max_new_tokens,
            generator=seeded(),
            min_confidence=request.min_confidence,
        )

    return {name: make(name) for name in names}


def close(runs: dict[str, Iterator[Event]]) -> None:
    """End the runs now: closing a generator runs its cleanup and drops its KV cache."""
    import torch

    for run_ in runs.values():
        run_.close()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@contextmanager
def racing(runs: dict[str, Iterator[Event]]):
    """The race of `runs` as (lane, event) pairs; however the block is left (the race over, an
    error, or a caller closing it for a Stop or a client gone), every run is closed."""
    try:
        yield race(runs)
    finally:
        close(runs)


def run_lanes(
    loaded, request: Request, image: Image.Image, order: tuple[str, ...] | None = None, drafter=None, prompts=None
) -> dict:
    """The request's lanes decoded whole, one after the other in `order` (default: all of them,
    `lane_names(request)`), from one prompt: lane -> Trace (`drafter`, `prompts`: as in `lanes`)."""
    from demo.engine.events import Trace

    order = lane_names(request) if order is None else order
    runs = lanes(loaded, request, image, order, drafter, prompts=prompts)
    try:
        return {lane: Trace.of(runs[lane]) for lane in order}
    finally:
        close(runs)


def run(loaded, request: Request, image: Image.Image, lane: str = "speculative", drafter=None, prompts=None) -> Trace:
    """One lane of the request decoded whole, as a trace (`drafter`, `prompts`: as in `lanes`)."""
    return run_lanes(loaded, request, image, (lane,), drafter, prompts)[lane]


def warm_up(preset: str) -> None:
    """Load a preset and its drafters and decode a few tokens with each, so the first Run is fast."""
    from demo.engine.sampling import Sampling
    from demo.models import loader  # torch and transformers: imported on first use

    available = loader.availability(preset)
    if not available.ok:  # said again, to whoever picks it
        log.warning("not warming up preset %r: %s", preset, available.message)
        return
    image = Image.new("RGB", (64, 64), (200, 200, 200))
    try:
        with _WARMING:
            loaded = loader.load(preset)
            for i, spec in enumerate(loaded.preset.drafters):
                request = Request(
                    question="Describe the image.",
                    preset=preset,
                    drafter=spec.name,
                    gamma=4,
                    sampling=Sampling(),
                    max_new_tokens=8,
                )
                traces = run_lanes(loaded, request, image)
                if i:  # the first pays the process's one-time costs; the others tell the budget this machine's speed
                    budget.learn(request, traces)
    except Exception:  # reported again to whoever runs the preset
        log.exception("warm-up of preset %r failed", preset)
