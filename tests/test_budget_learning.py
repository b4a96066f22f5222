"""The work budget learns this machine's speed (issue 54, "the estimate holds"): each race's lanes
record what a token cost them, the next estimates grow by it on a loaded machine (never below the
idle figures), and a race admitted on a slowed machine finishes within its limit instead of being
cut over budget."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import tiny

from demo import session
from demo.engine import decoding
from demo.engine.sampling import Sampling
from demo.models import loader
from demo.session import budget, lane_runs
from demo.session.validate import InvalidInput
from demo.world.tasks import heldout_examples


@pytest.fixture
def learning(monkeypatch):
    """Estimates that learn (the suite's default is the idle figures only), from nothing recorded."""
    monkeypatch.setenv(budget.LEARN_ENV, "1")
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    budget.forget()
    yield
    budget.forget()


def embedded(**fields) -> session.Request:
    fields = {"drafter": "text-only", "max_new_tokens": 272} | fields
    return session.parse(question="Describe the image.", preset="embedded", **fields)


def lane_trace(seconds_a_token: float, tokens: int = 11):
    """A lane's trace as `budget.learn` reads it: its tokens' clocks."""
    return SimpleNamespace(tokens=[SimpleNamespace(t=0.5 + i * seconds_a_token) for i in range(tokens)])


def test_the_estimate_follows_the_costs_this_machine_recorded(learning, monkeypatch):
    heavy = embedded(drafter="text-only+tree", gamma=8, greedy=False, temperature=0.8, second_drafter="image-aware")
    idle = budget.race(heavy)
    assert idle.seconds == pytest.approx(59.816) and idle.slow == 1  # the idle figures (issue 54's race)
    # an idle machine: a token at 0.4 of what the budget counts (8 ms a step against 20 ms) changes nothing
    budget.learn(heavy, {"autoregressive": lane_trace(0.4 * 1.25 * 0.02)})
    assert budget.race(heavy).steps == pytest.approx(idle.steps)
    assert budget.fit_race(embedded(max_new_tokens=128))[2] == ""  # the page's default race runs as asked
    # a loaded one: the autoregressive lane's token at 170 ms, 6.8x the 25 ms counted (1.25 steps, sampling)
    budget.learn(heavy, {"autoregressive": lane_trace(0.170)})
    assert budget.slowdown("embedded") == pytest.approx(3.6 * budget.LEARN_MARGIN)  # the median of 0.4 and 6.8
    budget.learn(heavy, {"autoregressive": lane_trace(0.170)})
    assert budget.slowdown("embedded") == pytest.approx(6.8 * budget.LEARN_MARGIN)  # of 0.4, 6.8 and 6.8
    # a drafter never measured is counted at the target's slowdown; one measured, at its own
    assert budget.slowdown("embedded", "image-aware") == pytest.approx(8.5)
    budget.learn(
        heavy,
        {"speculative": lane_trace(0.02), "speculative-2": lane_trace(0.01), "autoregressive": lane_trace(0.170, 3)},
    )
    tree = budget.token_steps("text-only+tree", 8, False, "embedded") * 0.02
    assert budget.slowdown("embedded", "text-only+tree") == pytest.approx(max(1.0, 1.25 * 0.02 / tree))
    loaded = budget.race(heavy)
    per_token = sum(
        budget.token_steps(d, 8, False, "embedded") * budget.slowdown("embedded", d)
        for d in ("text-only+tree", "image-aware", None)
    )
    assert loaded.per_unit == pytest.approx(per_token) and loaded.fixed == pytest.approx(3 * 20 * 8.5)
    most = loaded.most(60.0)
    assert 16 <= most < 272
    assert budget.fit_race(heavy)[2] == (
        f"This machine is busy: {most} of the 272 tokens you asked for fit in the 60 s a request may take, "
        f"so the race runs {most}."
    )
    # remembered for LEARN_WINDOW seconds: then the idle figures again
    later = time.monotonic() + budget.LEARN_WINDOW + 1
    monkeypatch.setattr(budget.time, "monotonic", lambda: later)
    assert budget.race(heavy).steps == pytest.approx(idle.steps)


def test_nothing_is_learned_on_zerogpu_or_when_switched_off(learning, monkeypatch):
    request = embedded(max_new_tokens=64)
    budget.learn(request, {"autoregressive": lane_trace(0.5)})
    assert budget.slowdown("embedded") > 1
    monkeypatch.setenv(budget.LEARN_ENV, "0")
    assert budget.slowdown("embedded") == 1.0
    monkeypatch.setenv(budget.LEARN_ENV, "1")
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")  # a ZeroGPU duration is asked from the idle figures
    assert budget.slowdown("embedded") == 1.0


@pytest.fixture(scope="module")
def uploads(tmp_path_factory):
    root = tmp_path_factory.mktemp("learning")
    tiny.save_preset(root / "preset", "tiny-learning")
    (root / "uploads").mkdir()
    tiny.images(1)[0].save(root / "uploads" / "q.png")
    yield root / "uploads"
    loader.PRESETS.pop("tiny-learning", None)
    loader._LOADED.pop("tiny-learning", None)


def test_a_race_shortened_on_a_slowed_machine_finishes_within_its_limit(learning, uploads, monkeypatch):
    """A slowed clock: every target forward takes 8 ms of it where the budget counts 2 ms a step
    (the engine's lane clocks and the deadline read it; nothing else moves it, so the test does not
    depend on this machine's load). The first race teaches the budget, which then refuses the race
    the idle figures admit, and admits a shorter one that finishes within its limit."""
    now = [0.0]
    clock = SimpleNamespace(perf_counter=lambda: now[0], monotonic=lambda: now[0])
    monkeypatch.setattr(decoding, "time", clock)
    monkeypatch.setattr(budget, "time", clock)
    forward = decoding.Target.forward

    def slowed(self, *args, **kwargs):
        now[0] += 0.008
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(decoding.Target, "forward", slowed)
    monkeypatch.setenv(budget.BUDGET_ENV, "0.6")
    monkeypatch.setattr(budget, "step_seconds", lambda preset: 0.002)

    def race(max_new_tokens):
        sampling = Sampling(greedy=False, temperature=0.3, seed=1)  # no γ sweep or table
        fields = dict(question="Describe the image.", preset="tiny-learning", drafter="text-only", gamma=3)
        return session.Race(session.Request(**fields, sampling=sampling, max_new_tokens=max_new_tokens), *call)

    call = (str(uploads / "q.png"), uploads)
    idle_most = race(8).estimate.most(0.6)  # what the idle figures admit: 78 tokens
    first = race(12)
    assert list(first.events())[-1].ending == "finished"
    assert budget.slowdown("tiny-learning") == pytest.approx(0.008 / 0.0025 * budget.LEARN_MARGIN)  # 8 ms over 2.5
    shortened = race(idle_most)  # what the idle figures admit runs shortened, and finishes within its limit
    most = shortened.estimate.most(0.6)
    assert 0 < most < idle_most / 2, (most, idle_most)
    started = now[0]
    result = list(shortened.events())[-1]
    assert result.ending == "finished" and result.limit == 0.6 and shortened.request.max_new_tokens == most
    assert len(shortened.traces["autoregressive"].tokens) == most and now[0] - started < 0.6
    assert result.shortened.startswith(f"This machine is busy: {most} of the {idle_most} tokens you asked for fit")


CLASSROOM = heldout_examples("description", 1, seed=2)[0].question  # the page's classroom lesson


def test_on_a_ten_times_slower_clock_the_default_race_and_the_lesson_run_shortened_and_quick_races_lift_it(learning):
    default = embedded(max_new_tokens=128)
    lesson = session.parse(question=CLASSROOM, preset="embedded", drafter="layer-skip")
    for request in (default, lesson):  # each lane's token at 10x what the budget counts for it
        for _ in range(budget.LEARN_KEEP):
            budget.learn(request, {lane: lane_at(request, lane, 10.0) for lane in ("speculative", "autoregressive")})
    assert budget.slowdown("embedded") == budget.slowdown("embedded", "layer-skip") == pytest.approx(12.5)
    ran, replayed, said = budget.fit_race(default)
    assert (ran.max_new_tokens, replayed) == (26, 26)  # (60 / 0.02 - 40 x 12.5) / (7.56 x 12.5)
    assert said == (
        "This machine is busy: 26 of the 128 tokens you asked for fit in the 60 s a request may take, so the race runs 26."
    )
    ran, replayed, said = budget.fit_race(lesson)  # layer skip's replays cost more: the race runs 16, they fit 11
    assert (ran.max_new_tokens, replayed) == (16, 11)
    assert said.endswith("so the race runs 16. Its γ sweep and table of strategies replay its first 11.")
    # two quick races (their lanes at 0.4 of what is counted) and the limit is back: the median of the last three
    for _ in range(2):
        budget.learn(lesson, {lane: lane_at(lesson, lane, 0.4) for lane in ("speculative", "autoregressive")})
        budget.learn(default, {lane: lane_at(default, lane, 0.4) for lane in ("speculative", "autoregressive")})
    assert budget.fit_race(default) == (default, 128, "") and budget.fit_race(lesson)[2] == ""


def lane_at(request, lane: str, ratio: float):
    """A lane of `request` whose tokens each cost `ratio` times what the budget counts for them."""
    drafter = request.drafter if lane == "speculative" else None
    counted = budget.token_steps(drafter, request.gamma, request.sampling.greedy, request.preset)
    return lane_trace(ratio * counted * budget.step_seconds(request.preset))


def test_a_race_is_checked_again_at_ready_where_a_warm_up_it_waited_for_measured_a_slow_machine(
    learning, uploads, monkeypatch
):
    request = session.Request(
        question="Describe the image.",
        preset="tiny-learning",
        drafter="text-only",
        gamma=3,
        sampling=Sampling(),
        max_new_tokens=300,
    )
    load = lane_runs.load

    def after_a_warm_up(*args, **kwargs):  # the race waited for a warm-up, which measured a crawling machine
        budget.learn(request, {"autoregressive": lane_trace(100.0)})
        return load(*args, **kwargs)

    monkeypatch.setattr(lane_runs, "load", after_a_warm_up)
    race = session.Race(request, str(uploads / "q.png"), uploads)
    budget.fit(race.estimate)  # admitted before its models are loaded: nothing measured yet
    seen = []
    with pytest.raises(InvalidInput, match="at this machine's present speed"):
        seen.extend(race.events())
    assert not any(isinstance(item, session.Lane) for item in seen) and race.ready is None


def test_a_race_resent_as_its_shortening_offered_finishes_within_its_limit_in_nineteen_of_twenty(
    learning, uploads, monkeypatch
):
    """A busy machine whose speed wanders (each target forward 6-12 ms of a simulated clock where
    the budget counts 2 ms a step): a race of 300 tokens is shortened, and the same race resent at
    the tokens the sentence offered finishes within its limit, each try learning from the last."""
    import random
    import re

    now, wander = [0.0], random.Random(7)
    clock = SimpleNamespace(perf_counter=lambda: now[0], monotonic=lambda: now[0])
    monkeypatch.setattr(decoding, "time", clock)
    monkeypatch.setattr(budget, "time", clock)
    forward = decoding.Target.forward

    def busy(self, *args, **kwargs):
        now[0] += 0.006 * wander.uniform(1.0, 2.0)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(decoding.Target, "forward", busy)
    monkeypatch.setenv(budget.BUDGET_ENV, "1.5")
    monkeypatch.setattr(budget, "step_seconds", lambda preset: 0.002)
    call, held = (str(uploads / "q.png"), uploads), []

    def race(max_new_tokens):
        sampling = Sampling(greedy=False, temperature=0.3, seed=len(held))
        fields = dict(question="Describe the image.", preset="tiny-learning", drafter="text-only", gamma=3)
        return session.Race(session.Request(**fields, sampling=sampling, max_new_tokens=max_new_tokens), *call)

    list(race(12).events())  # the machine's speed, first measured
    while len(held) < 20:
        offered = int(re.search(r"so the race runs (\d+)\.", budget.fit_race(race(300).request)[2]).group(1))
        resent = race(offered)
        started = now[0]
        result = list(resent.events())[-1]
        assert resent.shortened == "" and len(resent.traces["autoregressive"].tokens) <= offered
        held.append(result.ending == "finished" and now[0] - started <= result.limit)
    assert sum(held) >= 19, held
