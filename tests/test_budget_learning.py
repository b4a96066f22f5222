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


def lane(seconds_a_token: float, tokens: int = 11):
    """A lane's trace as `budget.learn` reads it: its tokens' clocks."""
    return SimpleNamespace(tokens=[SimpleNamespace(t=0.5 + i * seconds_a_token) for i in range(tokens)])


def test_the_estimate_follows_the_costs_this_machine_recorded(learning, monkeypatch):
    heavy = embedded(drafter="text-only+tree", gamma=8, greedy=False, temperature=0.8, second_drafter="image-aware")
    idle = budget.race(heavy)
    assert idle.seconds == pytest.approx(59.816) and idle.busy == ""  # the idle figures (issue 54's race)
    # an idle machine: a token at 0.4 of what the budget counts (8 ms a step against 20 ms) changes nothing
    budget.learn(heavy, {"autoregressive": lane(0.4 * 1.25 * 0.02)})
    assert budget.race(heavy).steps == pytest.approx(idle.steps)
    budget.check(budget.race(embedded()))  # the page's default race is admitted
    # a loaded one: the autoregressive lane's token at 170 ms, 6.8x the 25 ms counted (1.25 steps, sampling)
    budget.learn(heavy, {"autoregressive": lane(0.170)})
    assert budget.slowdown("embedded") == pytest.approx(3.6 * budget.LEARN_MARGIN)  # the median of 0.4 and 6.8
    budget.learn(heavy, {"autoregressive": lane(0.170)})
    assert budget.slowdown("embedded") == pytest.approx(6.8 * budget.LEARN_MARGIN)  # of 0.4, 6.8 and 6.8
    # a drafter never measured is counted at the target's slowdown; one measured, at its own
    assert budget.slowdown("embedded", "image-aware") == pytest.approx(8.5)
    budget.learn(heavy, {"speculative": lane(0.02), "speculative-2": lane(0.01), "autoregressive": lane(0.170, 3)})
    tree = budget.token_steps("text-only+tree", 8, False, "embedded") * 0.02
    assert budget.slowdown("embedded", "text-only+tree") == pytest.approx(max(1.0, 1.25 * 0.02 / tree))
    loaded = budget.race(heavy)
    per_token = sum(
        budget.token_steps(d, 8, False, "embedded") * budget.slowdown("embedded", d)
        for d in ("text-only+tree", "image-aware", None)
    )
    assert loaded.per_unit == pytest.approx(per_token) and loaded.fixed == pytest.approx(3 * 20 * 8.5)
    with pytest.raises(InvalidInput) as refused:
        budget.check(loaded)
    most = loaded.most(60.0)
    assert 0 < most < 272
    assert "at this machine's present speed (its recent runs cost up to 8.5x the idle figures)" in str(refused.value)
    assert f"lower max new tokens to {most} or less" in str(refused.value)
    # remembered for LEARN_WINDOW seconds: then the idle figures again
    later = time.monotonic() + budget.LEARN_WINDOW + 1
    monkeypatch.setattr(budget.time, "monotonic", lambda: later)
    assert budget.race(heavy).steps == pytest.approx(idle.steps)


def test_nothing_is_learned_on_zerogpu_or_when_switched_off(learning, monkeypatch):
    request = embedded(max_new_tokens=64)
    budget.learn(request, {"autoregressive": lane(0.5)})
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


def test_a_race_admitted_on_a_slowed_machine_finishes_within_its_limit(learning, uploads, monkeypatch):
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
    with pytest.raises(InvalidInput, match="at this machine's present speed"):
        list(race(idle_most).events())
    most = race(idle_most).estimate.most(0.6)
    assert 0 < most < idle_most / 2, (most, idle_most)
    admitted = race(most)
    started = now[0]
    result = list(admitted.events())[-1]
    assert result.ending == "finished" and result.limit == 0.6
    assert len(admitted.traces["autoregressive"].tokens) == most and now[0] - started < 0.6


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
        budget.learn(request, {"autoregressive": lane(100.0)})
        return load(*args, **kwargs)

    monkeypatch.setattr(lane_runs, "load", after_a_warm_up)
    race = session.Race(request, str(uploads / "q.png"), uploads)
    budget.check(race.estimate)  # admitted before its models are loaded: nothing measured yet
    seen = []
    with pytest.raises(InvalidInput, match="at this machine's present speed"):
        seen.extend(race.events())
    assert not any(isinstance(item, session.Lane) for item in seen) and race.ready is None
