"""The app launched in-process and driven through gradio_client, on tiny random models saved to
disk and loaded through the real preset path; plus the pure export functions."""

import csv
import importlib
import inspect
import io
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import tiny
from gradio_client import handle_file
from gradio_client.exceptions import AppError
from test_render import ar_trace, spd_trace

from demo import session
from demo.engine import export, metrics
from demo.engine.events import RoundEvent, Trace
from demo.lab.bench import soak
from demo.models import loader
from demo.page import handlers, layout, server
from demo.session import form

TINY = "tiny"
QUESTION = "Describe the image."


def write_examples(folder: Path) -> None:
    """Two tiny images and an examples.json as demo.world.gallery writes it."""
    folder.mkdir()
    rows = []
    for i, (image, question) in enumerate(zip(tiny.images(2), tiny.QUESTIONS[:2], strict=True)):
        image.save(folder / f"{i}.png")
        rows.append({"image": f"{i}.png", "question": question, "answer": "A reference.", "task": f"task_{i}"})
    (folder / "examples.json").write_text(json.dumps(rows))


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-world")
    tiny.save_preset(root, TINY)  # saved to disk, loaded through the real preset path
    write_examples(root / "examples")
    yield root
    loader.PRESETS.pop(TINY, None)


@pytest.fixture(scope="module")
def client(tiny_world):
    demo = server.build_demo(default_preset=TINY, examples_dir=tiny_world / "examples")
    server.launch(demo, warm=None, prevent_thread_lock=True, quiet=True)
    yield soak.client(demo.local_url, download_files=str(tiny_world / "downloads"))
    demo.close()


def trace_args(tiny_world, **change):
    """/trace's arguments in order: the second example image, then the request's fields up to
    max_new_tokens (`form.FIELDS`): parse's defaults for the tiny preset's text-only drafter on
    QUESTION for 24 tokens, with `change`."""
    values = session.DEFAULTS | dict(question=QUESTION, preset=TINY, drafter="text-only", max_new_tokens=24) | change
    image = handle_file(str(tiny_world / "examples" / "1.png"))
    return (image, *(values[name] for name in form.FIELDS[: form.FIELDS.index("max_new_tokens") + 1]))


@pytest.mark.parametrize("drafter", ["text-only", "image-aware"])
def test_greedy_race_gives_identical_texts_for_both_runs(client, tiny_world, drafter):
    result = client.predict(*trace_args(tiny_world, drafter=drafter), api_name="/trace")
    spd, ar = result["runs"]["speculative"]["trace"], result["runs"]["autoregressive"]["trace"]
    assert spd["summary"]["token_ids"] == ar["summary"]["token_ids"]
    assert spd["summary"]["text"] == ar["summary"]["text"]
    assert "".join(t["text"] for t in spd["tokens"]) == spd["summary"]["text"]
    assert result["comparison"]["identical"] is True
    assert result["settings"]["drafter"] == drafter


def test_trace_token_kinds_and_counts_agree_with_its_metrics(client, tiny_world):
    result = client.predict(*trace_args(tiny_world, gamma=3, max_new_tokens=40), api_name="/trace")
    run = result["runs"]["speculative"]
    tokens, rounds, numbers = run["trace"]["tokens"], run["trace"]["rounds"], run["metrics"]
    kinds = [t["kind"] for t in tokens]
    assert kinds[0] == "target" and "target" not in kinds[1:-1]
    assert numbers["tokens"] == len(tokens) == len(run["trace"]["summary"]["token_ids"])
    assert numbers["accepted"] == kinds.count("accepted") == sum(r["n_accepted"] for r in rounds)
    assert numbers["resampled"] == kinds.count("resampled")
    assert numbers["bonus"] == kinds.count("bonus")
    assert numbers["target_forwards"] == len(rounds) == run["trace"]["summary"]["target_forwards"]
    assert numbers["tau"] == pytest.approx((len(tokens) - 1) / len(rounds))
    assert numbers["drafted"] == sum(len(r["drafted_ids"]) for r in rounds)
    assert numbers["alpha"] == pytest.approx(numbers["accepted"] / numbers["drafted"])
    assert sum(numbers["accept_length_histogram"]) == len(rounds)
    for r in rounds:  # each round's tokens are its accepted drafts, then the target's own token
        own = [t["kind"] for t in tokens if t["round"] == r["index"]]
        assert own[: r["n_accepted"]] == ["accepted"] * min(r["n_accepted"], r["n_emitted"])
        assert len(own) == r["n_emitted"]
    ar = result["runs"]["autoregressive"]
    assert {t["kind"] for t in ar["trace"]["tokens"]} == {"target"}
    assert ar["metrics"]["tau"] == 1.0


def test_trace_gives_the_gamma_sweep_exact_at_the_race_gamma_and_none_for_sampling(client, tiny_world):
    result = client.predict(*trace_args(tiny_world, gamma=3, max_new_tokens=40), api_name="/trace")
    sweep = result["gamma_sweep"]
    assert [row["gamma"] for row in sweep] == list(range(1, 11))
    assert all(set(row) == {"gamma", "tau", "alpha", "mbsu", "scaled_speedup", "predicted_speedup"} for row in sweep)
    spd = result["runs"]["speculative"]["metrics"]
    assert sweep[2]["tau"] == spd["tau"] and sweep[2]["alpha"] == spd["alpha"]  # exactly: the race's rounds
    assert sweep[2]["mbsu"] == pytest.approx(spd["mbsu_made"])
    assert all(row["predicted_speedup"] > 0 for row in sweep)
    sampled = client.predict(*trace_args(tiny_world, greedy=False, seed=7), api_name="/trace")
    assert sampled["gamma_sweep"] == []
    assert sampled["strategies"] == []  # as the sweep: verdicts drawn at random are not read off one answer


def test_trace_gives_every_strategy_of_the_preset_at_the_race_gamma_its_own_exactly(client, tiny_world):
    result = client.predict(*trace_args(tiny_world, gamma=3, max_new_tokens=40), api_name="/trace")
    table = result["strategies"]
    assert [row["strategy"] for row in table] == list(loader.PRESETS[TINY].drafter_names())
    assert all(row["gamma"] == 3 and row["left_out"] is None for row in table)
    [own] = [row for row in table if row["raced"]]
    spd = result["runs"]["speculative"]["metrics"]
    assert own["strategy"] == result["settings"]["drafter"]
    assert own["tau"] == spd["tau"] and own["alpha"] == spd["alpha"] and own["c"] == spd["c"]


def test_sampled_races_repeat_exactly_for_a_seed(client, tiny_world):
    first = client.predict(*trace_args(tiny_world, greedy=False, seed=7), api_name="/trace")
    again = client.predict(*trace_args(tiny_world, greedy=False, seed=7), api_name="/trace")
    for run in ("speculative", "autoregressive"):
        assert (
            first["runs"][run]["trace"]["summary"]["token_ids"] == again["runs"][run]["trace"]["summary"]["token_ids"]
        )
    assert first["settings"]["sampling"] == {"greedy": False, "temperature": 0.8, "top_k": 0, "top_p": 0.95, "seed": 7}


def test_smallest_budget_gives_one_token_from_the_prefill(client, tiny_world):
    result = client.predict(*trace_args(tiny_world, gamma=10, max_new_tokens=1), api_name="/trace")
    for run in ("speculative", "autoregressive"):
        assert [t["kind"] for t in result["runs"][run]["trace"]["tokens"]] == ["target"]
        assert result["runs"][run]["trace"]["rounds"] == []


@pytest.mark.parametrize(
    "change, message",
    [
        ({"question": "  "}, "Ask a question about the image first."),
        ({"preset": "nope"}, "Unknown model preset: 'nope'. Choose one of: embedded, "),
        (
            {"drafter": "nope"},
            "Unknown drafter for preset 'tiny': 'nope'. Choose one of: text-only, text-only+tree, image-aware, "
            "image-aware+tree, prompt-lookup, staged.",
        ),
        ({"gamma": 50}, "gamma (drafts per round) must be a whole number from 1 to 10; got 50."),
        ({"max_new_tokens": 0}, "max new tokens must be a whole number from 1 to 512; got 0."),
        ({"greedy": False, "temperature": 0}, "temperature must be a number in [0.01, 5]; got 0."),
        ({"greedy": False, "top_p": 1.01}, "top-p must be a number in (0, 1]; got 1.01."),
        ({"greedy": False, "seed": None}, "seed must be a whole number from 0 to 4294967295; got None."),
    ],
)
def test_invalid_requests_get_a_message_not_a_traceback(client, tiny_world, change, message):
    with pytest.raises(AppError) as refused:
        client.predict(*trace_args(tiny_world, **change), api_name="/trace")
    assert str(refused.value).startswith(message)


def test_a_preset_without_weights_is_reported_in_the_page(client, tiny_world):
    loader.PRESETS["missing"] = loader.Preset(
        "missing", str(tiny_world / "nowhere"), (loader.DrafterSpec("d", "text-only", "x"),)
    )
    image = handle_file(str(tiny_world / "examples" / "0.png"))
    try:
        job = client.submit(image, QUESTION, "missing", "d", 4, True, 0.8, 0.95, 0, 8, api_name="/race")
        with pytest.raises(AppError, match="Model files missing: "):
            job.result()
        outcome = job.outputs()[-1][4]
    finally:
        del loader.PRESETS["missing"]
    assert "error-box" in outcome and "Model files missing: " in outcome


def shown_outputs() -> list[str]:
    """The /race outputs an API caller gets, in order: all but the buttons and the State."""
    return [name for name in handlers.OUTPUTS if name not in ("run", "replay", "stop", "last")]


def test_trace_races_a_second_drafter_when_asked_and_returns_every_lane(client, tiny_world):
    args = trace_args(tiny_world, drafter="text-only", gamma=3, max_new_tokens=24)
    result = client.predict(*args, 0.0, "image-aware", api_name="/trace")
    assert list(result["runs"]) == ["speculative", "speculative-2", "autoregressive"]
    assert result["settings"]["lanes"] == {
        "speculative": "text-only",
        "speculative-2": "image-aware",
        "autoregressive": None,
    }
    ar = result["runs"]["autoregressive"]["trace"]["summary"]["token_ids"]
    for lane in ("speculative", "speculative-2"):
        assert result["runs"][lane]["trace"]["summary"]["token_ids"] == ar  # greedy: every lane lossless
        assert result["comparisons"][lane]["identical"] is True
    alone = client.predict(
        *trace_args(tiny_world, drafter="image-aware", gamma=3, max_new_tokens=24), api_name="/trace"
    )
    rounds = [(r["drafted_ids"], r["n_accepted"]) for r in alone["runs"]["speculative"]["trace"]["rounds"]]
    assert [(r["drafted_ids"], r["n_accepted"]) for r in result["runs"]["speculative-2"]["trace"]["rounds"]] == rounds
    assert result["gamma_sweep"][2]["tau"] == result["runs"]["speculative"]["metrics"]["tau"]  # the first lane's
    with pytest.raises(AppError, match="^The two speculative lanes would both draft with 'text-only'"):
        client.predict(*args, 0.0, "text-only", api_name="/trace")


def test_race_endpoint_with_two_drafters_fills_the_third_panel_and_overlays_the_lanes(client, tiny_world):
    image = handle_file(str(tiny_world / "examples" / "0.png"))
    args = (image, QUESTION, TINY, "text-only", 3, True, 0.8, 0.95, 0, 24, 0.5, "image-aware", False)
    page = dict(zip(shown_outputs(), client.predict(*args, api_name="/race"), strict=True))
    assert (
        "Speculative, second lane · image-aware" in page["spd2_panel"] and 'data-blocks="blocks2"' in page["spd2_panel"]
    )
    assert page["spd2_panel"].count('class="tok tok-') == page["ar_panel"].count('class="tok tok-') > 1
    assert "wall-clock speedup" in page["spd2_stats"] and '<summary class="round">' in page["blocks2"]
    assert "text-only: lossless ✓" in page["outcome"] and "image-aware: lossless ✓" in page["outcome"]
    race = json.loads(page["race_chart"]["plot"])["data"]
    assert [line["name"] for line in race] == ["SPD text-only", "SPD image-aware", "autoregressive"]
    assert len(json.loads(page["tau_chart"]["plot"])["data"]) == 2
    assert "the first speculative lane" in page["how_round"]
    assert "(the first speculative lane: text-only)" in page["sweep_note"]
    rows = list(csv.DictReader(io.StringIO(Path(page["csv_file"]["value"]).read_text())))
    assert {r["run"] for r in rows} == {"speculative", "speculative-2", "autoregressive"}
    one = dict(zip(shown_outputs(), client.predict(*args[:-2], api_name="/race"), strict=True))  # one drafter
    assert "tok tok-" not in one["spd2_panel"]  # one speculative lane: the third panel is empty
    assert "lossless ✓ identical outputs" in one["outcome"] and "text-only: lossless" not in one["outcome"]


def test_race_endpoint_streams_the_panels_then_offers_the_downloads(client, tiny_world):
    image = handle_file(str(tiny_world / "examples" / "0.png"))
    job = client.submit(image, QUESTION, TINY, "image-aware", 3, True, 0.8, 0.95, 0, 48, api_name="/race")
    final = job.result()
    updates = job.outputs()
    assert len(updates) >= 3  # the empty start, at least one partial redraw, the final state
    page = dict(zip(shown_outputs(), final, strict=True))
    spd_panel, ar_panel, outcome, blocks = page["spd_panel"], page["ar_panel"], page["outcome"], page["blocks"]
    assert spd_panel.count('class="tok tok-') == ar_panel.count('class="tok tok-') > 1
    assert "lossless ✓ identical outputs" in outcome
    assert blocks.count('<summary class="round">') >= 1 and 'class="inspector"' in blocks
    assert "wall-clock speedup" in page["spd_stats"] and "decode tokens/s" in page["ar_stats"]
    assert "Round " in page["how_round"] and "of this race" in page["how_round"]
    for chart in ("race_chart", "tau_chart", "hist_chart", "pos_chart", "time_chart", "sweep_chart"):
        assert json.loads(page[chart]["plot"])["data"], chart
    assert "Rule of thumb for this prompt" in page["sweep_note"]
    offered = loader.PRESETS[TINY].drafter_names()
    shown = [name.replace("+", "<wbr>+") for name in offered]  # a name may break before "+tree"
    assert all(f'<th scope="row">{name}' in page["strategies"] for name in shown)
    assert (
        page["strategies"].count("(this race)") == 1
        and '<tr class="raced"><th scope="row">image-aware' in page["strategies"]
    )
    json_button, csv_button = page["json_file"], page["csv_file"]  # updates: the file and interactive=True
    assert json_button["interactive"] and csv_button["interactive"]
    record = json.loads(Path(json_button["value"]).read_text())
    rows = list(csv.DictReader(io.StringIO(Path(csv_button["value"]).read_text())))
    assert [row["strategy"] for row in record["strategies"]] == list(offered)  # the table, in the download too
    assert record["comparison"]["identical"] is True
    for run in ("speculative", "autoregressive"):
        tokens = record["runs"][run]["trace"]["tokens"]
        assert [r["text"] for r in rows if r["run"] == run] == [t["text"] for t in tokens]
        assert [r["kind"] for r in rows if r["run"] == run] == [t["kind"] for t in tokens]


def test_importing_the_app_loads_no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded at import time")

    monkeypatch.setattr(loader, "load", refuse)
    monkeypatch.delitem(sys.modules, "app", raising=False)
    app = importlib.import_module("app")
    assert app.demo.fns  # the page was built


def events_in_race_order(traces: dict[str, Trace]) -> list:
    """(lane, event) pairs of finished traces, in the order of their clocks (as race() gives them)."""
    pairs = []
    for lane, trace in traces.items():
        body = sorted(trace.tokens + trace.rounds, key=lambda e: (e.t, isinstance(e, RoundEvent)))
        pairs += [(lane, e) for e in [trace.start, trace.prefill, *body, trace.summary]]
    return sorted(pairs, key=lambda pair: pair[1].t)


def test_launch_warms_up_after_a_delay_when_no_page_loads(monkeypatch, tiny_world):
    warmed = []
    monkeypatch.setattr(session, "warm_up", warmed.append)
    monkeypatch.setattr(server, "WARM_UP_AFTER_S", 0.3)
    demo = server.build_demo(default_preset=TINY, examples_dir=tiny_world / "examples")
    server.launch(demo, warm=TINY, prevent_thread_lock=True, quiet=True)
    try:
        deadline = time.perf_counter() + 10
        while not warmed and time.perf_counter() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        assert warmed == [TINY]  # once, with no page ever loaded
    finally:
        demo.close()


def test_replay_shows_the_measured_race_slowed_by_the_speed_chosen():
    traces = {"speculative": spd_trace(), "autoregressive": ar_trace()}
    started = time.perf_counter()
    updates = list(handlers.replay_race(((), events_in_race_order(traces)), "⅛×"))
    elapsed = time.perf_counter() - started
    assert elapsed >= 8 * 0.11  # never faster than the slowdown it states (its pacing: test_session)
    first, final = updates[0], updates[-1]
    assert first["run"].interactive is False and final["run"].interactive is True  # Run waits for the replay
    spd_panel, outcome = final["spd_panel"], final["outcome"]
    assert spd_panel.count('class="tok tok-') == 8 and "0.110 s compute" in spd_panel
    assert "Replay: the measured race shown 8× slower than it ran." in outcome
    assert "lossless" not in outcome and "outputs differ from token 3 on" in outcome


def test_a_stopped_replay_ends_on_its_own_stopped_update():
    traces = {"speculative": spd_trace(), "autoregressive": ar_trace()}
    page = SimpleNamespace(session_hash="replaying page")
    replay = handlers.replay_race(((), events_in_race_order(traces)), "⅛×", page=page)
    updates = [next(replay), next(replay)]  # the empty view, then the first token
    answer = handlers.stop_race(page)
    updates += list(replay)
    assert set(answer) == {"stop"} and not answer["stop"].interactive  # the Stop's own answer: Stop off, no more
    final = updates[-1]  # the page gets the replay's updates in order: this one comes last
    assert "Stopped." in final["outcome"] and final["run"].interactive and not final["stop"].interactive
    assert "· stopped" in final["spd_panel"] and final["spd_panel"].count('class="tok tok-') < 8


def test_replay_shows_every_lane_of_a_two_drafter_race():
    traces = {
        "speculative": spd_trace(),
        "speculative-2": spd_trace(drafter="image-aware"),
        "autoregressive": ar_trace(),
    }
    final = list(handlers.replay_race(((), events_in_race_order(traces))))[-1]
    assert final["spd2_panel"].count('class="tok tok-') == final["spd_panel"].count('class="tok tok-') == 8
    assert "image-aware: ✗ outputs differ from token 3 on" in final["outcome"]


def test_examples_are_read_from_the_examples_folder(tiny_world, tmp_path):
    examples = layout.load_examples(tiny_world / "examples")
    assert [(Path(e.image).name, e.task) for e in examples] == [("0.png", "task_0"), ("1.png", "task_1")]
    assert layout.load_examples(tmp_path) == []


# --- exports, pure ----------------------------------------------------------------------------


def test_json_export_holds_settings_traces_metrics_and_comparison():
    traces = {"speculative": spd_trace(), "autoregressive": ar_trace()}
    record = json.loads(export.to_json(export.payload({"gamma": 3}, traces)))
    assert record["settings"] == {"gamma": 3}
    assert record["runs"]["speculative"]["trace"]["summary"]["token_ids"] == [10, 11, 13, 15, 16, 17, 18, 2]
    assert record["runs"]["speculative"]["metrics"]["tau"] == pytest.approx(7 / 3)
    assert record["runs"]["autoregressive"]["metrics"]["tau"] == 1.0
    assert record["comparison"]["identical"] is False
    assert record["comparison"]["first_difference"] == 3
    assert record["comparison"]["speedup"] == pytest.approx(
        metrics.speedup(traces["speculative"], traces["autoregressive"])
    )


def test_json_export_of_unfinished_runs_is_strict_json_without_a_comparison():
    record = export.payload({}, {"speculative": Trace(), "autoregressive": Trace()})
    text = export.to_json(record)  # allow_nan=False: NaN metrics must have become null
    assert json.loads(text)["runs"]["speculative"]["metrics"]["tau"] is None
    assert "comparison" not in record


def test_csv_export_has_one_row_per_token_with_its_details():
    traces = {"speculative": spd_trace(), "autoregressive": ar_trace()}
    rows = list(csv.DictReader(io.StringIO(export.tokens_csv(traces))))
    assert len(rows) == 8 + 3
    resampled = rows[2]
    assert resampled == {
        "run": "speculative",
        "index": "2",
        "token_id": "13",
        "text": " square",
        "kind": "resampled",
        "round": "1",
        "p": "0.7",
        "q": "",
        "accept_prob": "",
        "rejected_id": "12",
        "rejected_text": " circle",
        "rejected_p": "0.05",
        "rejected_q": "0.9",
        "rejected_accept_prob": "0.0556",
        "t": "0.06",
        "drafter": "text-only",
        "image_attention": "",  # not read for these traces
    }
    assert rows[6]["text"] == "<b>&" and rows[5]["text"] == "\n"
    assert [r["kind"] for r in rows[8:]] == ["target"] * 3 and {r["drafter"] for r in rows[8:]} == {""}


def test_exports_hold_every_lane_and_compare_each_speculative_lane_with_the_target():
    second = spd_trace(drafter="image-aware")
    traces = {"speculative": spd_trace(), "speculative-2": second, "autoregressive": ar_trace()}
    record = json.loads(export.to_json(export.payload({"lanes": {}}, traces)))
    assert list(record["runs"]) == ["speculative", "speculative-2", "autoregressive"]
    assert record["runs"]["speculative-2"]["metrics"]["tau"] == pytest.approx(7 / 3)
    assert list(record["comparisons"]) == ["speculative", "speculative-2"]
    assert record["comparisons"]["speculative"] == record["comparison"]  # the first lane's, where it always was
    assert record["comparisons"]["speculative-2"]["first_difference"] == 3
    rows = list(csv.DictReader(io.StringIO(export.tokens_csv(traces))))
    assert [(r["run"], r["drafter"]) for r in rows[7:10]] == [
        ("speculative", "text-only"),
        ("speculative-2", "image-aware"),
        ("speculative-2", "image-aware"),
    ]
    assert len(rows) == 8 + 8 + 3


def test_comparison_finds_where_outputs_part_ways():
    same = export.comparison(ar_trace(), ar_trace())
    assert same["identical"] is True and same["first_difference"] is None and same["speedup"] == pytest.approx(1.0)
    shorter = export.comparison(ar_trace(), ar_trace(ids=(10, 11), texts=("The", " red")))
    assert shorter["identical"] is False and shorter["first_difference"] == 2


def test_race_and_trace_take_the_requests_fields_by_the_same_names_from_one_list(client):
    """One dialect: /trace's parameters are the image and the session's request fields, in parse's
    order; /race's are the same, then the page-only ones. A field renamed in `parse` renames both."""
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]

    def names(endpoint: str) -> list[str]:
        return [p["parameter_name"] for p in endpoints[endpoint]["parameters"]]

    assert form.FIELDS == tuple(inspect.signature(session.parse).parameters)[:-1]  # all but `known`
    assert names("/trace") == ["image", *form.FIELDS]
    assert names("/race") == ["image", *form.FIELDS, *handlers.PAGE_ONLY]
    assert handlers.PAGE_ONLY == ("adaptive",)
