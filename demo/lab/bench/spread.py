"""How far one race's speedup can be trusted: `python -m demo.lab.bench.spread [--races 5] [--load N]`.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
from contextlib import contextmanager

from PIL import Image

from demo import session
from demo.engine import export, metrics
from demo.engine.events import Trace
from demo.models import presets
from demo.page.examples import load_examples
from demo.page.speedup import clock_note

BAR = 0.15  # the bar: every race within ±15% of the median


def default_request() -> tuple[session.Request, Image.Image]:
    """The page's default race: its first example with the default settings."""
    example = load_examples()[0]
    preset = presets.PRESETS[presets.DEFAULT_PRESET]
    request = session.parse(question=example.question, preset=preset.name, drafter=preset.drafters[0].name)
    return request, Image.open(example.image).convert("RGB")


def race_once(loaded, request: session.Request, image: Image.Image) -> dict:
    """One race as the page runs it; its speedups and step costs: the headline's projection, this
    machine's range (`metrics.split`: `low` with the host's part, `high` the model steps alone),
    whether the page warns that a clock was hit, and the wall clock."""
    traces = {lane: Trace() for lane in session.LANES}
    with session.racing(session.lanes(loaded, request, image)) as events:
        for lane, event in events:
            traces[lane].add(event)
    spd, ar = traces["speculative"], traces["autoregressive"]
    costs, split = metrics.costs(spd, ar), metrics.split(spd, ar)
    wall = export.comparison(spd, ar)["speedup"]
    return {
        "headline": metrics.scaled_speedup(spd),
        "alpha": metrics.alpha(spd),
        "mbsu": metrics.mbsu_made(spd),
        "clock_note": bool(clock_note(spd, ar, wall)),
        "low": split["low"],
        "high": split["high"],
        "speedup": wall,
        "tau": metrics.tau(spd),
        "t1_ms": costs.t1 * 1000,
        "t_verify_ms": costs.t_verify * 1000,
        "t_draft_ms": costs.t_draft * 1000,
    }


def _busy() -> None:  # a CPU-bound process: spins until terminated
    while True:
        pass


@contextmanager
def load(n: int):
    """`n` CPU-bound processes sharing the machine while the block runs; stopped after it."""
    procs = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()


def spread(values: list[float], around: float) -> float:
    """The largest |value - around| / around."""
    return max(abs(v - around) / around for v in values)


def race_set(loaded, request, image, races: int, label: str) -> dict:
    """`races` races; a table of them and their spreads."""
    before = os.getloadavg()[0]
    rows = [race_once(loaded, request, image) for _ in range(races)]
    during = os.getloadavg()[0]
    print(f"\n{label}: 1-minute load average {before:.2f} before, {during:.2f} after")
    print(
        f"{'race':>4} {'headline':>8} {'tau':>5} {'alpha':>5} {'MBSU':>5} {'this machine':>12} {'wall':>6} "
        f"{'T1 ms':>7} {'T(g+1) ms':>9} {'D ms':>6} clock note"
    )
    for i, r in enumerate(rows, start=1):
        print(
            f"{i:>4} {r['headline']:>8.2f} {r['tau']:>5.2f} {r['alpha']:>5.2f} {r['mbsu']:>5.2f} "
            f"{r['low']:>5.2f}-{r['high']:<6.2f} {r['speedup']:>6.2f} {r['t1_ms']:>7.2f} {r['t_verify_ms']:>9.2f} "
            f"{r['t_draft_ms']:>6.2f} {'yes' if r['clock_note'] else 'no'}"
        )
    out = {"label": label, "load_before": before, "load_after": during, "races": rows}
    words = {
        "headline": "headline (paper's scale, from τ)",
        "low": "this machine, with the host's part of a round",
        "high": "this machine, the model steps alone (the cost model)",
        "speedup": "wall-clock",
    }
    for key, word in words.items():
        values = [r[key] for r in rows]
        median = statistics.median(values)
        out[key] = {"median": median, "spread": spread(values, median)}
        print(f"{word}: median ×{median:.2f}, spread ±{out[key]['spread'] * 100:.0f}%")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--races", type=int, default=5)
    parser.add_argument("--load", type=int, default=0, help="CPU-bound processes of its own for a second set of races")
    args = parser.parse_args()
    request, image = default_request()
    loaded = session.load(request)
    race_once(loaded, request, image)  # warm-up: first-call costs stay out of the figures
    first = race_set(loaded, request, image, args.races, "the machine as it is")
    result = {"first": first, "within_bar": first["headline"]["spread"] <= BAR}
    if args.load:
        with load(args.load):
            loaded_set = race_set(loaded, request, image, args.races, f"with {args.load} CPU-bound processes")
        headlines = [r["headline"] for r in loaded_set["races"]]
        against_first = spread(headlines, first["headline"]["median"])
        worst = max(loaded_set["headline"]["spread"], against_first)
        result |= {"loaded": loaded_set, "loaded_vs_first": against_first, "within_bar": worst <= BAR}
        print(
            f"\nloaded headlines: ±{loaded_set['headline']['spread'] * 100:.0f}% around their median, "
            f"±{against_first * 100:.0f}% around the first set's median ×{first['headline']['median']:.2f}"
        )
    verdict = "within" if result["within_bar"] else "outside"
    print(f"{verdict} the ±{BAR * 100:.0f}% bar")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
