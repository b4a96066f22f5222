"""The drafter's one-token step on each path: `python -m demo.lab.bench.steps [--compile]`.

Times one drafter step (feed one token after a prompt, get the next token's logits, roll back)
on the preset's drafters.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import DynamicCache

from demo.engine import lean_steps
from demo.engine.lean_lm import LeanLM
from demo.engine.lean_steps import NumpyStep
from demo.models import loader


def timings(steps: dict, warmup: int, repeats: int) -> dict:
    """Each step's p10 and median wall time, the steps taken in turn (interleaved), so that a
    machine busier at one moment than another slows every path alike."""
    for _ in range(warmup):
        for step in steps.values():
            step()
    wall = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            wall[name].append(time.perf_counter() - start)
    return {name: _quantiles(w) for name, w in wall.items()}


def _quantiles(wall: list[float]) -> dict:
    wall = sorted(wall)
    return {"p10_ms": wall[len(wall) // 10] * 1e3, "median_ms": statistics.median(wall) * 1e3}


@torch.inference_mode()
def drafter_steps(drafter, prompt_len: int, warmup: int, repeats: int, compile_too: bool) -> dict:
    model = drafter.model
    ids = drafter.allowed.nonzero()[:, 0][: prompt_len + 1].tolist()
    prompt, token = ids[:prompt_len], ids[prompt_len]
    cache = DynamicCache(config=model.config)
    model(input_ids=torch.tensor([prompt]), **{drafter.cache_kw: cache}, use_cache=True)

    def transformers_step():
        model(input_ids=torch.tensor([[token]]), **{drafter.cache_kw: cache}, use_cache=True, logits_to_keep=1)
        cache.crop(-1)

    lm = LeanLM(model)
    static = lm.new_cache(prompt_len + 1)
    static.load(cache)

    def lean_step():
        lm.forward(static, [token])
        static.crop(-1)

    token_t, position = torch.tensor([token]), torch.tensor([prompt_len])
    keys_index, tables = torch.arange(static.capacity), lm.rope(static.capacity)

    def static_step():
        lm.static_step(static, token_t, position, keys_index, tables)

    numpy_step = NumpyStep(lm) if lean_steps.supported(lm) is None else None

    def lean_numpy_step():
        numpy_step(static, token)
        static.crop(-1)

    paths = {"transformers": transformers_step, "lean": lean_step, "lean static": static_step}
    if numpy_step is not None:
        paths["lean numpy"] = lean_numpy_step
    out = {}
    if compile_too:
        compiled = torch.compile(lm.static_step, fullgraph=True, dynamic=False)
        started = time.perf_counter()
        compiled(static, token_t, position, keys_index, tables)
        out["compile_seconds"] = time.perf_counter() - started
        paths["lean compiled"] = lambda: compiled(static, token_t, position, keys_index, tables)
    return timings(paths, warmup, repeats) | out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m demo.lab.bench.steps", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default=loader.DEFAULT_PRESET)
    parser.add_argument("--prompt-len", type=int, default=100, help="tokens in the cache before the step")
    parser.add_argument("--repeats", type=int, default=1000)
    parser.add_argument("--compile", action="store_true", help="also time the static step through torch.compile")
    args = parser.parse_args(argv)
    loaded = loader.load(args.preset)
    result = {"threads": torch.get_num_threads(), "torch": torch.__version__, "drafters": {}}
    for spec in loaded.preset.drafters:
        d = loaded.drafter(spec.name)
        steps = drafter_steps(d, args.prompt_len, 50, args.repeats, args.compile)
        result["drafters"][spec.name] = steps
        print(
            f"{spec.name} ({d.n_params / 1e6:.2f}M params), context {args.prompt_len}, {torch.get_num_threads()} threads"
        )
        for path, t in steps.items():
            if isinstance(t, dict):
                print(f"   {path:14} p10 {t['p10_ms']:6.3f} ms   median {t['median_ms']:6.3f} ms")
        if "compile_seconds" in steps:
            print(f"   first compiled call (compiling): {steps['compile_seconds']:.1f} s")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
