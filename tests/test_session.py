"""The session layer on its own, with no Gradio: one Request built by name, lanes, runs, pacing."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest
import races
import tiny

from demo import session
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.models import devices, loader, presets, zerogpu
from demo.models.hub import Availability
from demo.models.presets import DrafterSpec, Preset
from demo.session import budget, failures, offers
from demo.session.validate import InvalidInput

ROOT = Path(__file__).resolve().parent.parent
PRESETS = {"p": Preset("p", "t", (DrafterSpec("text-only", "text-only", "d"),))}


@pytest.mark.fast
def test_a_request_is_built_by_name_with_the_documented_defaults():
    request = session.parse(question=" What is this? ", preset="p", drafter="text-only", known=PRESETS)
    assert request == races.request(
        question="What is this?", preset="p", drafter="text-only", gamma=4, max_new_tokens=128
    )
    sampled = session.parse(
        question="q", preset="p", drafter="text-only", greedy=False, temperature=0.5, seed=7, known=PRESETS
    )
    assert sampled.sampling == Sampling(greedy=False, temperature=0.5, top_p=0.95, seed=7)
    assert sampled.settings()["sampling"] == {"greedy": False, "temperature": 0.5, "top_k": 0, "top_p": 0.95, "seed": 7}


@pytest.mark.fast
def test_a_request_takes_its_fields_by_name_only():
    with pytest.raises(TypeError):
        session.parse("q", "p", "text-only")  # positional fields are refused
    with pytest.raises(TypeError):
        session.parse(question="q", preset="p", drafter="text-only", gama=4, known=PRESETS)


@pytest.mark.fast
def test_every_bad_field_is_refused_with_its_name():
    with pytest.raises(
        InvalidInput, match=r"^gamma \(drafts per round\) must be a whole number from 1 to 10; got 0\.$"
    ):
        session.parse(question="q", preset="p", drafter="text-only", gamma=0, known=PRESETS)
    with pytest.raises(
        InvalidInput,
        match=r"^Unknown drafter for preset 'p': 'x'\. Choose one of: text-only, text-only\+tree, prompt-lookup, staged\.$",
    ):
        session.parse(question="q", preset="p", drafter="x", known=PRESETS)


def test_a_run_is_one_lane_decoded_whole_and_greedy_speculative_equals_autoregressive(world):
    image = tiny.images(1)[0]
    request = races.request()
    spd = session.run(world, request, image)
    ar = session.run(world, request, image, "autoregressive")
    assert spd.start.mode == "speculative" and spd.start.gamma == 3 and spd.start.drafter.name == "text-partly"
    assert ar.start.mode == "autoregressive" and ar.start.drafter is None
    assert spd.summary.token_ids == ar.summary.token_ids and len(ar.summary.token_ids) > 0
    raced = {lane: Trace() for lane in session.LANES}
    with session.racing(session.lanes(world, request, image)) as events:
        for lane, event in events:
            raced[lane].add(event)
    assert raced["speculative"].summary.token_ids == spd.summary.token_ids
    key = [(r.drafted_ids, r.n_accepted, r.target_id) for r in spd.rounds]
    assert [(r.drafted_ids, r.n_accepted, r.target_id) for r in raced["speculative"].rounds] == key


TWO = {
    "p": Preset(
        "p",
        "t",
        (DrafterSpec("text-only", "text-only", "d"), DrafterSpec("image-aware", "image-aware", "e")),
    )
}


@pytest.mark.fast
def test_a_second_drafter_adds_a_second_speculative_lane_named_speculative_2():
    one = session.parse(question="q", preset="p", drafter="text-only", known=TWO)
    assert one.drafters == ("text-only",) and session.lane_names(one) == ("speculative", "autoregressive")
    for none in (None, "", "none"):
        assert session.parse(question="q", preset="p", drafter="text-only", second_drafter=none, known=TWO) == one
    two = session.parse(question="q", preset="p", drafter="text-only", second_drafter="image-aware", known=TWO)
    assert two.drafters == ("text-only", "image-aware") and two.second_drafter == "image-aware"
    assert session.lane_names(two) == ("speculative", "speculative-2", "autoregressive")
    assert two.settings()["lanes"] == {
        "speculative": "text-only",
        "speculative-2": "image-aware",
        "autoregressive": None,
    }
    assert one.settings()["second_drafter"] is None and one.settings()["drafter"] == "text-only"
    with pytest.raises(KeyError, match="request has no lane 'speculative-2'"):
        one.lane_drafter("speculative-2")


@pytest.mark.fast
def test_every_drafter_the_preset_offers_may_race_and_the_others_are_refused_with_the_reason():
    known = {"p": Preset("p", "t", (DrafterSpec("text-only", "text-only", "d"),))}
    for name in ("text-only+tree", "prompt-lookup"):
        assert session.parse(question="q", preset="p", drafter=name, known=known).drafter == name
    with pytest.raises(
        InvalidInput,
        match=r"^The drafter 'layer-skip' cannot run on preset 'p': no search for the layers to skip is stored "
        r"for this preset's target\. Choose one of: text-only, text-only\+tree, prompt-lookup, staged\.$",
    ):
        session.parse(question="q", preset="p", drafter="text-only", second_drafter="layer-skip", known=known)


@pytest.mark.parametrize(
    "second, refusal",
    [
        ("text-only", r"^The two speculative lanes would both draft with 'text-only': a second lane must use another"),
        (
            ["image-aware", "text-only+tree"],
            r"^A race holds at most 2 speculative lanes beside the autoregressive one; "
            r"got 3 drafters \('text-only', 'image-aware', 'text-only\+tree'\)\. Pick one second drafter, or none\.$",
        ),
        (
            "x",
            r"^Unknown second drafter for preset 'p': 'x'\. Choose one of: text-only, text-only\+tree, image-aware, ",
        ),
        (3, r"^Unknown second drafter for preset 'p': 3\. "),
    ],
)
@pytest.mark.fast
def test_a_lane_configuration_the_race_cannot_take_is_refused_with_its_limit(second, refusal):
    with pytest.raises(InvalidInput, match=refusal):
        session.parse(question="q", preset="p", drafter="text-only", second_drafter=second, known=TWO)


def test_two_lanes_race_beside_autoregressive_decoding_each_as_it_decodes_alone(world):
    image = tiny.images(1)[0]
    request = races.request(second_drafter="image-partly")
    raced = {lane: Trace() for lane in session.lane_names(request)}
    with session.racing(session.lanes(world, request, image)) as events:
        for lane, event in events:
            raced[lane].add(event)
    assert raced["speculative-2"].start.drafter.name == "image-partly" and raced["speculative"].start.gamma == 3
    alone = {
        d: session.run(world, dataclasses.replace(request, drafter=d, second_drafter=None), image)
        for d in request.drafters
    }
    for lane, drafter in (("speculative", "text-partly"), ("speculative-2", "image-partly")):
        key = [(r.drafted_ids, r.n_accepted, r.target_id) for r in alone[drafter].rounds]
        assert [(r.drafted_ids, r.n_accepted, r.target_id) for r in raced[lane].rounds] == key
        assert raced[lane].summary.token_ids == raced["autoregressive"].summary.token_ids  # greedy: lossless
    whole = session.run_lanes(world, request, image)
    assert list(whole) == ["speculative", "speculative-2", "autoregressive"]
    assert whole["speculative-2"].summary.token_ids == raced["speculative-2"].summary.token_ids


@pytest.mark.fast
def test_two_lanes_ask_zerogpu_for_three_runs_of_time_and_a_greedy_race_for_its_sweep_too(monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")  # the work budget's estimate at the preset's ZeroGPU seconds a step
    one = races.embedded(question="q", sampling=Sampling(greedy=False), max_new_tokens=100)
    two = dataclasses.replace(one, second_drafter="image-aware")
    assert session._race_duration(two, None) > session._race_duration(one, None)
    # 100 tokens x (1.82 + 1.82 + 1) steps x 1.25 (sampling) + 3 set-ups of 20, at 0.05 s a step
    assert budget.race(two).steps == pytest.approx(640)
    assert session._race_duration(two, None) == zerogpu.clamp(640 * presets.seconds_per_token("embedded")) == 32
    # a greedy race's γ sweep and table of strategies run in the same call: 10 x 0.15 drafter steps
    # a token more, and each of the preset's 17 strategies' drafter steps (3.24 a token, all fit)
    greedy = dataclasses.replace(two, sampling=Sampling())
    assert budget.race(greedy).steps == pytest.approx(100 * (1.82 + 1.82 + 1 + 1.5 + 3.24) + 60)
    assert session._race_duration(greedy, None) == 49


@pytest.mark.fast
def test_two_drafter_models_that_do_not_fit_together_are_refused_before_anything_loads(monkeypatch):
    big = Preset(
        "big",
        "test/target",
        (
            DrafterSpec("a", "text-only", "test/a", params=200_000_000),
            DrafterSpec("b", "text-only", "test/b", params=200_000_000),
        ),
        params=100_000_000,
    )
    monkeypatch.setitem(presets.PRESETS, "big", big)
    monkeypatch.setattr(devices, "probe", lambda: devices.Memory((), 2**30))
    monkeypatch.setattr(loader, "availability", lambda name: Availability(True, True, "here"))
    monkeypatch.setattr(loader, "load", lambda *a, **k: pytest.fail("loaded before the lanes were checked"))
    request = races.request(question="q", preset="big", drafter="a", gamma=4, max_new_tokens=8, second_drafter="b")
    with pytest.raises(devices.NotEnoughMemory) as refused:
        next(session.prepare(request, None, "/nowhere", lambda *a: None))
    assert str(refused.value) == (
        "preset 'big' with the drafters 'a' and 'b' needs about 2.2 GiB of RAM in float32 on CPU, but only 1.0 GiB "
        "is available. Race one of these drafters at a time."
    )
    assert failures.message(refused.value) == str(refused.value)  # said to the person as it is
    offers.check_memory("big", ("a", "a+tree"))  # one model, drafting two ways: nothing more to hold
    offers.check_memory("big", ("a", "prompt-lookup"))  # prompt lookup has no model


@pytest.mark.fast
def test_leaving_a_race_early_closes_every_lane(world):
    request = races.request()
    runs = session.lanes(world, request, tiny.images(1)[0])
    with session.racing(runs) as events:
        next(events)
    for run in runs.values():
        with pytest.raises(StopIteration):
            next(run)  # closed: a closed generator ends at once


@pytest.mark.fast
def test_a_recorded_race_is_paced_at_its_measured_times_and_ends_before_the_next_event_once_stopped(monkeypatch):
    now = [100.0]
    waits = []

    def wait(timeout):
        """A stop that never comes, whose waits advance a virtual clock."""
        waits.append(round(timeout, 9))
        now[0] += timeout
        return False

    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    timeline = [("a", _event(t)) for t in (0.5, 1.0, 1.0, 2.5)]
    replay = session.Replay(timeline, 4.0)
    monkeypatch.setattr(replay.deadline, "wait", wait)
    shown = [(lane, round(now[0] - 100.0, 9)) for lane, _ in replay.events()]
    assert shown == [("a", 2.0), ("a", 4.0), ("a", 4.0), ("a", 10.0)]  # t x 4
    assert waits == [2.0, 2.0, 0.0, 6.0]
    stopped = session.Replay(timeline, 4.0)
    stopped.stop()
    assert list(stopped.events()) == [] and stopped.stopped


def _event(t: float):
    return type("Event", (), {"t": t})()


@pytest.mark.fast
def test_messages_pass_what_was_written_for_people_and_hide_the_rest():
    assert failures.message(InvalidInput("Ask a question about the image first.")) == (
        "Ask a question about the image first."
    )
    hidden = failures.message(KeyError("internal detail"))
    assert hidden.startswith("Something went wrong on the server (reference ") and "internal detail" not in hidden


@pytest.mark.fast
def test_the_session_layer_imports_no_gradio_and_no_torch_until_used():
    code = "import sys, demo.session; sys.exit(any(m in sys.modules for m in ('gradio', 'torch', 'transformers')))"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
