"""The Analysis tab: where, and on which words, the target rejects the drafter, over a batch.

A person picks a task family, a drafter (or both), gamma and N (and, where the world speaks
more than English, a language or all of them); the tab runs speculative
decoding, greedy, on N held-out examples of the embedded world and streams the aggregates as
each run finishes: rejection rate by word category (image-grounded against function and
template words), along the answer, the most-rejected words with what the drafter wrote instead,
and one row per run; a batch in several languages adds a line and a table row per language
and drafter. Selecting a row shows that run's recorded trace in the tab; its button
loads the example into the Race tab and starts the race there. Greedy decoding is
deterministic, so that race reproduces the recorded trace token for token, beside plain decoding.

Every number comes from `demo.session.rejections` and `demo.engine.metrics` over the runs' events; the figures
are `demo.page.analysis_charts`, shared with the benchmark's report. Nothing heavy at import time:
torch and the models are imported when an analysis starts.

Wiring, inside `build_demo`'s Blocks (its rules are in the page's `assets/page.css`):

    with gr.Tabs() as tabs:
        with gr.Tab("Race", id="race"):
            ...                                  # the race page, unchanged
        with gr.Tab("Analysis", id="analysis"):
            analysis_tab(RaceControls(tabs=tabs, race_tab="race", image=image, question=question,
                                      preset=preset, drafter=drafter, gamma=gamma, decoding=decoding,
                                      max_new=max_new, run=run, reference=reference))

`build_standalone()` hosts the tab beside stand-ins for those components, for development and tests.
"""

from __future__ import annotations

import functools
import tempfile
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import gradio as gr

from demo import session
from demo.engine import export
from demo.models import presets
from demo.page import analysis_charts, render
from demo.page.analysis_view import (
    ALL_LANGUAGES,
    TASK_CHOICES,
    TASK_KINDS,
    Batch,
    Run,
    examples_for,
    headline_html,
    language_choices,
    languages_table,
    observations_csv,
    record,
    run_html,
    runs_table,
    several_languages,
    status_html,
    summaries,
    words_table,
)
from demo.page.handlers import PageRun, page_error, page_run
from demo.session import failures, offers, validate
from demo.world.scoring import score
from demo.world.tasks import LANGUAGE_NAMES

BOTH = "both, side by side"
# The runs table's column widths, one per column of `run_columns(multilingual)`: the language
# column, where there is one, takes its room from the others.
RUN_WIDTHS = {
    False: ["4%", "10%", "9%", "22%", "22%", "5%", "6%", "7%", "7%", "8%"],
    True: ["4%", "9%", "8%", "20%", "20%", "5%", "6%", "7%", "7%", "6%", "8%"],
}
N_RANGE, N_DEFAULT = (1, 32), 8
GAMMA_DEFAULT = 4
MAX_NEW_TOKENS = 160  # enough for the world's longest answers (detailed descriptions)

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class RaceControls:
    """The Race tab's components the Analysis tab writes to, to race one of its examples there."""

    tabs: gr.Tabs  # the page's tabs; the race tab is selected
    race_tab: str  # id of the race tab: gr.Tab(..., id=race_tab)
    image: gr.Image  # type="pil"
    question: gr.Textbox
    preset: gr.Dropdown  # read: the analysis runs on the Race tab's preset
    drafter: gr.Dropdown
    gamma: gr.Slider
    decoding: gr.Radio  # set to "greedy"
    max_new: gr.Slider
    run: gr.Button | None = None  # clicked once the inputs are in, so the race starts by itself
    reference: gr.HTML | None = None  # the task and reference answer line, filled by render.reference_html
    adaptive: gr.Checkbox | None = None  # adaptive draft length: turned off, as in the analysis

    def targets(self) -> list:
        """What `race_inputs` fills, in its order."""
        optional = [c for c in (self.reference, self.adaptive) if c is not None]
        return [self.tabs, self.image, self.question, self.drafter, self.gamma, self.decoding, self.max_new, *optional]


# --- handlers ---------------------------------------------------------------------------------


def drafter_choices(preset: str) -> list[str]:
    names = [s.name for s in presets.PRESETS[preset].drafters] if preset in presets.PRESETS else []
    return names + [BOTH] if len(names) > 1 else names


def spoken() -> tuple[str, ...]:
    """The languages the shipped world speaks (English first)."""
    return presets.world_languages()


def parse_settings(preset, task, drafter, gamma, n, seed, language="en") -> tuple:
    """The analysis's settings as sent, checked by `demo.session.validate` as /race's and /trace's are:
    (preset, task, drafters, gamma, n, seed, languages asked), or InvalidInput naming the value
    and what would do."""
    preset = validate.choice("model preset", preset, presets.PRESETS)
    task = validate.choice("task", task, TASK_KINDS)
    language = validate.choice("language", language, [value for _, value in language_choices(spoken())])
    known = drafter_choices(preset)
    drafter = validate.choice(f"drafter for preset {preset!r}", drafter, known)
    gamma = validate.integer("gamma (drafts per round)", gamma, *validate.GAMMA_RANGE)
    n = validate.integer("N examples", n, *N_RANGE)
    seed = validate.integer("example set (seed)", 0 if seed is None else seed, *validate.SEED_RANGE)
    drafters = [d for d in known if d != BOTH] if drafter == BOTH else [drafter]
    languages = spoken() if language == ALL_LANGUAGES else (language,)
    return preset, task, drafters, gamma, n, seed, languages


@functools.cache
def _export_dir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="spd-analysis-")


def _view(batch: Batch | None, status: str, busy: bool, files: tuple | None = None) -> tuple:
    """Every output of an analysis, from the batch so far (see `analysis_tab`)."""
    sums = summaries(batch) if batch else {}
    downloads = files or (gr.DownloadButton(value=None, interactive=False),) * 2
    return (
        status,
        headline_html(batch, sums),
        analysis_charts.category_figure(sums),
        analysis_charts.position_figure(sums),
        words_table(sums),
        runs_table(batch, multilingual=len(spoken()) > 1),
        batch,
        *downloads,
        gr.Button(interactive=not busy, value="Analysing…" if busy else "Run analysis"),
        gr.Button(visible=busy, interactive=True, value="Stop"),
        gr.Dataframe(
            languages_table(batch), visible=several_languages(batch)
        ),  # last: the outputs before keep their places
    )


_ANALYSES: dict[str, PageRun] = {}  # by the page's session: the analysis it runs, for its Stop


def stop_analysis(page: gr.Request = None):
    """The Stop button: ask the page's analysis to end after the run at hand, and switch Stop off.
    The analysis says "Stopped." itself, in its last update (as the race does, and for the same
    reason: its updates reach the page in order, this answer may not, see `handlers.stop_race`)."""
    run = _ANALYSES.get(getattr(page, "session_hash", None))
    if run is not None:
        run.stop.set()
    return gr.Button(interactive=False, value="Stopping…")


def stopped(batch: Batch) -> tuple:
    """The last update of an analysis its Stop ended: the runs that finished stay, and can be downloaded."""
    runs = len(batch.runs)
    status = status_html(f"Stopped after {runs} run{'s' * (runs != 1)}; the charts and tables show those.")
    return _view(batch, status, busy=False, files=_downloads(batch) if runs else None)


def _downloads(batch: Batch) -> tuple:
    folder = Path(_export_dir().name)
    csv_path, json_path = folder / "analysis.csv", folder / "analysis.json"
    csv_path.write_text(observations_csv(batch))
    json_path.write_text(export.to_json(record(batch)))
    return gr.DownloadButton(value=str(csv_path), interactive=True), gr.DownloadButton(
        value=str(json_path), interactive=True
    )


def analyze(preset, task, drafter, gamma, n, seed, language="en", page: gr.Request = None):
    """Run SPD (greedy) on n held-out examples with the chosen drafter(s), in the chosen language
    (or each in turn); stream the aggregates. The page's Stop ends it after the run at hand."""
    with page_run(page, _ANALYSES) as run:
        yield from _analyze(preset, task, drafter, gamma, n, seed, language, run.stop)


def _analyze(preset, task, drafter, gamma, n, seed, language, stop: threading.Event):
    try:
        preset, task, drafters, gamma, n, seed, languages = parse_settings(
            preset, task, drafter, gamma, n, seed, language
        )
        offers.check_available(preset)  # not served here, or cannot load: said before any work
    except Exception as error:
        raise page_error(failures.message(error)) from None
    batch = Batch(preset, task, drafters, gamma, n, seed, MAX_NEW_TOKENS, language=language)
    yield _view(batch, status_html("Loading the models…", 0.0), busy=True)
    started = time.perf_counter()
    items = examples_for(task, batch.n, batch.seed, languages)
    total = len(items) * len(drafters)
    try:
        with closing(session.decode_examples(preset, drafters, items, batch.gamma, batch.max_new_tokens)) as steps:
            for step in steps:
                if step[0] == "run":
                    if stop.is_set():  # the run at hand has finished and is kept
                        break
                    _, i, d = step
                    note = f"example {i + 1}/{len(items)} · {d} drafter · {items[i].task.replace('_', ' ')}"
                    if items[i].language != "en":
                        note += f" · {LANGUAGE_NAMES[items[i].language]}"
                    yield _view(batch, status_html(note, len(batch.runs) / total), busy=True)
                    continue
                _, i, d, trace, obs = step
                item = items[i]
                correct = score(item.task, item, trace.summary.text)
                batch.runs.append(Run(len(batch.runs) + 1, i, item, d, trace, obs, correct, item.language))
    except Exception as error:  # models that will not load, a failed run: what finished stays on the page
        message = f"Stopped: {failures.message(error)}"
        yield _view(batch, status_html(message, error=True), busy=False)
        raise page_error(message) from None
    if stop.is_set():
        yield stopped(batch)
        return
    batch.seconds = time.perf_counter() - started
    done = (
        f"Done: {len(items)} examples × {len(drafters)} drafter{'s' * (len(drafters) > 1)} in "
        f"{batch.seconds:.1f} s (greedy, at most {batch.max_new_tokens} new tokens). "
        "Select a row to see its trace."
    )
    yield _view(batch, status_html(done), busy=False, files=_downloads(batch))


def find_run(batch: Batch | None, number) -> Run | None:
    if batch is None or number is None:
        return None
    return next((r for r in batch.runs if r.number == int(number)), None)


def show_run(batch: Batch | None, evt: gr.SelectData):
    """A row selected: that run's trace, its image, and the button to race it."""
    run = find_run(batch, (evt.row_value or [None])[0])
    return (
        gr.Image(run.item.image if run else None, visible=run is not None),
        run_html(run, batch.gamma if batch else 0),
        run.number if run else None,
        gr.Button(interactive=run is not None, visible=run is not None),
    )


def race_inputs(batch: Batch | None, number, current_preset: str, race: RaceControls) -> tuple:
    """The Race tab's inputs set to one run of the batch (`race.targets()`), and that tab selected."""
    run = find_run(batch, number)
    skip = (gr.skip(),) * len(race.targets())
    if run is None:
        return skip
    if current_preset != batch.preset:
        gr.Warning(
            f"The Race tab now uses preset {current_preset!r}; this analysis ran on {batch.preset!r}. "
            "Pick that preset again to race its examples."
        )
        return skip
    out = (
        gr.Tabs(selected=race.race_tab),
        run.item.image,
        run.item.question,
        run.drafter,
        batch.gamma,
        "greedy",
        batch.max_new_tokens,
    )
    if race.reference is not None:
        out += (render.reference_html(run.item.task, run.item.answer),)
    if race.adaptive is not None:
        out += (False,)
    return out


# --- layout -----------------------------------------------------------------------------------


NOTE = (
    f"Speculative decoding only, **greedy** (deterministic), at most {MAX_NEW_TOKENS} new tokens, on "
    "held-out scenes of the embedded world, with the Race tab's model preset. A rejection is counted at "
    "the target's word: a *colour* rejection means the drafter wrote something else where the target "
    "wrote a colour. Image-grounded words (colour, shape, size, count, position, yes/no) are grouped "
    "apart from option letters, function words, template text, punctuation and the end."
)


def analysis_tab(race: RaceControls) -> None:
    """Lay the tab out in the current Blocks context and wire it to the Race tab's `race` controls."""
    drafters = drafter_choices(race.preset.value)
    languages = language_choices(spoken())
    multilingual = len(languages) > 1
    with gr.Row(elem_id="an-controls"):
        task = gr.Dropdown(TASK_CHOICES, value="all", label="Task", elem_id="an-task", scale=2)
        language = gr.Dropdown(
            languages, value="en", label="Language", visible=multilingual, elem_id="an-language", scale=2
        )
        drafter = gr.Dropdown(
            drafters, value=drafters[0] if drafters else None, label="Drafter", elem_id="an-drafter", scale=2
        )
        gamma = gr.Slider(
            *validate.GAMMA_RANGE, value=GAMMA_DEFAULT, step=1, label="γ: drafts per round", elem_id="an-gamma", scale=2
        )
        n = gr.Slider(*N_RANGE, value=N_DEFAULT, step=1, label="N examples", elem_id="an-n", scale=2)
        seed = gr.Number(0, precision=0, minimum=0, label="Example set (seed)", elem_id="an-seed", scale=1)
        with gr.Column(scale=2, min_width=160):
            go = gr.Button("Run analysis", variant="primary", elem_id="an-run")
            stop = gr.Button("Stop", variant="stop", visible=False, size="sm", elem_id="an-stop")
    gr.Markdown(NOTE, elem_classes="an-note")
    with gr.Row(equal_height=False, elem_id="an-status-row"):
        status = gr.HTML(status_html("No analysis yet."), js_on_load=None, label="status", elem_id="an-status", scale=5)
        csv_file = gr.DownloadButton(
            "⤓ Observations (CSV)", interactive=False, elem_id="an-csv", scale=1, min_width=150, size="sm"
        )
        json_file = gr.DownloadButton(
            "⤓ Aggregates and runs (JSON)", interactive=False, elem_id="an-json", scale=1, min_width=150, size="sm"
        )
    headline = gr.HTML(headline_html(None, {}), js_on_load=None, label="headline", elem_id="an-headline")
    by_language = gr.Dataframe(
        languages_table(None),
        label="By language: runs, pooled τ and α, answers correct, image-grounded drafts accepted",
        interactive=False,
        visible=False,
        elem_id="an-languages",
    )
    with gr.Row():
        by_category = gr.Plot(
            analysis_charts.category_figure({}),
            label="rejection by category chart",
            show_label=False,
            elem_id="an-chart-category",
        )
        by_position = gr.Plot(
            analysis_charts.position_figure({}),
            label="rejection by position chart",
            show_label=False,
            elem_id="an-chart-position",
        )
    words = gr.Dataframe(
        words_table({}),
        label="Most rejected words, and what the drafter wrote instead",
        interactive=False,
        wrap=True,
        max_height=360,
        elem_id="an-words",
        column_widths=["12%", "12%", "12%", "9%", "9%", "10%", "36%"],
    )
    runs = gr.Dataframe(
        runs_table(None, multilingual),
        label="Runs: select one to see its recorded trace below",
        interactive=False,
        wrap=True,
        max_height=400,
        elem_id="an-runs",
        column_widths=RUN_WIDTHS[multilingual],
    )
    with gr.Group(elem_id="an-trace"):
        with gr.Row(equal_height=False):
            image = gr.Image(
                type="pil",
                interactive=False,
                show_label=False,
                height=220,
                scale=1,
                min_width=180,
                buttons=[],
                visible=False,
                elem_id="an-image",
            )
            with gr.Column(scale=5):
                trace_view = gr.HTML(run_html(None), js_on_load=None, elem_id="an-trace-view")
                to_race = gr.Button(
                    "Race this example on the Race tab ▶", interactive=False, visible=False, elem_id="an-to-race"
                )
    batch, selected = gr.State(None), gr.State(None)

    go.click(
        analyze,
        [race.preset, task, drafter, gamma, n, seed, language],
        [status, headline, by_category, by_position, words, runs, batch, csv_file, json_file, go, stop, by_language],
        api_name="analysis",
        show_progress="hidden",
        concurrency_limit=1,
        concurrency_id="decode",
        preprocess=False,
    )  # every value as sent reaches `parse_settings`, as on /race
    small = {"api_visibility": "private", "queue": False}  # never behind decoding in the queue
    stop.click(stop_analysis, None, stop, **small)  # the analysis ends itself: see stop_analysis
    runs.select(show_run, batch, [image, trace_view, selected, to_race], **small)
    race.preset.change(
        lambda p: gr.Dropdown(choices=drafter_choices(p), value=(drafter_choices(p) or [None])[0]),
        race.preset,
        drafter,
        **small,
    )
    event = to_race.click(
        lambda b, number, p: race_inputs(b, number, p, race), [batch, selected, race.preset], race.targets(), **small
    )
    if race.run is not None and race.run.elem_id:
        event.then(None, js=f"() => {{ document.getElementById({race.run.elem_id!r})?.click(); }}")


def build_standalone(default_preset: str = presets.DEFAULT_PRESET) -> gr.Blocks:
    """The tab beside stand-ins for the Race tab's inputs (its Run button only says what it got)."""
    names = [s.name for s in presets.PRESETS[default_preset].drafters]
    with gr.Blocks(title="Speculative decoding: error analysis") as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("Race", id="race"):
                with gr.Row():
                    image = gr.Image(type="pil", label="Image", height=240, elem_id="image")
                    with gr.Column():
                        question = gr.Textbox(label="Question", lines=2, elem_id="question")
                        reference = gr.HTML(elem_id="reference")
                        preset = gr.Dropdown(
                            list(presets.PRESETS), value=default_preset, label="Model preset", elem_id="preset"
                        )
                        drafter = gr.Dropdown(names, value=names[0], label="Drafter", elem_id="drafter")
                        gamma = gr.Slider(1, 10, value=4, step=1, label="γ", elem_id="gamma")
                        decoding = gr.Radio(
                            ["greedy", "sampling"], value="sampling", label="Decoding", elem_id="decoding"
                        )
                        max_new = gr.Slider(1, 512, value=128, step=1, label="Max new tokens", elem_id="max-new")
                        adaptive = gr.Checkbox(True, label="Adaptive draft length", elem_id="adaptive")
                        run = gr.Button("Run the race", variant="primary", elem_id="run")
                said = gr.Markdown(elem_id="raced")
                run.click(
                    lambda im, q, p, d, g, dec, m, a: (
                        f"Raced: {q!r} with {p}/{d}, γ = {g}, {dec}, {m} tokens, "
                        f"adaptive {'on' if a else 'off'}, image {'given' if im is not None else 'missing'}."
                    ),
                    [image, question, preset, drafter, gamma, decoding, max_new, adaptive],
                    said,
                    api_name="race",
                )
            with gr.Tab("Analysis", id="analysis"):
                analysis_tab(
                    RaceControls(
                        tabs=tabs,
                        race_tab="race",
                        image=image,
                        question=question,
                        preset=preset,
                        drafter=drafter,
                        gamma=gamma,
                        decoding=decoding,
                        max_new=max_new,
                        run=run,
                        reference=reference,
                        adaptive=adaptive,
                    )
                )
    return demo


if __name__ == "__main__":
    from demo.page.text import CSS

    build_standalone().launch(css=CSS)
