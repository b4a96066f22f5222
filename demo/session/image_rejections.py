"""Rejections against the target's image attention: was the drafter rejected where the target looked
at the image, or where the answer depends on it? Pure functions over `rejections.Observation`s;
those without an attention reading are left out."""

from __future__ import annotations

import math

BINS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)  # share of the target's attention on the image
THRESHOLD = 0.35  # the headline's "looking at the image": above this share (measured: docs/grounding.md)


def _read(obs: list) -> list:
    return [o for o in obs if o.image_attention is not None]


def _rate(obs: list) -> float:
    return sum(not o.accepted for o in obs) / len(obs) if obs else math.nan


def _counts(obs: list) -> dict:
    """A table row's counts of a group of drafts: drafted, rejected, and the rate (None for no drafts)."""
    return {
        "drafted": len(obs),
        "rejected": sum(not o.accepted for o in obs),
        "rejection_rate": _rate(obs) if obs else None,
    }


def binned(obs_by_drafter: dict[str, list], bins: tuple[float, ...] = BINS) -> list[dict]:
    """One row per drafter and bin [lo, hi) (the last bin closed): drafted, rejected, rate."""
    rows = []
    for drafter, obs in obs_by_drafter.items():
        obs = _read(obs)
        for k, (lo, hi) in enumerate(zip(bins, bins[1:])):
            last = k == len(bins) - 2
            inside = [o for o in obs if lo <= o.image_attention < hi or (last and o.image_attention == hi)]
            rows.append({"drafter": drafter, "from": lo, "to": hi} | _counts(inside))
    return rows


def quartiles(obs: list) -> dict:
    """Rejection rate in the bottom and the top quartile of the observations' image share (by
    rank: the quarter with the lowest shares, the quarter with the highest; n // 4 each)."""
    ranked = sorted(_read(obs), key=lambda o: o.image_attention)
    q = len(ranked) // 4
    bottom, top = ranked[:q], ranked[len(ranked) - q :] if q else []
    return {
        "observations": len(ranked),
        "per_quartile": q,
        "bottom_max_share": bottom[-1].image_attention if bottom else None,
        "top_min_share": top[0].image_attention if top else None,
        "bottom_rejection_rate": _rate(bottom),
        "top_rejection_rate": _rate(top),
    }


def ratio(obs: list, threshold: float = THRESHOLD) -> dict:
    """Rejection rates above and at-or-below `threshold`, and their ratio (NaN where undefined)."""
    obs = _read(obs)
    above = [o for o in obs if o.image_attention > threshold]
    below = [o for o in obs if o.image_attention <= threshold]
    hi, lo = _rate(above), _rate(below)
    return {
        "above": len(above),
        "below": len(below),
        "above_rate": hi,
        "below_rate": lo,
        "ratio": hi / lo if lo and not math.isnan(hi) and not math.isnan(lo) else math.nan,
    }


def _times(r: dict) -> str:
    if math.isnan(r["ratio"]):
        if r["above"] and r["below"] and r["below_rate"] == 0:
            return f"{r['above_rate']:.0%} of the time, and never elsewhere"
        return "— too few drafts on one side to compare"
    return f"{r['ratio']:.1f}x as often as elsewhere"


def headline(obs_by_drafter: dict[str, list], threshold: float = THRESHOLD) -> str | None:
    """ "Drafts at positions where the target put more than 30% of its attention on the image were
    rejected 4.0x as often as elsewhere (text-only) / 1.5x (image-aware)", from the batch; None
    when no observation has its image attention."""
    parts = []
    for drafter, obs in obs_by_drafter.items():
        if not _read(obs):
            continue
        r = ratio(obs, threshold)
        parts.append(f"{_times(r)} ({drafter}: {r['above']} such draft{'s' * (r['above'] != 1)})")
    if not parts:
        return None
    return (
        f"Drafts at positions where the target put more than {threshold:.0%} of its attention on the image "
        f"were rejected {' / '.join(parts)}."
    )


def most_image_dependent(rejections: list[dict], k: int = 8) -> list[dict]:
    """The k rejections with the highest image share (ties: the earlier run and position first).
    Each record: run, drafter, index, token, draft, category, image_attention."""
    read = [r for r in rejections if r["image_attention"] is not None]
    return sorted(read, key=lambda r: (-r["image_attention"], r["run"], r["index"]))[:k]


def by_dependence(obs_by_drafter: dict[str, list]) -> list[dict]:
    """One row per drafter and side (image-dependent, then independent) over the observations whose
    ablation was read (`Observation.image_dependent` not None): drafted, rejected, rate (None: none)."""
    rows = []
    for drafter, obs in obs_by_drafter.items():
        read = [o for o in obs if o.image_dependent is not None]
        for dependent in (True, False):
            side = [o for o in read if o.image_dependent is dependent]
            rows.append({"drafter": drafter, "dependent": dependent} | _counts(side))
    return rows
