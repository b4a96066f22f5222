"""The heaviest races the budget admits, raced: `python -m demo.lab.bench.heaviest`.

The work budget once admitted races it then stopped "over budget": three of six of
the heaviest admitted races were cut at 59.7-62.1 s. This sends such races one after another to the
app (a child process on a loopback port, as `demo.lab.bench.soak` serves it) and counts those stopped.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import time

from demo.lab.bench.child_server import served
from demo.lab.bench.soak import client, examples
from demo.models import presets

SETTINGS = {"drafter": "text-only+tree", "second_drafter": "image-aware", "gamma": 8, "greedy": False}


def heaviest_max_new(preset: str, question: str) -> tuple[int, float]:
    """The most new tokens the budget admits for SETTINGS, and that race's estimate in seconds."""
    from demo import session
    from demo.session import budget

    probe = session.parse(question=question, preset=preset, max_new_tokens=8, **SETTINGS)
    estimate = budget.race(probe)
    most = estimate.most(budget.budget_seconds())
    request = session.parse(question=question, preset=preset, max_new_tokens=most, **SETTINGS)
    return most, budget.race(request).seconds


def race(visitor, image: str, question: str, preset: str, max_new: int) -> dict:
    """One race (shortened by the budget where it does not fit: its "shortened" says so); refused
    outright where not even its smallest version fits."""
    from gradio_client.exceptions import AppError

    try:
        return send(visitor, image, question, preset, max_new)
    except AppError as refusal:
        print(f"refused at {max_new} new tokens: {refusal}")
        return {"refused_at": max_new, "max_new": 0, "seconds": 0.0, "stopped": None, "made": {}}


def send(visitor, image: str, question: str, preset: str, max_new: int) -> dict:
    from gradio_client import handle_file

    started = time.perf_counter()
    payload = visitor.predict(
        handle_file(image),
        question,
        preset,
        SETTINGS["drafter"],
        SETTINGS["gamma"],
        SETTINGS["greedy"],
        0.8,
        0.95,
        0,
        max_new,
        0.0,
        SETTINGS["second_drafter"],
        api_name="/trace",
    )
    tokens = {lane: run["trace"]["tokens"] for lane, run in payload["runs"].items()}
    made = {lane: len(made) for lane, made in tokens.items()}
    clocks = {lane: round(made[-1]["t"], 1) if made else 0.0 for lane, made in tokens.items()}  # decoding s
    seconds = round(time.perf_counter() - started, 1)
    return {
        "max_new": max_new,
        "seconds": seconds,
        "stopped": payload.get("stopped"),
        "shortened": payload.get("shortened"),
        "made": made,
        "lane_seconds": clocks,
    }


def warm_up_after() -> float:
    from demo.page.server import WARM_UP_AFTER_S  # gradio: imported when the bench runs, not at import

    return WARM_UP_AFTER_S


def serve(port: int, preset: str) -> None:
    """The child process: the app on 127.0.0.1:port as `launch()` serves it, warming `preset` up."""
    from demo.page import server

    server.launch(server.build_demo(), warm=preset, server_name="127.0.0.1", server_port=port, quiet=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=3)
    parser.add_argument("--preset", default=presets.DEFAULT_PRESET)
    parser.add_argument("--first", type=int, default=0, help="the example to start from")
    parser.add_argument("--greedy", action="store_true", help="greedy races (with their γ sweep and table)")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the child process: serve on this port
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.serve, args.preset)
    SETTINGS["greedy"] = args.greedy
    pairs = examples()
    max_new, estimate = heaviest_max_new(args.preset, pairs[0][1])
    results = []
    child = lambda port: ["demo.lab.bench.heaviest", "--serve", str(port), "--preset", args.preset]  # noqa: E731
    with served(child, "heaviest-cache-") as (url, _, _):
        time.sleep(warm_up_after() + 2)  # the warm-up has started: the first race waits for it
        visitor = client(url)
        print(f"{args.races} races of {max_new} new tokens (estimate {estimate:.1f} s), {SETTINGS}")
        for i in range(args.races):
            image, question = pairs[(args.first + i) % len(pairs)]
            results.append(race(visitor, image, question, args.preset, max_new))
            print(f"race {i + 1}: {results[-1]}")
    stopped = sum(bool(r["stopped"]) for r in results)
    refused = sum("refused_at" in r for r in results)
    summary = {"max_new_tokens": max_new, "estimate_s": round(estimate, 1), "races": len(results), "stopped": stopped}
    outright = sum(r["max_new"] == 0 for r in results)
    summary |= {"refused_then_resent": refused - outright, "refused_outright": outright}
    summary |= {"admitted_max_new": [r["max_new"] for r in results]}
    summary["seconds"] = [r["seconds"] for r in results]
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
