"""GPU check: `python -m demo.lab.bench.gpu_check` on a CUDA machine; `--smoke` runs tiny shapes anywhere.

1. the embedded world's SPD against AR, per drafter and gamma; 2. the step costs of a
llava-1.5-7b-shaped target and a vicuna-68m-shaped drafter (`step_costs`, random weights);
3. the speedups those costs predict; 4. at that shape, our AR and SPD against transformers'
`generate` and assisted generation, and on CUDA the host synchronisations of our rounds; then
each GPU goal with its figure from this run, or "not measured" and why. One JSON line last.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import torch
import transformers
from PIL import Image

from demo.engine import metrics, speculative
from demo.engine.decoding import Prompt, Target
from demo.engine.events import PrefillEvent, RunSummary, Trace
from demo.engine.lean import LeanDrafter
from demo.engine.sampling import Sampling
from demo.lab.bench import peer
from demo.lab.bench.cells import iqr, run_pair
from demo.lab.bench.step_costs import (
    GAMMA,
    SHAPES,
    build,
    drafter_costs,
    random_prompt,
    target_costs,
    targets,
    word_tokenizer,
)
from demo.models import loader

QUESTIONS = ("Describe the image.", "What colour is the largest shape?", "How many objects are there?")
BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}  # bytes/s, by device name
GAMMAS = tuple(range(1, 9))
TAUS = (2.0, 2.5, 3.0)


@dataclass(frozen=True)
class Run:
    shape: str  # of `step_costs.SHAPES`
    warmup: int
    repeats: int
    max_new_tokens: int  # per run
    cases: int  # (image, question) pairs per embedded configuration


FULL, SMOKE = Run("7b", warmup=5, repeats=30, max_new_tokens=64, cases=3), Run("tiny", 1, 3, 8, 1)


def example_images(n: int) -> list[Image.Image]:
    files = sorted((loader.ASSETS / "examples").glob("*.png"))[:n]
    images = [Image.open(f).convert("RGB") for f in files]
    colours = [(200, 40, 40), (40, 160, 60), (50, 70, 200)]
    return images + [Image.new("RGB", (64, 64), colours[i % 3]) for i in range(n - len(images))]


def rate(traces: list[Trace]) -> float:
    """Pooled decoding throughput: tokens after the prefill over seconds after it, all runs."""
    return sum(metrics.decode_tokens(t) for t in traces) / sum(metrics.decode_seconds(t) for t in traces)


def embedded_runs(run: Run, preset: str = "embedded") -> dict:
    """SPD vs AR on a preset's own models, greedy, per drafter and gamma (`cells.run_pair`, the
    benchmark's pair); or why it was skipped."""
    available = loader.availability(preset)
    if not available.ok:
        return {"skipped": available.message}
    loaded = loader.load(preset)
    cases = [SimpleNamespace(image=i, question=q) for i, q in zip(example_images(run.cases), QUESTIONS[: run.cases])]
    out = {}
    for name in loaded.preset.drafter_names():
        drafter = loaded.drafter(name)
        for gamma in (2, 4):  # the first pair only warms up
            pairs = [
                run_pair(loaded, c, drafter, gamma, Sampling(), run.max_new_tokens, True) for c in cases[:1] + cases
            ]
            spds, ars = [p[0] for p in pairs[1:]], [p[1] for p in pairs[1:]]
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


def shape_steps(run: Run, target_model, drafter_model) -> tuple[dict, dict]:
    """Parts 2 and 3's step costs (`step_costs`): T1 and each gamma's verify through transformers,
    the drafter's step on each path, D the fastest; and part 4's T1 on each target path."""
    shapes = SHAPES[run.shape]
    tok, prompt = word_tokenizer(shapes.text["vocab_size"]), random_prompt(shapes, target_model)
    paths = targets(target_model, tok, frozenset({2}), "llava-1.5-7b shape")
    widths = (1, *(gamma + 1 for gamma in GAMMAS))
    t = target_costs(paths, prompt, shapes.answer, widths, run.warmup, run.repeats)
    context = 1 + shapes.prompt_text + shapes.answer
    d = drafter_costs(drafter_model, context, ("transformers", "lean", "graphs"), run.warmup, run.repeats)
    ms = t["transformers"]["ms"]
    steps = {
        "target_params": t["transformers"]["params"],
        "drafter_params": d["params"],
        "image_tokens": shapes.image_tokens,
        "context": t["transformers"]["context"],
        "t1_ms": ms[1]["median_ms"],
        "verify_ms": {gamma: ms[gamma + 1]["median_ms"] for gamma in GAMMAS},
        "draft_ms_transformers": d["transformers"]["median_ms"],
        "draft_ms_lean": d["lean"].get("median_ms"),
        "draft_ms_lean_graphs": d["graphs"].get("median_ms"),
        "lean_max_abs_logit_diff": d["lean"].get("max_abs_logit_diff", math.nan),
        "graphs_error": d["graphs"].get("error"),
    }
    # D in the predictions: the fastest drafting path measured here (the one the demo would run).
    steps["draft_ms"] = min(v for k, v in steps.items() if k.startswith("draft_ms_") and v is not None)
    lean = t["lean"]
    t1 = {"transformers": steps["t1_ms"], "lean": lean["ms"][1]["median_ms"] if "ms" in lean else None}
    return steps, t1 | {"lean_path": lean.get("path") or lean["error"]}


def predictions(costs: dict) -> dict:
    """Predicted speedup tau*T1/(gamma*D + T_{gamma+1}) per gamma and tau (tau > gamma + 1 is
    impossible: None), and the break-even tau."""
    out = {}
    for gamma in GAMMAS:
        cost = gamma * costs["draft_ms"] + costs["verify_ms"][gamma]
        out[gamma] = {"break_even_tau": cost / costs["t1_ms"]}
        out[gamma] |= {f"tau={tau}": tau * costs["t1_ms"] / cost if tau <= gamma + 1 else None for tau in TAUS}
    return out


def _syncs_per_round(target: Target, drafter, prompt: Prompt) -> float | None:
    """Host synchronisations per speculative round, as CUDA's sync debug mode reports them (the
    prefill left out); None off CUDA."""
    if target.device.type != "cuda":
        return None
    events = speculative.speculative_generate(
        target,
        drafter,
        prompt,
        gamma=GAMMA,
        sampling=Sampling(),
        max_new_tokens=16,
        generator=torch.Generator(target.device),
    )
    rounds, syncs = 0, 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for event in events:
            if isinstance(event, PrefillEvent):
                next(events)  # the prefill's token
                caught.clear()
                torch.cuda.set_sync_debug_mode("warn")
            elif isinstance(event, RunSummary):
                torch.cuda.set_sync_debug_mode("default")
            else:
                rounds += type(event).__name__ == "RoundEvent"
        torch.cuda.set_sync_debug_mode("default")
        syncs = sum("synchronizing" in str(w.message) for w in caught)
    return syncs / rounds if rounds else None


@torch.inference_mode()
def race_7b(run: Run, target_model, drafter_model, reps: int = 2) -> dict:
    """Our decoding against transformers' at the run's shapes (`peer`'s methods): our AR against
    `generate`, our SPD against assisted generation with the same drafter, greedy, interleaved,
    identical outputs counted; and on CUDA the host synchronisations of our rounds."""
    shapes = SHAPES[run.shape]
    target = Target(
        target_model, word_tokenizer(shapes.text["vocab_size"]), name="llava-1.5-7b shape", stop_ids=frozenset({2})
    )
    target.prepare()  # the default path, its graphs captured before any clock
    drafter = LeanDrafter(
        drafter_model,
        name="vicuna-68m shape",
        kind="text-only",
        target_vocab_size=shapes.text["vocab_size"],
        stop_ids=target.stop_ids,
        blocked_ids=frozenset({shapes.image_token}),
    )
    prompt = random_prompt(shapes, target_model)
    holder = SimpleNamespace(target=target)  # what peer._methods reads: the target
    methods = peer._methods(holder, prompt, drafter, peer.widened(drafter), GAMMA, run.max_new_tokens, 0.0, False)
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    outputs: dict[str, list[tuple]] = {name: [] for name in methods}
    for rep in range(reps + 1):  # the first pass warms up (first-use checks, graph capture, kernels)
        for name, fn in list(methods.items())[:: -1 if rep % 2 else 1]:
            took, out = peer.timed(fn)
            if rep:
                seconds[name].append(took)
                outputs[name].append(tuple(out))
    ms = {name: statistics.median(s) * 1e3 / max(1, len(outputs[name][0])) for name, s in seconds.items()}
    same = lambda a, b: sum(x == y for x, y in zip(outputs[a], outputs[b], strict=True))  # noqa: E731
    return {
        "ms_per_token": ms,
        "ar_vs_generate": ms["hf_generate"] / ms["ours_ar"],
        "spd_vs_assisted": ms["hf_assisted"] / ms["ours_spd"],
        "identical": {
            "ours_ar = generate": f"{same('ours_ar', 'hf_generate')}/{reps}",
            "ours_spd = assisted": f"{same('ours_spd', 'hf_assisted')}/{reps}",
            "ours_spd = ours_ar": f"{same('ours_spd', 'ours_ar')}/{reps}",
        },
        "drafter_path": drafter.path,
        "target_path": target.path,
        "syncs_per_round": _syncs_per_round(target, drafter, prompt),
    }


def _spread(embedded: dict) -> float | None:
    """The largest IQR / median of T1 or D over the embedded configurations that ran."""
    ratios = [r[key] for r in embedded.values() if isinstance(r, dict) for key in ("t1_iqr_share", "d_iqr_share")]
    ratios = [x for x in ratios if x is not None]
    return max(ratios) if ratios else None


def goal_rows(report: dict) -> list[dict]:
    """(goal, bar, value or None, where it came from / why not measured) for each GPU goal."""
    embedded, steps, race = report["embedded"], report["steps"], report.get("race_7b") or {}
    skipped = embedded.get("skipped")

    def speedup(drafter: str):
        row = embedded.get(f"{drafter} gamma=4")
        return (row["speedup"], "embedded, gamma 4, pooled over the questions") if row else (None, skipped or "not run")

    floor_bar, floor_from = None, "the device's memory bandwidth is not in BANDWIDTH"
    bandwidth = next((b for name, b in BANDWIDTH.items() if name in report["device"]), None)
    lean_t1 = (race.get("t1_ms") or {}).get("lean")
    if bandwidth:
        floor_ms = steps["target_params"] * torch.finfo(getattr(torch, report["dtype"])).bits / 8 / bandwidth * 1e3
        floor_bar = 2 * floor_ms
    rows = [
        ("embedded SPD/AR, text-only", ">= 1.5", *speedup("text-only")),
        ("embedded SPD/AR, image-aware", ">= 1.5", *speedup("image-aware")),
        (
            "7B shape: lean target T1 (ms)",
            f"<= {floor_bar:.2f}" if floor_bar else "<= 2x floor",
            lean_t1 if floor_bar else None,
            floor_from if not floor_bar else (race.get("t1_ms") or {}).get("lean_path", "not run"),
        ),
        ("our AR / generate", ">= 1.0", race.get("ar_vs_generate"), "7B shape, greedy"),
        ("our SPD / assisted generation", ">= 1.5", race.get("spd_vs_assisted"), "7B shape, same drafter"),
        ("IQR / median of D and T1", "<= 0.15", _spread(embedded), "embedded, worst configuration"),
        ("host syncs per round", "<= 1", race.get("syncs_per_round"), "CUDA sync debug mode; CPU: tests"),
        ("CPU bench: lossless, no cell slower", "held", None, "python -m demo.lab.bench on a CPU, not here"),
    ]
    out = []
    for goal, bar, value, source in rows:
        met = None
        if value is not None:
            limit = float(bar.split()[-1]) if bar.split()[-1].replace(".", "").isdigit() else None
            met = None if limit is None else (value >= limit if bar.startswith(">=") else value <= limit)
        out.append({"goal": goal, "bar": bar, "value": value, "met": met, "from": source})
    return out


def goal_table(rows: list[dict]) -> str:
    lines = ["GPU goals", f"   {'goal':<38}{'bar':>12}{'value':>14}  verdict   from"]
    for g in rows:
        value = "not measured" if g["value"] is None else f"{g['value']:.3f}"
        verdict = {True: "met", False: "NOT met", None: "-"}[g["met"]]
        lines.append(f"   {g['goal']:<38}{g['bar']:>12}{value:>14}  {verdict:<9} {g['from']}")
    return "\n".join(lines)


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
        f"   our SPD (gamma {GAMMA}, {race['drafter_path']}) {ms['ours_spd']:.2f}  assisted {ms['hf_assisted']:.2f}"
        f"  -> our SPD / assisted {race['spd_vs_assisted']:.2f}x",
        "   identical: " + ", ".join(f"{k} {v}" for k, v in race["identical"].items()),
        f"   host syncs per round (CUDA sync debug mode): {'not measured (no CUDA)' if syncs is None else f'{syncs:.2f}'}",
        "",
        goal_table(report["goals"]),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes and few repeats, for any machine")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        parser.error("no CUDA GPU here: run with --smoke for the tiny CPU version")
    run = SMOKE if args.smoke else FULL
    device = torch.device("cuda:0" if cuda else "cpu")
    dtype = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if cuda else torch.float32
    report = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.processor() or platform.machine()})",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "smoke": args.smoke,
        "embedded": embedded_runs(run),
    }
    target, drafter = build(SHAPES[run.shape], device, dtype)
    report["steps"], t1 = shape_steps(run, target, drafter)
    report["race_7b"] = race_7b(run, target, drafter) | {"t1_ms": t1}
    report["race_tokens"] = run.max_new_tokens
    target = drafter = None
    if cuda:
        torch.cuda.empty_cache()
    report["predicted"] = predictions(report["steps"])
    report["taus"] = list(TAUS)
    report["goals"] = goal_rows(report)
    print(table(report))
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
