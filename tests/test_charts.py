"""The four live charts plot exactly the numbers of demo.engine.metrics and the events' clocks."""

import pytest
from test_render import ar_trace, spd_trace

from demo.engine import metrics
from demo.engine.events import Trace
from demo.page import charts

pytestmark = pytest.mark.fast  # the fast tier (`pytest -m fast`): pure functions and tiny models, milliseconds each


def test_race_plots_tokens_against_each_runs_own_clock():
    spd, ar = spd_trace(), ar_trace()
    fig = charts.race([spd], ar)
    lines = {line.name: line for line in fig.data}
    assert set(lines) == {"SPD text-only", "autoregressive"}
    assert list(lines["SPD text-only"].x) == [0.0, 0.035, 0.06, 0.06, 0.09, 0.09, 0.09, 0.09, 0.11]
    assert list(lines["SPD text-only"].y) == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert list(lines["autoregressive"].x) == pytest.approx([0.0, 0.04, 0.05, 0.06])
    assert list(lines["autoregressive"].y) == [0, 1, 2, 3]
    assert lines["SPD text-only"].line.shape == "hv"


def test_block_efficiency_is_the_running_tau_between_its_bounds():
    spd = spd_trace()
    fig = charts.block_efficiency([spd])
    assert list(fig.data[0].y) == metrics.running_tau(spd) == [2.0, 3.0, 7 / 3]
    assert list(fig.data[0].x) == [1, 2, 3]
    assert sorted(shape.y0 for shape in fig.layout.shapes) == [1, 4]


def test_accept_length_histogram_counts_rounds_by_accepted_drafts():
    fig = charts.accept_lengths([spd_trace()])
    assert list(fig.data[0].x) == [0, 1, 2, 3]
    assert list(fig.data[0].y) == [0, 2, 0, 1]


def test_acceptance_by_position_leaves_positions_never_drafted_empty():
    fig = charts.acceptance_by_position([spd_trace(gamma=4)])  # gamma 4, but no round drafted 4
    assert list(fig.data[0].x) == [1, 2, 3, 4]
    assert list(fig.data[0].y) == [1.0, 0.5, 0.5, None]


def two_lanes():
    second = spd_trace(drafter="image-aware")
    second.rounds = second.rounds[:2]  # a lane behind the other: two rounds so far
    second.tokens = [t for t in second.tokens if t.round <= 2]
    return [spd_trace(), second]


def test_two_lanes_are_overlaid_each_in_its_own_style_and_named_by_its_drafter_in_a_legend():
    spds, ar = two_lanes(), ar_trace()
    race = charts.race(spds, ar)
    assert [line.name for line in race.data] == ["SPD text-only", "SPD image-aware", "autoregressive"]
    assert [line.line.dash for line in race.data] == ["solid", "dash", "dot"]  # apart without colour too
    assert list(race.data[1].y) == [0, 1, 2, 3, 4, 5, 6, 7]
    tau = charts.block_efficiency(spds)
    assert tau.layout.showlegend and [line.name for line in tau.data] == ["SPD text-only", "SPD image-aware"]
    assert list(tau.data[1].y) == metrics.running_tau(spds[1]) == [2.0, 3.0]
    assert [line.marker.symbol for line in tau.data] == ["circle", "diamond"]
    hist = charts.accept_lengths(spds)
    assert hist.layout.barmode == "group" and [list(bar.y) for bar in hist.data] == [[0, 2, 0, 1], [0, 1, 0, 1]]
    assert hist.data[1].marker.pattern.shape == "/" and not hist.data[0].marker.pattern.shape
    pos = charts.acceptance_by_position(spds)
    assert [list(bar.y) for bar in pos.data] == [[1.0, 0.5, 0.5], [1.0, 0.5, 0.5]]


def test_a_single_lane_keeps_its_charts_without_a_legend():
    spd = spd_trace()
    assert not charts.block_efficiency([spd]).layout.showlegend and charts.block_efficiency([spd]).data[0].name == "τ"
    assert not charts.accept_lengths([spd]).layout.showlegend


@pytest.mark.parametrize(
    "draw",
    [
        lambda t: charts.race([t], t),
        lambda t: charts.race([t, t], t),
        lambda t: charts.block_efficiency([t]),
        lambda t: charts.accept_lengths([t, t]),
        lambda t: charts.acceptance_by_position([t]),
    ],
)
def test_every_chart_draws_an_empty_trace(draw):
    fig = draw(Trace())
    assert fig.layout.height == charts.HEIGHT
    assert fig.to_json()
