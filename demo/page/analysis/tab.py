"""The Analysis tab: where, and on which words, the target rejects the drafter, over N held-out
examples of the embedded world raced greedily, the aggregates streamed as each run finishes. A
row's button replays its run on the Race tab; handlers return dicts keyed by component name."""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from demo import session
from demo.engine import export
from demo.page import render
from demo.page.analysis import charts as analysis_charts
from demo.page.analysis.open_batch import open_section
from demo.page.analysis.records import observations_csv, record, run_html
from demo.page.analysis.view import (
    TASK_CHOICES,
    Batch,
    Run,
    compared,
    examples_for,
    headline_html,
    language_choices,
    languages_table,
    runs_table,
    several_languages,
    status_html,
    summaries,
    words_table,
)
from demo.page.layout import CHART_MIN_WIDTH
from demo.page.runs import export_dir, page_error, page_only, page_run, positional, stopper
from demo.session import batches, failures, validate
from demo.session.batches import drafter_choices, spoken
from demo.world.tasks import LANGUAGE_NAMES

# The runs table's column widths, one per column of `run_columns(multilingual)`: the language
# column, where there is one, takes its room from the others.
RUN_WIDTHS = {
    False: ["3%", "13%", "9%", "17%", "16%", "6%", "10%", "9%", "9%", "8%"],
    True: ["3%", "13%", "9%", "12%", "12%", "6%", "10%", "9%", "9%", "8%", "9%"],
}
# An analysis's outputs, in the order /analysis returns them (the API keeps it: by_language,
# added last, comes last).
OUTPUTS = (
    *("status", "headline", "by_category", "by_position", "words", "runs"),
    *("batch", "csv_file", "json_file", "go", "stop", "by_language"),
)
NO_DOWNLOADS = {"csv_file": gr.DownloadButton(value=None, interactive=False)}
NO_DOWNLOADS["json_file"] = NO_DOWNLOADS["csv_file"]


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
    decoding: gr.Radio  # set to greedy (True)
    max_new: gr.Slider
    run: gr.Button | None = None  # clicked once the inputs are in, so the race starts by itself
    reference: gr.HTML | None = None  # the task and reference answer line, filled by render.reference_html
    adaptive: gr.Checkbox | None = None  # adaptive draft length: turned off, as in the analysis

    def targets(self) -> tuple[str, ...]:
        """The names of the components `race_inputs` fills (those given)."""
        named = ("tabs", "image", "question", "drafter", "gamma", "decoding", "max_new", "reference", "adaptive")
        return tuple(name for name in named if getattr(self, name) is not None)


# --- handlers ---------------------------------------------------------------------------------


def _view(batch: Batch | None, status: str, busy: bool, files: dict | None = None) -> dict:
    """Every output of an analysis, by name, from the batch so far."""
    sums = summaries(batch) if batch else {}
    return {
        "status": status,
        "headline": headline_html(batch, sums),
        "by_category": analysis_charts.category_figure(sums),
        "by_position": analysis_charts.position_figure(sums),
        "words": words_table(sums),
        "runs": runs_table(batch, multilingual=len(spoken()) > 1),
        "batch": batch,
        **(files or NO_DOWNLOADS),
        "go": gr.Button(interactive=not busy, value="Analysing…" if busy else "Run analysis"),
        "stop": gr.Button(visible=busy, interactive=True, value="Stop"),
        "by_language": gr.Dataframe(languages_table(batch), visible=several_languages(batch)),
    }


# The Stop button: the analysis ends after the run at hand and says "Stopped." itself (`runs.stop`).
stop_analysis = stopper("analysis", lambda: gr.Button(interactive=False, value="Stopping…"))


def stopped(batch: Batch, over: bool = False) -> dict:
    """The last update of an analysis its Stop (or its budget, `over`) ended: the runs that finished
    stay, and can be downloaded."""
    runs = len(batch.runs)
    why = "Stopped: over budget" if over else "Stopped"
    shown = f"the drafters are {compared(batch)}" if len(batch.drafters) > 1 else "the charts and tables show those"
    status = status_html(f"{why} after {runs} run{'s' * (runs != 1)}; {shown}.")
    return _view(batch, status, busy=False, files=_downloads(batch) if runs else None)


def _downloads(batch: Batch) -> dict:
    folder = Path(export_dir().name)
    csv_path, json_path = folder / "analysis.csv", folder / "analysis.json"
    csv_path.write_text(observations_csv(batch))
    json_path.write_text(export.to_json(record(batch)))
    return {
        "csv_file": gr.DownloadButton(value=str(csv_path), interactive=True),
        "json_file": gr.DownloadButton(value=str(json_path), interactive=True),
    }


def analyze(preset, task, drafter, gamma, n, seed, language="en", page: gr.Request = None):
    """Run SPD (greedy) on n held-out examples with the chosen drafter(s), in the chosen language
    (or each in turn); stream the aggregates. The page's Stop ends it after the run at hand."""
    try:
        request = batches.parse_analysis(
            preset=preset, task=task, drafter=drafter, gamma=gamma, n=n, seed=seed, language=language
        )
        items = examples_for(request.task, request.n, request.seed, request.languages)
        analysis = session.Analysis(request, items)  # refuses what is not served or exceeds the budget
    except Exception as error:  # the earlier request's results are cleared: none stay under this one's words
        message = failures.message(error)
        yield _view(None, status_html(message, error=True), busy=False)
        raise page_error(message) from None
    with page_run(page, "analysis") as run:
        yield from _analyze(run.holds(analysis))


def _analyze(analysis: session.Analysis) -> dict:
    r, items = analysis.request, analysis.items
    batch = Batch(r.preset, r.task, list(r.drafters), r.gamma, r.n, r.seed, r.max_new_tokens, language=r.language)
    said = f"{analysis.shortened} " * bool(analysis.shortened)  # the budget shortened it: said where it runs
    yield _view(batch, status_html(f"{said}Loading the models…", 0.0), busy=True)
    started = time.perf_counter()
    total = len(items) * len(r.drafters)
    try:
        with closing(analysis.events()) as steps:
            for step in steps:
                if isinstance(step, session.Running):
                    item = items[step.example]
                    note = f"{said}example {step.example + 1}/{len(items)} · {step.drafter} drafter · "
                    note += item.task.replace("_", " ")
                    if item.language != "en":
                        note += f" · {LANGUAGE_NAMES[item.language]}"
                    yield _view(batch, status_html(note, len(batch.runs) / total), busy=True)
                    continue
                item, kept = items[step.example], (step.trace, step.observations, step.correct)  # a Decoded
                batch.runs.append(Run(len(batch.runs) + 1, step.example, item, step.drafter, *kept, item.language))
    except Exception as error:  # models that will not load, a failed run: what finished stays on the page
        message = f"Stopped: {failures.message(error)}"
        yield _view(batch, status_html(message, error=True), busy=False)
        raise page_error(message) from None
    if analysis.ending != "finished":  # the run at hand finished and is kept
        yield stopped(batch, over=analysis.ending == "over budget")
        return
    batch.seconds = time.perf_counter() - started
    done = (
        f"{said}Done: {len(items)} examples × {len(r.drafters)} drafter{'s' * (len(r.drafters) > 1)} in "
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
        gr.Button(
            interactive=run is not None, visible=run is not None and run.trace is not None
        ),  # a batch's: no image
    )


def race_inputs(batch: Batch | None, number, current_preset: str, race: RaceControls) -> dict:
    """The Race tab's inputs set to one run of the batch, by `RaceControls` field name, and that
    tab selected; nothing (every input left as it is) when there is no such run."""
    run = find_run(batch, number)
    if run is None:
        return {}
    if current_preset != batch.preset:
        gr.Warning(
            f"The Race tab now uses preset {current_preset!r}; this analysis ran on {batch.preset!r}. "
            "Pick that preset again to race its examples."
        )
        return {}
    return {
        "tabs": gr.Tabs(selected=race.race_tab),
        "image": run.item.image,
        "question": run.item.question,
        "drafter": run.drafter,
        "gamma": batch.gamma,
        "decoding": True,  # greedy
        "max_new": batch.max_new_tokens,
        "reference": render.reference_html(run.item.task, run.item.answer),
        "adaptive": False,
    }


# --- layout -----------------------------------------------------------------------------------


NOTE = (
    "Pick one drafter, or two or three to compare; γ is the drafts per round. "
    f"Speculative decoding only, **greedy** (deterministic), at most {batches.DEFAULTS['max_new_tokens']} new tokens, on "
    "held-out scenes of the embedded world, with the Race tab's model preset. A rejection is counted at "
    "the target's word: a *colour* rejection means the drafter wrote something else where the target "
    "wrote a colour. Image-grounded words (colour, shape, size, count, position, yes/no) are grouped "
    "apart from option letters, function words, template text, punctuation and the end."
)


def _names(choices: list[str]) -> list[str]:
    """The drafters the page's control offers: the preset's own (it compares those picked)."""
    return [c for c in choices if c != batches.BOTH]


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
            _names(drafters),
            value=_names(drafters)[:1],
            multiselect=True,
            max_choices=batches.MAX_COMPARED,
            label=f"Drafters (up to {batches.MAX_COMPARED})",
            elem_id="an-drafter",
            scale=3,
        )
        gamma = gr.Slider(
            *validate.GAMMA_RANGE,
            value=batches.DEFAULTS["gamma"],
            step=1,
            label="γ (drafts)",  # short: beside its number box, "γ: drafts per round" wrapped onto three lines
            elem_id="an-gamma",
            scale=2,
            min_width=190,
        )
        n = gr.Slider(
            *batches.N_RANGE, value=batches.DEFAULTS["n"], step=1, label="N examples", elem_id="an-n", scale=2
        )
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
    with gr.Row():  # side by side on a desktop, one above the other on a phone (as the Race tab's)
        by_category = gr.Plot(
            analysis_charts.category_figure({}),
            label="rejection by category chart",
            show_label=False,
            elem_id="an-chart-category",
            min_width=CHART_MIN_WIDTH,
        )
        by_position = gr.Plot(
            analysis_charts.position_figure({}),
            label="rejection by position chart",
            show_label=False,
            elem_id="an-chart-position",
            min_width=CHART_MIN_WIDTH,
        )
    words = gr.Dataframe(
        words_table({}),
        label="Most rejected words, and what the drafter wrote instead",
        interactive=False,
        wrap=True,
        max_height=360,
        elem_id="an-words",
        column_widths=["11%", "10%", "10%", "9%", "8%", "16%", "36%"],
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

    outputs = {"status": status, "headline": headline, "by_category": by_category, "by_position": by_position}
    outputs |= {"words": words, "runs": runs, "batch": batch, "csv_file": csv_file, "json_file": json_file}
    outputs |= {"go": go, "stop": stop, "by_language": by_language}
    open_section(outputs, OUTPUTS, _view)  # a batch's files, shown as a live analysis is
    go.click(
        page_only(positional(analyze, OUTPUTS)),
        [race.preset, task, drafter, gamma, n, seed, language],
        [outputs[name] for name in OUTPUTS],
        api_name="analysis",
        show_progress="hidden",
        concurrency_limit=1,
        concurrency_id="analysis",  # a queue of its own: a long analysis never holds a race up
        preprocess=False,
        trigger_mode="always_last",  # a click just after an analysis's last update waits for its end (see server)
    )  # every value as sent reaches `batches.parse_analysis`, as on /race
    small = {"api_visibility": "private", "queue": False}  # never behind decoding in the queue
    stop.click(stop_analysis, None, stop, **small)  # the analysis ends itself: see `runs.stop`
    runs.select(show_run, batch, [image, trace_view, selected, to_race], **small)
    race.preset.change(
        lambda p: gr.Dropdown(choices=_names(drafter_choices(p)), value=_names(drafter_choices(p))[:1]),
        race.preset,
        drafter,
        **small,
    )
    event = to_race.click(
        positional(lambda b, number, p: race_inputs(b, number, p, race), race.targets()),
        [batch, selected, race.preset],
        [getattr(race, name) for name in race.targets()],
        **small,
    )
    if race.run is not None and race.run.elem_id:
        event.then(None, js=f"() => {{ document.getElementById({race.run.elem_id!r})?.click(); }}")
