"""A race as one object (`session.Race`): its events and the one RaceResult that ends them, its
traces as the one accumulator, its own budget armed at Ready, its stop, and its image processed
once per drafter however many lanes, replays, strategies and attention readings read it."""

from __future__ import annotations

import pytest
import tiny

from demo import session
from demo.engine.sampling import Sampling
from demo.models import loader
from demo.session import batches, budget, rejections
from demo.session.validate import InvalidInput

QUESTION = "Describe the image."


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """A tiny preset on disk (the real loading path) and an uploaded image."""
    root = tmp_path_factory.mktemp("race")
    tiny.save_preset(root / "preset", "tiny-race")
    uploads = root / "uploads"
    uploads.mkdir()
    tiny.images(1)[0].save(uploads / "q.png")
    yield uploads
    loader.PRESETS.pop("tiny-race", None)
    loader._LOADED.pop("tiny-race", None)


def request(**changes) -> session.Request:
    fields = dict(question=QUESTION, preset="tiny-race", drafter="image-aware", gamma=3, sampling=Sampling())
    return session.Request(**(fields | dict(max_new_tokens=16) | changes))


def test_a_race_processes_its_image_once_for_the_target_and_once_per_drafter_that_reads_it(counted, monkeypatch):
    monkeypatch.setenv(budget.BUDGET_ENV, "0")  # every strategy of the table replays
    processed = []
    inputs = loader.Loaded._inputs

    def counting(self, processor, image, question):
        processed.append("target" if processor is self.processor else "drafter")
        return inputs(self, processor, image, question)

    monkeypatch.setattr(loader.Loaded, "_inputs", counting)
    race = session.Race(request(second_drafter="text-only"), str(counted / "q.png"), counted)
    items = list(race.events())
    result = items[-1]
    assert isinstance(result, session.RaceResult) and result.ending == "finished"
    # the lanes (3), the γ sweep (10 replays), the table (every strategy of the preset) and the
    # attention pass and the ablation all read the same prompts: the target's image once, the
    # image-aware drafter's once; the ablation's blank image is the one more the target processes
    assert sorted(processed) == ["drafter", "target", "target"]
    assert len(result.rows) == 10 and [r["strategy"] for r in result.strategies] == list(
        loader.PRESETS["tiny-race"].drafter_names()
    )
    assert result.traces is race.traces and all(t.done and t.image_attention for t in race.traces.values())
    lanes = [item for item in items if isinstance(item, session.Lane)]
    assert [(lane.name, lane.event) for lane in lanes] == list(result.timeline)  # the one accumulator's order
    assert race.traces["speculative"].summary.token_ids == race.traces["autoregressive"].summary.token_ids


def test_a_race_arms_its_own_budget_at_ready_and_ends_over_budget_while_decoding(counted, monkeypatch):
    monkeypatch.setattr(budget, "limit", lambda estimate: 0.0)  # runs out as soon as it is armed
    race = session.Race(request(max_new_tokens=64), str(counted / "q.png"), counted)
    items = list(race.events())
    kinds = [type(item).__name__ for item in items]
    assert kinds[-2:] == ["Ready", "RaceResult"] and "Lane" not in kinds  # armed at Ready, over at once
    result = items[-1]
    assert result.ending == "over budget" and result.limit == 0.0 and not race.traces["speculative"].done
    assert result.said() == {"stopped": budget.OVER_BUDGET}


def test_a_budget_running_out_after_every_lane_finished_cuts_only_the_sweep(counted, monkeypatch):
    race = session.Race(request(), str(counted / "q.png"), counted)
    items = []
    for item in race.events():
        items.append(item)
        if isinstance(item, session.Sweeping):
            race.deadline.arm(0.0)  # the race's own limit runs out in its sweep
    result = items[-1]
    assert result.ending == "sweep cut" and result.rows == () and result.strategies == ()
    assert all(trace.done for trace in result.traces.values())
    assert result.said() == {"sweep_cut": budget.SWEEP_CUT}


def test_a_stop_ends_the_race_after_the_item_at_hand(counted):
    race = session.Race(request(max_new_tokens=64), str(counted / "q.png"), counted)
    items = []
    for item in race.events():
        items.append(item)
        if isinstance(item, session.Lane):
            race.stop()
    assert [type(item).__name__ for item in items][-2:] == ["Lane", "RaceResult"]
    assert items[-1].ending == "stopped" and not race.deadline.over


def analysis(n: int) -> session.Analysis:
    request = batches.parse_analysis(preset="tiny-race", task="caption", drafter="text-only", gamma=3, n=n, seed=0)
    return session.Analysis(request, rejections.heldout_mix(batches.TASK_KINDS["caption"], n, 0))


def test_an_analysis_arms_its_own_budget_as_it_starts_and_says_how_it_ended(counted, monkeypatch):
    monkeypatch.setenv(budget.BUDGET_ENV, "0")  # no limit but the one set below: a loaded machine's runs take long
    whole = analysis(2)
    steps = list(whole.events())
    assert [type(step).__name__ for step in steps] == ["Running", "Decoded"] * 2 and whole.ending == "finished"
    stopped = analysis(2)
    kept = []
    for step in stopped.events():
        kept.append(step)
        if isinstance(step, session.Decoded):
            stopped.stop()  # the run at hand is kept; the next does not start
    assert [type(step).__name__ for step in kept] == ["Running", "Decoded"] and stopped.ending == "stopped"
    monkeypatch.setattr(budget, "limit", lambda estimate: 0.0)
    over = analysis(2)
    assert list(over.events()) == [] and over.ending == "over budget" and over.deadline.seconds == 0.0


def test_an_analysis_that_cannot_fit_one_example_is_refused_before_any_work(counted, monkeypatch):
    monkeypatch.setenv(budget.BUDGET_ENV, "0.001")
    with pytest.raises(InvalidInput, match=r"^This analysis asks for 2 examples x 1 drafter (x |\(answers of up to )"):
        analysis(2)


def test_an_analysis_over_the_budget_runs_the_first_examples_that_fit_with_every_drafter(counted, monkeypatch):
    whole = analysis(3)
    monkeypatch.setenv(budget.BUDGET_ENV, str(whole.estimate.seconds * 0.7))
    short = analysis(3)
    assert (
        short.request.n == len(short.items) == short.estimate.units < 3
        and short.items == whole.items[: short.request.n]
    )
    assert short.shortened.endswith(
        f"of the 3 examples you asked for fit in the {budget.budget_seconds():.3g} s a request may take, so the analysis runs {short.request.n}."
    )
