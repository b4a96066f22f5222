"""GPU check: `python -m demo.bench.gpu_check` on a CUDA machine; `--smoke` runs tiny shapes anywhere.

Measures, synchronising every GPU before each clock read:
  1. speculative vs autoregressive decoding on the embedded models, every drafter the preset
     offers at gamma 2 and 4, with the spread (IQR / median) of T1 and D (skipped, with the
     reason, when they are not built);
  2. the per-step costs of a llava-1.5-7b-shaped target (random weights, the device's dtype,
     576 image tokens in the prompt, median over repeats): a 1-token step, a (gamma+1)-token
     verify for gamma 1..8, and one step of a vicuna-68m-shaped drafter on each drafting path:
     the transformers forward, the lean forward (`demo.engine.lean_lm`), and on CUDA the lean step
     replayed as a CUDA graph, with the largest logit difference of the lean step from transformers;
  3. from those costs, the wall-clock speedup tau * T1 / (gamma * D + T_{gamma+1})
     (`metrics.predicted_speedup`) for block efficiencies tau in TAUS, with D the fastest drafting
     path that ran.

TAUS spans the block efficiencies Gagrani et al. (2024) report for LLaVA-1.5-7B with a text-only
68M drafter (about 2 to 3 at gamma 3 to 5); the exact per-task figures are not reproduced here,
so the range is used. Then, at the same 7B shape and on the same random weights
(`demo.bench.gpu_goals`): our AR against `generate`, our SPD against assisted generation, identical
outputs counted, and on CUDA our rounds' host synchronisations. Last, issue 41's goals with their
figures, "not measured" where a figure is absent. Prints the tables, then one JSON line.

Budget (from the H200 run of 2026-12-04, ../shared/notes/gpu-2026-12-04.md, 53 s in all): building
the 7B model about 15 s; part 1 about 3 s a configuration, 24 of them with every drafter (about
75 s); part 2 about 10 s; the 7B race 4 methods x 3 passes x 64 tokens at 20 to 32 ms a token
(about 25 s). About 2.5 minutes, inside the issue's 5. The model in bf16 needs about 15 GiB.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import transformers
from PIL import Image
from transformers import (
    CLIPVisionConfig,
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaConfig,
    LlavaForConditionalGeneration,
)

from demo import session
from demo.bench import gpu_goals
from demo.bench.benchmark import iqr
from demo.engine import metrics
from demo.engine.compat import cache_keyword
from demo.engine.events import Trace
from demo.engine.lean_lm import LeanLM
from demo.engine.lean_steps import GraphStep
from demo.engine.sampling import Sampling
from demo.models import devices, loader

TAUS = (2.0, 2.5, 3.0)
GAMMAS = tuple(range(1, 9))
QUESTIONS = ("Describe the image.", "What colour is the largest shape?", "How many objects are there?")


@dataclass(frozen=True)
class Shapes:
    vision: dict  # CLIPVisionConfig fields
    text: dict  # LlamaConfig fields of the target's language model
    drafter: dict  # LlamaConfig fields of the drafter
    image_token: int  # id of <image>, the first id past the drafter's vocabulary
    prompt_text: int  # text tokens around the image
    answer: int  # tokens already answered when steps are timed: the context is prompt + answer
    warmup: int
    repeats: int
    max_new_tokens: int  # per embedded run
    cases: int  # (image, question) pairs per embedded configuration

    @property
    def image_tokens(self) -> int:
        return (self.vision["image_size"] // self.vision["patch_size"]) ** 2


FULL = Shapes(  # llava-hf/llava-1.5-7b-hf and double7/vicuna-68m (JackFram/llama-68m's shape)
    vision=dict(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
        image_size=336,
        patch_size=14,
        projection_dim=768,
    ),
    text=dict(
        vocab_size=32064,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        max_position_embeddings=4096,
    ),
    drafter=dict(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=2,
        num_attention_heads=12,
        num_key_value_heads=12,
        max_position_embeddings=2048,
    ),
    image_token=32000,
    prompt_text=40,
    answer=64,
    warmup=5,
    repeats=30,
    max_new_tokens=64,
    cases=3,
)
SMOKE = Shapes(
    vision=dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
        projection_dim=32,
    ),
    text=dict(
        vocab_size=1064,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
    ),
    drafter=dict(
        vocab_size=1000,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
    ),
    image_token=1000,
    prompt_text=8,
    answer=8,
    warmup=1,
    repeats=3,
    max_new_tokens=8,
    cases=1,
)


@contextmanager
def default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def median_ms(step: Callable[[], None], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        devices.synchronize()
        start = time.perf_counter()
        step()
        devices.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def build(shapes: Shapes, device: torch.device, dtype: torch.dtype):
    """Random-weight target and drafter of the given shapes, created directly on the device."""
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**shapes.vision),
        text_config=LlamaConfig(**shapes.text),
        image_token_index=shapes.image_token,
        image_seq_length=shapes.image_tokens,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",  # drop CLS: (image_size / patch_size)^2 tokens, 576
    )
    with torch.device(device), default_dtype(dtype):
        torch.manual_seed(0)
        target = LlavaForConditionalGeneration(config).eval()
        drafter = LlamaForCausalLM(LlamaConfig(**shapes.drafter)).eval()
    return target, drafter


@torch.inference_mode()
def step_costs(shapes: Shapes, target, drafter) -> dict:
    """Median milliseconds of the forwards one decoding step is made of (`build`'s models)."""
    device, dtype = target.device, target.dtype
    g = torch.Generator(device="cpu").manual_seed(0)

    def text(n: int, vocab: int) -> torch.Tensor:
        return torch.randint(3, vocab, (1, n), generator=g).to(device)

    # The target's cache: image + prompt text, then the answer so far.
    t_kw, cache = cache_keyword(target), DynamicCache(config=target.config)
    image = torch.full((1, shapes.image_tokens), shapes.image_token, device=device)
    prompt = torch.cat([text(1, 1000), image, text(shapes.prompt_text, shapes.drafter["vocab_size"])], dim=1)
    pixels = torch.randn(1, 3, shapes.vision["image_size"], shapes.vision["image_size"], generator=g).to(device, dtype)
    target(input_ids=prompt, pixel_values=pixels, **{t_kw: cache}, use_cache=True, logits_to_keep=1)
    target(input_ids=text(shapes.answer, shapes.drafter["vocab_size"]), **{t_kw: cache}, use_cache=True)
    context = cache.get_seq_length()

    def target_step(k: int) -> None:  # as Target.forward: logits for all k positions, then roll back
        target(input_ids=text(k, shapes.drafter["vocab_size"]), **{t_kw: cache}, use_cache=True)
        cache.crop(-k)

    forward_ms = {
        k: median_ms(lambda k=k: target_step(k), shapes.warmup, shapes.repeats)
        for k in (1,) + tuple(gamma + 1 for gamma in GAMMAS)
    }

    # The drafter's cache: the text-only prompt (no image tokens), then the answer so far.
    d_kw, d_cache = cache_keyword(drafter), DynamicCache(config=drafter.config)
    drafter(
        input_ids=text(1 + shapes.prompt_text + shapes.answer, shapes.drafter["vocab_size"]),
        **{d_kw: d_cache},
        use_cache=True,
        logits_to_keep=1,
    )

    def draft_step() -> None:  # as Drafter._forward: one token, logits for the last position only
        drafter(input_ids=text(1, shapes.drafter["vocab_size"]), **{d_kw: d_cache}, use_cache=True, logits_to_keep=1)
        d_cache.crop(-1)

    draft_ms = median_ms(draft_step, shapes.warmup, shapes.repeats)
    paths = lean_steps(shapes, drafter, d_cache, text)
    result = {
        "target_params": sum(p.numel() for p in target.parameters()),
        "drafter_params": sum(p.numel() for p in drafter.parameters()),
        "image_tokens": shapes.image_tokens,
        "context": context,
        "t1_ms": forward_ms[1],
        "verify_ms": {gamma: forward_ms[gamma + 1] for gamma in GAMMAS},
        "draft_ms_transformers": draft_ms,
        **paths,
    }
    # D in the predictions: the fastest drafting path measured here (the one the demo would run).
    result["draft_ms"] = min(v for k, v in result.items() if k.startswith("draft_ms_") and v is not None)
    return result


def lean_steps(shapes: Shapes, drafter, d_cache, text) -> dict:
    """The drafter's step on the lean path over a copy of the same cache: eager, and on CUDA as a
    replayed CUDA graph (None where it could not run, with the reason)."""
    lm = LeanLM(drafter)
    cache = lm.new_cache(d_cache.get_seq_length() + 1)
    cache.load(d_cache)
    token = text(1, shapes.drafter["vocab_size"])
    t_kw = cache_keyword(drafter)
    reference = drafter(input_ids=token, **{t_kw: d_cache}, use_cache=True, logits_to_keep=1).logits[0, -1]
    d_cache.crop(-1)
    lean_logits = lm.forward(cache, token[0].tolist())
    cache.crop(-1)
    out = {
        "lean_max_abs_logit_diff": float((lean_logits.float() - reference.float()).abs().max()),
        "draft_ms_lean": median_ms(
            lambda: (lm.forward(cache, token[0].tolist()), cache.crop(-1)), shapes.warmup, shapes.repeats
        ),
        "draft_ms_lean_graphs": None,
        "graphs_error": "no CUDA device" if lm.device.type != "cuda" else None,
    }
    if lm.device.type == "cuda":
        try:
            step = GraphStep(lm, cache)
            out["draft_ms_lean_graphs"] = median_ms(
                lambda: (step(int(token[0, 0])), cache.crop(-1)), shapes.warmup, shapes.repeats
            )
        except Exception as error:  # reported, not fatal: the eager lean step still ran
            out["graphs_error"] = f"{type(error).__name__}: {error}"[:200]
    return out


def predictions(costs: dict) -> dict:
    """Predicted speedup per gamma and tau (tau > gamma + 1 is impossible: None), and break-even tau."""
    out = {}
    for gamma in GAMMAS:
        verify, t1, draft = costs["verify_ms"][gamma], costs["t1_ms"], costs["draft_ms"]
        out[gamma] = {
            "break_even_tau": (gamma * draft + verify) / t1,
            **{
                f"tau={tau}": metrics.predicted_speedup(tau, gamma, t1, verify, draft) if tau <= gamma + 1 else None
                for tau in TAUS
            },
        }
    return out


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
                request = session.Request(question, preset, name, gamma, greedy, shapes.max_new_tokens)
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
