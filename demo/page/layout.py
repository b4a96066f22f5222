"""The page's layout: the Race tab's inputs and views, built in the current Blocks context.

`inputs()` and `race_view()` return their components by name (the names `demo.page.handlers`
keys its updates by); `demo.page.app` puts them together with the Analysis tab and wires them.
"""

from __future__ import annotations

import functools
import html
from types import SimpleNamespace

import gradio as gr

from demo import session
from demo.engine.events import Trace
from demo.models import presets
from demo.page import blocks, charts, classroom, drafter_notes, lanes, render, stats_tables, strategy_table
from demo.page.examples import EXAMPLES_DIR, Example, load_examples  # noqa: F401 (the page's names)
from demo.page.text import TIMING, for_visitors
from demo.session import offers, validate


def _raw_image(**kwargs) -> gr.Image:
    """A gr.Image whose request value reaches the handler as sent (a file dict, None, or anything
    else an API caller put there), instead of failing Gradio's own check of its data model
    first with a message the caller never sees; the session's parsing then answers every malformed
    value. Gradio still checks, before the handler, that a file it is given was uploaded.
    (Done on the instance: Gradio writes a .pyi stub beside any module that subclasses a component.)"""
    image = gr.Image(**kwargs)
    schema = image.api_info()  # what API clients are told to send, unchanged
    image.data_model = None
    image.api_info = lambda: schema
    return image


def reference_html(example: Example | None) -> str:
    """The chosen example's task family and reference answer (for judging the answers by eye)."""
    return render.reference_html(None if example is None else example.task, None if example is None else example.answer)


def preset_html(name: str) -> str:
    """What a preset is, its caveat, whether it can load on this machine now, and the drafters it
    cannot offer, each with the reason."""
    preset = presets.PRESETS.get(name)
    if preset is None:
        return ""
    ok, message = offers.availability(name)
    status = "ready" if ok else "unavailable"
    lines = [html.escape(preset.description), html.escape(preset.note)]
    lines.append(f'<span class="{status}">{"✓" if ok else "✗"} {html.escape(for_visitors(message))}</span>')
    unusable = preset.unusable()
    if unusable:  # one line, opened on demand: it is for whoever deploys the page, not for a class
        why = "".join(f"<br><b>{html.escape(d)}</b>: {html.escape(for_visitors(w + '.'))}" for d, w in unusable.items())
        lines.append(f"<details><summary>{_count(len(unusable), 'drafter')} not offered here</summary>{why}</details>")
    lines.append(drafters_html(name))
    return '<div class="preset-info">' + "<br>".join(line for line in lines if line) + "</div>"


@functools.lru_cache(maxsize=64)
def _size(ref: str, estimate: int) -> str:
    """A model's size as the page says it ("16.3M parameters"), read from its files' headers where
    they are here, else the preset's estimate; "" where neither says."""
    from demo.models import hub

    try:
        path = hub.local(ref)
        n = (hub.count_params(path) if path else 0) or estimate
    except Exception:  # unreadable files: the menu stands, only the size is unsaid
        n = estimate
    return f"{render.params(n)} parameters" if n else ""


def drafters_html(preset: str) -> str:
    """What each model sees and its size, before any run: the target, then every drafter the menu
    offers with its one line (`drafter_notes.describe`)."""
    known = presets.PRESETS[preset]
    specs = {s.name: s for s in known.drafters}
    target = _size(known.target, known.params)
    rows = []
    for d in drafter_choices(preset):
        spec = specs.get(presets.base_name(d))
        size = _size(spec.path, spec.params) if spec else ""
        rows.append(
            f"<li><b>{html.escape(d)}</b>{f' ({size})' if size else ''}: {html.escape(drafter_notes.describe(preset, d))}</li>"
        )
    return (
        f'<details class="drafter-lines"><summary>The target{f" ({target})" if target else ""} sees the image and '
        f"the question and has the last word on every token; the drafters offered, their sizes and what each "
        f"sees</summary><ul>{''.join(rows)}</ul></details>"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def left_out_html(left: dict[str, str]) -> str:
    """The presets the selector does not offer, each with why."""
    if not left:
        return ""
    rows = "".join(f"<br><b>{html.escape(name)}</b>: {html.escape(for_visitors(why))}" for name, why in left.items())
    return f'<details class="preset-info"><summary>{_count(len(left), "preset")} not offered here</summary>{rows}</details>'


NO_SECOND = "none"  # the second drafter's choice for a race with one speculative lane
THRESHOLD_DEFAULT = 0.5  # the adaptive-drafting threshold slider (/race's min_confidence) starts here
DECODING = [("greedy", True), ("sampling", False)]  # the Decoding radio: /race's `greedy`, by its label


def drafter_choices(preset: str) -> list[str]:
    """Every drafter a race on `preset` may name (`Preset.drafter_names`)."""
    return list(presets.PRESETS[preset].drafter_names())


def max_new_offered(preset: str | None) -> int:
    """The slider's maximum: the preset's `max_new_tokens` (what fits its context), within the API's range."""
    known = presets.PRESETS.get(preset or "")
    return min(validate.MAX_NEW_RANGE[1], known.max_new_tokens if known else validate.MAX_NEW_RANGE[1])


def second_choices(preset: str) -> list[str]:
    return [NO_SECOND, *drafter_choices(preset)]


ENDONYMS = {"en": "English", "de": "Deutsch", "zh": "中文"}  # each language by its own name


def _sampling_slider(field: str, most: float, label: str, info: str) -> gr.Slider:
    """A sampling setting's slider from 0.05 to `most` in steps of 0.05, at the request's default
    for `field`; hidden until Decoding is set to sampling."""
    return gr.Slider(0.05, most, value=session.DEFAULTS[field], step=0.05, label=label, info=info, visible=False)


def inputs(default_preset: str, examples: list[Example], languages: tuple[str, ...] = ("en",)) -> SimpleNamespace:
    """The left column (image, examples, and the examples' language where the world speaks more
    than English) and the settings; returns the components by name."""
    c = SimpleNamespace()
    choices, left = offers.offered(default_preset)
    if default_preset not in choices:
        default_preset = choices[0] if choices else None
    drafters = drafter_choices(default_preset) if default_preset else []
    with gr.Column(scale=5, min_width=300):
        c.image = _raw_image(
            type="filepath",
            image_mode=None,
            format="png",  # an image set by the page (the Analysis tab's example) keeps its exact pixels
            label="Image",
            height=200,
            sources=["upload", "clipboard"],
            elem_id="image",
        )
        gr.Markdown(
            "**Examples**: held-out scenes of the embedded world, covering every task family. Pick one.",
            visible=bool(examples),
            elem_id="examples-title",
        )
        c.gallery = gr.Gallery(
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
        # The same scenes asked in each language the world speaks; shown only where it speaks more than English.
        c.example_language = gr.Radio(
            [(ENDONYMS[lang], lang) for lang in languages],
            value="en",
            label="Ask the examples in",
            visible=bool(examples) and len(languages) > 1,
            elem_id="examples-language",
        )
    with gr.Column(scale=7):
        c.question = gr.Textbox(
            label="Question",
            lines=2,
            max_length=validate.MAX_QUESTION_CHARS,
            elem_id="question",
            placeholder="Describe this image in detail.",
        )
        # The action right under the question: on a phone too, the first screen holds Run.
        with gr.Row(elem_id="actions"):
            c.run = gr.Button("Run the race", variant="primary", elem_id="run", scale=3)
            c.stop = gr.Button("Stop", variant="stop", interactive=False, elem_id="stop", scale=1)
            c.replay = gr.Button("Replay slowly", interactive=False, elem_id="replay", scale=1)
        vars(c).update(vars(classroom.controls()))
        c.reference = gr.HTML(reference_html(None), js_on_load=None, elem_id="reference")
        with gr.Row():
            # Only the presets' own names and drafters: a request can never name a model or a path.
            c.preset = gr.Dropdown(choices, value=default_preset, label="Model preset", elem_id="preset")
            c.drafter = gr.Dropdown(
                drafters,
                value=drafters[0] if drafters else None,
                label="Drafter",
                info=drafter_notes.describe(default_preset, drafters[0]) if drafters else None,
                elem_id="drafter",
            )
            c.drafter2 = gr.Dropdown(
                [NO_SECOND, *drafters],
                value=NO_SECOND,
                label="Second drafter: a third lane",
                elem_id="drafter2",
            )
            # The API lists every offered preset's drafters (the choices follow the preset on the page).
            every = sorted({name for preset in choices for name in drafter_choices(preset)})
            c.drafter.api_info = lambda: {"type": "string", "enum": every}
            c.drafter2.api_info = lambda: {"type": "string", "enum": [NO_SECOND, *every]}
        c.preset_info = gr.HTML(js_on_load=None, elem_id="preset-info")
        # Which drafter the question's language picked, and why (`offers.for_language`); hidden for English.
        c.language_note = gr.HTML("", js_on_load=None, visible=False, elem_id="language-note")
        gr.HTML(left_out_html(left), js_on_load=None, visible=bool(left), elem_id="presets-left")
        with gr.Row():
            c.gamma = gr.Slider(
                *validate.GAMMA_RANGE,
                value=session.DEFAULTS["gamma"],
                step=1,
                label="γ: drafts per round",
                elem_id="gamma",
                min_width=260,  # below two of these a row wraps: on a phone each slider has the width
            )
            c.max_new = gr.Slider(
                validate.MAX_NEW_RANGE[0],
                max_new_offered(default_preset),
                value=session.DEFAULTS["max_new_tokens"],
                step=1,
                label="Max new tokens",
                elem_id="max-new",
                min_width=260,
            )
        with gr.Row():
            c.adaptive = gr.Checkbox(False, label="Adaptive draft length", elem_id="adaptive")
            c.threshold = gr.Slider(
                0.05,
                0.95,
                value=THRESHOLD_DEFAULT,
                step=0.05,
                label="Stop drafting below this drafter confidence",
                visible=False,
                elem_id="threshold",
            )
        with gr.Row():
            # carries /race's `greedy` itself: True for greedy, False for sampling
            c.decoding = gr.Radio(DECODING, value=True, label="Decoding", elem_id="decoding")
            c.temperature = _sampling_slider(
                "temperature", 2.0, "Temperature", "divides the logits of both models: lower is more deterministic"
            )
            c.top_p = _sampling_slider("top_p", 1.0, "Top-p", "keep the fewest tokens whose probability reaches this")
            c.seed = gr.Number(
                session.DEFAULTS["seed"],
                precision=0,
                label="Seed",
                info="same seed, same race; SPD and AR still differ (other draws, same law)",
                visible=False,
                minimum=0,
                maximum=validate.SEED_RANGE[1],
            )
        gr.Markdown(TIMING, elem_id="timing")
    return c


CHART_MIN_WIDTH = 360  # px: two charts a row on a desktop, one on a phone (titles and axes whole)
# The race's charts, two a row: row id -> component name -> (its empty figure from an empty trace,
# its label (the API's output name), its element id).
CHARTS = {
    "charts": {
        "race_chart": (lambda empty: charts.race([empty], empty), "race chart", "chart-race"),
        "tau_chart": (lambda empty: charts.block_efficiency([empty]), "block efficiency chart", "chart-tau"),
    },
    "charts-2": {
        "hist_chart": (lambda empty: charts.accept_lengths([empty]), "accept lengths chart", "chart-hist"),
        "pos_chart": (
            lambda empty: charts.acceptance_by_position([empty]),
            "acceptance by position chart",
            "chart-pos",
        ),
    },
    "charts-3": {
        "sweep_chart": (lambda empty: charts.gamma_sweep([], 0), "gamma sweep chart", "chart-sweep"),
    },
}


def how_it_works() -> SimpleNamespace:
    """Beside the race's panels: one round of the race on show, annotated (cleared when the inputs
    change), why the acceptance rule is exact, and the rest of the explanation (collapsed)."""
    from demo.page import teach
    from demo.page.text import HOW_IT_WORKS

    h = SimpleNamespace()
    with gr.Group(elem_id="explain"):
        h.how_round = gr.HTML(
            teach.annotated_round_html(Trace()), js_on_load=None, label="annotated round", elem_id="how-round"
        )
        with gr.Accordion(
            "More: sampling, adaptive drafting, the numbers, CPU against GPU", open=False, elem_id="how-more"
        ):
            gr.Markdown(HOW_IT_WORKS)
    return h


def _lane_html(value: str, label: str, elem_id: str) -> gr.HTML:
    """A lane's panel or stats: HTML without a load script, named `label` for API callers."""
    return gr.HTML(value, js_on_load=None, label=label, elem_id=elem_id)


def race_view() -> SimpleNamespace:
    """The race's outputs: outcome, every lane's panel and stats (the second speculative lane's
    hidden until a second drafter is picked), charts, block views, downloads."""
    v = SimpleNamespace()
    empty = Trace()
    with gr.Row(elem_id="race-head"):
        gr.HTML(render.legend_html(), js_on_load=None, elem_id="legend")
    v.outcome = gr.HTML(render.outcome_html([empty], empty, None), js_on_load=None, label="outcome", elem_id="outcome")
    second = lanes.empty_second()
    with gr.Row(equal_height=False):
        with gr.Column(min_width=320):
            spd = render.panel_html(empty, "Speculative", "drafter + target", lane="lane-1")
            v.spd_panel = _lane_html(spd, "speculative panel", "spd-panel")
            v.spd_stats = _lane_html(stats_tables.speculative_stats_html(empty, None), "speculative stats", "spd-stats")
        # The second speculative lane shows while a second drafter is picked (`demo.page.server`).
        with gr.Column(min_width=320, visible=False, elem_id="spd2-column") as v.spd2_column:
            v.spd2_panel = _lane_html(second["spd2_panel"], "second speculative panel", "spd2-panel")
            v.spd2_stats = _lane_html(second["spd2_stats"], "second speculative stats", "spd2-stats")
        with gr.Column(min_width=320):
            ar = render.panel_html(empty, "Autoregressive (target only)", "one forward per token", lane="lane-ar")
            v.ar_panel = _lane_html(ar, "autoregressive panel", "ar-panel")
            v.ar_stats = _lane_html(stats_tables.autoregressive_stats_html(empty), "autoregressive stats", "ar-stats")
    vars(v).update(vars(how_it_works()))
    # Empty charts at load: the browser fetches plotly.js before the first Run, not during it.
    for row, pair in CHARTS.items():
        with gr.Row(elem_id=row):
            for name, (figure, label, elem_id) in pair.items():
                setattr(
                    v,
                    name,
                    gr.Plot(figure(empty), label=label, show_label=False, min_width=CHART_MIN_WIDTH, elem_id=elem_id),
                )
    v.sweep_note = gr.HTML(
        lanes.SWEEP_NOTE,
        js_on_load=None,
        label="gamma sweep note",
        elem_id="sweep-note",
    )
    v.strategies = gr.HTML(
        strategy_table.NOTE,
        js_on_load=None,
        label="table of drafting strategies",
        elem_id="strategies",
    )
    with gr.Accordion(
        "Block by block: every verification round of the speculative run (open one, or click one of its tokens, "
        "for p and q)",
        open=True,
        elem_id="blocks-accordion",
    ):
        v.blocks = gr.HTML(blocks.blocks_html(empty), js_on_load=None, label="block view", elem_id="blocks")
    with gr.Accordion(
        "Block by block: the second speculative lane", open=True, visible=False, elem_id="blocks2-accordion"
    ) as v.blocks2_accordion:
        v.blocks2 = gr.HTML(second["blocks2"], js_on_load=None, label="second block view", elem_id="blocks2")
    with gr.Row():
        v.json_file = gr.DownloadButton("Download the trace (JSON)", interactive=False, elem_id="download-json")
        v.csv_file = gr.DownloadButton("Download the tokens (CSV)", interactive=False, elem_id="download-csv")
    return v
