"""`python -m demo.batch --n 8 --workers 2 --out runs/batch`: the Analysis tab's work over a dataset
on Ray Data (docs/batch.md). The settings are named as /trace names them; the examples come from the
embedded world (--task, --language, --n, --example-set), an imagefolder --folder, or a --parquet
file. Started again with the same --out, a run skips the examples already written.
"""

from __future__ import annotations

import argparse
import json
import sys

from demo.session import batches, request, validate


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m demo.batch", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the results (a run resumes in it)")
    src = p.add_argument_group("examples (default: the embedded world's held-out examples)")
    src.add_argument("--task", default="all", choices=list(batches.TASK_KINDS), help="world task family")
    src.add_argument("--language", default="en", help="en, de, zh, or all (each example in each)")
    src.add_argument("--n", type=int, default=8, help="world examples")
    src.add_argument("--example-set", type=int, default=0, help="which held-out examples (the tab's seed)")
    src.add_argument("--folder", help="an imagefolder folder: images and metadata.jsonl")
    src.add_argument("--parquet", help="a Parquet file: image bytes and questions")
    run = p.add_argument_group("the runs, named as /trace names them")
    run.add_argument("--preset", default="embedded")
    run.add_argument("--drafter", action="append", help="repeat to compare (default: text-only)")
    run.add_argument("--gamma", type=int, default=batches.DEFAULTS["gamma"])
    run.add_argument("--sampled", action="store_true", help="sample (greedy=False) instead of greedy")
    run.add_argument("--temperature", type=float, default=request.DEFAULTS["temperature"])
    run.add_argument("--top-p", type=float, default=request.DEFAULTS["top_p"])
    run.add_argument("--seed", type=int, default=0, help="sampling seed: example i uses seed + i")
    run.add_argument("--max-new-tokens", type=int, default=batches.DEFAULTS["max_new_tokens"])
    ray = p.add_argument_group("Ray")
    ray.add_argument("--workers", type=int, default=1, help="actors, each holding the models once")
    ray.add_argument("--address", help="join a running cluster (or set RAY_ADDRESS); default: a local Ray")
    ray.add_argument("--gpus-per-worker", type=float, default=0.0)
    ray.add_argument("--block", type=int, default=1, help="examples a task takes at a time")
    ray.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> dict:
    from demo.batch import inputs
    from demo.batch import run as batch_run

    a = parser().parse_args(argv)
    settings = {
        "gamma": a.gamma,
        "greedy": not a.sampled,
        "temperature": a.temperature,
        "top_p": a.top_p,
        "seed": a.seed,
        "max_new_tokens": a.max_new_tokens,
    }
    drafters = a.drafter or ["text-only"]
    world = None
    if a.folder:
        table, source = inputs.folder(a.folder), {"folder": a.folder}
    elif a.parquet:
        table, source = inputs.parquet(a.parquet), {"parquet": a.parquet}
    else:
        spoken = batches.spoken()
        languages = (
            spoken if a.language == batches.ALL_LANGUAGES else (validate.choice("language", a.language, spoken),)
        )
        n = validate.integer("--n", a.n, 1, 100_000)
        world = {"task": a.task, "n": n, "seed": a.example_set, "languages": list(languages)}
        table, source = inputs.world(a.task, n, a.example_set, languages), {"world": world}
    manifest = batch_run.run(
        table, a.out, a.preset, drafters, settings, source=source, world=world, workers=a.workers,
        address=a.address, gpus_per_worker=a.gpus_per_worker, block=a.block, progress=not a.no_progress,
    )  # fmt: skip
    print(json.dumps({"out": a.out, "rows": manifest["rows"], "workers": manifest["workers"]["pids"]}))
    return manifest


if __name__ == "__main__":
    try:
        main()
    except validate.InvalidInput as error:
        sys.exit(str(error))
