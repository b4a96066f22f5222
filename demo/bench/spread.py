"""How far one race's speedup can be trusted: `python -m demo.bench.spread [--races 5]`.

Contract: the page's default race (the first example, the default preset and drafter, the
session's default settings: greedy, γ = 4, 128 new tokens), raced `--races` times back to back
in this process after one warm-up race, exactly as the page races it (`demo.session.lanes` and
`racing`: compute-fair, each run on its own clock, the device synchronised). Prints each race's
wall-clock speedup, its speedup from per-round medians and the cost model's prediction from
its own step costs (`demo.engine.metrics`), whether its timing was noisy, then the median and
the spread around it (largest |speedup - median| / median), against the issue's bar of ±15% on
an idle machine; ends with one JSON line. Timings are of this machine as it is: run it on a
quiet one (a shared, busy CPU spreads them far more).
"""

from __future__ import annotations

import argparse
import json
import statistics

from PIL import Image

from demo import session
from demo.engine import export, metrics
from demo.engine.events import Trace
from demo.models import presets
from demo.page.examples import load_examples

BAR = 0.15  # the bar: every race within ±15% of the median


def default_request() -> tuple[session.Request, Image.Image]:
    """The page's default race: its first example with the default settings."""
    example = load_examples()[0]
    preset = presets.PRESETS[presets.DEFAULT_PRESET]
    request = session.parse(question=example.question, preset=preset.name, drafter=preset.drafters[0].name)
    return request, Image.open(example.image).convert("RGB")


def race_once(loaded, request: session.Request, image: Image.Image) -> dict:
    """One race as the page runs it; its speedups and step costs."""
    traces = {lane: Trace() for lane in session.LANES}
    with session.racing(session.lanes(loaded, request, image)) as events:
        for lane, event in events:
            traces[lane].add(event)
    spd, ar = traces["speculative"], traces["autoregressive"]
    costs = metrics.costs(spd, ar)
    mid, low, high = metrics.round_speedups(spd, ar)
    return {
        "speedup": export.comparison(spd, ar)["speedup"],
        "round_median_speedup": mid,
        "round_quartile_speedups": [low, high],
        "predicted": metrics.predicted(metrics.tau(spd), metrics.drafts_per_round(spd), costs),
        "tau": metrics.tau(spd),
        "t1_ms": costs.t1 * 1000,
        "t_verify_ms": costs.t_verify * 1000,
        "t_draft_ms": costs.t_draft * 1000,
        "noisy": costs.noisy,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--races", type=int, default=5)
    args = parser.parse_args()
    request, image = default_request()
    loaded = session.load(request)
    race_once(loaded, request, image)  # warm-up: first-call costs stay out of the figures
    rows = [race_once(loaded, request, image) for _ in range(args.races)]
    print(f"{'race':>4} {'speedup':>8} {'rounds':>7} {'predicted':>9} {'T1 ms':>7} {'T(g+1) ms':>9} {'D ms':>6} noisy")
    for i, r in enumerate(rows, start=1):
        print(
            f"{i:>4} {r['speedup']:>8.2f} {r['round_median_speedup']:>7.2f} {r['predicted']:>9.2f} "
            f"{r['t1_ms']:>7.2f} {r['t_verify_ms']:>9.2f} {r['t_draft_ms']:>6.2f} {'yes' if r['noisy'] else 'no'}"
        )
    speedups = [r["speedup"] for r in rows]
    median = statistics.median(speedups)
    spread = max(abs(s - median) / median for s in speedups)
    verdict = "within" if spread <= BAR else "outside"
    print(f"median ×{median:.2f}, spread ±{spread * 100:.0f}% ({verdict} the ±{BAR * 100:.0f}% bar)")
    print(json.dumps({"races": rows, "median": median, "spread": spread, "within_bar": spread <= BAR}))


if __name__ == "__main__":
    main()
