"""The gamma sweep: replaying a greedy race's answer with the drafter alone gives the race's rounds."""

import math

import pytest
import tiny
import torch

from demo.engine import metrics, sweep
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.engine.speculative import speculative_generate

CASES = list(zip(tiny.images(2), tiny.QUESTIONS[:2]))
DRAFTERS = ["text-partly", "image-partly", "image-always", "text-never"]
MAX_NEW = 24


def race(world, drafter, image, question, gamma, min_confidence=0.0, max_new=MAX_NEW):
    prompt = world.prompt(image, question, drafter)
    trace = Trace.of(
        speculative_generate(
            world.target,
            world.drafter(drafter),
            prompt,
            gamma=gamma,
            sampling=Sampling(),
            max_new_tokens=max_new,
            generator=torch.Generator().manual_seed(0),
            min_confidence=min_confidence,
        )
    )
    return trace, prompt


def rounds_of(trace):
    return tuple((len(r.drafted_ids), r.n_accepted, r.n_emitted) for r in trace.rounds)


@pytest.mark.parametrize("min_confidence", [0.0, 0.4], ids=["fixed", "adaptive"])
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_replay_at_the_race_gamma_gives_the_race_rounds_tau_alpha_and_histogram_exactly(world, drafter, min_confidence):
    for image, question in CASES:
        trace, prompt = race(world, drafter, image, question, gamma=4, min_confidence=min_confidence)
        point = sweep.replay(
            world.drafter(drafter),
            prompt.drafter_inputs,
            list(trace.summary.token_ids),
            gamma=4,
            max_new_tokens=MAX_NEW,
            min_confidence=min_confidence,
        )
        assert point.rounds == rounds_of(trace)
        assert point.tau == metrics.tau(trace)
        assert point.alpha == pytest.approx(metrics.alpha(trace), abs=0, nan_ok=True)
        assert point.histogram == metrics.accept_length_histogram(trace)
        assert point.drafts_per_round == metrics.drafts_per_round(trace)


@pytest.mark.parametrize("drafter", ["text-partly", "image-partly"])
def test_replay_at_other_gammas_equals_a_race_run_at_that_gamma(world, drafter):
    image, question = CASES[0]
    base, prompt = race(world, drafter, image, question, gamma=4)
    answer = list(base.summary.token_ids)
    for gamma in (1, 2, 3, 5, 6):
        point = sweep.replay(world.drafter(drafter), prompt.drafter_inputs, answer, gamma=gamma, max_new_tokens=MAX_NEW)
        other, _ = race(world, drafter, image, question, gamma=point.gamma)
        assert point.rounds == rounds_of(other), point.gamma


def test_a_budget_cut_answer_replays_with_its_draftless_last_round(world):
    image, question = CASES[0]
    trace, prompt = race(world, "image-always", image, question, gamma=4, max_new=7)
    point = sweep.replay(
        world.drafter("image-always"), prompt.drafter_inputs, list(trace.summary.token_ids), gamma=4, max_new_tokens=7
    )
    assert trace.summary.stop == "max_new_tokens" and point.rounds == rounds_of(trace)
    assert point.rounds == ((4, 4, 5), (0, 0, 1))  # 1 + 5 + 1 = 7 tokens: the last round has no room to draft


def test_sweep_rows_give_mbsu_from_the_drafts_made_and_the_cost_model_from_measured_costs():
    point = metrics.SweepPoint(gamma=3, rounds=((3, 3, 4), (2, 0, 1)))
    costs = metrics.Costs(t1=0.010, t_verify=0.014, t_draft=0.002, gamma=3)
    [row] = metrics.sweep_rows([point], c=0.1, step_costs=costs)
    assert row["gamma"] == 3 and row["tau"] == 2.5 and row["alpha"] == 0.6
    assert row["mbsu"] == pytest.approx(2.5 / (1 + 2.5 * 0.1))
    # 2.5 drafts a round: a verify of 3.5 tokens, interpolated: 0.010 + 2.5 * (0.004 / 3)
    assert row["predicted_speedup"] == pytest.approx(2.5 * 0.010 / (2.5 * 0.002 + 0.010 + 2.5 * 0.004 / 3))
    assert metrics.sweep_rows([point], c=0.1, step_costs=None)[0]["predicted_speedup"] is None


def test_sweep_rows_price_each_gamma_at_the_papers_ratios_whatever_the_measured_costs():
    point = metrics.SweepPoint(gamma=3, rounds=((3, 3, 4), (2, 0, 1)))
    # rounds of 3 and 2 drafts: drafter steps at 0.011 T1, verifies of 4 and 3 tokens at the H200's
    # 22.39 / 20.67 and 22.62 / 20.67 T1
    cost = (5 * 0.011 + 22.39 / 20.67 + 22.62 / 20.67) / 2
    slow = metrics.Costs(t1=0.010, t_verify=0.030, t_draft=0.004, gamma=3)
    fast = metrics.Costs(t1=0.010, t_verify=0.011, t_draft=0.001, gamma=3)
    rows = [metrics.sweep_rows([point], c=0.1, step_costs=costs)[0] for costs in (slow, fast, None)]
    assert [row["scaled_speedup"] for row in rows] == [pytest.approx(2.5 / cost)] * 3
    # prompt lookup drafts with no forward; layer-skip's step is the share of the target it runs
    lookup = metrics.sweep_rows([point], c=0.0, step_costs=None)[0]["scaled_speedup"]
    assert lookup == pytest.approx(2.5 / ((22.39 + 22.62) / 20.67 / 2))
    layers = metrics.sweep_rows([point], c=0.5, step_costs=None, kind="self")[0]["scaled_speedup"]
    assert layers == pytest.approx(2.5 / ((5 * 0.5 + (22.39 + 22.62) / 20.67) / 2))


def test_a_replay_times_each_rounds_drafting_and_prices_a_step_as_the_race_does():
    # the lower quartile over the rounds that drafted of seconds / drafter steps (1 and 2 ms: 1.25 ms);
    # a round that drafted nothing is left out
    chain = metrics.SweepPoint(gamma=3, rounds=((3, 3, 4), (2, 0, 1), (0, 0, 1)), draft_seconds=(0.003, 0.004, 0.5))
    assert chain.steps == [3, 2, 0] and chain.step_seconds == pytest.approx(0.00125)
    # a tree's steps are its catch-up and one per node with children (`metrics.drafter_steps`), not its path
    tree = metrics.SweepPoint(
        gamma=3, rounds=((2, 2, 3), (1, 0, 1)), tree_costs=((5, 9), (3, 7)), draft_seconds=(0.010, 0.006)
    )
    assert tree.steps == [5, 3] and tree.step_seconds == pytest.approx(0.002)
    assert math.isnan(metrics.SweepPoint(gamma=3, rounds=((0, 0, 1),), draft_seconds=(0.1,)).step_seconds)


def test_a_replay_measures_every_round_it_drafts(world):
    image, question = CASES[0]
    trace, prompt = race(world, "text-partly", image, question, gamma=4)
    point = sweep.replay(
        world.drafter("text-partly"),
        prompt.drafter_inputs,
        list(trace.summary.token_ids),
        gamma=4,
        max_new_tokens=MAX_NEW,
    )
    assert len(point.draft_seconds) == len(point.rounds) and all(t > 0 for t in point.draft_seconds)
    assert 0 < point.step_seconds < max(point.draft_seconds)


@pytest.mark.parametrize("name", ["feature", "medusa", "medusa+tree"])
def test_a_drafter_that_reads_the_targets_features_replays_its_race_from_one_target_forward(name):
    # the embedded world's shipped drafters: the replay hands over the features the race handed
    # over (the prompt's rows, then each round's accepted rows), made by one forward over the answer
    import feature_world as fw
    from embedded import embedded

    prompt = fw.prompt("description")
    for gamma in (4, 2):
        trace = fw.run(name, "description", "en", gamma, 40)
        answer = list(trace.summary.token_ids)
        features = sweep.answer_features(embedded().target, prompt.target_inputs, answer)
        assert features.shape[0] == prompt.target_inputs["input_ids"].shape[1] + len(answer) - 1
        drafter = fw.drafters()[name]
        point = sweep.replay(drafter, prompt.drafter_inputs, answer, gamma=gamma, max_new_tokens=40, features=features)
        assert point.rounds == rounds_of(trace), gamma
    with pytest.raises(ValueError, match="hidden states"):
        sweep.replay(drafter, prompt.drafter_inputs, answer, gamma=4, max_new_tokens=40)
