"""The session layer on its own, with no Gradio: one Request built by name, lanes, runs, pacing."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tiny

from demo import session
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.models.presets import DrafterSpec, Preset
from demo.validate import InvalidInput

ROOT = Path(__file__).resolve().parent.parent
PRESETS = {"p": Preset("p", "t", (DrafterSpec("text-only", "text-only", "d"),))}


def test_a_request_is_built_by_name_with_the_documented_defaults():
    request = session.parse(question=" What is this? ", preset="p", drafter="text-only", known=PRESETS)
    assert request == session.Request("What is this?", "p", "text-only", 4, Sampling(), 128, 0.0)
    sampled = session.parse(
        question="q", preset="p", drafter="text-only", greedy=False, temperature=0.5, seed=7, known=PRESETS
    )
    assert sampled.sampling == Sampling(greedy=False, temperature=0.5, top_p=0.95, seed=7)
    assert sampled.settings()["sampling"] == {"greedy": False, "temperature": 0.5, "top_k": 0, "top_p": 0.95, "seed": 7}


def test_a_request_takes_its_fields_by_name_only():
    with pytest.raises(TypeError):
        session.parse("q", "p", "text-only")  # positional fields are refused
    with pytest.raises(TypeError):
        session.parse(question="q", preset="p", drafter="text-only", gama=4, known=PRESETS)


def test_every_bad_field_is_refused_with_its_name():
    with pytest.raises(
        InvalidInput, match=r"^gamma \(drafts per round\) must be a whole number from 1 to 10; got 0\.$"
    ):
        session.parse(question="q", preset="p", drafter="text-only", gamma=0, known=PRESETS)
    with pytest.raises(
        InvalidInput,
        match=r"^Unknown drafter for preset 'p': 'x'\. Choose one of: text-only, text-only\+tree, prompt-lookup\.$",
    ):
        session.parse(question="q", preset="p", drafter="x", known=PRESETS)


def test_a_run_is_one_lane_decoded_whole_and_greedy_speculative_equals_autoregressive(world):
    image = tiny.images(1)[0]
    request = session.Request("Describe the image.", "tiny", "text-partly", 3, Sampling(), 24)
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


def test_leaving_a_race_early_closes_every_lane(world):
    request = session.Request("Describe the image.", "tiny", "text-partly", 3, Sampling(), 24)
    runs = session.lanes(world, request, tiny.images(1)[0])
    with session.racing(runs) as events:
        next(events)
    for run in runs.values():
        with pytest.raises(StopIteration):
            next(run)  # closed: a closed generator ends at once


def test_a_recorded_race_is_paced_at_its_measured_times_and_ends_before_the_next_event_once_stopped(monkeypatch):
    now = [100.0]
    waits = []

    class Clock:
        """A stop event that never fires, whose waits advance a virtual clock."""

        def wait(self, timeout):
            waits.append(round(timeout, 9))
            now[0] += timeout
            return False

    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    timeline = [("a", _event(t)) for t in (0.5, 1.0, 1.0, 2.5)]
    shown = [(lane, round(now[0] - 100.0, 9)) for lane, _ in session.paced(timeline, 4.0, Clock())]
    assert shown == [("a", 2.0), ("a", 4.0), ("a", 4.0), ("a", 10.0)]  # t x 4
    assert waits == [2.0, 2.0, 0.0, 6.0]
    stop = threading.Event()
    stop.set()
    assert list(session.paced(timeline, 4.0, stop)) == []


def _event(t: float):
    return type("Event", (), {"t": t})()


def test_messages_pass_what_was_written_for_people_and_hide_the_rest():
    assert session.message(InvalidInput("Ask a question about the image first.")) == (
        "Ask a question about the image first."
    )
    hidden = session.message(KeyError("internal detail"))
    assert hidden.startswith("Something went wrong on the server (reference ") and "internal detail" not in hidden


def test_the_session_layer_imports_no_gradio_and_no_torch_until_used():
    code = "import sys, demo.session; sys.exit(any(m in sys.modules for m in ('gradio', 'torch', 'transformers')))"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
