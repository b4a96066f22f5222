"""The target's decode path, transformers against the lean target, on the embedded world:
`python -m demo.lab.bench.target_path [--repeats 3] [--threads N] [--tokens 64]`.

Runs the autoregressive lane (greedy, one target forward per token) on the preset's target twice
per case: once through transformers, once through the lean target (`demo.engine.lean_target`,
forced on, as it runs by default only on CUDA). The two take turns, in alternating order, so that
a machine busier at one moment than another slows both alike. Reports each path's decode time per
token (median, min, max over the runs), their ratio, how many runs gave identical tokens, then one
JSON line. Decode time is the run's own clock (`RunSummary.decode_seconds`), prefill excluded.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from PIL import Image

from demo.engine.sampling import Sampling
from demo.engine.speculative import run
from demo.models import loader

EXAMPLES = Path(__file__).resolve().parents[2] / "assets" / "world" / "examples"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per case and path")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--tokens", type=int, default=64, help="max new tokens per run")
    parser.add_argument("--preset", default=loader.DEFAULT_PRESET)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = loader.load(args.preset)
    plain = loaded.target
    paths = {
        "transformers": type(plain)(plain.model, plain.tokenizer, name=plain.name, stop_ids=plain.stop_ids, lean=False),
        "lean": type(plain)(plain.model, plain.tokenizer, name=plain.name, stop_ids=plain.stop_ids, lean=True),
    }
    for target in paths.values():
        target.prepare()
    images = sorted(EXAMPLES.glob("*.png"))[:3]
    prompts = [loaded.prompt(Image.open(p).convert("RGB"), "Describe the image.") for p in images]
    ms = {name: [] for name in paths}
    identical = runs = 0
    for r in range(args.repeats):
        for i, prompt in enumerate(prompts):
            order = list(paths) if (r + i) % 2 == 0 else list(reversed(paths))
            tokens = {}
            for name in order:
                trace = run(paths[name], prompt, sampling=Sampling(), max_new_tokens=args.tokens)
                steps = max(len(trace.summary.token_ids) - 1, 1)  # the first token comes from the prefill
                ms[name].append(trace.summary.decode_seconds / steps * 1e3)
                tokens[name] = trace.summary.token_ids
            identical += tokens["transformers"] == tokens["lean"]
            runs += 1
    result = {
        "paths": {name: target.path for name, target in paths.items()},
        "threads": torch.get_num_threads(),
        "ms_per_token": {name: statistics.median(v) for name, v in ms.items()},
        "ms_range": {name: [min(v), max(v)] for name, v in ms.items()},
        "lean_over_transformers": statistics.median(ms["lean"]) / statistics.median(ms["transformers"]),
        "identical": f"{identical}/{runs}",
    }
    print(f"{'path':<14}{'ms/token (median)':>20}{'min':>10}{'max':>10}")
    for name in paths:
        low, high = result["ms_range"][name]
        print(f"{result['paths'][name]:<14}{result['ms_per_token'][name]:>20.2f}{low:>10.2f}{high:>10.2f}")
    print(f"lean / transformers: {result['lean_over_transformers']:.2f}; identical tokens: {result['identical']}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
