"""The Gradio app: the page put together (`build_demo`), its events wired, and its launch behind the
front door (`demo.serve.guard`). Two queues, races and analyses, one request at a time each, each
bounded by the work budget. Gradio 6 takes the theme, CSS and script at launch: use `launch()`."""

from __future__ import annotations

import ctypes
import html
import inspect
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
from gradio.exceptions import InvalidPathError
from starlette.middleware import Middleware

from demo import session
from demo.engine.events import Trace
from demo.models import presets, zerogpu
from demo.page import classroom, drafter_notes, handlers, layout, proof_view, render, runs, teach, text
from demo.page.analysis import tab as analysis_tab
from demo.page.layout import EXAMPLES_DIR, Example
from demo.serve import guard, visitors
from demo.session import offers, validate

log = logging.getLogger(__name__)

# Requests that may wait (a few KiB each); beyond, "queue full", unless the joiner has none waiting
# and another visitor two (`demo.serve.visitors.make_place`). 128: 32 visitors' most, twice over.
QUEUE_SIZE = 128
# Visitors' sessions Gradio keeps (their page state: the last race for the replay, the analysis on
# show), the least recently used dropped beyond it. Gradio keeps 10,000, and each holds a copy of the
# page's component configs and its last race: on a public Space every new visitor (and every
# gradio_client call from a fresh client) grew the server by 0.1-1 MiB for good. A
# visitor whose session was dropped is asked to run a race before replaying one.
SESSIONS = 64
WARM_UP_AFTER_S = 20.0  # launch() warms the default preset up this long after the start at the latest
# Gradio's cache (uploads, and each race's two downloads) is swept every 10 minutes of files
# older than an hour: a page left open that long uploads its image again.
DELETE_CACHE = (600, 3600)

# glibc raises its mmap threshold each time a large block is freed (up to 32 MiB); tensors of that
# size then come from the heap, whose pages stay with the process. A server owning its process
# fixes the mmap and trim thresholds at 1 MiB: the mixed soak's RSS over requests 130-230 grew
# 0.1 MiB, against 13.1 MiB untuned, and the race kept its speed (docs/soak.md; at 128 KiB the
# verify slowed by a quarter).
MALLOC_THRESHOLD = 1 << 20


def tune_allocator() -> bool:
    """Fix glibc's mmap and trim thresholds at MALLOC_THRESHOLD for this process; False where the
    C library is not glibc (nothing changed)."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    return mallopt(m_mmap_threshold, MALLOC_THRESHOLD) == 1 and mallopt(m_trim_threshold, MALLOC_THRESHOLD) == 1


def _wire(demo: gr.Blocks, c: SimpleNamespace, v: SimpleNamespace, examples: dict[str, list[Example]]) -> None:
    """The events. The page's small events skip the queue, so a full queue never blocks them.
    `examples`: the gallery in each language the world speaks, the same tasks in the same order,
    the same scenes but the description's (each language shows its own: `demo.world.gallery`)."""

    def example_in(language, index) -> Example:
        shown = examples.get(language) or examples["en"]
        return shown[index] if index < len(shown) else examples["en"][index]

    def on_example(language, evt: gr.SelectData):
        example = example_in(language, evt.index)
        return example.image, example.question, layout.reference_html(example), evt.index

    def on_example_language(language, index):
        """The picked example asked again in the language chosen, on that language's image where
        its scene differs (nothing to do before a pick)."""
        if index is None:
            return gr.skip(), gr.skip(), gr.skip()
        example = example_in(language, index)
        own_scene = len({example_in(lang, index).image for lang in examples}) > 1
        return example.question, layout.reference_html(example), example.image if own_scene else gr.skip()

    def thumbnails(language):
        """The gallery's images in the language chosen (its description is its own scene)."""
        return gr.Gallery(value=[(e.image, e.task.replace("_", " ")) for e in examples.get(language) or examples["en"]])

    def on_preset(name, max_new):
        names = layout.drafter_choices(name) if name in presets.PRESETS else []
        most = layout.max_new_offered(name)  # the slider offers only what fits this preset's context
        return (
            gr.Dropdown(choices=names, value=names[0] if names else None),
            gr.Dropdown(choices=[layout.NO_SECOND, *names], value=layout.NO_SECOND),
            layout.preset_html(name),
            gr.Slider(maximum=most, value=min(max_new, most) if isinstance(max_new, int | float) else most),
        )

    def on_question(question, preset, drafter, last):
        """The question's language picks the drafter (the page says why), once per language: a
        drafter picked by hand stays while a question in the same language is edited."""
        chosen = offers.for_language(question, preset, drafter, last) if preset in presets.PRESETS else None
        if chosen is None:
            return gr.skip(), gr.skip(), gr.skip()
        note = f'<div class="language-note" role="status">{html.escape(chosen.note)}</div>'
        return gr.update(value=chosen.drafter), gr.update(value=note, visible=bool(chosen.note)), chosen.language

    def on_second(drafter):  # the second lane's panel and block view show while a second drafter is picked
        return [gr.update(visible=drafter not in (None, "", layout.NO_SECOND))] * 2

    def visible(on):
        return gr.update(visible=bool(on))

    small = {"api_visibility": "private", "queue": False}
    # The annotated round is of the race on show: a new example, language, image or question clears it.
    for changed in (c.gallery.select, c.example_language.change, c.image.upload, c.question.input):
        changed(lambda: teach.annotated_round_html(Trace()), None, v.how_round, **small)
    c.question.input(lambda: render.UPLOAD_NOTE, None, c.reference, **small)  # a free question: no reference
    picked = gr.State(None)  # the index of the example last picked, asked again when the language changes
    c.gallery.select(on_example, c.example_language, [c.image, c.question, c.reference, picked], **small)
    c.example_language.change(
        on_example_language, [c.example_language, picked], [c.question, c.reference, c.image], **small
    )
    c.example_language.change(thumbnails, c.example_language, c.gallery, **small)
    c.image.upload(lambda: (render.UPLOAD_NOTE, None), None, [c.reference, picked], **small)
    c.preset.change(on_preset, [c.preset, c.max_new], [c.drafter, c.drafter2, c.preset_info, c.max_new], **small)
    language = gr.State("en")  # the language the drafter was last picked for: the page starts in English
    c.question.change(
        on_question, [c.question, c.preset, c.drafter, language], [c.drafter, c.language_note, language], **small
    )
    # The drafter's one-line description follows the drafter picked (and the preset's first, on a new preset).
    c.drafter.change(
        lambda preset, drafter: gr.update(info=drafter_notes.describe(preset, drafter)),
        [c.preset, c.drafter],
        c.drafter,
        **small,
    )
    c.drafter2.change(on_second, c.drafter2, [v.spd2_column, v.blocks2_accordion], **small)
    demo.load(layout.preset_html, c.preset, c.preset_info, **small)
    c.decoding.change(lambda greedy: [visible(not greedy)] * 3, c.decoding, [c.temperature, c.top_p, c.seed], **small)
    c.adaptive.change(visible, c.adaptive, c.threshold, **small)

    last = gr.State(None)  # the last race: (facts, its events in order, request, image), for the replay and the check
    named = vars(v) | vars(v.proof) | {"run": c.run, "replay": c.replay, "stop": c.stop, "last": last}
    outputs = [named[name] for name in handlers.OUTPUTS]  # the order of handlers.positional's tuples
    # /race's parameters in order: the image, the request's fields (`form.FIELDS`, /trace's too),
    # then the page-only Adaptive box (`handlers.PAGE_ONLY`)
    fields = [c.question, c.preset, c.drafter, c.gamma, c.decoding, c.temperature, c.top_p, c.seed, c.max_new]
    decode = {"concurrency_limit": 1, "concurrency_id": "race", "preprocess": False}  # analyses queue apart
    # A run's last update turns its button on before the run has ended (its handler still closes the
    # race and tidies the session), and Gradio drops a click on a button whose event is still running
    # (trigger_mode "once"): a click in that gap went nowhere. "always_last" holds it until the run ends.
    # While a run streams its button is off, so this never queues a second run behind the first.
    after_the_run = {"trigger_mode": "always_last"}
    c.run.click(
        runs.page_only(handlers.positional(handlers.run_race)),  # its accelerator part: `session.gpu_race`
        [c.image, *fields, c.threshold, c.drafter2, c.adaptive],
        outputs,
        api_name="race",
        show_progress="hidden",
        **decode,
        **after_the_run,
    )
    c.replay.click(
        handlers.positional(handlers.replay_race),
        [last, c.speed],
        outputs,
        api_visibility="private",
        show_progress="hidden",
        concurrency_limit=8,
        **after_the_run,
    )  # replays mostly sleep
    step = gr.State(0)  # the round the step mode shows (0: none yet); a new race starts it over
    c.run.click(lambda: 0, None, step, **small)

    def next_round(k, race):
        k = classroom.next_step(k, race)
        return (*handlers.positional(classroom.step)(race, k), k)

    c.next_round.click(next_round, [step, last], [*outputs, step], **small)
    # The run ends itself (see stop_race); the button says "Stopping…" at once, in the browser, and
    # its run's last update says "Stop" again.
    c.stop.click(None, None, c.stop, js=text.STOPPING_JS, **small)
    c.stop.click(handlers.positional(handlers.stop_race), None, outputs, **small)

    min_confidence = gr.Number(0.0, visible=False)  # /trace's default: off (the page's slider starts at 0.5)
    api_inputs = [c.image, *fields, min_confidence, c.drafter2]  # the image, then `form.FIELDS`
    trace_out = gr.JSON(visible=False, label="trace")
    gr.Button(visible=False).click(  # the MCP tool "trace", described by its docstring
        handlers.trace, api_inputs, trace_out, api_name="trace", **decode
    )
    proof_view.wire(v.proof, last, api_inputs)  # Check exactness: the race shown; /exactness: by the fields


def _parameters(block_fn) -> list[str]:
    """The endpoint's parameter names, as its API page lists them (the page's gr.Request is not one)."""
    params = inspect.signature(block_fn.fn).parameters.values()
    return [p.name for p in params if p.annotation not in (gr.Request, "gr.Request")]


def _remote(value) -> bool:
    """A Gradio file value whose path is a URL: Gradio would fetch it; the app never reads one."""
    path = value.get("path") if isinstance(value, dict) else None
    return isinstance(path, str) and path.split(":", 1)[0].lower() in ("http", "https", "ftp", "file", "data")


# Inputs an endpoint gained after callers started to use it (its last ones), each with the value a call
# leaving it out gets, so that such a call keeps working (a plain HTTP call may not know them).
ADDED_INPUTS = {"race": (layout.NO_SECOND, True), "trace": (layout.NO_SECOND,)}  # second_drafter, adaptive


def _padded(block_fn, inputs: list) -> list:
    """`inputs`, with the endpoint's added inputs that it leaves out set to their defaults."""
    added = ADDED_INPUTS.get(block_fn.api_name, ())
    missing = len(block_fn.inputs) - len(inputs)
    return [*inputs, *added[len(added) - missing :]] if 0 < missing <= len(added) else inputs


def arity_refusal(block_fn, n: int) -> str | None:
    """The sentence refusing `n` values for the endpoint `block_fn`, or None when `n` will do (a call
    may leave out the inputs added since it was written, `ADDED_INPUTS`)."""
    if len(_padded(block_fn, [None] * n)) >= len(block_fn.inputs):
        return None
    names = _parameters(block_fn)
    added = len(ADDED_INPUTS.get(block_fn.api_name, ()))
    optional = f" (the last {added} may be left out)" if added > 1 else " (the last may be left out)" if added else ""
    return (
        f"/{block_fn.api_name or block_fn.name} takes {len(block_fn.inputs)} values{optional}, in this order: "
        f"{', '.join(names)}; it got {n}. gradio_client fills in the defaults of any left out."
    )


class _Page(gr.Blocks):
    """gr.Blocks whose refusals of a request's raw values, before any handler runs, are the app's
    own sentences rather than Gradio's (which `show_error=False` blanks to `{"error": null}`):
    too few values, and an image that is a server path or a URL rather than an upload, or whose
    path cannot even be resolved (a NUL byte). A call that leaves out inputs added since it was
    written (`ADDED_INPUTS`) gets their defaults."""

    def validate_inputs(self, block_fn, inputs):
        refused = arity_refusal(block_fn, len(inputs))
        if refused:
            raise gr.Error(refused, print_exception=False)
        super().validate_inputs(block_fn, inputs)

    async def preprocess_data(self, block_fn, inputs, state, explicit_call=False):
        inputs = _padded(block_fn, inputs)
        if any(_remote(value) for value in inputs):
            raise gr.Error(validate.NOT_UPLOADED, print_exception=False)
        try:
            return await super().preprocess_data(block_fn, inputs, state, explicit_call)
        except InvalidPathError:  # a server path (or a dotfile) given as an uploaded file
            raise gr.Error(validate.NOT_UPLOADED, print_exception=False) from None
        except (ValueError, OSError, RuntimeError) as error:  # a file path Gradio cannot resolve: NUL, link loop
            if not any(isinstance(value, dict) and "path" in value for value in inputs):
                raise
            raise gr.Error(validate.unusable_path(error), print_exception=False) from None


def build_demo(default_preset: str = presets.DEFAULT_PRESET, examples_dir: Path = EXAMPLES_DIR) -> gr.Blocks:
    """The page. Offers the presets of `presets.PRESETS` and the examples in `examples_dir`, in
    each language the world they belong to speaks (`presets.world_languages`)."""
    languages = presets.world_languages(Path(examples_dir).parent)
    examples = {lang: layout.load_examples(examples_dir, lang) for lang in languages}
    with _Page(title="Speculative decoding, live", delete_cache=DELETE_CACHE) as demo:
        gr.HTML(text.header(), js_on_load=None)
        with gr.Tabs(elem_id="tabs") as tabs:
            with gr.Tab("Race", id="race", elem_id="tab-race"):
                with gr.Row(equal_height=False):
                    controls = layout.inputs(default_preset, examples["en"], languages)
                view = layout.race_view()
                view.proof = proof_view.section()  # where the time went, the sampling law, the image
            with gr.Tab("Analysis", id="analysis", elem_id="tab-analysis"):
                c = controls
                analysis_tab.analysis_tab(
                    analysis_tab.RaceControls(
                        tabs=tabs,
                        race_tab="race",
                        image=c.image,
                        question=c.question,
                        preset=c.preset,
                        drafter=c.drafter,
                        gamma=c.gamma,
                        decoding=c.decoding,
                        max_new=c.max_new,
                        run=c.run,
                        reference=c.reference,
                        adaptive=c.adaptive,
                    )
                )
        _wire(demo, controls, view, examples)
    return demo


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    """`fn`, run by the first call only (thread-safe)."""
    lock, done = threading.Lock(), []

    def call():
        with lock:
            if not done:
                done.append(True)
                fn()

    return call


WILDCARD = ("0.0.0.0", "::", "[::]", "")  # listening on every interface: the address says nothing of the public name


def public_root(server_name: str, port: int) -> str | None:
    """The app's public URL, which Gradio's /config calls `root` and prefixes to file URLs, never the
    request's Host header (which any caller may forge): $GRADIO_ROOT_PATH where set (Gradio reads it),
    https://$SPACE_HOST on a Space, http://server_name:port where the server listens on one address.
    None where none is known (every interface, off a Space): Gradio then derives it from the Host
    header, so set GRADIO_ROOT_PATH=https://your.host there."""
    if os.environ.get("GRADIO_ROOT_PATH"):
        return None
    if zerogpu.on_space() and os.environ.get("SPACE_HOST"):
        return f"https://{os.environ['SPACE_HOST']}"
    if server_name in WILDCARD:
        log.warning(
            "listening on every interface: set GRADIO_ROOT_PATH to the public URL, or Gradio takes the Host header"
        )
        return None
    host = f"[{server_name}]" if ":" in server_name and not server_name.startswith("[") else server_name
    return f"http://{host}:{port}"


def launch(demo: gr.Blocks, warm: str | None = presets.DEFAULT_PRESET, queue_size: int = QUEUE_SIZE, **kwargs):
    """Serve the page, then warm preset `warm` up in a background thread (None warms nothing),
    started by the first page load or after WARM_UP_AFTER_S, whichever comes first.

    Defaults a caller may override through kwargs: listen on 127.0.0.1 (or $GRADIO_SERVER_NAME), no
    share link, no /monitoring page, the MCP server, the public URL from `public_root`, SESSIONS
    sessions kept. Always: at most `queue_size` waiting, uploads up to `validate.MAX_FILE_BYTES`, the
    request guard (`demo.serve.guard`), no Python errors shown (show_error=False), the page's theme
    and CSS. Returns what `Blocks.launch` returns; pass prevent_thread_lock=True to get control back.
    """
    block = not kwargs.pop("prevent_thread_lock", False)
    if block:  # a server that owns its process (app.py, the soak's child), not a test's in-process one
        tune_allocator()
    kwargs.setdefault("server_name", os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    kwargs.setdefault("share", False)
    kwargs.setdefault("enable_monitoring", False)  # Gradio's /monitoring summary is open to anyone
    kwargs.setdefault("mcp_server", True)  # /trace and /exactness as MCP tools, through the same guard
    kwargs.setdefault("state_session_capacity", SESSIONS)
    if not visitors.proxy_hops():  # uvicorn would take X-Forwarded-For from a loopback client
        os.environ["FORWARDED_ALLOW_IPS"] = ""
    middleware = Middleware(guard.Guard, arity=arity_refusal, folder=handlers.uploads)
    kwargs["app_kwargs"] = {**kwargs.get("app_kwargs", {}), "middleware": [middleware]}
    demo.queue(max_size=queue_size, default_concurrency_limit=1)
    demo._queue.ANALYTICS_MAX_EVENTS = 100  # for /monitoring, which is off: Gradio kept 10,000 events' records
    if warm:
        # Not at once: importing torch and transformers holds the GIL for seconds, and the first
        # page's requests would wait on it. The first page load starts the warm-up; a timer
        # starts it anyway for a server nobody has opened yet.
        start = _once(
            lambda: threading.Thread(target=session.warm_up, args=(warm,), name="warm-up", daemon=True).start()
        )
        with demo:
            demo.load(start, api_visibility="private", queue=False)
        timer = threading.Timer(WARM_UP_AFTER_S, start)
        timer.daemon = True
        timer.start()
    result = demo.launch(
        prevent_thread_lock=True,
        css=text.CSS,
        js=text.JS,
        theme=text.THEME,
        max_file_size=validate.MAX_FILE_BYTES,
        show_error=False,
        **kwargs,
    )
    root = None if kwargs.get("root_path") else public_root(kwargs["server_name"], demo.server_port)
    if root:  # known once Gradio has picked the port; read by the app on every request
        demo.root_path = demo.app.root_path = root
    if block:
        demo.block_thread()
    return result
