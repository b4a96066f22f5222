"""The session layer: what every surface goes through to decode, with no Gradio in it.

The page, the API, the Analysis tab, the benchmark and the tests all turn what they were sent
into one `Request` (`parse`, by name: every field is checked by `demo.validate` and refused with
its name and valid range), and then use the calls below:

    load(request, progress)        the preset and drafter, loaded once per process (waits for a
                                   running warm-up, so clocks never share the CPU with it)
    prepare(request, image, ...)   everything before the first token, as a generator of loading
                                   reports: the image checked, the models loaded, the lanes built
    lanes(loaded, request, image)  the race's seeded runs, not started: lane -> event generator
    racing(lanes)                  the race as (lane, event) pairs, compute-fair; closes the runs
                                   (and frees their KV caches) however it is left
    gpu_race(request, image)       prepare + racing, yielding plain data (the part a Space runs
                                   on its GPU, in another process)
    run(loaded, request, image)    one lane decoded whole -> Trace (benchmark, Analysis tab)
    warm_up(preset)                load and decode a few tokens with each drafter
    paced(timeline, slowdown)      a recorded race again, each event at its measured time x slowdown
    message(error)                 the one sentence a person or caller is told about a failure

Torch and transformers are imported on first use, so a page can import this module and be
usable before they are.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from demo import validate
from demo.engine.race import race
from demo.models import presets, zerogpu
from demo.validate import InvalidInput

if TYPE_CHECKING:
    from demo.engine.events import Event, Trace
    from demo.engine.sampling import Sampling

log = logging.getLogger(__name__)

LANES = ("speculative", "autoregressive")
DEFAULTS = {
    "gamma": 4,
    "greedy": True,
    "temperature": 0.8,
    "top_p": 0.95,
    "seed": 0,
    "max_new_tokens": 128,
    "min_confidence": 0.0,
}
THRESHOLD = "threshold (stop drafting below this drafter confidence; min_confidence on /trace; 0 = off)"


# --- the request --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """A validated request: everything a run needs besides the image."""

    question: str
    preset: str
    drafter: str
    gamma: int
    sampling: Sampling
    max_new_tokens: int
    min_confidence: float = 0.0  # adaptive draft length: stop drafting below this top probability; 0 = off

    def settings(self) -> dict:
        return {
            "question": self.question,
            "preset": self.preset,
            "drafter": self.drafter,
            "gamma": self.gamma,
            "sampling": asdict(self.sampling),
            "max_new_tokens": self.max_new_tokens,
            "min_confidence": self.min_confidence,
        }


def parse(
    *,
    question,
    preset,
    drafter,
    gamma=DEFAULTS["gamma"],
    greedy=DEFAULTS["greedy"],
    temperature=DEFAULTS["temperature"],
    top_p=DEFAULTS["top_p"],
    seed=DEFAULTS["seed"],
    max_new_tokens=DEFAULTS["max_new_tokens"],
    min_confidence=DEFAULTS["min_confidence"],
    known: dict | None = None,
) -> Request:
    """The request from its fields as sent, by name; `known` maps preset names to presets (default
    `presets.PRESETS`). Raises InvalidInput naming the first bad value and its valid range."""
    from demo.engine.sampling import Sampling  # torch: imported on first use

    known = presets.PRESETS if known is None else known
    text = validate.question(question)
    preset = validate.choice("model preset", preset, known)
    if drafter in known[preset].unusable():  # a drafter it names but cannot offer: say why
        raise InvalidInput(validate.sentence(known[preset].refusal(drafter, 1)))
    drafter = validate.choice(f"drafter for preset {preset!r}", drafter, known[preset].drafter_names())
    gamma = validate.integer("gamma (drafts per round)", gamma, *validate.GAMMA_RANGE)
    max_new_tokens = validate.integer("max new tokens", max_new_tokens, *validate.MAX_NEW_RANGE)
    greedy = validate.flag("greedy", greedy)
    temperature = validate.number("temperature", temperature, 0.0, validate.MAX_TEMPERATURE, low_open=True)
    top_p = validate.number("top-p", top_p, 0.0, 1.0, low_open=True)
    seed = validate.integer("seed", seed, *validate.SEED_RANGE)
    min_confidence = validate.number(THRESHOLD, min_confidence, 0.0, 1.0)
    refused = known[preset].refusal(drafter, gamma, min_confidence)  # e.g. a tree too large for one verify
    if refused:
        raise InvalidInput(validate.sentence(refused))
    sampling = Sampling() if greedy else Sampling(greedy=False, temperature=temperature, top_p=top_p, seed=seed)
    return Request(text, preset, drafter, gamma, sampling, max_new_tokens, min_confidence)


# --- failures -----------------------------------------------------------------------------------


class LoadFailed(RuntimeError):
    """A preset whose files are here but would not load (damaged weights, a bad config...)."""


def first_line(error: BaseException, limit: int = 160) -> str:
    line = (str(error).strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _out_of_memory(error: BaseException) -> bool:
    import torch

    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(error).lower()  # other backends, and the CPU allocator, raise a RuntimeError
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _release_memory() -> None:
    """Give freed tensors back to the accelerator, so the next request finds the memory free."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def message(error: Exception) -> str:
    """What the person or API caller is told about a failed request; the server log gets the rest."""
    from demo.models import loader  # torch and transformers: imported on first use

    if isinstance(error, (InvalidInput, loader.Unavailable, loader.NotEnoughMemory, LoadFailed)):
        return str(error)  # written for the person
    if _out_of_memory(error):
        log.warning("out of memory during a request: %s", error)
        traceback.clear_frames(error.__traceback__)  # the failed run's frames hold its KV caches
        _release_memory()
        return (
            "The models ran out of memory for this request; it was stopped and its memory freed. "
            "Ask for fewer new tokens, shorten the question, or pick a smaller preset."
        )
    reference = uuid.uuid4().hex[:8]
    log.error("request failed (reference %s)", reference, exc_info=error)
    return f"Something went wrong on the server (reference {reference}; the details are in its log). Try again."


def _load_failed(preset: str, error: Exception) -> Exception:
    """The error a failed load becomes: messages written for the person pass through."""
    from demo.models import loader

    if isinstance(error, (loader.Unavailable, loader.NotEnoughMemory)) or _out_of_memory(error):
        return error
    log.error("loading preset %r failed", preset, exc_info=error)
    return LoadFailed(
        f"The models of preset {preset!r} could not be loaded ({type(error).__name__}: {first_line(error)}). "
        "Its files may be missing or damaged; the other presets still work."
    )


# --- loading --------------------------------------------------------------------------------------

_WARMING = threading.Lock()  # held while the background warm-up decodes


def load(request: Request, progress=None):
    """The request's preset and drafter, loaded once per process (`progress(fraction, message)`
    hears about each stage). Waits for a running warm-up, so that a race never shares the CPU
    with one and its clocks stay honest."""
    from demo.models import loader  # torch and transformers: imported on first use

    with _WARMING:
        pass
    loaded = loader.load(request.preset, progress)
    loaded.drafter(request.drafter, progress)
    return loaded


def _loading(request: Request, show) -> Iterator:
    """Load in a thread, yielding show(fraction, message) for each progress report; returns the
    Loaded, or raises what `_load_failed` makes of the error."""
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
            raise _load_failed(request.preset, item)
        if not isinstance(item, tuple):
            return item
        yield show(*item)


def check_available(preset: str) -> None:
    """Refuse (Unavailable, LoadFailed) a preset that is not served here or cannot load."""
    from demo.models import loader

    loader.check_served(preset)  # preloaded deployments (a Space) never load in a request
    if loader.is_loaded(preset):
        return
    try:
        available = loader.availability(preset)
    except Exception as error:  # files too damaged even to count their parameters
        raise _load_failed(preset, error) from error
    if not available.ok:
        raise loader.Unavailable(available.message)


def prepare(request: Request, image_payload, uploads: str | Path, show) -> Iterator:
    """Everything before the first token: the image (a file inside `uploads`), the models, the
    prompt and its length. Yields show(fraction, message) while loading; returns (facts, lanes,
    notes): what the page says of the drafter, the race's runs, notes on the image."""
    check_available(request.preset)
    path = validate.image_path(image_payload, uploads)
    if path is None:
        raise InvalidInput(validate.NO_IMAGE)
    image, notes = validate.open_image(path)
    if _WARMING.locked():
        yield show(0.0, "waiting for the warm-up to finish")
    loaded = yield from _loading(request, show)
    try:
        facts = loaded.notes(request.drafter)
    except Exception as error:
        raise _load_failed(request.preset, error) from error
    return facts, lanes(loaded, request, image), notes


# --- lanes and runs ---------------------------------------------------------------------------------


def _prompt(loaded, request: Request, image: Image.Image):
    """The prompt of both lanes; refuses (InvalidInput) one the models cannot read or whose answer
    would not fit their context."""
    try:
        prompt = loaded.prompt(image, request.question, request.drafter)
    except Exception as error:
        log.warning("the processor refused a request", exc_info=error)
        raise InvalidInput(f"This model could not read the image and question ({first_line(error)}).") from error
    tokens = {"target": prompt.target_inputs["input_ids"].shape[1]}
    windows = {"target": validate.context_window(loaded.target.model.config)}
    model = loaded.drafter(request.drafter).model  # None for prompt lookup: no context to fill
    if prompt.drafter_inputs is not None and model is not None:
        tokens["drafter"] = prompt.drafter_inputs["input_ids"].shape[1]
        windows["drafter"] = validate.context_window(model.config)
    validate.check_context(tokens, windows, request.max_new_tokens)
    return prompt


def lanes(
    loaded, request: Request, image: Image.Image, names: tuple[str, ...] = LANES, drafter=None
) -> dict[str, Iterator[Event]]:
    """The runs of a race, not started: lane name -> the engine's event generator, each with its
    own generator seeded with the request's seed. Both read the same target inputs: the image is
    processed once, outside both clocks. `drafter` replaces the preset's drafter of the request's
    name (the benchmark's drafter on another forward path)."""
    import torch

    from demo.engine.speculative import Prompt, autoregressive_generate, speculative_generate

    prompt = _prompt(loaded, request, image)
    s = request.sampling

    def seeded():
        return torch.Generator(device=loaded.device).manual_seed(s.seed)

    def make(name: str):
        if name == "speculative":
            return speculative_generate(
                loaded.target,
                drafter or loaded.drafter(request.drafter),
                prompt,
                gamma=request.gamma,
                sampling=s,
                max_new_tokens=request.max_new_tokens,
                generator=seeded(),
                min_confidence=request.min_confidence,
            )
        assert name == "autoregressive", name
        return autoregressive_generate(
            loaded.target,
            Prompt(prompt.target_inputs),
            sampling=s,
            max_new_tokens=request.max_new_tokens,
            generator=seeded(),
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


def run_lanes(loaded, request: Request, image: Image.Image, order: tuple[str, ...] = LANES, drafter=None) -> dict:
    """The request's lanes decoded whole, one after the other in `order`, from one prompt:
    lane -> Trace (`drafter`: as in `lanes`)."""
    from demo.engine.events import Trace

    runs = lanes(loaded, request, image, order, drafter)
    try:
        return {lane: Trace.of(runs[lane]) for lane in order}
    finally:
        close(runs)


def run(loaded, request: Request, image: Image.Image, lane: str = "speculative", drafter=None) -> Trace:
    """One lane of the request decoded whole, as a trace (`drafter`: as in `lanes`)."""
    return run_lanes(loaded, request, image, (lane,), drafter)[lane]


def _race_duration(request: Request, image_payload, uploads=None) -> int:
    """Seconds a race asks ZeroGPU for: both runs at the preset's per-token budget, capped."""
    return zerogpu.duration(request.max_new_tokens, len(LANES), presets.seconds_per_token(request.preset))


@zerogpu.GPU(duration=_race_duration)
def gpu_race(request: Request, image_payload, uploads: str | Path) -> Iterator[tuple]:
    """The part of a race that needs the accelerator, yielding plain data only (on ZeroGPU it
    runs in another process, its values pickled): ("loading", fraction, message) while a preset
    loads (lazy deployments only), ("ready", facts, notes) once both runs are set up, then the
    race's (lane, event) pairs. Both runs are closed however it ends."""
    facts, runs, notes = yield from prepare(
        request, image_payload, uploads, lambda fraction, message: ("loading", fraction, message)
    )
    yield "ready", facts, notes
    with racing(runs) as events:
        yield from events


def until_ready(stream: Iterator[tuple], show) -> Iterator:
    """Yield show(fraction, message) for `gpu_race`'s loading reports; returns (facts, notes)."""
    for item in stream:
        if item[0] == "ready":
            return item[1], item[2]
        yield show(item[1], item[2])
    raise RuntimeError("the race ended before it started")


def _examples_duration(preset: str, drafters: list[str], items: list, gamma: int, max_new_tokens: int) -> int:
    """Seconds an analysis asks ZeroGPU for: one run per example and drafter, capped."""
    return zerogpu.duration(max_new_tokens, len(items) * len(drafters), presets.seconds_per_token(preset))


@zerogpu.GPU(duration=_examples_duration)
def decode_examples(preset: str, drafters: list[str], items: list, gamma: int, max_new_tokens: int):
    """Speculative decoding, greedy, of each example (`.image`, `.question`) with each drafter,
    yielding plain data only (on ZeroGPU it runs in another process): ("run", i, drafter) before
    each run, then ("done", i, drafter, trace, observations) (`demo.analysis.observations`)."""
    from demo import analysis
    from demo.engine.sampling import Sampling
    from demo.models import loader

    loader.check_served(preset)  # preloaded deployments (a Space) never load in a request
    loaded = loader.load(preset)
    for i, item in enumerate(items):
        for d in drafters:
            yield "run", i, d
            trace = run(loaded, Request(item.question, preset, d, gamma, Sampling(), max_new_tokens), item.image)
            yield "done", i, d, trace, analysis.observations(trace, i, loaded.target.stop_ids)


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
            for spec in loaded.preset.drafters:
                request = Request("Describe the image.", preset, spec.name, 4, Sampling(), 8)
                with racing(lanes(loaded, request, image)) as events:
                    for _ in events:
                        pass
    except Exception:  # reported again to whoever runs the preset
        log.exception("warm-up of preset %r failed", preset)


def paced(timeline, slowdown: float, stop: threading.Event) -> Iterator[tuple[str, Event]]:
    """A recorded race's (lane, event) pairs again, the event made at t seconds of compute shown
    t * slowdown seconds after the start; ends before the next event once `stop` is set."""
    import time

    started = time.perf_counter()
    for lane, event in timeline:
        if stop.wait(max(0.0, started + event.t * slowdown - time.perf_counter())):
            return
        yield lane, event


# --- what the selector offers ---------------------------------------------------------------------


def offered(default: str) -> tuple[list[str], dict[str, str]]:
    """The presets a page offers, and the others with the reason each is left out.

    Preloaded (a Space, or DEMO_PRELOAD): exactly the presets that loaded at start-up. Lazy: the
    presets whose files are here or may be downloaded (`demo.models.hub`, no torch needed), and
    always `default`, whose own status line says whether it can load."""
    if zerogpu.preload_names(presets.DEFAULT_PRESET) is not None:
        from demo.models import loader  # already imported: the presets were loaded at start-up

        outcome = loader.preloaded()
        if outcome is not None:
            left = {name: f"it failed to load at start-up: {why}." for name, why in outcome.items() if why}
            left |= {
                name: f"not loaded at start-up here (set {zerogpu.PRELOAD_ENV} to serve it)."
                for name in presets.PRESETS
                if name not in outcome
            }
            return [name for name, why in outcome.items() if why is None and name in presets.PRESETS], left
    from demo.models import hub

    choices, left = [], {}
    for name, preset in presets.PRESETS.items():
        found = hub.availability([preset.target, *(s.path for s in preset.drafters)])
        if found.ok or name == default:
            choices.append(name)
        else:
            left[name] = found.message
    return choices, left


def availability(name: str) -> tuple[bool, str]:
    """Whether preset `name` can load on this machine now, and the sentence that says so."""
    from demo.models import loader  # torch and transformers: imported on first use

    try:
        available = loader.availability(name)
    except Exception as error:  # files too damaged even to count their parameters
        log.warning("cannot check preset %r: %s", name, error)
        return False, f"Its files could not be read ({type(error).__name__}); they may be damaged."
    return available.ok, available.message
