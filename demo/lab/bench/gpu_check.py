"""GPU check: `python -m demo.lab.bench.gpu_check` on a CUDA machine; `--smoke` runs tiny shapes anywhere.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics

import torch
import transformers
from PIL import Image

from demo import session
from demo.engine import metrics
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.lab.bench import gpu_goals
from demo.lab.bench.cells import iqr
from demo.lab.bench.gpu_steps import FULL, SMOKE, TAUS, Shapes, build, median_ms, predictions, step_costs
from demo.models import loader

QUESTIONS = ("Describe the image.", "What colour is the largest shape?", "How many objects are there?")


def example_images(n: int) -> list[Image.Image]:
    files = sorted((loader.ASSETS / "examples").glob("*.png"))[:n]
    images = [Image.open(f).convert("RGB") for f in files]
    colours = [(200, 40, 40), (40, 160, 60), (50, 70, 200)]
    return images + [Image.new("RGB", (64, 64), colours[i % 3]) for i in range(n - len(images))]


def rate(traces: list[Trace]) -> float:
    """Pooled decoding throughput: tokens after the prefill over seconds after it, all runs."""
    return sum(metrics.decode_tokens(t) for t in traces) / sum(metrics.decode_seconds(t) for t in traces)


def embedded_runs(shapes: Shapes, preset: str = "embedded") -> dict:
    """SPD vs AR on a preset's own models, greedy, per drafter and gamma; or why it was skipped."""
    available = loader.availability(preset)
    if not available.ok:
        return {"skipped": available.message}
    loaded = loader.load(preset)
    cases = list(zip(example_images(shapes.cases), QUESTIONS[: shapes.cases]))
    greedy = Sampling()
    out = {}
    for name in loaded.preset.drafter_names():
        for gamma in (2, 4):
            spds, ars = [], []
            for i, (image, question) in enumerate([cases[0]] + cases):  # the first run only warms up
                request = session.Request(
                    question=question,
                    preset=preset,
                    drafter=name,
                    gamma=gamma,
                    sampling=greedy,
                    max_new_tokens=shapes.max_new_tokens,
                )
                traces = session.run_lanes(loaded, request, image)
                spd, ar = traces["speculative"], traces["autoregressive"]
                if i > 0:
                    spds.append(spd)
                    ars.append(ar)
            spd_rate, ar_rate = rate(spds), rate(ars)
            identical = sum(s.summary.token_ids == a.summary.token_ids for s, a in zip(spds, ars))
            pooled = metrics.pooled(spds)
            alpha = metrics.alpha(pooled)
            t1 = [r.verify_seconds for t in ars for r in t.rounds]
            d = [r.draft_seconds / metrics.drafter_steps(r) for t in spds for r in t.rounds if r.drafted_ids]
            out[f"{name} gamma={gamma}"] = {
                "tau": metrics.tau(pooled),
                "alpha": None if math.isnan(alpha) else alpha,
                "spd_tok_s": spd_rate,
                "ar_tok_s": ar_rate,
                "speedup": spd_rate / ar_rate,
                "identical": f"{identical}/{len(cases)}",
                "drafter_path": spds[0].start.drafter.path,
                "t1_iqr_share": iqr(t1) / statistics.median(t1),
                "d_iqr_share": iqr(d) / statistics.median(d) if d else None,
            }
    return out


def table(report: dict) -> str:
    lines = [
        f"GPU check {report['date']}  device: {report['device']}  torch {report['torch']}  "
        f"transformers {report['transformers']}  dtype {report['dtype']}{'  (SMOKE: tiny shapes)' if report['smoke'] else ''}",
        "",
        "1. embedded models, greedy, SPD vs AR",
    ]
    embedded = report["embedded"]
    if "skipped" in embedded:
        lines.append(f"   skipped: {embedded['skipped']}")
    else:
        lines.append(
            f"   {'drafter, gamma':<26}{'tau':>6}{'alpha':>7}{'SPD tok/s':>11}{'AR tok/s':>10}{'speedup':>9}{'same':>7}"
            f"{'IQR/med T1':>11}{'D':>6}  drafting path"
        )
        for name, r in embedded.items():
            alpha = f"{r['alpha']:.2f}" if r["alpha"] is not None else "-"
            lines.append(
                f"   {name:<26}{r['tau']:>6.2f}{alpha:>7}{r['spd_tok_s']:>11.1f}{r['ar_tok_s']:>10.1f}"
                f"{r['speedup']:>8.2f}x{r['identical']:>7}{r['t1_iqr_share']:>11.2f}"
                f"{r['d_iqr_share'] if r['d_iqr_share'] is not None else math.nan:>6.2f}  {r['drafter_path']}"
            )
    c = report["steps"]
    lines += [
        "",
        f"2. llava-1.5-7b-shaped target ({c['target_params'] / 1e9:.2f}B params, {c['image_tokens']} image "
        f"tokens, context {c['context']}) and vicuna-68m-shaped drafter ({c['drafter_params'] / 1e6:.0f}M)",
        f"   1-token step T1 = {c['t1_ms']:.2f} ms",
        "   drafter step D: "
        + "   ".join(
            f"{label} {c[key]:.3f} ms (D/T1 {c[key] / c['t1_ms']:.3f})" if c[key] is not None else f"{label} n/a"
            for label, key in (
                ("transformers", "draft_ms_transformers"),
                ("lean", "draft_ms_lean"),
                ("lean + CUDA graphs", "draft_ms_lean_graphs"),
            )
        ),
        f"   lean step logits vs transformers: max |diff| {c['lean_max_abs_logit_diff']:.3g}"
        + (f"   (CUDA graphs: {c['graphs_error']})" if c["graphs_error"] else ""),
        "",
        f"3. predicted speedup tau*T1/(gamma*D + T_{{gamma+1}}), D = {c['draft_ms']:.3f} ms (the fastest path)",
        f"   {'gamma':>5}{'T_{g+1} ms':>12}{'T_{g+1}/T1':>12}{'break-even tau':>16}"
        + "".join(f"{'tau=' + str(t):>10}" for t in TAUS),
    ]
    for gamma, p in report["predicted"].items():
        verify = c["verify_ms"][gamma]
        cells = "".join(f"{p[f'tau={t}']:>9.2f}x" if p[f"tau={t}"] is not None else f"{'-':>10}" for t in TAUS)
        lines.append(f"   {gamma:>5}{verify:>12.2f}{verify / c['t1_ms']:>12.2f}{p['break_even_tau']:>16.2f}{cells}")
    race = report["race_7b"]
    ms = race["ms_per_token"]
    syncs = race["syncs_per_round"]
    lines += [
        "",
        f"4. the same shape, greedy, {report['race_tokens']} tokens, ms a token (median of the runs after a warm-up)",
        "   T1: "
        + "  ".join(f"{k} {v:.2f} ms" for k, v in race["t1_ms"].items() if isinstance(v, float))
        + f"  (lean: {race['t1_ms']['lean_path']}; our lanes' target: {race['target_path']})",
        f"   our AR {ms['ours_ar']:.2f}  generate {ms['hf_generate']:.2f}  -> our AR / generate {race['ar_vs_generate']:.2f}x",
        f"   our SPD (gamma {gpu_goals.GAMMA}, {race['drafter_path']}) {ms['ours_spd']:.2f}  assisted {ms['hf_assisted']:.2f}"
        f"  -> our SPD / assisted {race['spd_vs_assisted']:.2f}x",
        "   identical: " + ", ".join(f"{k} {v}" for k, v in race["identical"].items()),
        f"   host syncs per round (CUDA sync debug mode): {'not measured (no CUDA)' if syncs is None else f'{syncs:.2f}'}",
        "",
        gpu_goals.goal_table(report["goals"]),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes and few repeats, for any machine")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        parser.error("no CUDA GPU here: run with --smoke for the tiny CPU version")
    shapes = SMOKE if args.smoke else FULL
    device = torch.device("cuda:0" if cuda else "cpu")
    dtype = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if cuda else torch.float32
    report = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.processor() or platform.machine()})",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "smoke": args.smoke,
        "embedded": embedded_runs(shapes),
    }
    target, drafter = build(shapes, device, dtype)
    report["steps"] = step_costs(shapes, target, drafter)
    report["race_7b"] = gpu_goals.race_7b(
        shapes, target, drafter, lambda step: median_ms(step, shapes.warmup, shapes.repeats)
    )
    report["race_tokens"] = shapes.max_new_tokens
    target = drafter = None
    if cuda:
        torch.cuda.empty_cache()
    report["predicted"] = predictions(report["steps"])
    report["taus"] = list(TAUS)
    report["goals"] = gpu_goals.goal_rows(report)
    print(table(report))
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
