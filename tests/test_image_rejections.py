"""Rejections against the target's image attention (pure, on hand-built observations)."""

from __future__ import annotations

import math

import pytest

from demo.lab.bench import attention_quartiles
from demo.session import image_rejections as ir
from demo.session.rejections import Observation


def obs(share: float | None, accepted: bool, index: int = 0) -> Observation:
    return Observation(0, index, 0.0, "t", "w", "template", accepted, "t", "w", share)


# text-only: rejected where the target looks at the image; image-aware: rarely
TEXT_ONLY = [obs(0.05, True), obs(0.1, True), obs(0.15, True), obs(0.2, False), obs(0.4, False), obs(0.6, False)]
TEXT_ONLY += [obs(0.7, True), obs(0.25, True), obs(None, False)]  # the last was not read: left out
IMAGE_AWARE = [obs(0.05, True), obs(0.1, False), obs(0.2, True), obs(0.35, False), obs(0.5, True), obs(0.8, True)]


def test_binned_counts_each_read_observation_once_per_drafter():
    rows = ir.binned({"text-only": TEXT_ONLY}, bins=(0.0, 0.3, 1.0))
    assert [(r["from"], r["to"], r["drafted"], r["rejected"]) for r in rows] == [(0.0, 0.3, 5, 1), (0.3, 1.0, 3, 2)]
    assert rows[1]["rejection_rate"] == pytest.approx(2 / 3)
    edge = ir.binned({"d": [obs(1.0, False), obs(0.3, True)]}, bins=(0.0, 0.3, 1.0))
    assert [r["drafted"] for r in edge] == [0, 2]  # 0.3 opens the upper bin; 1.0 closes the last
    assert edge[0]["rejection_rate"] is None


def test_quartiles_take_the_lowest_and_highest_quarter_by_share():
    q = ir.quartiles(TEXT_ONLY)
    assert q["observations"] == 8 and q["per_quartile"] == 2
    assert (q["bottom_max_share"], q["top_min_share"]) == (0.1, 0.6)
    assert (q["bottom_rejection_rate"], q["top_rejection_rate"]) == (0.0, 0.5)


def test_ratio_and_headline_compare_drafts_above_and_below_the_threshold():
    r = ir.ratio(TEXT_ONLY, 0.3)
    assert (r["above"], r["below"]) == (3, 5)
    assert r["ratio"] == pytest.approx((2 / 3) / (1 / 5))
    assert ir.headline({"text-only": TEXT_ONLY, "image-aware": IMAGE_AWARE}, 0.3) == (
        "Drafts at positions where the target put more than 30% of its attention on the image were rejected "
        "3.3x as often as elsewhere (text-only: 3 such drafts) / 1.0x as often as elsewhere (image-aware: 3 such drafts)."
    )
    assert ir.headline({"text-only": [obs(None, True)]}) is None
    never = ir.ratio([obs(0.5, False), obs(0.1, True)], 0.3)
    assert math.isnan(never["ratio"])


def test_most_image_dependent_rejections_rank_by_share():
    rejections = [
        {"run": 2, "index": 4, "image_attention": 0.5},
        {"run": 1, "index": 9, "image_attention": 0.9},
        {"run": 1, "index": 3, "image_attention": 0.5},
        {"run": 3, "index": 0, "image_attention": None},
    ]
    ranked = ir.most_image_dependent(rejections, k=3)
    assert [(r["run"], r["index"]) for r in ranked] == [(1, 9), (1, 3), (2, 4)]


def test_benchmark_table_gives_each_drafters_quartile_rates():
    rows = attention_quartiles.rows({("en", "text-only"): TEXT_ONLY, ("en", "image-aware"): IMAGE_AWARE})
    text = attention_quartiles.table(rows)
    assert "| en | text-only | 8 | ≤ 0.10: 0% | ≥ 0.60: 50% | 3.3x |" in text
    assert "| en | image-aware | 6 | ≤ 0.05: 0% | ≥ 0.80: 0% | 0.0x |" in text  # above 35%: none rejected
