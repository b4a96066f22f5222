"""What each draft of a round costs in the bench's own races: `python -m demo.lab.bench.draft_positions`.

The bench's D is a round's drafting time over its drafts. On a CPU the round's first draft runs
right after the target's verify forward, which streams the target's weights through the caches,
so it costs several later drafts (docs/drafters-feature.md, "The round's first draft"). This
runs the bench's own cell (`cells.bench_cell`: the task's held-out examples, SPD and AR in turn,
greedy) with the speculator's NumPy step timed at each draft position of every round, and
prints the medians beside the cell's D and T1, then one JSON line.

    python -m demo.lab.bench.draft_positions                      # feature, descriptions, gamma 4, 2 examples
    python -m demo.lab.bench.draft_positions --gamma 6 --n 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from demo.lab.bench.benchmark import examples_for
from demo.lab.bench.cells import bench_cell
from demo.models import loader


class TimedStep:
    """A drafter's NumPy step (`feature_steps.NumpySpeculator`) that records each step's seconds
    by draft position; everything else is the step's own."""

    def __init__(self, step):
        self.step, self.seconds = step, {}

    def step_rows(self, k, s, token, seen):
        started = time.perf_counter()
        out = self.step.step_rows(k, s, token, seen)
        self.seconds.setdefault(k, []).append(time.perf_counter() - started)
        return out

    def __getattr__(self, name):
        return getattr(self.step, name)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m demo.lab.bench.draft_positions", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--preset", default=loader.DEFAULT_PRESET)
    parser.add_argument("--drafter", default="feature", help="a speculator on its NumPy step")
    parser.add_argument("--task", default="description")
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    args = parser.parse_args(argv)

    loaded = loader.load(args.preset)
    drafter = loaded.drafter(args.drafter)
    if getattr(drafter, "numpy", None) is None:
        raise SystemExit(f"{args.drafter} drafts with no NumPy step here ({drafter.path}): nothing to time")
    timed = drafter.numpy = TimedStep(drafter.numpy)
    try:
        examples = examples_for(args.task, args.n, 0)
        cell, _ = bench_cell(loaded, args.task, drafter, args.gamma, "greedy", examples, args.max_new_tokens)
    finally:
        drafter.numpy = timed.step  # the loaded drafter is shared: leave it as it was
    by_position = {k + 1: statistics.median(v) * 1e6 for k, v in sorted(timed.seconds.items())}
    result = {key: getattr(args, key) for key in ("drafter", "task", "gamma", "n")}
    result |= {"step_us_by_draft": by_position, "d_ms": cell.d_ms, "t1_ms": cell.t1_ms}
    result |= {"d_over_t1": cell.d_ms / cell.t1_ms, "tau": cell.tau, "lossless": cell.lossless}
    steps = ", ".join(f"draft {k}: {us:.0f}" for k, us in by_position.items())
    print(
        f"{args.drafter} on {args.task}, gamma {args.gamma}, {args.n} examples: median NumPy step, µs ({steps})\n"
        f"D {cell.d_ms:.3f} ms (the whole propose, per draft), T1 {cell.t1_ms:.2f} ms, "
        f"D/T1 {result['d_over_t1']:.3f}, tau {cell.tau:.2f}, {cell.lossless}\n{json.dumps(result)}"
    )
    return result


if __name__ == "__main__":
    main()
