"""Paper-style benchmark: `python -m demo.bench`.

Sweeps task x drafter x gamma x decoding on held-out examples of the embedded world. For each
cell and example it runs speculative decoding (SPD) and plain autoregressive decoding (AR) of the
same target back to back, alternating which goes first, so both see the same machine state.
Throughput and speedup come from the runs' own clocks (device synchronised); tau, alpha, MBSU
and the rest from `demo.engine.metrics` over the events. Greedy cells also count how many outputs were
identical between SPD and AR (lossless is counted, not assumed).

Then the peer comparison, on the same models and prompts: our AR against transformers'
`generate(do_sample=False)`, and our SPD against transformers' assisted generation with the
same drafter (as shipped, with its adaptive draft length). Both sides are timed end to end with
the same wall clock, interleaved.

Prints a table, writes an HTML report with charts plus CSV and JSON, and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from demo import analysis
from demo.engine import metrics, speculative
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.engine.speculative import Stopwatch
from demo.models import loader
from demo.world.scoring import score
from demo.world.tasks import heldout_examples

PAPER_TASKS = {  # bench task -> world tasks it draws from (vqa mixes the five short kinds)
    "description": ("description",),
    "caption": ("caption",),
    "multiple_choice": ("multiple_choice",),
    "vqa": ("vqa_colour", "vqa_shape", "vqa_count", "vqa_position", "vqa_yesno"),
}
SAMPLING = Sampling(greedy=False, temperature=0.7, top_p=0.95, seed=0)


@dataclass
class Cell:
    task: str
    drafter: str
    gamma: int
    decoding: str  # "greedy" | "sampling"
    n: int  # examples
    tau: float
    alpha: float
    acceptance_by_position: list[float]
    mbsu: float
    tok_s_spd: float
    tok_s_ar: float
    speedup: float
    predicted_speedup: float  # cost model from this cell's measured step costs
    lossless: str  # "k/n identical" for greedy, "n/a (sampling)" otherwise
    correct_spd: int  # answers the world's scorer accepts
    correct_ar: int


def examples_for(task: str, n: int, seed: int):
    """n held-out examples, cycling through the world tasks a bench task draws from."""
    kinds = PAPER_TASKS[task]
    per = math.ceil(n / len(kinds))
    pools = [heldout_examples(kind, per, seed) for kind in kinds]
    mixed = [pool[i] for i in range(per) for pool in pools]
    return mixed[:n]


def run_pair(loaded, example, drafter: str, gamma: int, sampling: Sampling, max_new: int, spd_first: bool):
    """One SPD and one AR run of the same request, in the given order -> (spd, ar)."""
    prompt = loaded.prompt(example.image, example.question, drafter)

    def spd():
        return speculative.run(
            loaded.target,
            prompt,
            drafter=loaded.drafter(drafter),
            gamma=gamma,
            sampling=sampling,
            max_new_tokens=max_new,
        )

    def ar():
        return speculative.run(loaded.target, prompt, sampling=sampling, max_new_tokens=max_new)

    if spd_first:
        first = spd()
        return first, ar()
    first = ar()
    return spd(), first


def step_costs(spd_traces: list[Trace], ar_traces: list[Trace], gamma: int) -> tuple[float, float, float]:
    """Median measured T1 (AR step), T(gamma+1) (full verify) and D (one draft step), seconds."""
    t1 = statistics.median(r.verify_seconds for t in ar_traces for r in t.rounds)
    full = [r for t in spd_traces for r in t.rounds if len(r.drafted_ids) == gamma]
    some = full or [r for t in spd_traces for r in t.rounds if r.drafted_ids]
    t_verify = statistics.median(r.verify_seconds for r in some)
    draft = statistics.median(r.draft_seconds / len(r.drafted_ids) for r in some)
    return t1, t_verify, draft


def bench_cell(loaded, task, drafter, gamma, decoding, examples, max_new) -> tuple[Cell, list[Trace]]:
    sampling = Sampling() if decoding == "greedy" else SAMPLING
    spds, ars = [], []
    for i, ex in enumerate(examples):
        s, a = run_pair(loaded, ex, drafter, gamma, sampling, max_new, spd_first=i % 2 == 0)
        spds.append(s)
        ars.append(a)
    all_spd = metrics.pooled(spds)
    tok_s_spd = sum(metrics.decode_tokens(t) for t in spds) / sum(metrics.decode_seconds(t) for t in spds)
    tok_s_ar = sum(metrics.decode_tokens(t) for t in ars) / sum(metrics.decode_seconds(t) for t in ars)
    tau = metrics.tau(all_spd)
    t1, t_verify, t_draft = step_costs(spds, ars, gamma)
    identical = sum(s.summary.token_ids == a.summary.token_ids for s, a in zip(spds, ars))
    cell = Cell(
        task=task,
        drafter=drafter,
        gamma=gamma,
        decoding=decoding,
        n=len(examples),
        tau=tau,
        alpha=metrics.alpha(all_spd),
        acceptance_by_position=metrics.acceptance_by_position(all_spd),
        mbsu=metrics.mbsu(all_spd),
        tok_s_spd=tok_s_spd,
        tok_s_ar=tok_s_ar,
        speedup=tok_s_spd / tok_s_ar,
        predicted_speedup=metrics.predicted_speedup(tau, gamma, t1, t_verify, t_draft),
        lossless=f"{identical}/{len(examples)} identical" if decoding == "greedy" else "n/a (sampling)",
        correct_spd=sum(score(ex.task, ex, s.summary.text) for ex, s in zip(examples, spds)),
        correct_ar=sum(score(ex.task, ex, a.summary.text) for ex, a in zip(examples, ars)),
    )
    return cell, spds


# --- peer comparison --------------------------------------------------------------------------


def timed(fn) -> tuple[float, object]:
    clock = Stopwatch(torch.device("cpu") if not torch.cuda.is_available() else torch.device("cuda"))
    with clock:
        out = fn()
    return clock.last, out


def peer(loaded, examples, drafter: str, gamma: int, max_new: int, reps: int, min_confidence: float = 0.0) -> dict:
    """Throughput ratios against transformers on the same prompts, interleaved, greedy. Our SPD
    drafts up to `gamma` tokens, stopping early below `min_confidence` (adaptive draft length);
    transformers' assisted generation runs as shipped (its own schedule and threshold)."""
    model = loaded.target.model
    d = loaded.drafter(drafter)
    stops = sorted(loaded.target.stop_ids)
    pad = loaded.target.tokenizer.pad_token_id
    rows = {"ours_ar": [], "hf_generate": [], "ours_spd": [], "hf_assisted": []}
    tokens = {k: 0 for k in rows}
    hf_assisted_error = None
    for rep in range(reps):
        for ex in examples:
            prompt = loaded.prompt(ex.image, ex.question, drafter)
            n_in = prompt.target_inputs["input_ids"].shape[1]

            def ours_ar():
                return speculative.run(
                    loaded.target, prompt, sampling=Sampling(), max_new_tokens=max_new
                ).summary.token_ids

            def ours_spd():
                return speculative.run(
                    loaded.target,
                    prompt,
                    drafter=d,
                    gamma=gamma,
                    sampling=Sampling(),
                    max_new_tokens=max_new,
                    min_confidence=min_confidence,
                ).summary.token_ids

            def hf_generate():
                out = model.generate(
                    **prompt.target_inputs,
                    max_new_tokens=max_new,
                    do_sample=False,
                    eos_token_id=stops,
                    pad_token_id=pad,
                )
                return tuple(out[0, n_in:].tolist())

            def hf_assisted():
                out = model.generate(
                    **prompt.target_inputs,
                    max_new_tokens=max_new,
                    do_sample=False,
                    eos_token_id=stops,
                    pad_token_id=pad,
                    assistant_model=d.model,
                )
                return tuple(out[0, n_in:].tolist())

            order = [
                ("ours_ar", ours_ar),
                ("hf_generate", hf_generate),
                ("ours_spd", ours_spd),
                ("hf_assisted", hf_assisted),
            ]
            if rep % 2:
                order.reverse()
            for name, fn in order:
                if name == "hf_assisted" and hf_assisted_error:
                    continue
                try:
                    seconds, ids = timed(fn)
                except Exception as exc:  # transformers cannot run this pairing; the table says so
                    hf_assisted_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                    continue
                rows[name].append(seconds)
                tokens[name] += len(ids)
    tok_s = {k: tokens[k] / sum(v) if v else math.nan for k, v in rows.items()}
    return {
        "drafter": drafter,
        "gamma": gamma,
        "min_confidence": min_confidence,
        "tok_s": tok_s,
        "ar_vs_hf_generate": tok_s["ours_ar"] / tok_s["hf_generate"],
        "spd_vs_hf_assisted": tok_s["ours_spd"] / tok_s["hf_assisted"] if not hf_assisted_error else None,
        "hf_assisted_error": hf_assisted_error,
    }


# --- output -----------------------------------------------------------------------------------


def print_table(cells: list[Cell]) -> None:
    header = (
        f"{'task':16} {'drafter':12} {'g':>2} {'decoding':9} {'tau':>5} {'alpha':>6} {'MBSU':>5} "
        f"{'SPD tok/s':>9} {'AR tok/s':>8} {'speedup':>7} {'predicted':>9}  lossless"
    )
    print(header)
    print("-" * len(header))
    for c in cells:
        print(
            f"{c.task:16} {c.drafter:12} {c.gamma:>2} {c.decoding:9} {c.tau:5.2f} {c.alpha:6.2f} {c.mbsu:5.2f} "
            f"{c.tok_s_spd:9.1f} {c.tok_s_ar:8.1f} {c.speedup:7.2f} {c.predicted_speedup:9.2f}  {c.lossless}"
        )


def write_outputs(out: Path, cells: list[Cell], peer_result: dict | None, obs: dict, meta: dict) -> None:
    from demo.bench import report

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
    result = {"meta": meta, "cells": [asdict(c) for c in cells], "peer": peer_result, "analysis": analysis_summary}
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    (out / "report.html").write_text(report.page(cells, peer_result, analysis_summary, meta))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m demo.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default=loader.DEFAULT_PRESET)
    parser.add_argument("--tasks", default=",".join(PAPER_TASKS))
    parser.add_argument("--drafters", default="text-only,image-aware")
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
    parser.add_argument("--out", default="runs/bench")
    args = parser.parse_args(argv)

    started = time.time()
    loaded = loader.load(args.preset)
    drafters = args.drafters.split(",")
    for d in drafters:
        loaded.drafter(d)
    cells, obs = [], {d: [] for d in drafters}
    for task in args.tasks.split(","):
        examples = examples_for(task, args.n, args.seed)
        for decoding in args.decoding.split(","):
            for drafter in drafters:
                for gamma in map(int, args.gammas.split(",")):
                    cell, spds = bench_cell(loaded, task, drafter, gamma, decoding, examples, args.max_new_tokens)
                    cells.append(cell)
                    if decoding == "greedy" and gamma == int(args.gammas.split(",")[-1]):
                        for i, t in enumerate(spds):
                            obs[drafter] += analysis.observations(t, i, loaded.target.stop_ids)
                    print(
                        f"[{time.time() - started:6.1f}s] {task} {drafter} gamma={gamma} {decoding}: "
                        f"tau {cell.tau:.2f} speedup {cell.speedup:.2f}",
                        flush=True,
                    )
    peer_result = None
    if not args.no_peer:
        examples = examples_for("description", 2, args.seed) + examples_for("vqa", 2, args.seed)
        peer_result = {
            d: peer(loaded, examples, d, args.peer_gamma, args.max_new_tokens, args.peer_reps, args.peer_min_confidence)
            for d in drafters
        }
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
        for d, p in peer_result.items():
            assisted = (
                f"{p['spd_vs_hf_assisted']:.2f}" if p["spd_vs_hf_assisted"] else f"n/a ({p['hf_assisted_error']})"
            )
            print(
                f"peer [{d}, gamma {p['gamma']}]: our AR / HF generate = {p['ar_vs_hf_generate']:.3f}; "
                f"our SPD / HF assisted = {assisted}"
            )
    print()
    for d, o in obs.items():
        share = analysis.grounded_share(o)
        print(
            f"analysis [{d}]: image-grounded words are {share['grounded_share_of_drafted']:.0%} of drafted "
            f"positions and {share['grounded_share_of_rejections']:.0%} of rejections"
        )
    write_outputs(Path(args.out), cells, peer_result, obs, meta)
    print(f"wrote {args.out}/report.html, cells.csv, analysis.csv, bench.json")
    keys = (
        "task",
        "drafter",
        "gamma",
        "decoding",
        "tau",
        "alpha",
        "mbsu",
        "tok_s_spd",
        "tok_s_ar",
        "speedup",
        "lossless",
    )
    first_peer = next(iter(peer_result.values())) if peer_result else {}
    line = {
        "cells": [{k: getattr(c, k) for k in keys} for c in cells],
        "peer": {
            "ar_vs_hf_generate": first_peer.get("ar_vs_hf_generate"),
            "spd_vs_hf_assisted": first_peer.get("spd_vs_hf_assisted"),
            "by_drafter": peer_result,
        },
    }
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()
