"""The Gradio page: a live race of speculative against autoregressive decoding of one target.

`build_demo()` lays the page out and wires two endpoints, both fed by the same race of the
engine's event streams (`demo.race`):

    /race    the page's Run button: a generator that streams both token panels, the block view,
             the stats and the four charts while the runs decode, then the downloads
    /trace   for gradio_client: the same race, returned whole as one JSON document
             (`demo.export.payload`)

The Replay button shows the last race again from its recorded events, slowed down by one
factor that the page states (a race of the embedded models takes about a second on a CPU).

This module holds no decoding logic and touches no caches or logits: it validates the request,
asks `demo.models` for the preset, starts the two generators, and maps their events to
components with `demo.render` and `demo.charts`. Nothing is loaded at import time; `launch()`
warms the default preset up in a background thread once the server is up.

Gradio 6 takes the theme and CSS at launch, so launch through `launch()` (or pass `CSS` and
`THEME` yourself).
"""

from __future__ import annotations

import functools
import html
import json
import logging
import math
import queue
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import gradio as gr
from PIL import Image

from demo import charts, export, presets, render
from demo.events import Event, TokenEvent, Trace
from demo.race import race

if TYPE_CHECKING:
    from demo.sampling import Sampling

# torch and the decoding engine are imported where a race starts (`start_race`, `parse_request`):
# they take seconds to import, and the page should not wait for them.

try:
    import spaces

    GPU = spaces.GPU
except ImportError:

    def GPU(fn):
        return fn


log = logging.getLogger(__name__)

GAMMA_RANGE = (1, 10)
MAX_NEW_RANGE = (1, 512)
DEFAULTS = {"gamma": 4, "max_new_tokens": 128, "temperature": 0.8, "top_p": 0.95, "seed": 0}
PANEL_EVERY = 0.08  # seconds of wall time between redraws of the panels (the browser keeps up)
CHART_EVERY = 0.5  # and of the charts, which cost the browser more to draw
REPLAY_SECONDS = 12.0  # a replay lasts this long, whatever the race took
LANES = ("speculative", "autoregressive")

CSS = (
    render.CSS
    + """
.gradio-container { max-width: 1480px !important; }
#title h1 { margin: 0 0 2px 0; font-size: 26px; }
#title p { margin: 0; opacity: .8; }
#timing { font-size: 13px; opacity: .85; }
#run { min-height: 44px; font-size: 16px; }
.preset-info { font-size: 12px; opacity: .85; line-height: 1.45; }
.preset-info .ready { color: #009E73; }
.preset-info .unavailable { color: #D55E00; }
.reference { font-size: 13px; opacity: .9; padding: 2px 2px 0; }
.reference .task { display: inline-block; padding: 0 8px; margin-right: 6px; border-radius: 999px;
  background: rgba(0,114,178,.14); font-weight: 600; }
#examples .caption-label { font-size: 10px; padding: 0 4px; opacity: .85; }  /* less of the scene hidden */
#examples .grid-wrap { height: auto !important; max-height: none !important; overflow: visible !important; }
#examples .grid-container { grid-template-columns: repeat(auto-fill, minmax(96px, 1fr)) !important; }
#examples-title p { font-size: 13px; margin: 0; }
"""
)
THEME = gr.themes.Default(primary_hue="teal", neutral_hue="slate")


@dataclass(frozen=True)
class Request:
    """A validated request: everything a race needs besides the image."""

    question: str
    preset: str
    drafter: str
    gamma: int
    sampling: Sampling
    max_new_tokens: int

    def settings(self) -> dict:
        return {
            "question": self.question,
            "preset": self.preset,
            "drafter": self.drafter,
            "gamma": self.gamma,
            "sampling": asdict(self.sampling),
            "max_new_tokens": self.max_new_tokens,
        }


def _clamp(name: str, value, low: int, high: int, notes: list[str]) -> int:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"{name} is missing")
    clamped = min(max(int(round(value)), low), high)
    if clamped != value:
        notes.append(f"{name} must be an integer in [{low}, {high}]; used {clamped}")
    return clamped


def parse_request(
    question, preset, drafter, gamma, greedy, temperature, top_p, seed, max_new_tokens
) -> tuple[Request, list[str]]:
    """Check and normalise the inputs. Raises ValueError with a message a person can act on;
    returns the request and notes on any value it had to clamp."""
    from demo.sampling import Sampling

    notes: list[str] = []
    question = (question or "").strip()
    if not question:
        raise ValueError("Ask a question about the image first.")
    if preset not in presets.PRESETS:
        raise ValueError(f"Unknown model preset {preset!r} (known: {', '.join(presets.PRESETS)}).")
    drafters = _drafter_choices(preset)
    if drafter not in drafters:
        raise ValueError(f"Preset {preset!r} has no drafter {drafter!r} (known: {', '.join(drafters)}).")
    gamma = _clamp("gamma", gamma, *GAMMA_RANGE, notes)
    max_new_tokens = _clamp("max new tokens", max_new_tokens, *MAX_NEW_RANGE, notes)
    if greedy:
        sampling = Sampling(greedy=True)
    else:
        if temperature is None or not temperature > 0:
            raise ValueError("Temperature must be greater than 0 (choose greedy for deterministic decoding).")
        if top_p is None or not 0 < top_p <= 1:
            raise ValueError("Top-p must be in (0, 1].")
        if seed is None:
            raise ValueError("Sampling needs a seed.")
        sampling = Sampling(greedy=False, temperature=float(temperature), top_p=float(top_p), seed=int(seed))
    return Request(question, preset, drafter, gamma, sampling, max_new_tokens), notes


_WARMING = threading.Lock()  # held while the background warm-up decodes


def load(request: Request, progress=None):
    """The request's preset and drafter, loaded once per process (`progress(fraction, message)`
    hears about each stage). Waits for a running warm-up, so that a race never shares the CPU
    with one and its clocks stay honest."""
    from demo import models  # torch and transformers: imported on first use, not to slow the start

    with _WARMING:
        pass
    loaded = models.load(request.preset, progress)
    loaded.drafter(request.drafter, progress)
    return loaded


def _loading(request: Request) -> Iterator:
    """Load in a thread and yield its progress reports as (fraction, message), then the Loaded."""
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
            raise item
        yield item
        if not isinstance(item, tuple):
            return


def start_race(loaded, request: Request, image: Image.Image | None) -> Iterator[tuple[str, Event]]:
    """Race the two runs of a loaded preset; yields (lane, event)."""
    import torch

    from demo.speculative import Prompt, autoregressive_generate, speculative_generate

    prompt = loaded.prompt(image, request.question, request.drafter)
    s = request.sampling

    def generator():
        return torch.Generator(device=loaded.device).manual_seed(s.seed)

    spd = speculative_generate(
        loaded.target,
        loaded.drafter(request.drafter),
        prompt,
        gamma=request.gamma,
        sampling=s,
        max_new_tokens=request.max_new_tokens,
        generator=generator(),
    )
    # Both runs read the same target inputs: the image is processed once, outside both clocks.
    ar = autoregressive_generate(
        loaded.target,
        Prompt(prompt.target_inputs),
        sampling=s,
        max_new_tokens=request.max_new_tokens,
        generator=generator(),
    )
    return race({"speculative": spd, "autoregressive": ar})


def warm_up(preset: str) -> None:
    """Load a preset and its drafters and decode a few tokens with each, so the first Run is fast."""
    from demo import models  # torch and transformers: imported on first use, not to slow the start

    from demo.sampling import Sampling

    available = models.availability(preset)
    if not available.ok:  # said again, on the page, to whoever picks it
        log.warning("not warming up preset %r: %s", preset, available.message)
        return
    image = Image.new("RGB", (64, 64), (200, 200, 200))
    try:
        with _WARMING:
            loaded = models.load(preset)
            for spec in loaded.preset.drafters:
                request = Request("Describe the image.", preset, spec.name, 4, Sampling(), 8)
                for _ in start_race(loaded, request, image):
                    pass
    except Exception:  # reported again to whoever runs the preset
        log.exception("warm-up of preset %r failed", preset)


def _load_error(error: Exception) -> str:
    from demo import models  # torch and transformers: imported on first use, not to slow the start

    if isinstance(error, (models.Unavailable, models.NotEnoughMemory)):
        return str(error)  # written for the page
    return f"Could not load the models: {type(error).__name__}: {error}"


# --- the streaming handler --------------------------------------------------------------------


def _view(traces: dict[str, Trace], request: Request, facts: tuple[str, ...], charts_too: bool) -> tuple:
    spd, ar = traces["speculative"], traces["autoregressive"]
    gamma = request.gamma
    done = spd.done and ar.done
    comparison = export.comparison(spd, ar) if done else None
    speedup = comparison["speedup"] if comparison else None
    mode = (
        "greedy"
        if request.sampling.greedy
        else f"sampling T={request.sampling.temperature}, top-p={request.sampling.top_p}"
    )
    figures = (
        (
            charts.race(spd, ar),
            charts.block_efficiency(spd, gamma),
            charts.accept_lengths(spd, gamma),
            charts.acceptance_by_position(spd, gamma),
        )
        if charts_too
        else (gr.skip(),) * 4
    )
    greedy = request.sampling.greedy
    return (
        render.panel_html(spd, "Speculative", f"{request.drafter} drafter · γ = {gamma} · {mode}", greedy),
        render.speculative_stats_html(spd, gamma, speedup),
        render.panel_html(ar, "Autoregressive (target only)", f"one target forward per token · {mode}", greedy),
        render.autoregressive_stats_html(ar),
        render.outcome_html(spd, ar, greedy, comparison, facts),
        render.blocks_html(spd),
        *figures,
    )


@functools.cache
def _export_dir() -> tempfile.TemporaryDirectory:
    """One folder per process for the downloads (held by the cache, removed at exit). Gradio
    copies each file into its own cache when it sends it, and runs never overlap (one
    concurrency slot), so every run can write the same two names."""
    return tempfile.TemporaryDirectory(prefix="spd-exports-")


def _downloads(traces: dict[str, Trace], request: Request) -> tuple:
    folder = Path(_export_dir().name)
    json_path, csv_path = folder / "trace.json", folder / "tokens.csv"
    json_path.write_text(export.to_json(export.payload(request.settings(), traces, request.gamma)))
    csv_path.write_text(export.tokens_csv(traces))
    return (
        gr.DownloadButton(value=str(json_path), interactive=True),
        gr.DownloadButton(value=str(csv_path), interactive=True),
    )


N_VIEW = 10  # panels, stats, outcome, block view and charts: what _view fills


def _update(view: tuple | None = None, downloads: tuple | None = None, busy: bool | None = None, last=None) -> tuple:
    """One update of every output of a run (see `build_demo`); None leaves that part alone.

    busy: whether a race or replay is on (both buttons off) or over (both on).
    """
    skip = gr.skip()
    buttons = (
        (skip, skip)
        if busy is None
        else (
            gr.Button(interactive=not busy, value="Racing…" if busy else "Run the race"),
            gr.Button(interactive=not busy),
        )
    )
    return (view or (skip,) * N_VIEW) + (downloads or (skip, skip)) + buttons + (skip if last is None else last,)


def _status(html_text: str, busy: bool) -> tuple:
    """Show a message where the outcome goes, and leave the rest of the page as it is."""
    skip = gr.skip()
    return _update(view=(skip,) * 4 + (html_text,) + (skip,) * (N_VIEW - 5), busy=busy)


def _failed(message: str) -> tuple:
    gr.Warning(message)
    return _status(render.error_html(message), busy=False)


def _frames(
    timeline, traces: dict[str, Trace], request: Request, facts: tuple[str, ...], slowdown: float | None = None
) -> Iterator[tuple]:
    """Feed (lane, event) pairs into `traces` and yield views: at the first token at once, then
    at most every PANEL_EVERY s (charts every CHART_EVERY s), and always at the end.

    Live (slowdown None), events come as fast as the race makes them. A replay shows the event
    made at t seconds of compute at t * slowdown seconds after it starts.
    """
    started = last_panel = last_chart = time.perf_counter()
    shown_tokens = False
    for lane, event in timeline:
        if slowdown:
            time.sleep(max(0.0, started + event.t * slowdown - time.perf_counter()))
        traces[lane].add(event)
        now = time.perf_counter()
        first = not shown_tokens and isinstance(event, TokenEvent)
        if first or now - last_panel >= PANEL_EVERY:
            charts_too = now - last_chart >= CHART_EVERY
            yield _view(traces, request, facts, charts_too)
            shown_tokens = shown_tokens or first
            last_panel = time.perf_counter()
            last_chart = last_panel if charts_too else last_chart
    yield _view(traces, request, facts, charts_too=True)


def run_race(image, question, preset, drafter, gamma, decoding, temperature, top_p, seed, max_new_tokens):
    """Stream the race to the page: both panels, stats, block view and charts as events arrive."""
    from demo import models  # torch and transformers: imported on first use, not to slow the start

    try:
        request, notes = parse_request(
            question, preset, drafter, gamma, decoding == "greedy", temperature, top_p, seed, max_new_tokens
        )
    except ValueError as error:
        yield _failed(str(error))
        return
    for note in notes:
        gr.Warning(note)
    if not models.is_loaded(request.preset):
        available = models.availability(request.preset)
        if not available.ok:
            yield _failed(available.message)
            return
    if _WARMING.locked():
        yield _status(render.loading_html(0.0, "waiting for the warm-up to finish"), busy=True)
    try:
        for item in _loading(request):
            if isinstance(item, tuple):
                yield _status(render.loading_html(*item), busy=True)
            else:
                loaded = item
        facts = loaded.notes(request.drafter)
        events = start_race(loaded, request, image)
    except Exception as error:  # files that will not load, too little memory, a bad image
        yield _failed(_load_error(error))
        return
    traces = {lane: Trace() for lane in LANES}
    timeline = []  # the race in the order it ran, for the replay

    def recorded():
        for pair in events:
            timeline.append(pair)
            yield pair

    # The charts wait for the first redraw after the first token: drawing four plots costs the
    # browser more than the first tokens do.
    empty = _view(traces, request, facts, charts_too=False)
    yield _update(view=empty, downloads=(gr.DownloadButton(value=None, interactive=False),) * 2, busy=True)
    try:
        for view in _frames(recorded(), traces, request, facts):
            yield _update(view=view)
    except Exception as error:  # the panels keep what was decoded before it
        log.exception("race failed")
        yield _failed(f"Decoding failed: {type(error).__name__}: {error}")
        return
    # The last update repeats the final view, so that an API client's result is the whole page.
    yield _update(view=view, downloads=_downloads(traces, request), busy=False, last=(request, facts, timeline))


def replay_race(last):
    """Show the last race again, slowed down so that the slower run takes REPLAY_SECONDS; the
    clocks, numbers and order are the measured ones."""
    if last is None:
        yield _failed("Run a race first; the replay shows the last one again, slowly.")
        return
    request, facts, timeline = last
    slowdown = REPLAY_SECONDS / max(event.t for _, event in timeline)
    note = (f"Replay: the measured race shown {slowdown:.0f}× slower than it ran.",)
    traces = {lane: Trace() for lane in LANES}
    yield _update(view=_view(traces, request, facts + note, charts_too=True), busy=True)
    for view in _frames(timeline, traces, request, facts + note, slowdown):
        yield _update(view=view)
    yield _update(view=view, busy=False)


def trace_api(image, question, preset, drafter, gamma, greedy, temperature, top_p, seed, max_new_tokens) -> dict:
    """The whole race as one JSON document: settings, both traces and their metrics."""
    try:
        request, _ = parse_request(question, preset, drafter, gamma, greedy, temperature, top_p, seed, max_new_tokens)
    except ValueError as error:
        raise gr.Error(str(error)) from error
    try:
        events = start_race(load(request), request, image)
    except Exception as error:
        raise gr.Error(_load_error(error)) from error
    traces = {lane: Trace() for lane in LANES}
    for lane, event in events:
        traces[lane].add(event)
    return export.payload(request.settings(), traces, request.gamma)


# --- examples ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    image: str  # path to the image file
    question: str
    task: str
    answer: str


EXAMPLES_DIR = presets.ASSETS / "examples"


def load_examples(folder: Path = EXAMPLES_DIR) -> list[Example]:
    """The examples in folder/examples.json, as `demo.world.gallery` writes it: a list of
    {"image", "task", "question", "answer"}, image being a file name in the folder. No file
    means no examples (the embedded world not trained yet)."""
    index = Path(folder) / "examples.json"
    if not index.exists():
        return []
    rows = json.loads(index.read_text())
    return [Example(str(Path(folder) / r["image"]), r["question"], r["task"], r["answer"]) for r in rows]


# --- the page ---------------------------------------------------------------------------------

TIMING = """**How the race is timed.** Both runs decode on this machine, taking turns on one thread.
Each has its own clock that runs only while it computes; the page always advances whichever run
has used less compute so far, so the race you watch is the race that was measured. Drawing the
page and the network are on neither clock."""

HOW_IT_WORKS = r"""
**Speculative decoding** (Leviathan et al. 2023; for multimodal models, Gagrani et al. 2024).
`p` is the target's next-token distribution (the model that sees the image), `q` the drafter's.
Each round:

1. **Draft.** The small drafter proposes γ tokens, one at a time: x₁ … xᵧ with probabilities q.
   A *text-only* drafter never sees the image; an *image-aware* one does.
2. **Verify.** One target forward over the last token plus the γ drafts gives p at every draft
   position and one more, the price of about one target step on a GPU.
3. **Accept.** Greedy: a draft is accepted while it equals the target's argmax. Sampling: draft x
   is accepted with probability min(1, p(x)/q(x)).
4. **Correct.** At the first rejection the target samples its own token from
   norm(max(0, p − q)) (greedy: its argmax): a <span style="color:#D55E00">resampled</span> token.
   If all γ were accepted, it adds a <span style="color:#0072B2">bonus</span> token from p for free.

So every round costs one target forward and yields between 1 and γ+1 tokens, and the output has
exactly the target's distribution: greedy outputs are identical to plain decoding (the badge checks
this on every run), and sampled outputs are distributed identically.

**The numbers** (each computed from the run's events, shown beside its formula in the panel):

| | formula | meaning |
|---|---|---|
| τ (block efficiency) | tokens after the prefill / target forwards | 1 for plain decoding, at most γ+1 |
| α (acceptance rate) | accepted drafts / drafted tokens | how often the drafter guessed right |
| MBSU | τ / (1 + γ·c), c = drafter / target params | speedup if a forward costs reading its weights |
| wall-clock speedup | SPD decode tokens/s / AR decode tokens/s | what this machine actually measured |

**CPU versus GPU.** On a GPU a forward over γ+1 tokens costs about as much as over one (decoding is
memory-bound), so the speedup approaches MBSU. On this CPU it costs about two single steps, and
the drafter's steps are not free either, so the measured speedup is smaller than MBSU and
needs a high acceptance rate to exceed 1.
"""


def _header() -> str:
    return (
        '<div id="title"><h1>Speculative decoding, live</h1><p>Upload an image, ask a question, and '
        "watch a small drafter plus the target race the target alone. Every token is coloured by "
        "where it came from; hover or focus one for its probabilities.</p></div>"
    )


def reference_html(example: Example | None) -> str:
    """The chosen example's task family and reference answer (for judging the answers by eye)."""
    if example is None:
        return '<div class="reference">Pick an example below, or upload your own image.</div>'
    task = html.escape(example.task.replace("_", " "))
    answer = html.escape(example.answer)
    return f'<div class="reference"><span class="task">{task}</span> reference answer: <q>{answer}</q></div>'


def preset_html(name: str) -> str:
    """What a preset is, its caveat, and whether it can load on this machine now."""
    from demo import models  # torch and transformers: imported on first use, not to slow the start

    preset = presets.PRESETS.get(name)
    if preset is None:
        return ""
    available = models.availability(name)
    status = "ready" if available.ok else "unavailable"
    lines = [html.escape(preset.description), html.escape(preset.note)]
    lines.append(f'<span class="{status}">{"✓" if available.ok else "✗"} {html.escape(available.message)}</span>')
    return '<div class="preset-info">' + "<br>".join(line for line in lines if line) + "</div>"


def _drafter_choices(preset: str) -> list[str]:
    return [s.name for s in presets.PRESETS[preset].drafters]


def build_demo(default_preset: str = presets.DEFAULT_PRESET, examples_dir: Path = EXAMPLES_DIR) -> gr.Blocks:
    """The page. Offers the presets of `presets.PRESETS` and the examples in `examples_dir`."""
    preset_names = list(presets.PRESETS)
    drafters = _drafter_choices(default_preset)
    examples = load_examples(examples_dir)
    empty, g = Trace(), DEFAULTS["gamma"]
    with gr.Blocks(title="Speculative decoding, live") as demo:
        gr.HTML(_header(), js_on_load=None)
        with gr.Row(equal_height=False):
            with gr.Column(scale=5, min_width=300):
                image = gr.Image(
                    type="pil", label="Image", height=240, sources=["upload", "clipboard"], elem_id="image"
                )
                gr.Markdown(
                    "**Examples**: held-out scenes of the embedded world, covering every task family. Pick one.",
                    visible=bool(examples),
                    elem_id="examples-title",
                )
                gallery = gr.Gallery(
                    [(e.image, e.task.replace("_", " ")) for e in examples],
                    show_label=False,
                    columns=4,
                    height="auto",
                    allow_preview=False,
                    object_fit="contain",
                    buttons=[],
                    visible=bool(examples),
                    elem_id="examples",
                )
            with gr.Column(scale=7):
                question = gr.Textbox(
                    label="Question", lines=2, elem_id="question", placeholder="Describe this image in detail."
                )
                reference = gr.HTML(reference_html(None), js_on_load=None, elem_id="reference")
                with gr.Row():
                    # Custom values pass through to parse_request, which names the known ones.
                    preset = gr.Dropdown(
                        preset_names, value=default_preset, label="Model preset", elem_id="preset", allow_custom_value=True
                    )
                    drafter = gr.Dropdown(
                        drafters,
                        value=drafters[0] if drafters else None,
                        label="Drafter",
                        elem_id="drafter",
                        allow_custom_value=True,
                    )
                preset_info = gr.HTML(js_on_load=None, elem_id="preset-info")
                with gr.Row():
                    gamma = gr.Slider(*GAMMA_RANGE, value=g, step=1, label="γ: drafts per round", elem_id="gamma")
                    max_new = gr.Slider(
                        *MAX_NEW_RANGE,
                        value=DEFAULTS["max_new_tokens"],
                        step=1,
                        label="Max new tokens",
                        elem_id="max-new",
                    )
                with gr.Row():
                    decoding = gr.Radio(["greedy", "sampling"], value="greedy", label="Decoding", elem_id="decoding")
                    temperature = gr.Slider(
                        0.05, 2.0, value=DEFAULTS["temperature"], step=0.05, label="Temperature", visible=False
                    )
                    top_p = gr.Slider(0.05, 1.0, value=DEFAULTS["top_p"], step=0.05, label="Top-p", visible=False)
                    seed = gr.Number(DEFAULTS["seed"], precision=0, label="Seed", visible=False, minimum=0)
                with gr.Row():
                    run = gr.Button("Run the race", variant="primary", elem_id="run", scale=3)
                    replay = gr.Button("Replay slowly", interactive=False, elem_id="replay", scale=1)
                gr.Markdown(TIMING, elem_id="timing")
        with gr.Row(elem_id="race-head"):
            gr.HTML(render.legend_html(), js_on_load=None, elem_id="legend")
        outcome = gr.HTML(render.outcome_html(empty, empty, True, None), js_on_load=None, elem_id="outcome")
        with gr.Row(equal_height=False):
            with gr.Column(min_width=320):
                spd_panel = gr.HTML(
                    render.panel_html(empty, "Speculative", "drafter + target", True),
                    js_on_load=None,
                    elem_id="spd-panel",
                )
                spd_stats = gr.HTML(render.speculative_stats_html(empty, g, None), js_on_load=None, elem_id="spd-stats")
            with gr.Column(min_width=320):
                ar_panel = gr.HTML(
                    render.panel_html(empty, "Autoregressive (target only)", "one forward per token", True),
                    js_on_load=None,
                    elem_id="ar-panel",
                )
                ar_stats = gr.HTML(render.autoregressive_stats_html(empty), js_on_load=None, elem_id="ar-stats")
        # Empty charts at load: the browser fetches plotly.js before the first Run, not during it.
        with gr.Row(elem_id="charts"):
            race_chart = gr.Plot(charts.race(empty, empty), show_label=False, elem_id="chart-race")
            tau_chart = gr.Plot(charts.block_efficiency(empty, g), show_label=False, elem_id="chart-tau")
        with gr.Row(elem_id="charts-2"):
            hist_chart = gr.Plot(charts.accept_lengths(empty, g), show_label=False, elem_id="chart-hist")
            pos_chart = gr.Plot(charts.acceptance_by_position(empty, g), show_label=False, elem_id="chart-pos")
        with gr.Accordion("Block by block: every verification round of the speculative run", open=True):
            blocks = gr.HTML(render.blocks_html(empty), js_on_load=None, elem_id="blocks")
        with gr.Row():
            json_file = gr.DownloadButton("Download the trace (JSON)", interactive=False, elem_id="download-json")
            csv_file = gr.DownloadButton("Download the tokens (CSV)", interactive=False, elem_id="download-csv")
        with gr.Accordion("How it works", open=False, elem_id="how"):
            gr.Markdown(HOW_IT_WORKS)
        greedy = gr.Checkbox(True, visible=False)
        trace_out = gr.JSON(visible=False)
        trace_button = gr.Button(visible=False)

        def on_example(evt: gr.SelectData):
            example = examples[evt.index]
            return example.image, example.question, reference_html(example)

        def on_preset(name):
            names = _drafter_choices(name) if name in presets.PRESETS else []
            return gr.Dropdown(choices=names, value=names[0] if names else None), preset_html(name)

        gallery.select(on_example, None, [image, question, reference], api_visibility="private")
        image.upload(lambda: reference_html(None), None, reference, api_visibility="private")
        preset.change(on_preset, preset, [drafter, preset_info], api_visibility="private")
        demo.load(preset_html, preset, preset_info, api_visibility="private")
        decoding.change(
            lambda d: [gr.update(visible=d == "sampling")] * 3,
            decoding,
            [temperature, top_p, seed],
            api_visibility="private",
        )
        inputs = [image, question, preset, drafter, gamma, decoding, temperature, top_p, seed, max_new]
        last = gr.State(None)  # the last race: (request, facts, its events in order), for the replay
        outputs = [
            spd_panel,
            spd_stats,
            ar_panel,
            ar_stats,
            outcome,
            blocks,
            race_chart,
            tau_chart,
            hist_chart,
            pos_chart,
            json_file,
            csv_file,
            run,
            replay,
            last,
        ]
        run.click(
            GPU(run_race),
            inputs,
            outputs,
            api_name="race",
            show_progress="hidden",
            concurrency_limit=1,
            concurrency_id="decode",
        )
        replay.click(
            replay_race, last, outputs, api_visibility="private", show_progress="hidden", concurrency_limit=8
        )  # replays mostly sleep
        trace_button.click(
            GPU(trace_api),
            [image, question, preset, drafter, gamma, greedy, temperature, top_p, seed, max_new],
            trace_out,
            api_name="trace",
            concurrency_limit=1,
            concurrency_id="decode",
        )
    return demo


def launch(demo: gr.Blocks, warm: str | None = presets.DEFAULT_PRESET, **kwargs):
    """Launch with the page's theme and CSS, then warm preset `warm` up in a background thread
    (None warms nothing). Returns what `Blocks.launch` returns; pass prevent_thread_lock=True to
    get control back."""
    block = not kwargs.pop("prevent_thread_lock", False)
    result = demo.launch(prevent_thread_lock=True, css=CSS, theme=THEME, **kwargs)
    if warm:
        threading.Thread(target=warm_up, args=(warm,), name="warm-up", daemon=True).start()
    if block:
        demo.block_thread()
    return result
