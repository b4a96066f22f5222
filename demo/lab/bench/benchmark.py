"""Paper-style benchmark: `python -m demo.lab.bench`.

Sweeps task x drafter x gamma x decoding on held-out examples of the embedded world. For each
cell and example it runs speculative decoding (SPD) and plain autoregressive decoding (AR) of the
same target back to back, alternating which goes first, so both see the same machine state.
Throughput and speedup come from the runs' own clocks (device synchronised); tau, alpha, MBSU
and the rest from `demo.engine.metrics` over the events. Greedy cells also count how many outputs were
identical between SPD and AR (lossless is counted, not assumed).

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from demo.engine.events import tree_refusal
from demo.lab.bench import attention_quartiles
from demo.lab.bench.cells import Cell, bench_cell, drafter_on
from demo.lab.bench.peer import peer
from demo.models import loader
from demo.session import image_attention, lane_runs
from demo.session import rejections as analysis

PAPER_TASKS = {  # bench task -> world tasks it draws from (vqa mixes the five short kinds)
    "description": ("description",),
    "caption": ("caption",),
    "multiple_choice": ("multiple_choice",),
    "vqa": ("vqa_colour", "vqa_shape", "vqa_count", "vqa_position", "vqa_yesno"),
}


def examples_for(task: str, n: int, seed: int, languages: tuple[str, ...] = ("en",)):
    """n held-out examples, cycling through the world tasks a bench task draws from."""
    return analysis.heldout_mix(PAPER_TASKS[task], n, seed, languages)


# --- the step-cost goals ------------------------------------------------------------------------------

GOALS = (  # (name, "max" or "min", bar)
    ("D / T1", "max", 0.05),
    ("speedup / limit_speedup", "min", 0.85),
    ("SPD / HF assisted", "min", 1.8),
    ("AR / HF generate", "min", 1.0),
)


def goals(cells: list[Cell], peer_result: dict | None) -> list[dict]:
    """The step-cost goals from this run: the step-cost ones from the greedy description cell at
    gamma 4 on the lean path (text-only drafter if it ran), the peer ones from the same drafter's
    peer block. A goal whose cell or block did not run has value None."""
    lean_cells = [c for c in cells if c.drafter_path != "transformers" and c.decoding == "greedy"]
    candidates = [c for c in lean_cells if c.task == "description" and c.gamma == 4]
    cell = next((c for c in candidates if c.drafter == "text-only"), candidates[0] if candidates else None)
    peers = peer_result or {}
    block = peers.get("text-only") or next(iter(peers.values()), None)
    values = ((cell.d_ms / cell.t1_ms, cell.speedup / cell.limit_speedup) if cell else (None, None)) + (
        (block["spd_vs_hf_assisted"], block["ar_vs_hf_generate"]) if block else (None, None)
    )
    where = (f"description, {cell.drafter}, gamma 4, greedy, {cell.drafter_path}" if cell else None,) * 2 + (
        f"peer, {block['drafter']}, {block['drafter_path']}" if block else None,
    ) * 2
    out = []
    for (name, kind, bar), value, source in zip(GOALS, values, where):
        met = None if value is None else (value <= bar if kind == "max" else value >= bar)
        out.append(
            {
                "goal": name,
                "bar": f"{'<=' if kind == 'max' else '>='} {bar}",
                "value": value,
                "met": met,
                "from": source,
            }
        )
    return out


# --- output -----------------------------------------------------------------------------------


def print_table(cells: list[Cell]) -> None:
    header = (
        f"{'task':16} {'drafter':16} {'path':17} {'g':>2} {'decoding':9} {'tau':>5} {'alpha':>6} "
        f"{'SPD tok/s':>9} {'AR tok/s':>8} {'T1 ms':>6} {'Tv ms':>6} {'D ms':>5} "
        f"{'speedup':>7} {'limit':>5} {'predicted':>9} {'ovh ms':>6}  lossless"
    )
    print(header)
    print("-" * len(header))
    for c in cells:
        print(
            f"{c.task:16} {c.drafter:16} {c.drafter_path:17} {c.gamma:>2} {c.decoding:9} {c.tau:5.2f} {c.alpha:6.2f} "
            f"{c.tok_s_spd:9.1f} {c.tok_s_ar:8.1f} {c.t1_ms:6.2f} {c.t_verify_ms:6.2f} {c.d_ms:5.2f} "
            f"{c.speedup:7.2f} {c.limit_speedup:5.2f} {c.predicted_speedup:9.2f} {c.overhead_ms_per_round:6.2f}  {c.lossless}"
        )
    for c in cells:  # staged drafting: its second stage's acceptance beside the target's (alpha)
        if c.stage_guessed:
            print(
                f"{c.drafter} gamma={c.gamma} {c.decoding}: the lookup stage guessed {c.stage_guessed} tokens, "
                f"the drafter confirmed {c.stage_confirmed} ({c.stage_confirmed / c.stage_guessed:.0%}); "
                f"the target accepted alpha {c.alpha:.2f}"
            )


def print_peer(peer_result: dict) -> None:
    for d, p in peer_result.items():
        assisted = f"{p['spd_vs_hf_assisted']:.2f}" if p["spd_vs_hf_assisted"] else f"n/a ({p['hf_assisted_error']})"
        line = (
            f"peer [{d} ({p['drafter_path']}), gamma {p['gamma']}]: our AR / HF generate = "
            f"{p['ar_vs_hf_generate']:.3f}; our SPD / HF assisted = {assisted}"
        )
        if p.get("lean_vs_transformers_path"):
            line += f"; our SPD lean / transformers path = {p['lean_vs_transformers_path']:.2f}"
        print(line)


def print_goals(rows: list[dict]) -> None:
    for g in rows:
        value = "not measured" if g["value"] is None else f"{g['value']:.3f}"
        verdict = {True: "met", False: "NOT met", None: "-"}[g["met"]]
        print(f"goal {g['goal']:<24} {g['bar']:>8}: {value:>12}  {verdict:8} ({g['from']})")


def write_outputs(out: Path, cells: list[Cell], peer_result, obs: dict, meta: dict, goal_rows: list[dict]) -> list[str]:
    """Write the CSVs and bench.json, then report.html where plotly is installed; the names written."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "cells.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(cells[0])))
        writer.writeheader()
        for c in cells:
            writer.writerow(asdict(c))
    with open(out / "analysis.csv", "w", newline="") as f:
        flat = [dict(drafter=d, **row) for d, o in obs.items() for row in analysis.rows(o)]
        if flat:
            writer = csv.DictWriter(f, fieldnames=list(flat[0]))
            writer.writeheader()
            writer.writerows(flat)
    analysis_summary = {d: analysis.summary(o) for d, o in obs.items()}
    result = {
        "meta": meta,
        "cells": [asdict(c) for c in cells],
        "peer": peer_result,
        "goals": goal_rows,
        "analysis": analysis_summary,
    }
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    written = ["cells.csv", "analysis.csv", "bench.json"]
    try:
        from demo.lab.bench import report
    except ImportError as error:
        print(f"no report.html: {error}")
        return written
    (out / "report.html").write_text(report.page(cells, peer_result, analysis_summary, meta, goal_rows))
    return written + ["report.html"]


LINE_KEYS = (  # each cell's fields in the final JSON line
    "task",
    "drafter",
    "drafter_path",
    "gamma",
    "decoding",
    "tau",
    "alpha",
    "mbsu",
    "tok_s_spd",
    "tok_s_ar",
    "speedup",
    "t1_ms",
    "t_verify_ms",
    "d_ms",
    "t1_iqr_ms",
    "t_verify_iqr_ms",
    "d_iqr_ms",
    "overhead_ms_per_round",
    "overhead_ms_per_step_ar",
    "limit_speedup",
    "lossless",
)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m demo.lab.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default=loader.DEFAULT_PRESET)
    parser.add_argument("--tasks", default=",".join(PAPER_TASKS))
    parser.add_argument(
        "--drafters",
        default="text-only,image-aware",
        help="names the preset offers (see Preset.drafter_names), or all of them: all",
    )
    parser.add_argument(
        "--drafter-paths",
        default="lean",
        help="any of lean, lean-torch, transformers (comma-separated): the drafter forwards each cell runs with",
    )
    parser.add_argument("--gammas", default="2,4,6")
    parser.add_argument("--decoding", default="greedy,sampling")
    parser.add_argument("--n", type=int, default=3, help="held-out examples per cell")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--peer-gamma", type=int, default=16, help="our SPD's longest draft in the peer run")
    parser.add_argument(
        "--peer-min-confidence",
        type=float,
        default=0.4,
        help="our SPD stops drafting below this drafter confidence (transformers' default threshold)",
    )
    parser.add_argument("--peer-reps", type=int, default=2)
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--seed", type=int, default=0, help="which held-out examples")
    parser.add_argument(
        "--example-languages", default="en", help="the held-out examples' languages, in turn (en,de,zh)"
    )
    parser.add_argument("--out", default="runs/bench")
    args = parser.parse_args(argv)

    started = time.time()
    loaded = loader.load(args.preset)
    drafters = list(loaded.preset.drafter_names()) if args.drafters == "all" else args.drafters.split(",")
    paths = args.drafter_paths.split(",")
    on = {(d, path): drafter_on(loaded, d, path) for d in drafters for path in paths}
    cells, obs, obs_by_language = [], {d: [] for d in drafters}, {}
    for task in args.tasks.split(","):
        examples = examples_for(task, args.n, args.seed, tuple(args.example_languages.split(",")))
        for decoding in args.decoding.split(","):
            for drafter in drafters:
                for gamma in map(int, args.gammas.split(",")):
                    for path in paths:
                        if on[drafter, path] is None or (
                            on[drafter, path].tree and tree_refusal(on[drafter, path].tree, gamma)
                        ):
                            continue
                        cell, spds = bench_cell(
                            loaded, task, on[drafter, path], gamma, decoding, examples, args.max_new_tokens
                        )
                        cells.append(cell)
                        if decoding == "greedy" and gamma == int(args.gammas.split(",")[-1]) and path == paths[0]:
                            for i, (t, ex) in enumerate(zip(spds, examples)):
                                image_attention.attach(
                                    lane_runs.Prompts(loaded, ex.question, ex.image), {"spd": t}
                                )  # off the clocks
                                o = analysis.observations(t, i, loaded.target.stop_ids, ex.language)
                                obs[drafter] += o
                                obs_by_language.setdefault((ex.language, drafter), []).extend(o)
                        print(
                            f"[{time.time() - started:6.1f}s] {task} {drafter} ({cell.drafter_path}) gamma={gamma} "
                            f"{decoding}: tau {cell.tau:.2f} speedup {cell.speedup:.2f} (limit {cell.limit_speedup:.2f})",
                            flush=True,
                        )
    peer_result = None
    models = [d for d in drafters if d in {s.name for s in loaded.preset.drafters}]  # peers: model chains only
    if not args.no_peer and models:
        examples = examples_for("description", 2, args.seed) + examples_for("vqa", 2, args.seed)
        peer_result = {
            d: peer(
                loaded,
                examples,
                d,
                args.peer_gamma,
                args.max_new_tokens,
                args.peer_reps,
                args.peer_min_confidence,
                with_transformers_path="transformers" in paths,
            )
            for d in models
        }
    goal_rows = goals(cells, peer_result)
    meta = {
        "preset": args.preset,
        "date": time.strftime("%Y-%m-%d"),
        "device": str(loaded.device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "seconds": round(time.time() - started, 1),
        "args": vars(args),
    }
    print()
    print_table(cells)
    if peer_result:
        print()
        print_peer(peer_result)
    print()
    print_goals(goal_rows)
    print()
    for d, o in obs.items():
        share = analysis.grounded_share(o)
        print(
            f"analysis [{d}]: image-grounded words are {share['grounded_share_of_drafted']:.0%} of drafted "
            f"positions and {share['grounded_share_of_rejections']:.0%} of rejections"
        )
    quartiles = attention_quartiles.rows(obs_by_language)
    print("\nRejection rate by the target's image attention at the drafted position (greedy, the last gamma)\n")
    print(attention_quartiles.table(quartiles))
    written = write_outputs(Path(args.out), cells, peer_result, obs, meta, goal_rows)
    print(f"wrote {args.out}/: {', '.join(written)}")
    first_peer = next(iter(peer_result.values())) if peer_result else {}
    line = {
        "cells": [{k: getattr(c, k) for k in LINE_KEYS} for c in cells],
        "peer": {
            "ar_vs_hf_generate": first_peer.get("ar_vs_hf_generate"),
            "spd_vs_hf_assisted": first_peer.get("spd_vs_hf_assisted"),
            "by_drafter": peer_result,
        },
        "goals": {g["goal"]: {"value": g["value"], "bar": g["bar"], "met": g["met"]} for g in goal_rows},
        "image_attention_quartiles": quartiles,
    }
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()
