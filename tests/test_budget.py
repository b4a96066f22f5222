"""The work budget: a request's worst-case compute, estimated from the request alone, shortened to
the largest version that fits the deployment's budget (refused when not even its smallest does);
a running request's own limit."""

import re
import time

import pytest

from demo import session
from demo.models import presets, zerogpu
from demo.page.analysis.view import examples_for
from demo.session import budget
from demo.session.validate import InvalidInput

QUESTION = "Describe the image."


def refusal(call, *args) -> str:
    """What `call(*args)` refuses with (it must refuse)."""
    with pytest.raises(InvalidInput) as refused:
        call(*args)
    return str(refused.value)


def race(**fields) -> session.Request:
    return session.parse(question=QUESTION, preset="embedded", **({"drafter": "text-only"} | fields))


def test_the_issues_three_lane_sampled_race_runs_the_most_tokens_that_fit_and_says_so(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    fields = dict(drafter="text-only+tree", gamma=8, greedy=False, temperature=5.0, second_drafter="image-aware")
    request = race(max_new_tokens=440, **fields)
    estimate = budget.race(request)
    # per token: the tree lane (1.1 + 8 x 0.18) x 2 x 1.25, the chain lane (1.1 + 8 x 0.18) x 1.25, the
    # autoregressive lane 1.25; three set-ups of 20 steps; at 0.02 s a step on a CPU
    assert estimate.steps == pytest.approx(440 * (6.35 + 3.175 + 1.25) + 60)
    assert estimate.seconds == pytest.approx(96.02)
    ran, replayed, said = budget.fit_race(request)
    assert ran == race(max_new_tokens=272, **fields) and replayed == 272  # a sampled race replays nothing anyway
    assert said == "272 of the 440 tokens you asked for fit in the 60 s a request may take, so the race runs 272."
    assert budget.fit_race(ran) == (ran, 272, "")  # the largest that fits, fits as it is
    monkeypatch.setenv(budget.BUDGET_ENV, "1")  # not even 16 tokens fit: refused, with what applies
    assert refusal(budget.fit_race, request) == (
        "This race asks for 3 lanes x 440 new tokens (text-only+tree, image-aware at γ 8, sampling), and not even "
        "its smallest version (16 tokens) fits in the 1 s a request may take here. To run it, race one drafter "
        "rather than two, or pick a chain drafter rather than a tree, or lower γ."
    )
    # a one-lane chain race is told neither
    assert refusal(budget.fit_race, race(gamma=2, max_new_tokens=64)).endswith(
        "fits in the 1 s a request may take here. To run it, ask for fewer tokens."
    )


def test_the_pages_default_race_fits_and_the_longest_races_are_shortened(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    default = budget.race(race())  # γ 4, 128 new tokens, greedy: its γ sweep and table counted
    # per token: the chain lane 1.1 + 4 x 0.18, the autoregressive lane 1, the sweep 10 x 0.15, the
    # table's 17 strategies 5 x 0.15 (model drafters) + 5 x 0.3 (their trees) + 0.02 (lookup) + 0.7 (layer-skip)
    # + 0.02 + 0.04 (feature and its tree) + 0.02 + 0.04 (medusa and its tree) + 0.15 (staged), each its
    # registered kind's step
    assert default.seconds == pytest.approx((128 * (1.82 + 1 + 1.5 + 3.24) + 40) * 0.02)
    budget.fit(default)
    assert budget.limit(default) == pytest.approx(2 * default.seconds)
    # the longest race: shortened with its sweep and table, which replay the whole answer
    assert budget.fit_race(race(gamma=10, max_new_tokens=512))[1:] == (
        342,
        "342 of the 512 tokens you asked for fit in the 60 s a request may take, so the race runs 342.",
    )
    ran, replayed, said = budget.fit_race(race(gamma=10, max_new_tokens=512, second_drafter="image-aware"))
    assert ran.max_new_tokens == replayed < 512 and said.startswith(f"{replayed} of the 512 tokens you asked for fit")


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


def test_an_analysis_runs_the_first_examples_that_fit_for_every_drafter_and_says_so(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)

    def estimate(task, n, drafters):
        items = examples_for(task, n, 0, ("en",))
        return budget.analysis("embedded", drafters, n, len(items), 4, 160, [item.answer for item in items])

    two, three = ["text-only", "image-aware"], ["text-only", "image-aware", "multilingual"]
    fitted, said = budget.fit(estimate("all", 32, two))  # 248 s asked
    assert fitted.units == 8 and fitted.seconds <= 60
    assert said == "8 of the 32 examples you asked for fit in the 60 s a request may take, so the analysis runs 8."
    assert budget.fit(estimate("all", 8, two)) == (estimate("all", 8, two), "")  # 58 s: each run to its answer
    assert budget.fit(estimate("vqa", 8, three))[1] == ""  # 60 s
    assert budget.fit(estimate("all", 8, three))[0].units == 4  # 83 s: the first 5 hold both descriptions
    # without the answers, every run counts 160 tokens: the worst case of any example; each example's ablation 40
    assert budget.analysis("embedded", two, 8, 8, 4, 160).steps == pytest.approx(2 * 8 * (160 * 1.82 + 20) + 8 * 40)
    monkeypatch.setenv(budget.BUDGET_ENV, "5")  # not even one example fits: refused, with what applies
    assert refusal(budget.fit, estimate("all", 8, three)) == (
        "This analysis asks for 8 examples x 3 drafters (answers of up to 160 tokens), and not even its smallest "
        "version (1 example) fits in the 5 s a request may take here. To run it, compare fewer drafters, or pick "
        "shorter answers (a vqa task)."
    )
    monkeypatch.setenv(budget.BUDGET_ENV, "0")
    assert budget.fit(estimate("all", 32, three))[1] == ""
    assert budget.limit(estimate("all", 32, three)) is None


def test_the_budget_is_a_setting_and_zero_lifts_it(monkeypatch):
    default = budget.race(race())
    monkeypatch.setenv(budget.BUDGET_ENV, "10")
    assert budget.fit_race(race())[2].startswith("60 of the 128 tokens you asked for fit in the 10 s a request")
    assert budget.limit(default) == 10
    monkeypatch.setenv(budget.BUDGET_ENV, "0")
    assert budget.fit_race(race(gamma=10, max_new_tokens=512, second_drafter="image-aware"))[2] == ""
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


def test_the_table_of_strategies_replays_every_strategy_over_the_tokens_that_fit_beside_a_shortened_race(
    monkeypatch,
):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    names = presets.PRESETS["embedded"].drafter_names()
    short = race(max_new_tokens=128)
    table = sum(budget.replay_step(name, "embedded") for name in names)  # each strategy: its drafter steps, a token
    sweep = budget.SWEEP_GAMMAS * budget.replay_step("text-only", "embedded")
    assert budget.race(short).steps == pytest.approx(40 + (1.82 + 1 + sweep + table) * 128)
    assert budget.race(race(greedy=False, temperature=1.0)).per_unit == pytest.approx(1.82 * 1.25 + 1.25)  # none
    # so slow a machine that the race alone has room for 16 tokens and a few more: the race runs 16,
    # and its sweep and table replay the first tokens that fit beside it
    for kind in (None, "text-only"):
        for _ in range(budget.LEARN_KEEP):
            budget.record("embedded", kind, 20.0)
    monkeypatch.setenv(budget.LEARN_ENV, "1")
    try:
        ran, replayed, said = budget.fit_race(short)
    finally:
        budget.forget()
    assert ran.max_new_tokens == 16 and 0 < replayed < 16
    assert said.endswith(f"so the race runs 16. Its γ sweep and table of strategies replay its first {replayed}.")


@pytest.mark.parametrize("task", ["all", "description", "caption", "vqa"])
@pytest.mark.parametrize("drafters", [["text-only", "image-aware"], ["text-only", "image-aware", "feature"]])
def test_an_analysis_shortened_runs_the_n_its_sentence_names_which_fits_and_one_more_does_not(
    monkeypatch, task, drafters
):
    # the examples differ (a description counts 160 tokens, a yes/no a few): the advice counts the
    # first N examples themselves, the ones a smaller request gets (the mix is prefix-stable)
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)

    def estimate(n):
        items = examples_for(task, n, 0, ("en",))
        return budget.analysis("embedded", drafters, n, len(items), 4, 160, [item.answer for item in items])

    fitted, said = budget.fit(estimate(32))
    most = int(re.search(r"so the analysis runs (\d+)\.", said).group(1))
    assert most == fitted.units and budget.fit(estimate(most))[1] == ""
    assert budget.fit(estimate(most + 1))[1]


def test_a_single_law_check_counts_the_law_and_the_targets_draws_and_is_shortened_or_refused(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    # the issue's check: k 3, γ 10: two prefills (40), the law (1 + 2 x 100 prefixes), the p-values (10), one
    # step more; per draw the lane's 3 rounds and the broken rule's 1 at γ 4 (its drafts stop at k + 1), sampled,
    # and the target's 2
    heavy = budget.law("embedded", "text-only", 10, 3, 200)
    assert heavy.fixed == pytest.approx(40 + 1 + 200 + 1 + 10)
    assert heavy.per_unit == pytest.approx(4 * (1.1 + 4 * 0.18) * 1.25 + 2)
    assert budget.fit(heavy) == (heavy, "")  # 49 s: it runs whole
    monkeypatch.setenv(budget.BUDGET_ENV, "20")
    fitted, said = budget.fit(heavy)
    assert budget.MIN_DRAWS <= fitted.units < 200 and fitted.seconds <= 20
    assert (
        said
        == f"{fitted.units} of the 200 draws you asked for fit in the 20 s a request may take, so the check runs {fitted.units}."
    )
    monkeypatch.setenv(budget.BUDGET_ENV, "8")
    assert refusal(budget.fit, heavy) == (
        "This check asks for the sampling law of 3 tokens drawn 200 times each way (text-only at γ 10), and not even "
        "its smallest version (50 draws) fits in the 8 s a request may take here. To run it, check fewer tokens (k), "
        "or lower γ."
    )
