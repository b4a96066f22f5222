"""The work budget (issue 43): a request's worst-case compute, estimated from the request alone,
refused with what fits when it exceeds the deployment's budget; a running request's own limit."""

import re
import time

import pytest

from demo import session
from demo.models import presets, zerogpu
from demo.page.analysis.view import examples_for
from demo.session import budget
from demo.session.validate import InvalidInput

QUESTION = "Describe the image."


def race(**fields) -> session.Request:
    return session.parse(question=QUESTION, preset="embedded", **({"drafter": "text-only"} | fields))


def test_the_issues_three_lane_sampled_race_is_refused_with_what_was_asked_and_what_fits(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    request = race(
        drafter="text-only+tree",
        gamma=8,
        greedy=False,
        temperature=5.0,
        max_new_tokens=440,
        second_drafter="image-aware",
    )
    estimate = budget.race(request)
    # per token: the tree lane (1.1 + 8 x 0.18) x 2 x 1.25, the chain lane (1.1 + 8 x 0.18) x 1.25, the
    # autoregressive lane 1.25; three set-ups of 20 steps; at 0.02 s a step on a CPU
    assert estimate.steps == pytest.approx(440 * (6.35 + 3.175 + 1.25) + 60)
    assert estimate.seconds == pytest.approx(96.02)
    with pytest.raises(InvalidInput) as refused:
        budget.check(estimate)
    assert str(refused.value) == (
        "This request asks for 3 lanes x 440 new tokens (text-only+tree, image-aware at γ 8, sampling): up to about "
        "96 s of compute here, and this deployment allows 60 s a request so that no visitor holds it for long. To run "
        "it, lower max new tokens to 272 or less, or race one drafter rather than two, lower γ, or pick a chain "
        "drafter rather than a tree; or run your own copy with `DEMO_BUDGET_SECONDS=0 python app.py`, which lifts the "
        "budget."
    )
    fits = race(
        drafter="text-only+tree",
        gamma=8,
        greedy=False,
        temperature=5.0,
        max_new_tokens=272,
        second_drafter="image-aware",
    )
    budget.check(budget.race(fits))  # the largest that fits, fits


def test_the_pages_default_race_and_the_longest_single_drafter_race_fit(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    default = budget.race(race())  # γ 4, 128 new tokens, greedy: its γ sweep and table counted
    # per token: the chain lane 1.1 + 4 x 0.18, the autoregressive lane 1, the sweep 10 x 0.15, the
    # table's 17 strategies 5 x 0.15 (model drafters) + 5 x 0.3 (their trees) + 0.02 (lookup) + 0.7 (layer-skip)
    # + 0.02 + 0.04 (feature and its tree) + 0.02 + 0.04 (medusa and its tree) + 0.15 (staged), each its
    # registered kind's step
    assert default.seconds == pytest.approx((128 * (1.82 + 1 + 1.5 + 3.24) + 40) * 0.02)
    budget.check(default)
    assert budget.limit(default) == pytest.approx(2 * default.seconds)
    budget.check(budget.race(race(gamma=10, max_new_tokens=512)))
    with pytest.raises(InvalidInput, match=r"^This request asks for 3 lanes x 512 new tokens"):
        budget.check(budget.race(race(gamma=10, max_new_tokens=512, second_drafter="image-aware")))


def test_a_sampled_race_runs_under_the_limit_of_the_same_race_greedy(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    sampled = race(greedy=False, temperature=0.8, top_p=0.95, seed=1)
    greedy = race()
    # admitted on its own estimate, which has no sweep or table and is far smaller ...
    assert budget.race(sampled).seconds < budget.race(greedy).seconds / 2
    assert budget.limit(budget.race(sampled)) < budget.race_limit(greedy)
    # ... but it runs as long as the greedy race may: its lanes cost about as much a token
    assert budget.race_limit(sampled) == budget.race_limit(greedy) == budget.limit(budget.race(greedy))
    monkeypatch.setenv(budget.BUDGET_ENV, "0")
    assert budget.race_limit(sampled) is None  # no budget, no limit


def test_an_analysis_compares_two_drafters_on_eight_examples_or_three_on_vqa_and_refuses_more(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)

    def estimate(task, n, drafters):
        items = examples_for(task, n, 0, ("en",))
        return budget.analysis("embedded", drafters, n, len(items), 4, 160, [item.answer for item in items])

    two, three = ["text-only", "image-aware"], ["text-only", "image-aware", "multilingual"]
    with pytest.raises(InvalidInput) as refused:
        budget.check(estimate("all", 32, two))
    assert str(refused.value) == (
        "This request asks for 32 examples x 2 drafters (answers of up to 160 tokens): up to about 248 s of compute "
        "here, and this deployment allows 60 s a request so that no visitor holds it for long. To run it, lower N "
        "examples to 8 or less, or compare fewer drafters, pick one language, or pick shorter answers (a vqa task); "
        "or run your own copy with `DEMO_BUDGET_SECONDS=0 python app.py`, which lifts the budget."
    )
    budget.check(
        estimate("all", 8, two)
    )  # 58 s: each run counted to its reference answer, not to 160 tokens; 8 ablations
    budget.check(estimate("vqa", 8, three))  # 60 s
    with pytest.raises(InvalidInput, match="lower N examples to 4 or less"):  # the first 5 hold both descriptions
        budget.check(estimate("all", 8, three))  # 83 s: two descriptions of 160 tokens
    # without the answers, every run counts 160 tokens: the worst case of any example; each example's ablation 40
    assert budget.analysis("embedded", two, 8, 8, 4, 160).steps == pytest.approx(2 * 8 * (160 * 1.82 + 20) + 8 * 40)
    monkeypatch.setenv(budget.BUDGET_ENV, "0")  # what the refusal says: `DEMO_BUDGET_SECONDS=0 python app.py`
    budget.check(estimate("all", 32, three))
    assert budget.limit(estimate("all", 32, three)) is None


def test_the_budget_is_a_setting_and_zero_lifts_it(monkeypatch):
    default = budget.race(race())
    monkeypatch.setenv(budget.BUDGET_ENV, "10")
    with pytest.raises(InvalidInput, match="this deployment allows 10 s a request"):
        budget.check(default)
    assert budget.limit(default) == 10
    monkeypatch.setenv(budget.BUDGET_ENV, "0")
    budget.check(budget.race(race(gamma=10, max_new_tokens=512, second_drafter="image-aware")))
    assert budget.limit(default) is None


def test_the_zerogpu_duration_comes_from_the_same_estimate(monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    request = race(max_new_tokens=64)
    assert budget.race(request).seconds == pytest.approx(budget.race(request).steps * 0.05)  # embedded on ZeroGPU
    assert session._race_duration(request, None) == zerogpu.clamp(budget.race(request).seconds)


def test_a_deadline_ends_a_run_when_its_time_is_up_and_says_it_was_the_budget():
    deadline = budget.Deadline()
    deadline.arm(0.2)
    assert not deadline.ended and not deadline.over
    started = time.monotonic()
    assert deadline.wait(5.0)  # returns once the time is up, not after 5 s
    assert 0.2 <= time.monotonic() - started < 5.0
    assert deadline.ended and deadline.over and not deadline.stopped and deadline.seconds == 0.2
    stopped = budget.Deadline()
    stopped.arm(60.0)
    stopped.stop()
    assert stopped.wait(5.0) and stopped.ended and not stopped.over  # a Stop, not the budget
    unlimited = budget.Deadline()
    started = time.monotonic()
    assert not unlimited.wait(0.05) and time.monotonic() - started >= 0.05 and not unlimited.ended


def test_the_table_of_strategies_replays_what_fits_beside_the_race_its_own_drafter_first(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    names = presets.PRESETS["embedded"].drafter_names()
    short = race(max_new_tokens=128)
    assert budget.table_strategies(short) == names  # a default race has room for every strategy
    fixed, per_token = budget._race_alone(short)
    table = sum(budget.replay_step(name, "embedded") for name in names)  # each strategy: its drafter steps, a token
    assert budget.race(short).steps == pytest.approx(fixed + (per_token + table) * 128)
    long = race(drafter="image-aware", gamma=10, max_new_tokens=512)
    fits = budget.table_strategies(long)
    assert "image-aware" in fits and 0 < len(fits) < len(names)  # the race's own counted first; not all fit
    assert budget.race(long).seconds <= budget.budget_seconds()  # the race with its table is admitted
    assert budget.table_strategies(race(greedy=False, temperature=1.0)) == ()  # no table after sampling
    monkeypatch.setenv(budget.BUDGET_ENV, "0")  # no budget (a local copy): every strategy, however long
    assert budget.table_strategies(long) == names


@pytest.mark.parametrize("task", ["all", "description", "caption", "vqa"])
@pytest.mark.parametrize("drafters", [["text-only", "image-aware"], ["text-only", "image-aware", "feature"]])
def test_an_analysis_refusals_advice_is_true_the_n_it_names_fits_and_one_more_does_not(monkeypatch, task, drafters):
    # the examples differ (a description counts 160 tokens, a yes/no a few): the advice counts the
    # first N examples themselves, the ones a smaller request gets (the mix is prefix-stable)
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)

    def estimate(n):
        items = examples_for(task, n, 0, ("en",))
        return budget.analysis("embedded", drafters, n, len(items), 4, 160, [item.answer for item in items])

    with pytest.raises(InvalidInput) as refused:
        budget.check(estimate(32))
    most = int(re.search(r"lower N examples to (\d+) or less", str(refused.value)).group(1))
    budget.check(estimate(most))
    with pytest.raises(InvalidInput):
        budget.check(estimate(most + 1))
