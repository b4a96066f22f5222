"""The Analysis tab's figures give every compared drafter its own colour."""

import itertools

import pytest

from demo.page.analysis import charts as analysis_charts
from demo.session import batches

pytestmark = pytest.mark.fast

# every drafter the embedded world registers, and a name the palette has never seen
NAMES = ("text-only", "image-aware", "feature", "feature+tree", "medusa", "medusa+tree", "staged", "lookup", "other")


def test_no_two_compared_drafters_share_a_colour():
    for picked in itertools.permutations(NAMES, batches.MAX_COMPARED):  # every pick, in every order
        colours = [analysis_charts.colour(name, i) for i, name in enumerate(picked)]
        assert len(set(colours)) == len(colours), dict(zip(picked, colours))


def test_the_blind_the_sighted_and_the_target_feature_drafter_keep_their_colour_in_every_figure():
    for i in range(batches.MAX_COMPARED):
        assert analysis_charts.colour("text-only", i) == "#E69F00"
        assert analysis_charts.colour("image-aware", i) == "#0072B2"
        assert analysis_charts.colour("feature", i) == "#009E73"
