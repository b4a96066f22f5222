"""The acceptance rule and warping on hand-built distributions, and the full loop's output law.

Distribution checks compare an empirical distribution with the exact one by total-variation
distance. The bound comes from the L1 deviation inequality for an empirical distribution over k
outcomes from N draws (Weissman et al. 2003):
    P(||p_hat - p||_1 >= eps) <= (2^k - 2) exp(-N eps^2 / 2),
so with probability at least 1 - delta, TV = ||p_hat - p||_1 / 2 <= sqrt(2 (k ln 2 + ln(1/delta)) / N) / 2.
The whole loop's law is checked with a bound that uses the exact law, as tight with fewer runs
(`tests/law.py`). Every draw is seeded, so a check that passes once passes always; the negative controls show
the same check fails when the rule is wrong.
"""

import law
import pytest
import torch
from law import tv_bound

from demo.engine.sampling import Sampling, acceptance_probs, verify_greedy, verify_sampled, warp


def tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().sum() / 2)


def empirical(samples: torch.Tensor, k: int) -> torch.Tensor:
    return torch.bincount(samples.flatten(), minlength=k).double() / samples.numel()


P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04], dtype=torch.float64)
Q = torch.tensor([0.05, 0.10, 0.15, 0.20, 0.20, 0.30], dtype=torch.float64)


@pytest.mark.fast
def test_greedy_accepts_the_leading_drafts_that_match_the_target_argmax():
    logits = torch.full((4, 5), -1.0)
    logits[0, 2] = logits[1, 3] = logits[2, 0] = logits[3, 4] = 5.0  # target argmax: 2, 3, 0, 4
    for drafts, expected in [([2, 3, 0], (3, 4)), ([2, 3, 1], (2, 0)), ([1, 3, 0], (0, 2)), ([2, 1, 0], (1, 3))]:
        n, token = verify_greedy(logits, torch.tensor(drafts))
        assert (int(n), int(token)) == expected


@pytest.mark.fast
def test_draft_with_p_at_least_q_is_always_accepted():
    p = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    q = torch.tensor([[0.2, 0.8]])
    assert acceptance_probs(p, q, torch.tensor([0])).tolist() == [1.0]
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        n, _ = verify_sampled(p, q, torch.tensor([0]), g)
        assert int(n) == 1


@pytest.mark.fast
def test_draft_the_target_rules_out_is_always_rejected_and_resampled_from_the_residual():
    p = torch.tensor([[0.0, 0.3, 0.7], [1 / 3, 1 / 3, 1 / 3]])
    q = torch.tensor([[0.6, 0.4, 0.0]])
    g = torch.Generator().manual_seed(0)
    draws = []
    for _ in range(2000):
        n, token = verify_sampled(p, q, torch.tensor([0]), g)
        assert int(n) == 0
        draws.append(int(token))
    # residual = max(0, p - q) = [0, 0, 0.7] -> always token 2
    assert set(draws) == {2}


@pytest.mark.fast
def test_all_accepted_drafts_get_a_bonus_token_sampled_from_p_after_the_last_draft():
    p = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    q = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    n, token = verify_sampled(p, q, torch.tensor([0, 1]), torch.Generator().manual_seed(0))
    assert (int(n), int(token)) == (2, 2)


@pytest.mark.fast
def test_acceptance_probability_is_min_one_p_over_q():
    p = torch.tensor([[0.1, 0.9], [0.6, 0.4]])
    q = torch.tensor([[0.4, 0.6]])
    assert acceptance_probs(p, q, torch.tensor([0])).tolist() == pytest.approx([0.25])
    assert acceptance_probs(p, q, torch.tensor([1])).tolist() == [1.0]


def draw_with_rule(n: int, seed: int, accept_everything: bool = False) -> torch.Tensor:
    """n independent single-draft rounds: x ~ q, then the rule's first output token."""
    g = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(Q.expand(n, -1), 1, replacement=True, generator=g)  # [n, 1]
    p = P.expand(n, 2, -1)  # [n, gamma+1, V]
    q = Q.expand(n, 1, -1)
    n_acc, token = verify_sampled(p, q, drafts, g)
    first = torch.where(n_acc == 1, drafts[:, 0], token)
    return drafts[:, 0] if accept_everything else first


@pytest.mark.fast
def test_rejection_sampling_output_is_distributed_as_p_in_100k_draws():
    n = 100_000
    bound = tv_bound(len(P), n)
    assert tv(empirical(draw_with_rule(n, seed=1), len(P)), P) < bound
    # Negative control: accepting every draft reproduces q, which the same check rejects.
    assert tv(empirical(draw_with_rule(n, seed=1, accept_everything=True), len(P)), P) > 10 * bound


@pytest.mark.fast
def test_two_draft_rule_gives_p_at_both_positions_in_100k_draws():
    n, k = 100_000, len(P)
    g = torch.Generator().manual_seed(2)
    drafts = torch.multinomial(Q.expand(2 * n, -1), 1, replacement=True, generator=g).reshape(n, 2)
    n_acc, token = verify_sampled(P.expand(n, 3, -1), Q.expand(n, 2, -1), drafts, g)
    first = torch.where(n_acc >= 1, drafts[:, 0], token)
    second = torch.where(n_acc == 2, drafts[:, 1], token)
    reached = n_acc >= 1  # the second position is decided in this round only after an acceptance
    assert tv(empirical(first, k), P) < tv_bound(k, n)
    assert tv(empirical(second[reached], k), P) < tv_bound(k, int(reached.sum()))


@pytest.mark.fast
def test_temperature_top_k_and_top_p_warp_as_specified():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    torch.testing.assert_close(warp(logits, Sampling(greedy=False)), torch.tensor([0.5, 0.3, 0.15, 0.05]))
    torch.testing.assert_close(warp(logits, Sampling(greedy=False, top_k=2)), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    # top_p 0.8: 0.5 + 0.3 reaches it, so the two least likely tokens go.
    torch.testing.assert_close(warp(logits, Sampling(greedy=False, top_p=0.8)), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    torch.testing.assert_close(
        warp(logits, Sampling(greedy=False, top_p=0.81)), torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95
    )
    hot = warp(logits, Sampling(greedy=False, temperature=2.0))
    torch.testing.assert_close(hot, torch.softmax(logits / 2, -1))


# The full loop on a tiny-vocabulary model: enumerate the target's law of the first tokens.


@pytest.fixture(scope="module")
def small_world(tok):
    return law.small_world(tok, layers=1)


@pytest.mark.parametrize(
    "accept_everything, min_confidence", [(False, 0.0), (False, 0.3), (True, 0.0)], ids=["fixed", "adaptive", "broken"]
)
@pytest.mark.slow
def test_speculative_sampling_loop_matches_the_target_law_of_the_first_three_tokens(
    small_world, monkeypatch, accept_everything, min_confidence
):
    if accept_everything:  # negative control: a broken rule that accepts every draft
        monkeypatch.setattr(
            "demo.engine.verification.verify_sampled",
            lambda p, q, drafts, g: (torch.tensor(len(drafts)), torch.multinomial(p[-1], 1, generator=g)[0]),
        )
    # The broken rule's law is far off (TV 0.56 at 2650 runs): 400 runs show it over their bound of 0.27.
    n = 400 if accept_everything else law.RUNS[1]
    w = small_world
    distance, bound, traces = law.law_distance(w, w.drafter, w.prompt, n=n, gamma=2, min_confidence=min_confidence)
    short_rounds = sum(len(trace.rounds[0].drafted_ids) < 2 for trace in traces)
    assert (short_rounds > n // 10) == (min_confidence > 0)  # the adaptive runs did stop early
    if accept_everything:
        assert distance > bound
    else:
        assert distance < bound
