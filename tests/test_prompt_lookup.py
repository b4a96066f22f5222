"""Prompt lookup: the lookup on hand-built histories, greedy output identical to the target alone,
rounds that draft nothing, and the sampling law with a negative control that fails."""

import embedded
import law
import pytest
import torch
from races import CASES, GREEDY, spd

from demo.engine import metrics
from demo.engine.lookup import PromptLookup, lookup
from demo.engine.sampling import acceptance_probs, sample
from demo.models.presets import PRESETS, PROMPT_LOOKUP


def test_lookup_matches_the_longest_tail_first():
    # [7, 3, 4] occurs nowhere earlier; [3, 4] does, at 2: what followed it is proposed, not
    # what followed the earlier one-token match of [4] at 0.
    assert lookup([4, 9, 3, 4, 8, 7, 3, 4], 3) == [8, 7, 3]


def test_lookup_takes_the_leftmost_occurrence_and_stops_at_the_history_end():
    assert lookup([1, 2, 5, 1, 2, 6, 1, 2], 2) == [5, 1]
    assert lookup([1, 2, 3, 1, 2], 5) == [3, 1, 2]
    assert lookup([1, 1, 1], 4) == [1]


def test_lookup_proposes_nothing_without_an_earlier_match():
    assert lookup([1, 2, 3], 4) == []
    assert lookup([5], 4) == []
    assert lookup([], 4) == []
    assert lookup([1, 2, 1], 0) == []


def test_lookup_respects_the_longest_tail_it_may_match():
    history = [3, 5, 2, 3, 7, 1, 2, 3, 9, 1, 2, 3]
    assert lookup(history, 1, max_ngram=3) == [9]  # [1, 2, 3] at 5
    assert lookup(history, 1, max_ngram=2) == [7]  # [2, 3] at 2
    assert lookup(history, 1, max_ngram=1) == [5]  # [3] at 0


def test_drafts_are_cut_after_a_stop_and_q_is_one_on_each_draft():
    drafter = PromptLookup(
        name=PROMPT_LOOKUP, target_vocab_size=12, stop_ids=frozenset({3}), blocked_ids=frozenset({2}), device="cpu"
    )
    state = drafter.start({"input_ids": torch.tensor([[2, 2, 5, 3, 9, 5, 6]])})
    assert state.prompt_ids == [5, 3, 9, 5, 6]  # the image placeholders are left out
    drafts, q = state.draft([8, 5, 3, 9], 4, GREEDY, torch.Generator())
    assert drafts == [5, 6, 8, 5]  # [5, 3, 9] at 0 is followed by 5, 6, then the answer's 8, 5
    assert torch.equal(q, torch.nn.functional.one_hot(torch.tensor(drafts), 12).float())
    drafts, _ = state.draft([5], 4, GREEDY, torch.Generator())
    assert drafts == [3]  # [5] at 0 is followed by the stop 3: nothing is drafted past it


def test_prompt_lookup_is_offered_on_every_preset():
    for preset in PRESETS.values():
        assert PROMPT_LOOKUP in preset.drafter_names()
        assert PROMPT_LOOKUP not in preset.unusable()


@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_prompt_lookup_output_identical_to_the_target_alone(world, answers, gamma):
    drafted = accepted = 0
    for (image, question), reference in zip(CASES, answers):
        trace = spd(world, PROMPT_LOOKUP, image, question, gamma)
        assert trace.summary.token_ids == reference
        drafted += metrics.drafted(trace)
        accepted += metrics.accepted(trace)
    assert drafted > 0 and accepted > 0  # it did find matches, and some were right


def test_rounds_that_draft_nothing_are_plain_target_steps(world):
    trace = spd(world, PROMPT_LOOKUP, *CASES[1], 4)
    empty = [r for r in trace.rounds if not r.drafted_ids]
    assert empty and len(empty) < len(trace.rounds)  # this case has rounds of both sorts
    for r in empty:
        tokens = [t for t in trace.tokens if t.round == r.index]
        assert (r.n_accepted, r.n_emitted, len(tokens)) == (0, 1, 1)
        assert tokens[0].kind == "target" and tokens[0].token_id == r.target_id
        assert r.detail.positions == () and r.tree is None
    # tau counts every round, alpha only the drafts that were made
    assert metrics.tau(trace) == metrics.decode_tokens(trace) / len(trace.rounds)
    made = [r for r in trace.rounds if r.drafted_ids]
    assert metrics.alpha(trace) == sum(r.n_accepted for r in made) / sum(len(r.drafted_ids) for r in made)
    summary = metrics.summary(trace)
    assert summary["drafts_per_round"] < 4 and summary["c"] == 0.0 and summary["mbsu"] == metrics.tau(trace)
    assert trace.start.drafter.kind == "prompt-lookup" and trace.start.drafter.params == 0


@pytest.mark.slow
def test_greedy_prompt_lookup_identical_on_every_task_family_gamma_and_budget():
    assert embedded.mismatches(PROMPT_LOOKUP, range(1, 9), (1, 2, 5, 17, 128)) == []


@pytest.mark.fast
def test_the_exactness_sweeps_covering_design_runs_every_pair_of_task_gamma_and_budget():
    """The slow sweeps (prompt lookup, trees, layer skip) run `embedded.design`, not the full
    product: every task at every gamma (twice), and every budget beside every task and gamma."""
    tasks, gammas, budgets = range(8), range(1, 9), (1, 2, 5, 17, 128)
    runs = embedded.design(len(tasks), gammas, budgets)
    assert len(runs) == len(set(runs)) == 2 * len(tasks) * len(gammas)  # two fifths of the 320
    levels = (tasks, gammas, budgets)
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert {(run[a], run[b]) for run in runs} == {(x, y) for x in levels[a] for y in levels[b]}
    assert {(g, b) for t, g, b in runs if t == 0 and b == 128} == {(2, 128), (4, 128), (7, 128)}  # the long answer


def resample_from_p(p, q, drafts, generator):
    """A wrong rule: the right acceptances, then the target's token drawn from p itself."""
    u = torch.rand(drafts.shape, generator=generator)
    n = (u < acceptance_probs(p, q, drafts)).long().cumprod(-1).sum(-1)
    return n, sample(p[n], generator)


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True], ids=["exact", "resample-from-p"])
def test_prompt_lookup_sampling_matches_the_target_law(tok, monkeypatch, broken):
    world = law.small_world(tok)
    drafter = PromptLookup(
        name=PROMPT_LOOKUP,
        target_vocab_size=law.VOCAB,
        stop_ids=frozenset({3}),
        blocked_ids=frozenset({2}),
        device="cpu",
    )
    if broken:  # negative control: at a rejection, resample from p, not from p with the draft removed
        monkeypatch.setattr("demo.engine.verification.verify_sampled", resample_from_p)
    n = law.BROKEN_RUNS if broken else law.RUNS[2]
    distance, bound, traces = law.law_distance(world, drafter, world.prompt, n=n, gamma=2)
    assert sum(metrics.drafted(t) for t in traces) > 1000  # lookup did draft, and drafts were judged
    assert (distance > bound) == broken, (distance, bound)
