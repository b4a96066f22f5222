"""`python -m demo.lab.bench.ablation_agreement`: the image ablation's thresholds, and how well it agrees
with the image attention, on the embedded world in three languages (docs/grounding.md).

For n held-out examples per language (the task kinds in turn) the target answers greedily; then,
off any clock, one attention pass (`demo.models.attention_pass`, the preset's layers) and one
ablation (`demo.models.ablation`: the answer scored with the image and with a blank one). Each
answer token is tagged with its word's category (`demo.session.rejections.token_categories`).

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from demo.lab.bench.grounding_layers import GROUNDED, answered, auc, quantile
from demo.models import ablation, attention_pass, loader

LOOKED = 0.35  # the attention share above which the target was looking at the image (docs/grounding.md)


def measure(n: int, seed: int, languages: tuple[str, ...], max_new_tokens: int) -> list[dict]:
    """One record per answer token: language, category, asked, attention share, log ratio, flip."""
    loaded = loader.load("embedded")
    records = []
    for ex, trace, inputs, tags in answered(loaded, n, seed, languages, max_new_tokens):
        ids = list(trace.summary.token_ids)
        shares = attention_pass.image_attention(loaded, inputs, ids).image
        read = ablation.ablate(loaded, ex.image, ex.question, ids)
        for i, (word, cat, asked) in enumerate(tags):
            records.append(
                {
                    "language": ex.language,
                    "task": ex.task,
                    "word": word,
                    "category": cat,
                    "asked": asked,
                    "share": shares[i],
                    "log_ratio": read.log_ratio[i],
                    "flip": read.flips[i],
                }
            )
    return records


def best_ratio(pos: list[float], neg: list[float]) -> tuple[float, float]:
    """The log-ratio threshold with the largest TPR - FPR (Youden's J), and that J."""
    best = (0.0, -1.0)
    for t in sorted(set(pos)):
        j = sum(v >= t for v in pos) / len(pos) - sum(v >= t for v in neg) / len(neg)
        if j > best[1]:
            best = (t, j)
    return best


def kappa(table: dict) -> float:
    """Cohen's kappa of a 2 x 2 table {(looked, dependent): count}."""
    n = sum(table.values())
    if not n:
        return math.nan
    agree = (table[(True, True)] + table[(False, False)]) / n
    looked = (table[(True, True)] + table[(True, False)]) / n
    dep = (table[(True, True)] + table[(False, True)]) / n
    chance = looked * dep + (1 - looked) * (1 - dep)
    return (agree - chance) / (1 - chance) if chance < 1 else math.nan


def report(records: list[dict], ratio: float = ablation.RATIO) -> dict:
    grounded = [r for r in records if r["category"] in GROUNDED and not r["asked"]]
    template = [r for r in records if r["category"] == "template"]
    limit = math.log(ratio)

    def dependent(r):  # as `Ablation.dependent`
        return r["log_ratio"] >= limit

    threshold, j = best_ratio([r["log_ratio"] for r in grounded], [r["log_ratio"] for r in template])
    by_language = {}
    for lang in sorted({r["language"] for r in records}):
        rows = [r for r in records if r["language"] == lang]
        table = {(a, b): 0 for a in (True, False) for b in (True, False)}
        for r in rows:
            table[(r["share"] >= LOOKED, dependent(r))] += 1
        n = len(rows)
        by_language[lang] = {
            "tokens": n,
            "looked_and_dependent": table[(True, True)],
            "looked_only": table[(True, False)],
            "dependent_only": table[(False, True)],
            "neither": table[(False, False)],
            "agreement": (table[(True, True)] + table[(False, False)]) / n,
            "kappa": kappa(table),
            "grounded_dependent": sum(dependent(r) for r in grounded if r["language"] == lang)
            / max(1, sum(r["language"] == lang for r in grounded)),
            "template_dependent": sum(dependent(r) for r in template if r["language"] == lang)
            / max(1, sum(r["language"] == lang for r in template)),
        }

    def summary(rows):
        ratios = [r["log_ratio"] for r in rows]
        return {
            "n": len(rows),
            "flips": sum(r["flip"] for r in rows) / max(1, len(rows)),
            "dependent": sum(dependent(r) for r in rows) / max(1, len(rows)),
            "log_ratio_p10": quantile(ratios, 0.1),
            "log_ratio_median": quantile(ratios, 0.5),
            "log_ratio_p90": quantile(ratios, 0.9),
        }

    return {
        "tokens": len(records),
        "grounded": summary(grounded),
        "template": summary(template),
        "auc_log_ratio": auc([r["log_ratio"] for r in grounded], [r["log_ratio"] for r in template]),
        "best_log_ratio": threshold,
        "best_ratio": math.exp(threshold),
        "youden_j": j,
        "ratio_used": ratio,
        "by_language": by_language,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16, help="held-out examples per language")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--languages", default="en,de,zh")
    parser.add_argument("--out", default=None, help="write the records and the report here (JSON)")
    args = parser.parse_args()
    began = time.perf_counter()
    records = measure(args.n, args.seed, tuple(args.languages.split(",")), args.max_new_tokens)
    result = report(records)
    print(json.dumps(result, indent=1))
    print(f"{time.perf_counter() - began:.0f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"records": records, "report": result}, f)


if __name__ == "__main__":
    main()
