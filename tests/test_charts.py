"""The four live charts plot exactly the numbers of demo.engine.metrics and the events' clocks."""

import pytest
from test_render import ar_trace, spd_trace

from demo.engine import metrics
from demo.engine.events import Trace
from demo.page import charts


def test_race_plots_tokens_against_each_runs_own_clock():
    spd, ar = spd_trace(), ar_trace()
    fig = charts.race(spd, ar)
    lines = {line.name: line for line in fig.data}
    assert set(lines) == {"speculative", "autoregressive"}
    assert list(lines["speculative"].x) == [0.0, 0.035, 0.06, 0.06, 0.09, 0.09, 0.09, 0.09, 0.11]
    assert list(lines["speculative"].y) == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert list(lines["autoregressive"].x) == pytest.approx([0.0, 0.04, 0.05, 0.06])
    assert list(lines["autoregressive"].y) == [0, 1, 2, 3]
    assert lines["speculative"].line.shape == "hv"


def test_block_efficiency_is_the_running_tau_between_its_bounds():
    spd = spd_trace()
    fig = charts.block_efficiency(spd)
    assert list(fig.data[0].y) == metrics.running_tau(spd) == [2.0, 3.0, 7 / 3]
    assert list(fig.data[0].x) == [1, 2, 3]
    assert sorted(shape.y0 for shape in fig.layout.shapes) == [1, 4]


def test_accept_length_histogram_counts_rounds_by_accepted_drafts():
    fig = charts.accept_lengths(spd_trace())
    assert list(fig.data[0].x) == [0, 1, 2, 3]
    assert list(fig.data[0].y) == [0, 2, 0, 1]


def test_acceptance_by_position_leaves_positions_never_drafted_empty():
    fig = charts.acceptance_by_position(spd_trace(gamma=4))  # gamma 4, but no round drafted 4
    assert list(fig.data[0].x) == [1, 2, 3, 4]
    assert list(fig.data[0].y) == [1.0, 0.5, 0.5, None]


@pytest.mark.parametrize(
    "draw",
    [
        lambda t: charts.race(t, t),
        charts.block_efficiency,
        charts.accept_lengths,
        charts.acceptance_by_position,
    ],
)
def test_every_chart_draws_an_empty_trace(draw):
    fig = draw(Trace())
    assert fig.layout.height == charts.HEIGHT
    assert fig.to_json()
