"""The Analysis tab: its views of a hand-built batch (exact), its endpoint in-process through
gradio_client on tiny random models loaded through the real preset path, and the whole tab once
in headless Chromium, down to the link that races an example on the Race tab."""

import csv
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import analysis_page
import gradio as gr
import pytest
import tiny
from gradio_client.exceptions import AppError
from test_rejections import STOPS, shapes_trace, yes_trace

from demo.lab.bench import soak
from demo.models import loader, presets
from demo.page import layout, text
from demo.page.analysis import tab as analysis_tab
from demo.page.analysis.tab import Batch, Run
from demo.page.analysis.view import rate as view_rate
from demo.page.runs import positional
from demo.session import batches, rejections, validate
from demo.session.batches import BOTH
from demo.world.tasks import heldout_examples

PRESET = "tiny-analysis"
ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(os.environ.get("SCREENSHOT_DIR", ROOT / "runs" / "screenshots"))


def item(task="caption", question="Caption this.", answer="A red circle."):
    return SimpleNamespace(task=task, question=question, answer=answer, image=None)


def hand_batch() -> Batch:
    """Two drafters on one example: the text-only one writes shapes_trace, the image-aware one yes_trace."""
    batch = Batch(PRESET, "caption", ["text-only", "image-aware"], gamma=3, n=1, seed=0, max_new_tokens=16)
    for number, (drafter, trace) in enumerate([("text-only", shapes_trace()), ("image-aware", yes_trace())], 1):
        obs = rejections.observations(trace, 0, STOPS)
        batch.runs.append(Run(number, 0, item(), drafter, trace, obs, correct=number == 1))
    return batch


# --- views of a batch, pure -------------------------------------------------------------------


def test_examples_cycle_through_the_world_tasks_of_a_choice():
    vqa = analysis_tab.examples_for("vqa", 7, seed=0)
    assert [e.task for e in vqa] == [
        "vqa_colour",
        "vqa_shape",
        "vqa_count",
        "vqa_position",
        "vqa_yesno",
        "vqa_colour",
        "vqa_shape",
    ]
    captions = analysis_tab.examples_for("caption", 2, seed=0)
    assert [e.question for e in captions] == [e.question for e in heldout_examples("caption", 2, 0)]


def test_headline_sentences_are_computed_from_the_numbers():
    batch = hand_batch()
    text = analysis_tab.headline_html(batch, analysis_tab.summaries(batch))
    # every rate with its count and its 95% Wilson interval
    assert (
        "<b>text-only</b> drafter: image-grounded words are 50% (5/10; 95% 24%–76%) of drafted positions but "
        "75% (3/4; 95% 30%–95%) of rejections; the target rejects 60% (3/5; 95% 23%–88%) of drafts on them, "
        "20% (1/5; 95% 4%–62%) elsewhere."
    ) in text
    assert (
        "<b>image-aware</b> drafter: image-grounded words are 25% (1/4; 95% 5%–70%) of drafted positions but "
        "100% (1/1; 95% 21%–100%) of rejections; the target rejects 100% (1/1; 95% 21%–100%) of drafts on them, "
        "0% (0/3; 95% 0%–56%) elsewhere."
    ) in text
    # the intervals overlap: no ranking, and the sentence says why
    assert (
        "On image-grounded words these examples cannot rank the <b>text-only</b> drafter's 60% (3/5; 95% 23%–88%) "
        "and the <b>image-aware</b> drafter's 100% (1/1; 95% 21%–100%): their 95% intervals overlap." in text
    )
    assert "The drafters are compared on the 1 of 1 example every drafter finished." in text
    assert "1 example · 14 drafted positions checked · greedy · γ = 3" in text


def test_a_batch_stopped_partway_compares_the_drafters_on_the_examples_every_one_finished():
    """Stopped over budget after the text-only drafter's run on a second example: every aggregate,
    sentence and table is of the one example both drafters finished, and the status says how many."""
    batch, whole = hand_batch(), hand_batch()
    trace = shapes_trace()
    batch.runs.append(Run(3, 1, item(), "text-only", trace, rejections.observations(trace, 1, STOPS), correct=True))
    assert analysis_tab.summaries(batch) == analysis_tab.summaries(whole)
    text = analysis_tab.headline_html(batch, analysis_tab.summaries(batch))
    assert text == analysis_tab.headline_html(whole, analysis_tab.summaries(whole)).replace(
        "1 of 1 example ", "1 of 2 examples "
    )
    assert "1 example · 14 drafted positions checked" in text
    status = analysis_tab.stopped(batch, over=True)["status"]
    assert (
        "Stopped: over budget after 3 runs; the drafters are compared on the 1 of 2 examples every drafter finished."
        in status
    )
    assert len(analysis_tab.stopped(batch)["runs"]) == 3  # the table lists every run that finished


def test_headline_says_when_every_draft_was_accepted_or_nothing_ran():
    batch = hand_batch()
    batch.runs[0].obs = [o for o in batch.runs[0].obs if o.accepted]
    text = analysis_tab.headline_html(batch, analysis_tab.summaries(batch))
    assert "<b>text-only</b>: the target accepted all 6 drafts." in text
    assert "press <b>Run analysis</b>" in analysis_tab.headline_html(None, {})


def test_tables_list_the_most_rejected_words_and_one_row_per_run():
    batch = hand_batch()
    words = analysis_tab.words_table(analysis_tab.summaries(batch))
    assert words.values.tolist()[:4] == [
        ["text-only", ".", "punctuation", 1, 1, "100% (1/1; 95% 21%–100%)", "(end) (1)"],
        ["text-only", "left", "position", 1, 1, "100% (1/1; 95% 21%–100%)", "right (1)"],
        ["text-only", "red", "colour", 1, 1, "100% (1/1; 95% 21%–100%)", "blue (1)"],
        ["text-only", "circle", "shape", 1, 2, "50% (1/2; 95% 9%–91%)", "circus (1)"],
    ]
    assert words.values.tolist()[-1] == ["image-aware", "red", "colour", 1, 1, "100% (1/1; 95% 21%–100%)", "blue (1)"]
    runs = analysis_tab.runs_table(batch)
    # shapes_trace: 11 tokens after the prefill in 6 rounds; 6 of 14 drafts accepted; 4 rejected, 3 on grounded words
    assert runs.values.tolist()[0] == [
        1,
        "caption",
        "text-only",
        "Caption this.",
        "The red circle is in the top left corner.",
        1.83,
        "43% (6/14; 95% 21%–67%)",
        4,
        3,
        "✓",
    ]
    assert runs.values.tolist()[1][-3:] == [1, 1, "✗"]


def test_csv_has_one_row_per_observation_and_json_is_strict_with_aggregates_and_runs():
    batch = hand_batch()
    rows = list(csv.DictReader(io.StringIO(analysis_tab.observations_csv(batch))))
    assert len(rows) == 10 + 4
    assert rows[2] == {
        "run": "1",
        "drafter": "text-only",
        "task": "caption",
        "language": "en",
        "example": "0",
        "index": "3",
        "rel": str(3 / 12),
        "token": "cle",
        "word": "circle",
        "category": "shape",
        "accepted": "False",
        "draft": "cus",
        "draft_word": "circus",
        "image_attention": "",  # not read for the hand-built runs
        "image_dependent": "",  # nor their ablation
        "grounded": "True",
    }
    record = json.loads(json.dumps(analysis_tab.record(batch), allow_nan=False))
    assert record["settings"]["drafters"] == ["text-only", "image-aware"]
    assert record["by_drafter"]["text-only"]["grounded"]["grounded_share_of_rejections"] == 0.75
    assert [(r["run"], r["drafter"], r["rejected"], r["grounded_rejected"], r["correct"]) for r in record["runs"]] == [
        (1, "text-only", 4, 3, True),
        (2, "image-aware", 1, 1, False),
    ]


def test_a_selected_run_shows_its_trace_and_each_rejection():
    batch = hand_batch()
    select = gr.SelectData(None, {"index": [0, 1], "value": "caption", "row_value": [1, "caption"]})
    image, view, number, button = analysis_tab.show_run(batch, select)
    assert number == 1 and button.interactive and button.visible
    assert "#1 · caption" in view and "τ = 1.83" in view and "Rejections (4)" in view
    assert "<td>circle</td><td>shape</td><td>circus</td>" in view.replace(' class=""', "").replace(
        ' class="grounded"', ""
    )
    assert 'class="tok tok-resampled"' in view  # the coloured answer, from demo.page.render


def test_racing_a_run_fills_the_race_tab_inputs_and_selects_it():
    with gr.Blocks():
        race = analysis_tab.RaceControls(
            gr.Tabs(),
            "race",
            gr.Image(type="pil"),
            gr.Textbox(),
            gr.Dropdown([PRESET]),
            gr.Dropdown(["text-only", "image-aware"]),
            gr.Slider(1, 10),
            gr.Radio(layout.DECODING),
            gr.Slider(1, 512),
            reference=gr.HTML(),
            adaptive=gr.Checkbox(),
        )
    batch = hand_batch()
    out = analysis_tab.race_inputs(batch, 2, PRESET, race)
    assert out["tabs"].selected == "race"
    assert [out[name] for name in ("question", "drafter", "gamma", "decoding", "max_new")] == [
        "Caption this.",
        "image-aware",
        3,
        True,  # greedy
        16,
    ]
    assert "reference answer" in out["reference"] and "A red circle." in out["reference"]
    assert out["adaptive"] is False  # adaptive draft length off, as in the analysis: the race repeats the trace
    assert set(out) == set(race.targets()) and len(race.targets()) == 9
    skipped = analysis_tab.race_inputs(batch, 2, "another-preset", race)
    as_sent = positional(lambda: skipped, race.targets())()  # what Gradio gets: every input left as it is
    assert skipped == {} and all(o == gr.skip() for o in as_sent) and len(as_sent) == 9


@pytest.mark.slow
def test_importing_the_tab_imports_no_torch():
    code = "import sys, demo.page.server; sys.exit('torch' in sys.modules or 'transformers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


# --- the endpoint, in-process -----------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tiny.save_preset(tmp_path_factory.mktemp("preset"), PRESET)  # loaded through the real preset path
    short, batches.DEFAULTS["max_new_tokens"] = batches.DEFAULTS["max_new_tokens"], 8
    demo = analysis_page.build_standalone(PRESET)
    demo.launch(prevent_thread_lock=True, quiet=True, css=text.CSS)
    yield demo
    demo.close()
    batches.DEFAULTS["max_new_tokens"] = short
    loader.PRESETS.pop(PRESET, None)


@pytest.mark.slow
def test_analysis_streams_progress_then_charts_tables_and_downloads_that_agree(served):
    client = soak.client(served.local_url)
    job = client.submit(PRESET, "caption", BOTH, 3, 2, 0, api_name="/analysis")
    statuses = [out[0] for out in job]
    assert any("example 2/2 · image-aware drafter · caption" in s for s in statuses)
    status, headline, by_category, by_position, words, runs, csv_file, json_file, languages = job.result()
    assert "Done: 2 examples × 2 drafters" in status and "at most 8 new tokens" in status
    assert [row[2] for row in runs["data"]] == ["text-only", "image-aware"] * 2
    title = json.loads(by_category["plot"])["layout"]["title"]["text"]
    assert (
        title
        == "Rejection rate by word category<br><sup>whiskers: 95% Wilson interval · labels, where they fit: rejected/drafted</sup>"
    )
    record = json.loads(Path(json_file["value"]).read_text())
    assert record["settings"] | {"drafters": None} == {
        "preset": PRESET,
        "task": "caption",
        "language": "en",
        "drafters": None,
        "gamma": 3,
        "n": 2,
        "seed": 0,
        "decoding": "greedy",
        "max_new_tokens": 8,
        "split": "heldout",
    }
    observations = list(csv.DictReader(io.StringIO(Path(csv_file["value"]).read_text())))
    for drafter, summary in record["by_drafter"].items():
        mine = [o for o in observations if o["drafter"] == drafter]
        assert (
            summary["grounded"]["drafted"]
            == len(mine)
            == sum(r["drafted"] for r in record["runs"] if r["drafter"] == drafter)
        )
        assert summary["grounded"]["rejected"] == sum(o["accepted"] == "False" for o in mine)
    assert [row[7] for row in runs["data"]] == [r["rejected"] for r in record["runs"]]
    assert f"{len(observations)} drafted positions checked" in headline


def test_a_drafter_the_preset_lacks_is_refused_with_a_message(served):
    # the page offers only the preset's drafters; the Race tab's preset can change under a choice
    steps = analysis_tab.analyze(PRESET, "caption", "no-such-drafter", 3, 2, 0)
    cleared = next(steps)  # the earlier request's results go, the refusal in their place
    assert cleared["headline"] == analysis_tab.headline_html(None, {}) and cleared["runs"].empty
    assert "Unknown drafter" in cleared["status"]
    with pytest.raises(gr.Error) as refused:
        next(steps)
    assert refused.value.message == (
        "Unknown drafter for preset 'tiny-analysis': 'no-such-drafter'. Choose one of: text-only, text-only+tree, "
        f"image-aware, image-aware+tree, prompt-lookup, staged, {BOTH}."
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"gamma": 0}, "gamma (drafts per round) must be a whole number from 1 to 10; got 0."),
        ({"n": 0}, "N examples must be a whole number from 1 to 32; got 0."),
        ({"n": 2.5}, "N examples must be a whole number from 1 to 32; got 2.5."),
        (
            {"seed": 2**70},
            "example set (seed) must be a whole number from 0 to 4294967295; got 1180591620717411303424.",
        ),
        ({"task": "poetry"}, "Unknown task: 'poetry'."),
        ({"preset": "nope"}, "Unknown model preset: 'nope'."),
    ],
)
def test_analysis_settings_are_checked_as_on_race_naming_the_parameter(served, change, message):
    values = {"preset": PRESET, "task": "caption", "drafter": BOTH, "gamma": 3, "n": 2, "seed": 0} | change
    client = soak.client(served.local_url)
    with pytest.raises(AppError) as refused:
        client.predict(*values.values(), api_name="/analysis")
    assert str(refused.value).startswith(message)


# --- languages --------------------------------------------------------------------------------

ENGLISH_RUN_COLUMNS = [
    "#",
    "task",
    "drafter",
    "question",
    "answer",
    "τ",
    "α: accepted / drafted (95%)",
    "rejected",
    "on grounded words",
    "correct",
]


def speaking(monkeypatch, *languages):
    """The shipped world made to speak `languages`, as `presets.world_languages` says."""
    monkeypatch.setattr(presets, "world_languages", lambda directory=presets.ASSETS: languages)


def component(demo: gr.Blocks, elem_id: str):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def last(outputs):
    *_, final = outputs
    return final


def test_the_language_control_offers_the_worlds_languages_and_all_of_them(monkeypatch):
    speaking(monkeypatch, "en", "de", "zh")
    demo = analysis_page.build_standalone(presets.DEFAULT_PRESET)
    language = component(demo, "an-language")
    assert language.visible and language.value == "en"
    assert language.choices == [("English", "en"), ("German", "de"), ("Chinese", "zh"), ("all languages", "all")]
    assert component(demo, "an-runs").value["headers"] == ENGLISH_RUN_COLUMNS + ["language"]


def test_an_english_only_world_hides_the_language_control_and_keeps_the_tables(monkeypatch):
    speaking(monkeypatch, "en")
    demo = analysis_page.build_standalone(presets.DEFAULT_PRESET)
    language = component(demo, "an-language")
    assert not language.visible and language.value == "en" and language.choices == [("English", "en")]
    assert component(demo, "an-runs").value["headers"] == ENGLISH_RUN_COLUMNS
    assert not component(demo, "an-languages").visible


@pytest.mark.parametrize(
    "spoken, language, message",
    [
        (("en", "de", "zh"), "fr", "Unknown language: 'fr'. Choose one of: en, de, zh, all."),
        (("en", "de", "zh"), None, "Unknown language: None. Choose one of: en, de, zh, all."),
        (("en",), "de", "Unknown language: 'de'. Choose one of: en."),
        (("en",), "all", "Unknown language: 'all'. Choose one of: en."),
    ],
)
def test_a_language_the_world_does_not_speak_is_refused_naming_the_choices(
    monkeypatch, served, spoken, language, message
):
    speaking(monkeypatch, *spoken)
    with pytest.raises(validate.InvalidInput) as refused:
        batches.parse_analysis(preset=PRESET, task="caption", drafter=BOTH, gamma=3, n=2, seed=0, language=language)
    assert str(refused.value) == message


def test_the_language_chosen_picks_the_languages_asked(monkeypatch, served):
    speaking(monkeypatch, "en", "de", "zh")
    settings = {"preset": PRESET, "task": "caption", "drafter": "text-only", "gamma": 3, "n": 2, "seed": 0}
    assert batches.parse_analysis(**settings, language="de").languages == ("de",)
    assert batches.parse_analysis(**settings, language="all").languages == ("en", "de", "zh")
    assert batches.parse_analysis(**settings).languages == ("en",)  # as before


def test_the_endpoint_refuses_an_unknown_language_as_it_does_other_settings(monkeypatch, served):
    speaking(monkeypatch, "en", "de", "zh")
    client = soak.client(served.local_url)
    with pytest.raises(AppError) as refused:
        client.predict(PRESET, "caption", BOTH, 3, 2, 0, "fr", api_name="/analysis")
    assert str(refused.value).startswith("Unknown language: 'fr'. Choose one of: en, de, zh, all.")


@pytest.mark.slow
def test_a_batch_in_two_languages_is_broken_down_per_language_and_drafter(monkeypatch, served):
    speaking(monkeypatch, "en", "de")
    outputs = last(analysis_tab.analyze(PRESET, "caption", BOTH, 3, 4, 0, "all"))
    status, headline, runs_table, batch = outputs["status"], outputs["headline"], outputs["runs"], outputs["batch"]
    languages_table = outputs["by_language"]
    assert "Done: 4 examples × 2 drafters" in status
    # each caption asked in English, then German, on the same scene; both drafters on each
    assert [(r.number, r.example, r.language, r.drafter) for r in batch.runs] == [
        (1, 0, "en", "text-only"),
        (2, 0, "en", "image-aware"),
        (3, 1, "de", "text-only"),
        (4, 1, "de", "image-aware"),
        (5, 2, "en", "text-only"),
        (6, 2, "en", "image-aware"),
        (7, 3, "de", "text-only"),
        (8, 3, "de", "image-aware"),
    ]
    assert batch.runs[0].item.scene == batch.runs[2].item.scene and batch.runs[4].item.scene == batch.runs[6].item.scene
    assert [r.item.language for r in batch.runs] == [r.language for r in batch.runs]
    assert [row[-1] for row in runs_table.values.tolist()] == ["English"] * 2 + ["German"] * 2 + ["English"] * 2 + [
        "German"
    ] * 2
    # the German runs' words are German words, categorised in German
    german = [o for r in batch.runs if r.language == "de" for o in r.obs]
    assert all(o.category == rejections.category(o.word, o.category == "end", language="de") for o in german if o.word)
    # one row per language and drafter, each pooled over its two runs from the runs' own events
    expected, pairs = [], []
    for language, name in (("en", "English"), ("de", "German")):
        for drafter in ("text-only", "image-aware"):
            runs = [r for r in batch.runs if r.language == language and r.drafter == drafter]
            rounds = [x for r in runs for x in r.trace.rounds]
            tau = sum(x.n_emitted for x in rounds) / len(rounds)
            alpha = view_rate(sum(x.n_accepted for x in rounds), sum(len(x.drafted_ids) for x in rounds))
            grounded = [o for r in runs for o in r.obs if rejections.is_grounded(o.category)]
            accepted = view_rate(sum(o.accepted for o in grounded), len(grounded))
            correct = view_rate(sum(r.correct for r in runs), 2)
            pairs.append((language, drafter, 2))
            expected.append(
                [
                    name,
                    drafter,
                    2,
                    round(tau, 2),
                    alpha,
                    correct,
                    accepted,
                ]
            )
            line = f"<p><b>{name}</b>, {drafter} drafter: τ = {tau:.2f}, α = {alpha}, {correct} answers correct, "
            assert line in headline
    rows = languages_table.value["data"]
    assert [[None if isinstance(v, float) and math.isnan(v) else v for v in row] for row in rows] == expected
    assert languages_table.visible
    exported = analysis_tab.record(batch)
    assert [(b["language"], b["drafter"], b["runs"]) for b in exported["by_language"]] == pairs
    assert [r["language"] for r in exported["runs"]] == ["en", "en", "de", "de", "en", "en", "de", "de"]
    observations = list(csv.DictReader(io.StringIO(analysis_tab.observations_csv(batch))))
    assert {o["language"] for o in observations if o["run"] in ("3", "4", "7", "8")} == {"de"}


@pytest.mark.slow
def test_a_stopped_analysis_ends_on_its_own_update_keeping_the_runs_that_finished(monkeypatch, served):
    speaking(monkeypatch, "en")
    page = SimpleNamespace(session_hash="analysing page")
    analysis = analysis_tab.analyze(PRESET, "caption", "text-only", 3, 4, 0, "en", page=page)
    updates = []
    for update in analysis:
        updates.append(update)
        if "example 3/4" in update["status"]:  # two runs finished, the third announced
            answer = analysis_tab.stop_analysis(page)
    assert not answer.interactive and answer.value == "Stopping…"  # the Stop's own answer: Stop off, no more
    final = updates[-1]  # the page gets the analysis's updates in order: this one comes last
    status, runs_table, batch, go, stop = (final[name] for name in ("status", "runs", "batch", "go", "stop"))
    assert "Stopped after 3 runs" in status and len(batch.runs) == 3 == len(runs_table)  # the run at hand ends
    assert go.interactive and not stop.visible and stop.value == "Stop"  # Run on; Stop hidden, ready for the next
    assert final["csv_file"].interactive and final["json_file"].interactive  # what finished can be downloaded
    assert not any("Done:" in update["status"] for update in updates)


@pytest.mark.slow
def test_an_english_batch_shows_no_language_breakdown(monkeypatch, served):
    speaking(monkeypatch, "en")
    outputs = last(analysis_tab.analyze(PRESET, "caption", "text-only", 3, 1, 0, "en"))
    headline, runs_table, batch = outputs["headline"], outputs["runs"], outputs["batch"]
    languages_table = outputs["by_language"]
    assert list(runs_table.columns) == ENGLISH_RUN_COLUMNS
    assert not languages_table.visible
    assert "English" not in headline and "answers correct" not in headline
    assert headline == analysis_tab.headline_html(batch, analysis_tab.summaries(batch))
    assert [r.language for r in batch.runs] == ["en"]


# --- the tab in a browser ---------------------------------------------------------------------


# The tables' header cells whose text does not fit (Gradio clips it: "on groun…").
CUT_HEADERS = """() => [...document.querySelectorAll('#an-runs thead th, #an-words thead th')]
  .filter(th => [th, ...th.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1))
  .map(th => th.innerText.trim())"""
# The charts' count labels shown that overlap or touch another ("0/3 0/3" drawn on each other, "0/20/2").
OVERLAPPING_COUNTS = """() => {
  const boxes = [...document.querySelectorAll('#an-chart-category text.bartext, #an-chart-position .textpoint text')]
    .filter(t => t.textContent && getComputedStyle(t).display !== 'none' && t.getBoundingClientRect().width > 0)
    .map(t => [t.textContent, t.getBoundingClientRect()]);
  const apart = (a, b) => a.right + 2 <= b.left || b.right + 2 <= a.left || a.bottom <= b.top || b.bottom <= a.top;
  return boxes.flatMap(([s, a], i) => boxes.slice(i + 1).filter(([, b]) => !apart(a, b)).map(([t]) => s + ' ' + t));
}"""


@pytest.mark.slow
def test_the_tab_in_chromium_runs_shows_a_trace_and_races_it_on_the_race_tab(served, chromium):
    # the worker's one Chromium (tests/browser_app.py): a second Playwright in one process fails
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    page.goto(served.local_url)
    page.get_by_role("tab", name="Analysis").click()
    gamma_label = page.locator("#an-gamma label, #an-gamma [data-testid='block-info']").first
    assert gamma_label.bounding_box()["height"] < 40  # one line (27.6 px); "γ: drafts per round" took 47 to 66
    page.click("#an-drafter input")
    page.get_by_role("option", name="image-aware", exact=True).click()  # compared with text-only, already picked
    page.locator("#an-n input[type=number]").fill("2")
    page.locator("#an-n input[type=number]").press("Enter")
    page.click("#an-run")
    page.wait_for_function("document.querySelector('#an-status').innerText.startsWith('Done')", timeout=60_000)
    assert page.locator("#an-chart-category .js-plotly-plot").count() == 1
    page.screenshot(path=str(SHOTS / "analysis-tab.png"), full_page=True)
    for width in (420, 1400):  # at a phone's width and a desktop's: every header whole, no two counts on each other
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(600)  # plotly redraws at the new width
        assert page.evaluate(CUT_HEADERS) == [], width
        assert page.evaluate(OVERLAPPING_COUNTS) == [], width
    page.click("#an-runs [data-testid='cell-1-1']")  # the second run: the image-aware drafter
    page.wait_for_selector("#an-trace-view .tok")
    assert "image-aware drafter" in page.locator("#an-trace-view").inner_text()
    page.screenshot(path=str(SHOTS / "analysis-trace.png"), full_page=True)
    page.click("#an-to-race")
    page.wait_for_function("(document.querySelector('#raced') || {}).innerText?.startsWith('Raced')")
    raced = page.locator("#raced").inner_text()
    assert "with tiny-analysis/image-aware, γ = 4, greedy, 8 tokens, adaptive off, image given" in raced
    page.close()


def test_analysis_headline_bins_rejections_by_image_attention_and_links_the_most_image_dependent():
    from demo.engine.grounding import ImageAttention

    def read(trace, shares: dict[int, float], rest: float):
        image = tuple(shares.get(t.index, rest) for t in trace.tokens)
        n = len(image)
        trace.image_attention = ImageAttention((1,), 1, 1, image, (0.0,) * n, (0.0,) * n, tuple((s,) for s in image))
        return trace

    batch = Batch(PRESET, "caption", ["text-only", "image-aware"], gamma=3, n=1, seed=0, max_new_tokens=16)
    traces = [
        ("text-only", read(shapes_trace(), {1: 0.8, 3: 0.6, 8: 0.5, 10: 0.1}, 0.05)),  # rejected at 1, 3, 8, 10
        ("image-aware", read(yes_trace(), {2: 0.7}, 0.1)),  # rejected at 2
    ]
    for number, (drafter, trace) in enumerate(traces, 1):
        batch.runs.append(Run(number, 0, item(), drafter, trace, rejections.observations(trace, 0, STOPS), True))
    text = analysis_tab.headline_html(batch, analysis_tab.summaries(batch))
    assert (
        "<b>Drafts at positions where the target put more than 35% of its attention on the image were rejected "
        "7.0x as often as elsewhere (text-only: 3 such drafts) / 100% of the time, and never elsewhere "
        "(image-aware: 1 such draft).</b>"
    ) in text
    # text-only: 0-10%: 6 accepted; 10-20%: the "." rejected; 20-30%, 30-50%: none; 50-100%: 3 of 3
    assert (
        '<tr><th>text-only</th><td>0% <span class="n">(0/6; 95% 0%–39%)</span></td><td>100% <span class="n">(1/1; 95% 21%–100%)</span></td>'
        '<td>–</td><td>–</td><td>100% <span class="n">(3/3; 95% 44%–100%)</span></td></tr>'
    ) in text
    links = [line.split('data-run="')[1][0] for line in text.split("<li>")[1:]]
    assert links == ["1", "2", "1", "1", "1"]  # 80%, 70%, 60%, 50%, 10%
    assert "position 1: the target wrote <b>&#x27; red&#x27;</b>, the drafter &#x27; blue&#x27; (colour)" in text
    assert 'data-run="1">run 1 (text-only)</a> at position 1: the target wrote' in text  # no " , " after the link
    rows = list(csv.DictReader(io.StringIO(analysis_tab.observations_csv(batch))))
    assert [float(r["image_attention"]) for r in rows[:3]] == [0.8, 0.05, 0.6]


def test_the_headline_says_but_only_where_the_shares_differ_as_shown():
    from types import SimpleNamespace

    from demo.page.analysis import view as analysis_view

    run = SimpleNamespace(
        example=0, language="en", obs=[], drafter="text-only", trace=SimpleNamespace(image_attention=None)
    )
    batch = SimpleNamespace(runs=[run], gamma=4, drafters=["text-only"], decoding="greedy", compared=lambda: [run])

    def sentence(drafted_share: float, rejected_share: float) -> str:
        grounded = {
            "drafted": 100,
            "rejected": 10,
            "grounded_drafted": 19,
            "grounded_rejected": round(rejected_share * 10),
            "grounded_share_of_drafted": drafted_share,
            "grounded_share_of_rejections": rejected_share,
            "grounded_rejection_rate": 0.1,
            "other_rejection_rate": 0.1,
        }
        return analysis_view.headline_html(batch, {"text-only": {"grounded": grounded}})

    assert "of drafted positions and 20% (2/10; 95% 6%–51%) of rejections" in sentence(0.189, 0.191)
    assert "of drafted positions but 40% (4/10; 95% 17%–69%) of rejections" in sentence(0.19, 0.40)
