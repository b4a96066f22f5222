"""`python -m demo.lab.bench.grounding_layers`: which decoder layers' image attention tells grounded
words from template words, on the embedded world.

For n held-out examples per language (the task kinds in turn), the target answers greedily; one
extra forward over each answer reads every layer's attention (`demo.models.attention_pass`). Each
answer token is tagged with its word's category (`demo.session.rejections.token_categories`). For every
contiguous range of layers, the image share (mean over heads and the range's layers) of grounded
words (colour, shape, count) the question does not contain is set against that of template words: the AUC is the chance that
a grounded token's share beats a template token's (0.5: no separation). The best range is the
one `demo.models.attention_pass.LAYERS` names for the embedded preset (docs/grounding.md).
More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator

import torch

from demo import session
from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.models import attention_pass, loader
from demo.session import rejections as analysis
from demo.session.rejections import WORD
from demo.world.tasks import TASKS

GROUNDED = ("colour", "shape", "count")


def auc(pos: list[float], neg: list[float]) -> float:
    """P(a positive's value > a negative's), ties counting half (Mann-Whitney)."""
    if not pos or not neg:
        return float("nan")
    ranked = sorted([(v, 1) for v in pos] + [(v, 0) for v in neg])
    rank_sum, i = 0.0, 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        rank_sum += sum(label for _, label in ranked[i:j]) * (i + j + 1) / 2  # mean rank of the tie, 1-based
        i = j
    return (rank_sum - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def answer(loaded, ex, max_new_tokens: int) -> tuple[Trace, dict]:
    """The embedded target's greedy answer to one held-out example (the autoregressive lane: no
    drafter runs), and the target's inputs for it, which an attention pass or an ablation reads
    again. This bench's, `ablation_agreement`'s and tests/test_grounding.py's one way to answer."""
    request = session.Request(
        question=ex.question,
        preset="embedded",
        drafter="text-only",
        gamma=4,
        sampling=Sampling(),
        max_new_tokens=max_new_tokens,
    )
    trace = session.run(loaded, request, ex.image, lane="autoregressive")
    return trace, loaded.prompt(ex.image, ex.question).target_inputs


def answered(loaded, n: int, seed: int, languages: tuple[str, ...], max_new_tokens: int) -> Iterator[tuple]:
    """n held-out examples per language (the task kinds in turn), each answered (`answer`):
    (example, trace, inputs, tags), a tag per answer token: (word, category, asked), `asked`
    when the word is in the question, so that it can be copied from there."""
    for ex in analysis.heldout_mix(TASKS, n * len(languages), seed, languages):
        trace, inputs = answer(loaded, ex, max_new_tokens)
        question_words = {w.lower() for w in WORD.findall(ex.question)}
        categories = analysis.token_categories(trace, loaded.target.stop_ids, ex.language)
        yield (
            ex,
            trace,
            inputs,
            [(word, cat, bool(word) and word.lower() in question_words) for word, cat in categories],
        )


def measure(n: int, seed: int, languages: tuple[str, ...], max_new_tokens: int) -> list[dict]:
    """One record per answer token: category, whether copied from the question, share per layer."""
    loaded = loader.load("embedded")
    model = loaded.target.model
    n_layers = len(model.model.language_model.layers)
    records = []
    for ex, trace, inputs, tags in answered(loaded, n, seed, languages, max_new_tokens):
        ids = list(trace.summary.token_ids)
        input_ids = inputs["input_ids"][0].tolist()
        _, _, cells = attention_pass.layout("llava", input_ids, inputs, model.config, loaded.processor.tokenizer)
        weights = attention_pass.head_shares(model, inputs, ids, tuple(range(n_layers)))  # [L, H, n, K]
        shares = weights[..., [c[0] for c in cells]].sum(-1).mean(1)  # [L, n]
        for i, (_, cat, asked) in enumerate(tags):
            records.append(
                {
                    "language": ex.language,
                    "category": cat,
                    "asked": asked,  # the word is in the question: it can be copied from there
                    "shares": shares[:, i].tolist(),
                }
            )
    return records


def ranges(n_layers: int) -> list[tuple[int, ...]]:
    return [tuple(range(a, b)) for a in range(n_layers) for b in range(a + 1, n_layers + 1)]


def report(records: list[dict]) -> dict:
    n_layers = len(records[0]["shares"])

    def share(r, layers):
        return sum(r["shares"][i] for i in layers) / len(layers)

    # grounded words the question does not give: only the image tells them
    grounded = [r for r in records if r["category"] in GROUNDED and not r["asked"]]
    template = [r for r in records if r["category"] == "template"]
    rows = []
    for layers in ranges(n_layers):
        rows.append(
            {
                "layers": list(layers),
                "auc": auc([share(r, layers) for r in grounded], [share(r, layers) for r in template]),
                "grounded_mean": sum(share(r, layers) for r in grounded) / len(grounded),
                "template_mean": sum(share(r, layers) for r in template) / len(template),
            }
        )
    best = max(rows, key=lambda row: (row["auc"], -len(row["layers"])))
    layers = tuple(best["layers"])
    colour = [share(r, layers) for r in records if r["category"] == "colour" and not r["asked"]]
    copied = [share(r, layers) for r in records if r["asked"]]
    per_language = {
        lang: auc(
            [share(r, layers) for r in grounded if r["language"] == lang],
            [share(r, layers) for r in template if r["language"] == lang],
        )
        for lang in sorted({r["language"] for r in records})
    }
    return {
        "tokens": len(records),
        "grounded_tokens": len(grounded),
        "template_tokens": len(template),
        "ranges": rows,
        "best": best,
        "auc_by_language": per_language,
        "colour": {
            "n": len(colour),
            "p10": quantile(colour, 0.1),
            "p25": quantile(colour, 0.25),
            "median": quantile(colour, 0.5),
        },
        "copied": {
            "n": len(copied),
            "median": quantile(copied, 0.5),
            "p75": quantile(copied, 0.75),
            "p90": quantile(copied, 0.9),
        },
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=24, help="examples per language")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--languages", default="en,de,zh")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    records = measure(args.n, args.seed, tuple(args.languages.split(",")), args.max_new_tokens)
    out = report(records)
    print(
        f"{out['tokens']} answer tokens: {out['grounded_tokens']} grounded (colour, shape, count; not in the question), "
        f"{out['template_tokens']} template"
    )
    print(f"{'layers':<20}{'AUC':>7}{'grounded':>10}{'template':>10}")
    for row in out["ranges"]:
        layers = ",".join(map(str, row["layers"]))
        print(f"{layers:<20}{row['auc']:>7.3f}{row['grounded_mean']:>10.3f}{row['template_mean']:>10.3f}")
    print(f"best: layers {out['best']['layers']}, AUC {out['best']['auc']:.3f}; by language {out['auc_by_language']}")
    print(f"colour words: {out['colour']}; copied from the question: {out['copied']}")
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps({k: v for k, v in out.items() if k != "ranges"}))


if __name__ == "__main__":
    main()
