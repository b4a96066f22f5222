"""The GPU goals, read from one `python -m demo.lab.bench.gpu_check` run.

    race_7b     at the llava-1.5-7b shape (random weights, `gpu_steps.build`): the target's
                one-token step T1 through transformers and through the lean target
                (`demo.engine.lean_target`, forced on, its graphs captured before any clock); our AR against
                transformers' `generate`, and our SPD against transformers' assisted generation
                with the same 68M-shaped drafter, greedy, interleaved, identical outputs counted;
                and on CUDA the host synchronisations of our rounds (`torch.cuda.set_sync_debug_mode`)
    goal_rows   each goal with its figure from this run, or "not measured" and why

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import statistics
import warnings

import torch
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from demo.engine import speculative
from demo.engine.decoding import Prompt, Target
from demo.engine.drafters import ids_on
from demo.engine.events import PrefillEvent, RunSummary
from demo.engine.lean import LeanDrafter
from demo.engine.sampling import Sampling
from demo.lab.bench import peer

BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}  # bytes/s, by device name
GAMMA = 4


def word_tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    words = {f"t{i}": i for i in range(vocab)} | {"<unk>": 0, "<s>": 1, "</s>": 2}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="</s>", pad_token="</s>")


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


def _t1_ms(target: Target, prompt: Prompt, timer) -> float:
    """The median one-token decode step of `target` after the prompt (`timer`: gpu_steps.median_ms)."""
    cache = target.new_cache()
    target.prefill(prompt.target_inputs, cache)
    token = ids_on(target.device, [5])

    def step() -> None:
        target.forward(token, cache)
        cache.crop(-1)

    return timer(step)


@torch.inference_mode()
def race_7b(shapes, target_model, drafter_model, timer, reps: int = 2) -> dict:
    """Our decoding against transformers' at the given shapes (module docstring); `timer(step)`
    gives a step's median milliseconds."""
    device = target_model.device
    vocab = shapes.text["vocab_size"]
    tok = word_tokenizer(vocab)
    paths = {
        lean: Target(target_model, tok, name="llava-1.5-7b shape", stop_ids=frozenset({2}), lean=lean)
        for lean in (False, True)
    }
    for t in paths.values():
        t.prepare()  # the lean check and the graph captures, before any clock
    target = Target(target_model, tok, name="llava-1.5-7b shape", stop_ids=frozenset({2}))  # the default path
    target.prepare()
    drafter = LeanDrafter(
        drafter_model,
        name="vicuna-68m shape",
        kind="text-only",
        target_vocab_size=vocab,
        stop_ids=target.stop_ids,
        blocked_ids=frozenset({shapes.image_token}),
    )
    g = torch.Generator().manual_seed(1)
    text = torch.randint(3, shapes.drafter["vocab_size"], (1, shapes.prompt_text), generator=g)
    image = torch.full((1, shapes.image_tokens), shapes.image_token)
    ids = torch.cat([torch.ones(1, 1, dtype=torch.long), image, text], 1).to(device)
    pixels = torch.randn(1, 3, shapes.vision["image_size"], shapes.vision["image_size"], generator=g)
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": pixels.to(device, target_model.dtype),
    }
    prompt = Prompt(inputs, {"input_ids": torch.cat([ids[:, :1], text.to(device)], 1)})
    t1 = {"transformers": _t1_ms(paths[False], prompt, timer), "lean": None, "lean_path": paths[True].path}
    if paths[True].path.startswith("lean"):
        t1["lean"] = _t1_ms(paths[True], prompt, timer)
    else:
        t1["lean_path"] = f"transformers ({paths[True].lean.fallback_reason})"
    holder = type("Models", (), {"target": target})()  # what peer._methods reads: the target
    methods = peer._methods(holder, prompt, drafter, peer.widened(drafter), GAMMA, shapes.max_new_tokens, 0.0, False)
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
        "t1_ms": t1,
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
