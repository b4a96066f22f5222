"""The benchmark's image-attention table: per language and drafter, the rejection rate in the
bottom and the top quartile of the target's image-attention share at the drafted positions
(`demo.session.image_rejections.quartiles`), and the rate above the headline's threshold over the rate
at or below it. Observations come from the benchmark's greedy runs, their image attention read
after each run (`demo.session.image_attention.attach`), off the runs' clocks."""

from __future__ import annotations

import math

from demo.session import image_rejections


def rows(obs_by: dict[tuple[str, str], list]) -> list[dict]:
    """One row per (language, drafter) with observations."""
    out = []
    for (language, drafter), obs in obs_by.items():
        q = image_rejections.quartiles(obs)
        r = image_rejections.ratio(obs)
        out.append({"language": language, "drafter": drafter, **q, "above_threshold_ratio": r["ratio"]})
    return out


def _pct(x) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.0%}"


def table(table_rows: list[dict]) -> str:
    """The rows as markdown: drafted positions, each quartile's share range and rejection rate."""
    lines = [
        "| language | drafter | positions | bottom quartile: share ≤, rejected | top quartile: share ≥, rejected "
        f"| rejected above {image_rejections.THRESHOLD:.0%} / at or below |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in table_rows:
        ratio = r["above_threshold_ratio"]
        lines.append(
            f"| {r['language']} | {r['drafter']} | {r['observations']} "
            f"| ≤ {r['bottom_max_share'] or 0:.2f}: {_pct(r['bottom_rejection_rate'])} "
            f"| ≥ {r['top_min_share'] or 0:.2f}: {_pct(r['top_rejection_rate'])} "
            f"| {'—' if math.isnan(ratio) else f'{ratio:.1f}x'} |"
        )
    return "\n".join(lines)
