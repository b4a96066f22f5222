"""Metrics and the race, on hand-built event streams with known answers."""

import math

import pytest

from demo.engine import metrics
from demo.engine.events import DrafterInfo, PrefillEvent, RoundEvent, RunStart, RunSummary, TokenEvent, Trace
from demo.engine.race import race
from demo.engine.sampling import Sampling

pytestmark = pytest.mark.fast  # the fast tier (`pytest -m fast`): pure functions and tiny models, milliseconds each


def round_event(index, drafted, n_accepted, n_emitted=None, t=0.0, stop=None):
    return RoundEvent(
        index=index,
        drafted_ids=tuple(range(drafted)),
        drafted_texts=("x",) * drafted,
        n_accepted=n_accepted,
        target_id=99,
        n_emitted=n_accepted + 1 if n_emitted is None else n_emitted,
        stop=stop,
        draft_seconds=0.0,
        verify_seconds=0.0,
        t=t,
    )


def spd_trace(rounds, gamma=4, target_params=1000, drafter_params=50, prefill_t=1.0, end_t=3.0):
    """A speculative trace with the given (drafted, accepted) rounds; t grows linearly to end_t."""
    trace = Trace()
    mode = "speculative" if gamma else "autoregressive"
    drafter = DrafterInfo("d", "text-only", drafter_params, 0.0) if gamma else None
    trace.add(RunStart(mode, "target", target_params, drafter, gamma, Sampling(), 100))
    trace.add(PrefillEvent(mode, 10, 8, 0.8, 0.2, t=prefill_t))
    trace.add(TokenEvent(index=0, token_id=1, text="a", kind="target", round=0, p=0.9, t=prefill_t))
    n = 1
    for i, (drafted, n_acc) in enumerate(rounds, start=1):
        t = prefill_t + (end_t - prefill_t) * i / len(rounds)
        for j in range(n_acc + 1):
            kind = "accepted" if j < n_acc else ("resampled" if n_acc < drafted else "bonus")
            trace.add(TokenEvent(index=n, token_id=5, text="b", kind=kind, round=i, p=0.5, t=t))
            n += 1
        trace.add(round_event(i, drafted, n_acc, t=t))
    trace.add(
        RunSummary(
            mode,
            (1,) * n,
            "ab",
            "eos",
            gamma,
            "d",
            target_params,
            drafter_params,
            prefill_t,
            end_t - prefill_t,
            len(rounds),
            t=end_t,
        )
    )
    return trace


ROUNDS = [(4, 4), (4, 0), (4, 2), (4, 1)]  # accepted 7 of 16 drafts; 4 + 0 + 2 + 1 + 4 own tokens


def test_tau_is_decoded_tokens_per_target_forward_with_bonus_counted():
    trace = spd_trace(ROUNDS)
    assert metrics.decode_tokens(trace) == 11
    assert metrics.tau(trace) == 11 / 4


def test_alpha_is_accepted_over_drafted():
    assert metrics.alpha(spd_trace(ROUNDS)) == 7 / 16


def test_acceptance_by_position_conditions_on_the_draft_being_proposed():
    trace = spd_trace([(4, 4), (2, 1), (1, 0)])
    # position 1: proposed in 3 rounds, accepted in 2; position 2: proposed in 2, accepted in 1
    assert metrics.acceptance_by_position(trace) == [2 / 3, 1 / 2, 1.0, 1.0]


def test_accept_length_histogram_counts_rounds_by_accepted_drafts():
    assert metrics.accept_length_histogram(spd_trace(ROUNDS)) == [1, 1, 1, 0, 1]


def test_mbsu_discounts_tau_by_drafting_cost():
    trace = spd_trace(ROUNDS, gamma=4, target_params=1000, drafter_params=50)
    assert metrics.param_ratio(trace) == 0.05
    assert metrics.mbsu(trace) == pytest.approx((11 / 4) / 1.2)


def test_tokens_per_second_excludes_the_prefill():
    trace = spd_trace(ROUNDS, prefill_t=1.0, end_t=3.0)
    assert metrics.tokens_per_second(trace) == 11 / 2.0


def test_speedup_is_the_throughput_ratio():
    spd = spd_trace(ROUNDS, prefill_t=1.0, end_t=3.0)
    ar = spd_trace([(0, 0)] * 11, gamma=0, prefill_t=1.0, end_t=12.0)
    assert metrics.tau(ar) == 1.0
    assert metrics.speedup(spd, ar) == pytest.approx((11 / 2) / (11 / 11))


def test_truncated_round_counts_only_emitted_tokens():
    trace = spd_trace([(4, 4)])
    trace.rounds[0] = round_event(1, 4, 4, n_emitted=4, stop="eos")
    assert metrics.tau(trace) == 4.0


def test_metrics_of_an_empty_decode_are_nan_not_errors():
    trace = Trace()
    trace.add(PrefillEvent("speculative", 10, 8, 0.8, 0.2, t=1.0))
    assert math.isnan(metrics.tau(trace)) and math.isnan(metrics.alpha(trace))


def test_running_tau_after_each_round():
    assert metrics.running_tau(spd_trace(ROUNDS)) == [5 / 1, 6 / 2, 9 / 3, 11 / 4]


class Clocked:
    def __init__(self, t):
        self.t = t


def test_race_advances_the_lane_whose_clock_is_behind():
    slow = iter([Clocked(2.0), Clocked(4.0), Clocked(6.0)])
    fast = iter([Clocked(1.0), Clocked(1.5), Clocked(5.0), Clocked(5.5)])
    order = [(lane, e.t) for lane, e in race({"slow": slow, "fast": fast})]
    assert order == [
        ("slow", 2.0),  # tie at 0: first lane listed
        ("fast", 1.0),
        ("fast", 1.5),
        ("fast", 5.0),
        ("slow", 4.0),
        ("slow", 6.0),
        ("fast", 5.5),
    ]


def test_speedup_is_nan_while_the_baseline_has_no_decoded_tokens():
    ar = Trace()
    ar.add(PrefillEvent("autoregressive", 10, 0, 0.8, 0.0, t=1.0))
    assert math.isnan(metrics.speedup(spd_trace(ROUNDS), ar))


def test_pooled_runs_start_as_the_first_so_their_rates_need_no_gamma_beside_them():
    whole = spd_trace(ROUNDS)
    pooled = metrics.pooled([spd_trace(ROUNDS[:2]), spd_trace(ROUNDS[2:])])
    assert pooled.gamma == 4 and len(pooled.rounds) == 4
    assert metrics.tau(pooled) == metrics.tau(whole) == 11 / 4
    assert metrics.acceptance_by_position(pooled) == metrics.acceptance_by_position(whole)
    assert metrics.mbsu(pooled) == metrics.mbsu(whole) == pytest.approx((11 / 4) / 1.2)


def test_a_trace_before_its_first_event_has_no_gamma_and_no_parameter_ratio():
    assert Trace().gamma == 0 and metrics.acceptance_by_position(Trace()) == []
    assert math.isnan(metrics.param_ratio(Trace()))
    assert "alpha" not in metrics.summary(Trace()) and "alpha" in metrics.summary(Trace(), speculative=True)


def test_cost_model_keeps_measured_verify_costs_and_never_prices_one_below_them():
    measured = metrics.Costs(t1=0.004, t_verify=0.006, t_draft=0.0005, gamma=4)
    assert measured.verify(1) == 0.004 and measured.verify(5) == pytest.approx(0.006)
    assert measured.verify(9) == pytest.approx(0.008)  # extrapolated along the measured slope
    # A busy machine timed the 5-token verify cheaper than the 1-token step: a wider forward does that
    # step's work and more, so every verify is held at one step at least.
    inverted = metrics.Costs(t1=0.075, t_verify=0.030, t_draft=0.001, gamma=4)
    assert inverted.verify(1) == inverted.verify(5) == inverted.verify(40) == 0.075


def test_a_drafter_that_gets_nothing_accepted_is_priced_at_or_below_x1_on_the_strategy_tables_costs():
    """τ 1, α 0 (text-only on a Chinese prompt): the row read ×1.55 where the verify was timed cheaper
    than one step; every draft is work for nothing, so it can never read faster than the target alone."""
    inverted = metrics.Costs(t1=0.075, t_verify=0.030, t_draft=0.001, gamma=4)
    for made in (4, 0):  # four rejected drafts a round; and prompt lookup with no match, which drafts nothing
        point = metrics.SweepPoint(gamma=4, rounds=((made, 0, 1),) * 5)
        [row] = metrics.sweep_rows([point], c=0.0 if made == 0 else 0.1, step_costs=inverted)
        assert point.alpha == 0 or made == 0
        assert row["predicted_speedup"] <= 1.0
    [row] = metrics.sweep_rows([metrics.SweepPoint(gamma=4, rounds=((0, 0, 1),) * 5)], c=0.0, step_costs=inverted)
    assert row["predicted_speedup"] == 1.0  # nothing drafted, nothing lost: the target alone
