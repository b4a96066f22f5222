"""The second seed's table in miniature: `python -m demo.lab.bench --languages [en,de,zh]`.

Yi et al. 2024 (speculative decoding with drafters specialised per language) report tau and
speedup per language and drafter. This runs that table on the embedded world: for each language
of `--languages`, held-out questions in it (one of each task kind in turn: descriptions,
captions, multiple choice and the five short questions, the same scenes in every language), and
for each drafter and gamma, speculative decoding (SPD) against the target alone (AR), greedy,
each pair back to back in alternating order, through `cells.bench_cell`: tau, alpha,
speedup and lossless counted ("k/n identical"). Every cell carries its "language".

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from demo.lab.bench.cells import bench_cell, drafter_on
from demo.models import loader, presets
from demo.world.tasks import LANGUAGE_NAMES, LANGUAGES, TASKS, heldout_examples

LINE_KEYS = ("language", "drafter", "gamma", "n", "tau", "alpha", "speedup", "tok_s_spd", "tok_s_ar", "lossless")


def examples_in(language: str, n: int, seed: int) -> list:
    """n held-out examples in `language`, one of each task kind in turn (the same scenes in
    every language)."""
    per = -(-n // len(TASKS))
    pools = [heldout_examples(task, per, seed, language=language) for task in TASKS]
    return [pool[i] for i in range(per) for pool in pools if i < len(pool)][:n]


def register_world(directory: Path, name: str = "embedded-languages") -> str:
    """A preset of the world saved in `directory`: its target and whichever drafters it holds."""
    presets.PRESETS[name] = presets.Preset(
        name=name,
        target=str(directory / "target"),
        drafters=presets.world_drafters(directory),
        description=f"the world in {directory}",
    )
    return name


def language_cells(loaded, languages, drafters, gammas, n: int, seed: int, max_new: int, log=print) -> list[dict]:
    """Every cell of the table: language x drafter x gamma, greedy, on the lean drafting path."""
    started = time.time()
    on = {d: drafter_on(loaded, d, "lean") for d in drafters}
    rows = []
    for language in languages:
        examples = examples_in(language, n, seed)
        for drafter in drafters:
            for gamma in gammas:
                cell, _ = bench_cell(loaded, "all", on[drafter], gamma, "greedy", examples, max_new)
                rows.append({"language": language} | asdict(cell))
                log(
                    f"[{time.time() - started:6.1f}s] {language} {drafter} gamma={gamma}: tau {cell.tau:.2f} "
                    f"speedup {cell.speedup:.2f} ({cell.lossless})"
                )
    return rows


def seed_table(rows: list[dict]) -> str:
    """Speedup (tau) per drafter and language at each gamma, as markdown; the best gamma of each
    drafter and language in bold."""
    languages = list(dict.fromkeys(r["language"] for r in rows))
    drafters = list(dict.fromkeys(r["drafter"] for r in rows))
    best = {}
    for r in rows:
        key = (r["drafter"], r["language"])
        best[key] = max(best.get(key, 0.0), r["speedup"])
    head = "| drafter | gamma | " + " | ".join(LANGUAGE_NAMES[lang] for lang in languages) + " |"
    lines = [head, "| --- | ---: | " + " | ".join("---:" for _ in languages) + " |"]
    for d in drafters:
        for gamma in sorted({r["gamma"] for r in rows if r["drafter"] == d}):
            cells = []
            for lang in languages:
                r = next(x for x in rows if (x["drafter"], x["language"], x["gamma"]) == (d, lang, gamma))
                text = f"{r['speedup']:.2f}x (tau {r['tau']:.2f})"
                cells.append(f"**{text}**" if r["speedup"] == best[d, lang] else text)
            lines.append(f"| {d} | {gamma} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def lossless_summary(rows: list[dict]) -> str:
    same = sum(int(r["lossless"].split("/")[0]) for r in rows)
    total = sum(int(r["lossless"].split("/")[1].split()[0]) for r in rows)
    return f"greedy SPD identical to AR in {same}/{total} runs"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m demo.lab.bench --languages", description=__doc__.split("\n\n")[0])
    parser.add_argument("--languages", nargs="?", const=",".join(LANGUAGES), default=",".join(LANGUAGES))
    parser.add_argument("--preset", default=loader.DEFAULT_PRESET)
    parser.add_argument("--world", type=Path, default=None, help="measure the world saved in this directory")
    parser.add_argument("--drafters", default=None, help="comma list (default: every model drafter of the preset)")
    parser.add_argument("--gammas", default="2,4,6")
    parser.add_argument("--n", type=int, default=8, help="held-out examples per language (one per task kind)")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/bench-languages")
    args, _ = parser.parse_known_args(argv)  # the benchmark's other options do not apply here
    started = time.time()
    name = register_world(args.world) if args.world else args.preset
    loaded = loader.load(name)
    drafters = args.drafters.split(",") if args.drafters else [s.name for s in loaded.preset.drafters]
    languages = args.languages.split(",")
    unknown = set(languages) - set(LANGUAGES)
    if unknown:
        parser.error(f"unknown languages {sorted(unknown)}; the world speaks {', '.join(LANGUAGES)}")
    gammas = [int(g) for g in args.gammas.split(",")]
    rows = language_cells(loaded, languages, drafters, gammas, args.n, args.seed, args.max_new_tokens)
    table = seed_table(rows)
    meta = {
        "preset": name,
        "world": str(args.world) if args.world else None,
        "date": time.strftime("%Y-%m-%d"),
        "device": str(loaded.device),
        "threads": torch.get_num_threads(),
        "seconds": round(time.time() - started, 1),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    print("\nSpeedup (tau) per drafter and language, greedy; the best gamma of each in bold\n")
    print(table)
    print(f"\n{lossless_summary(rows)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "languages.json").write_text(json.dumps({"meta": meta, "cells": rows, "table": table}, indent=1))
    print(f"wrote {out}/languages.json")
    line = {"cells": [{k: r[k] for k in LINE_KEYS} for r in rows]}
    print(json.dumps(line))
    return line
