"""The layer-skip search: which decoder layers the "layer-skip" drafter skips, for one preset.

    python -m demo.lab.bench.layerskip_search --preset embedded

Draft & Verify chose its skipped layers by Bayesian optimisation; this is a greedy search over
layer subsets, on training-split prompts (never the held-out ones the benchmark, the tests and
the page's examples use).

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from demo.engine import layerskip
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.engine.speculative import autoregressive_generate
from demo.models import loader
from demo.world.tasks import TASKS, train_examples


def answers(loaded, n: int, max_new: int, seed: int) -> list[tuple[dict, list[int]]]:
    """(target inputs, the target's greedy answer) for n training prompts of every task family."""
    out = []
    for task in TASKS:
        for ex in train_examples(task, n, seed=seed):
            inputs = loaded.prompt(ex.image, ex.question).target_inputs
            events = autoregressive_generate(
                loaded.target,
                loaded.prompt(ex.image, ex.question),
                sampling=Sampling(),
                max_new_tokens=max_new,
                generator=torch.Generator(device=loaded.device),
            )
            out.append((inputs, list(Trace.of(events).summary.token_ids)))
    return out


def drafter(loaded, skip: tuple[int, ...]) -> layerskip.LayerSkipDrafter:
    return layerskip.LayerSkipDrafter(
        loaded.target.model,
        skip=skip,
        name="layer-skip",
        target_vocab_size=loaded.target.vocab_size,
        stop_ids=loaded.target.stop_ids,
        blocked_ids=loaded.placeholder_ids(),
    )


@torch.inference_mode()
def agreement(d: layerskip.LayerSkipDrafter, inputs: dict, answer: list[int]) -> list[bool]:
    """For each answer position i >= 1: whether the drafter's argmax after prompt + answer[:i]
    (ids it may not propose masked) is answer[i]. One forward over prompt + answer."""
    prompt = layerskip.embed_prompt(d.model, inputs)  # [1, L, C]
    ids = torch.tensor([answer[:-1]], device=d.device)
    embeds = torch.cat([prompt, d.decoder.embed_tokens(ids)], dim=1)
    cache = DynamicCache(config=d.model.config)
    logits = d.run(embeds, cache, 0, every=True)[prompt.shape[1] :]  # [len(answer) - 1, V]: after answer[:i], i >= 1
    choice = logits.masked_fill(d.blocked, float("-inf")).argmax(-1).tolist()
    return [c == a for c, a in zip(choice, answer[1:])]


def emitted(agree: list[bool], gamma: int, max_new: int) -> list[int]:
    """The tokens each greedy round emits on an answer of len(agree) + 1 tokens whose positions
    the drafter gets right where `agree` says, as `speculative_round` runs the rounds: the
    accepted drafts and the target's own token."""
    out, i, length = [], 1, len(agree) + 1  # the prefill wrote answer[0]
    while i < length:
        n_draft = min(gamma, max_new - i - 1)  # never more than the budget can take
        k = 0
        while k < n_draft and i + k < length and agree[i + k - 1]:
            k += 1
        out.append(min(k + 1, length - i))
        i += out[-1]
    return out


def score(loaded, skip: tuple[int, ...], pairs, gammas: tuple[int, ...], max_new: int) -> dict:
    """tau by gamma over the training answers, c, and the best MBSU (with its gamma)."""
    d = drafter(loaded, skip)
    c = d.n_params / loaded.target.n_params
    agrees = [agreement(d, inputs, answer) for inputs, answer in pairs]
    taus = {}
    for gamma in gammas:
        counts = [n for agree in agrees for n in emitted(agree, gamma, max_new)]
        taus[gamma] = sum(counts) / len(counts)
    mbsu = {g: t / (1 + g * c) for g, t in taus.items()}
    best = max(mbsu, key=mbsu.get)
    return {"skip": list(skip), "c": c, "tau": taus, "mbsu": mbsu, "best_gamma": best, "score": mbsu[best]}


def search(loaded, pairs, gammas: tuple[int, ...], max_new: int, log=print) -> tuple[dict, list[dict]]:
    """The greedy path (module docstring, step 3): (the best set's record, every candidate's)."""
    n_layers = len(loaded.target.model.model.language_model.layers)
    skipped: tuple[int, ...] = ()
    tried, path = [], []
    while len(skipped) < n_layers - 1:
        candidates = []
        for layer in (i for i in range(n_layers) if i not in skipped):
            record = score(loaded, tuple(sorted(skipped + (layer,))), pairs, gammas, max_new)
            log(
                f"  skip {record['skip']}: c {record['c']:.2f}, tau "
                + " ".join(f"{g}:{t:.2f}" for g, t in record["tau"].items())
                + f", best MBSU {record['score']:.3f} at gamma {record['best_gamma']}"
            )
            candidates.append(record)
        tried += candidates
        best = max(candidates, key=lambda r: r["score"])
        path.append(best)
        skipped = tuple(best["skip"])
        log(f"step {len(skipped)}: skip {list(skipped)} (MBSU {best['score']:.3f})")
    return max(path, key=lambda r: (r["score"], -len(r["skip"]))), tried


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m demo.lab.bench.layerskip_search", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--preset", default=loader.DEFAULT_PRESET)
    parser.add_argument("--n", type=int, default=3, help="training prompts per task family")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--gammas", default="1,2,3,4,6,8")
    parser.add_argument("--seed", type=int, default=0, help="which training prompts")
    parser.add_argument("--out", default="runs/layerskip")
    args = parser.parse_args(argv)

    started = time.time()
    loaded = loader.load(args.preset)
    why = layerskip.unsupported(loaded.target.model)
    if why:
        raise SystemExit(f"preset {args.preset!r}: {why}")
    gammas = tuple(map(int, args.gammas.split(",")))
    with torch.inference_mode():
        pairs = answers(loaded, args.n, args.max_new_tokens, args.seed)
        print(f"{len(pairs)} training prompts, {sum(len(a) for _, a in pairs)} answer tokens")
        best, tried = search(loaded, pairs, gammas, args.max_new_tokens)
    result = {
        "preset": args.preset,
        "date": time.strftime("%Y-%m-%d"),
        "args": vars(args),
        "seconds": round(time.time() - started, 1),
        "best": best,
        "candidates": tried,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.preset}.json").write_text(json.dumps(result, indent=1))
    print(
        f"best: skip layers {best['skip']} (c {best['c']:.2f}): MBSU {best['score']:.3f} at gamma "
        f"{best['best_gamma']}, tau {best['tau'][best['best_gamma']]:.2f}; wrote {out / (args.preset + '.json')}"
    )
    print(json.dumps({"preset": args.preset, "skip_layers": best["skip"], "mbsu": best["score"], "c": best["c"]}))
    return result


if __name__ == "__main__":
    main()
