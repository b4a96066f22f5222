"""The Gradio app: the page put together, its events wired, and its launch.

    build_demo()   the page: the Race tab (`demo.page.layout`, handlers in `demo.page.handlers`)
                   and the Analysis tab (`demo.page.analysis_tab`), with two API endpoints:
                   /race (the Run button) and /trace (the same race as one JSON document)
    launch(demo)   serve it, and warm the default preset up in the background once the first
                   page has loaded, unless the presets were preloaded at start-up (a Space, or
                   DEMO_PRELOAD: `demo.models.zerogpu`); then only those are offered and served

One decoder at a time (`concurrency_id="decode"`, limit 1: one accelerator, honest clocks), at
most QUEUE_SIZE requests waiting; one more is told at once that the queue is full. Gradio 6 takes
the theme, CSS and script at launch, so launch through `launch()` (or pass `text.CSS`, `text.JS` and
`text.THEME`).
"""

from __future__ import annotations

import html
import inspect
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
from gradio.exceptions import InvalidPathError

from demo import session
from demo.models import presets
from demo.page import analysis_tab, handlers, layout, text
from demo.page.layout import EXAMPLES_DIR, Example
from demo.session import offers, validate

QUEUE_SIZE = 32  # requests that may wait for the decoder; the next one is refused as "queue full"
WARM_UP_AFTER_S = 20.0  # launch() warms the default preset up this long after the start at the latest
# Gradio's cache (uploads, and each race's two downloads) is swept every 10 minutes of files
# older than an hour: a page left open that long uploads its image again.
DELETE_CACHE = (600, 3600)


def _wire(demo: gr.Blocks, c: SimpleNamespace, v: SimpleNamespace, examples: dict[str, list[Example]]) -> None:
    """The events. The page's small events skip the queue, so a full queue never blocks them.
    `examples`: the gallery in each language the world speaks, the same scenes in the same order."""

    def example_in(language, index) -> Example:
        shown = examples.get(language) or examples["en"]
        return shown[index] if index < len(shown) else examples["en"][index]

    def on_example(language, evt: gr.SelectData):
        example = example_in(language, evt.index)
        return example.image, example.question, layout.reference_html(example), evt.index

    def on_example_language(language, index):
        """The picked example asked again in the language chosen (nothing to do before a pick)."""
        if index is None:
            return gr.skip(), gr.skip()
        example = example_in(language, index)
        return example.question, layout.reference_html(example)

    def on_preset(name):
        names = layout.drafter_choices(name) if name in presets.PRESETS else []
        return (
            gr.Dropdown(choices=names, value=names[0] if names else None),
            gr.Dropdown(choices=[layout.NO_SECOND, *names], value=layout.NO_SECOND),
            layout.preset_html(name),
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
    picked = gr.State(None)  # the index of the example last picked, asked again when the language changes
    c.gallery.select(on_example, c.example_language, [c.image, c.question, c.reference, picked], **small)
    c.example_language.change(on_example_language, [c.example_language, picked], [c.question, c.reference], **small)
    c.image.upload(lambda: (layout.reference_html(None), None), None, [c.reference, picked], **small)
    c.preset.change(on_preset, c.preset, [c.drafter, c.drafter2, c.preset_info], **small)
    language = gr.State("en")  # the language the drafter was last picked for: the page starts in English
    c.question.change(
        on_question, [c.question, c.preset, c.drafter, language], [c.drafter, c.language_note, language], **small
    )
    c.drafter2.change(on_second, c.drafter2, [v.spd2_column, v.blocks2_accordion], **small)
    demo.load(layout.preset_html, c.preset, c.preset_info, **small)
    c.decoding.change(lambda d: [visible(d == "sampling")] * 3, c.decoding, [c.temperature, c.top_p, c.seed], **small)
    c.adaptive.change(visible, c.adaptive, c.threshold, **small)

    last = gr.State(None)  # the last race: (facts, its events in order), for the replay
    named = vars(v) | {"run": c.run, "replay": c.replay, "stop": c.stop, "last": last}
    outputs = [named[name] for name in handlers.OUTPUTS]  # the order of handlers.positional's tuples
    settings = [c.question, c.preset, c.drafter, c.gamma]
    sampling = [c.temperature, c.top_p, c.seed, c.max_new]
    decode = {"concurrency_limit": 1, "concurrency_id": "decode", "preprocess": False}
    c.run.click(
        handlers.positional(handlers.run_race),  # its accelerator part is `session.gpu_race`
        [c.image, *settings, c.decoding, *sampling, c.adaptive, c.threshold, c.drafter2],
        outputs,
        api_name="race",
        show_progress="hidden",
        **decode,
    )
    c.replay.click(
        handlers.positional(handlers.replay_race),
        last,
        outputs,
        api_visibility="private",
        show_progress="hidden",
        concurrency_limit=8,
    )  # replays mostly sleep
    c.stop.click(handlers.positional(handlers.stop_race), None, outputs, **small)  # the run ends itself: see stop_race

    greedy = gr.Checkbox(True, visible=False)
    min_confidence = gr.Number(0.0, visible=False)
    trace_out = gr.JSON(visible=False, label="trace")
    gr.Button(visible=False).click(
        handlers.trace_api,
        [c.image, *settings, greedy, *sampling, min_confidence, c.drafter2],
        trace_out,
        api_name="trace",
        **decode,
    )


def _parameters(block_fn) -> list[str]:
    """The endpoint's parameter names, as its API page lists them (the page's gr.Request is not one)."""
    params = inspect.signature(block_fn.fn).parameters.values()
    return [p.name for p in params if p.annotation not in (gr.Request, "gr.Request")]


def _remote(value) -> bool:
    """A Gradio file value whose path is a URL: Gradio would fetch it; the app never reads one."""
    path = value.get("path") if isinstance(value, dict) else None
    return isinstance(path, str) and path.split(":", 1)[0].lower() in ("http", "https", "ftp", "file", "data")


# Inputs an endpoint gained after callers had started to use it (its last ones), each with the value
# a call that leaves it out gets: such a call keeps working as it did (gradio_client fills them in
# anyway; a plain HTTP call may not know them).
ADDED_INPUTS = {"race": (layout.NO_SECOND,), "trace": (layout.NO_SECOND,)}  # second_drafter (issue 27)


def _padded(block_fn, inputs: list) -> list:
    """`inputs`, with the endpoint's added inputs that it leaves out set to their defaults."""
    added = ADDED_INPUTS.get(block_fn.api_name, ())
    missing = len(block_fn.inputs) - len(inputs)
    return [*inputs, *added[len(added) - missing :]] if 0 < missing <= len(added) else inputs


class _Page(gr.Blocks):
    """gr.Blocks whose refusals of a request's raw values, before any handler runs, are the app's
    own sentences rather than Gradio's (which `show_error=False` blanks to `{"error": null}`):
    too few values, and an image that is a server path or a URL rather than an upload. A call
    that leaves out inputs added since it was written (`ADDED_INPUTS`) gets their defaults."""

    def validate_inputs(self, block_fn, inputs):
        if len(_padded(block_fn, inputs)) < len(block_fn.inputs):
            names = _parameters(block_fn)
            added = len(ADDED_INPUTS.get(block_fn.api_name, ()))
            optional = (
                f" (the last {added} may be left out)" if added > 1 else " (the last may be left out)" if added else ""
            )
            raise gr.Error(
                f"/{block_fn.api_name or block_fn.name} takes {len(block_fn.inputs)} values{optional}, in this order: "
                f"{', '.join(names)}; it got {len(inputs)}. gradio_client fills in the defaults of any left out.",
                print_exception=False,
            )
        super().validate_inputs(block_fn, inputs)

    async def preprocess_data(self, block_fn, inputs, state, explicit_call=False):
        inputs = _padded(block_fn, inputs)
        if any(_remote(value) for value in inputs):
            raise gr.Error(validate.NOT_UPLOADED, print_exception=False)
        try:
            return await super().preprocess_data(block_fn, inputs, state, explicit_call)
        except InvalidPathError:  # a server path (or a dotfile) given as an uploaded file
            raise gr.Error(validate.NOT_UPLOADED, print_exception=False) from None


def build_demo(default_preset: str = presets.DEFAULT_PRESET, examples_dir: Path = EXAMPLES_DIR) -> gr.Blocks:
    """The page. Offers the presets of `presets.PRESETS` and the examples in `examples_dir`, in
    each language the world they belong to speaks (`presets.world_languages`)."""
    languages = presets.world_languages(Path(examples_dir).parent)
    examples = {lang: layout.load_examples(examples_dir, lang) for lang in languages}
    with _Page(title="Speculative decoding, live", delete_cache=DELETE_CACHE) as demo:
        gr.HTML(text.header(), js_on_load=None)
        with gr.Tabs(elem_id="tabs") as tabs:
            with gr.Tab("Race", id="race", elem_id="tab-race"):
                how = layout.how_it_works()
                with gr.Row(equal_height=False):
                    controls = layout.inputs(default_preset, examples["en"], languages)
                view = layout.race_view()
                vars(view).update(vars(how))
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


def launch(demo: gr.Blocks, warm: str | None = presets.DEFAULT_PRESET, queue_size: int = QUEUE_SIZE, **kwargs):
    """Serve the page, then warm preset `warm` up in a background thread (None warms nothing),
    started by the first page load or after WARM_UP_AFTER_S, whichever comes first.

    Defaults a caller may override through kwargs: listen on 127.0.0.1 (or $GRADIO_SERVER_NAME),
    no share link, no /monitoring page. Always: at most `queue_size` requests waiting, uploads up to
    `validate.MAX_FILE_BYTES`, no Python errors shown to users (show_error=False), the page's
    theme and CSS. Returns what `Blocks.launch` returns; pass prevent_thread_lock=True to get
    control back.
    """
    block = not kwargs.pop("prevent_thread_lock", False)
    kwargs.setdefault("server_name", os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    kwargs.setdefault("share", False)
    kwargs.setdefault("enable_monitoring", False)  # Gradio's /monitoring summary is open to anyone
    demo.queue(max_size=queue_size, default_concurrency_limit=1)
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
    if block:
        demo.block_thread()
    return result
