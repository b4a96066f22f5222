"""The world in three languages, evaluated: `python -m demo.lab.training.evaluate_languages [--dir DIR] [--n N]`.

More, with its measurements: docs/modules.md.
"""

import time
from pathlib import Path

import torch

from demo.lab.training.evaluate import agreement, command_line, encode_examples, load_target
from demo.lab.training.generate import greedy
from demo.world.scoring import score
from demo.world.tasks import LANGUAGES, TASKS, heldout_examples

DRAFTERS = ("drafter-text", "drafter-multilingual", "drafter-de", "drafter-zh")
# The bars for the target on held-out questions: English as shipped, the others lower.
BARS = {
    "en": {"vqa_colour": 0.95, "vqa_shape": 0.95, "caption": 0.90, "multiple_choice": 0.90},
    "de": {"vqa_colour": 0.90, "vqa_shape": 0.90, "caption": 0.85, "multiple_choice": 0.85},
    "zh": {"vqa_colour": 0.90, "vqa_shape": 0.90, "caption": 0.85, "multiple_choice": 0.85},
}


def tokens_per_word(tok, n: int = 50) -> dict:
    """Per language: tokens, words (Han characters for Chinese) and their ratio on n held-out
    questions and answers per task."""
    out = {}
    for lang in LANGUAGES:
        tokens = words = 0
        for task in TASKS:
            for ex in heldout_examples(task, n, language=lang):
                for text in (ex.question, ex.answer):
                    tokens += len(tok(text, add_special_tokens=False)["input_ids"])
                    words += sum("\u4e00" <= c <= "\u9fff" for c in text) if lang == "zh" else len(text.split())
        out[lang] = {"tokens": tokens, "words": words, "tokens_per_word": round(tokens / words, 3)}
    for lang in LANGUAGES:
        out[lang]["tokens_vs_english"] = round(out[lang]["tokens"] / out["en"]["tokens"], 3)
    return out


def load_drafters(directory: Path) -> dict:
    from transformers import AutoModelForCausalLM

    return {
        name: AutoModelForCausalLM.from_pretrained(directory / name, dtype=torch.float32)
        for name in DRAFTERS
        if (directory / name).exists()
    }


def evaluate_languages(directory: Path, n: int) -> dict:
    start = time.perf_counter()
    target, processor = load_target(directory)
    drafters = load_drafters(directory)
    load_s = time.perf_counter() - start
    tok = processor.tokenizer
    pad_id, eos_id, image_id = tok.pad_token_id, tok.eos_token_id, tok.convert_tokens_to_ids(tok.image_token)
    params = {"target": sum(p.numel() for p in target.parameters())}
    params |= {k: sum(p.numel() for p in m.parameters()) for k, m in drafters.items()}
    result = {
        "load_s": round(load_s, 2),
        "params": params,
        "tokens": tokens_per_word(tok),
        "accuracy": {},
        "agreement": {},
        "bars": {},
        "n": {},
    }
    for lang in LANGUAGES:
        result["accuracy"][lang], result["n"][lang] = {}, {}
        agree = {k: [0, 0] for k in drafters}
        for task in TASKS:
            examples = heldout_examples(task, n // 2 if task == "description" else n, language=lang)
            result["n"][lang][task] = len(examples)
            rows, pixels = encode_examples(processor, examples)
            answers = greedy(target, rows, pad_id, eos_id, image_id, pixels, desc=f"{lang} {task}")
            texts = tok.batch_decode(answers, skip_special_tokens=True)
            result["accuracy"][lang][task] = sum(score(task, ex, t) for ex, t in zip(examples, texts)) / len(texts)
            for name, drafter in drafters.items():
                flags = agreement(drafter, rows, answers, None, pad_id, image_id, eos_id)
                agree[name][0] += sum(map(sum, flags))
                agree[name][1] += sum(map(len, flags))
        result["agreement"][lang] = {k: a / max(1, t) for k, (a, t) in agree.items()}
        result["bars"][lang] = {t: [bar, result["accuracy"][lang][t] >= bar] for t, bar in BARS[lang].items()}
    result["bars_met"] = all(ok for lang in result["bars"].values() for _, ok in lang.values())
    return result


def print_tables(r: dict) -> None:
    print("\nTokens per word (Chinese: per Han character), held-out questions and answers")
    for lang, t in r["tokens"].items():
        print(
            f"{lang:<4}{t['tokens']:>8,} tokens{t['tokens_per_word']:>7.2f} per word{t['tokens_vs_english']:>7.2f}x English"
        )
    print("\nTarget accuracy on held-out questions, greedy (bar: the issue's; * = below it)")
    print(f"{'task':<18}" + "".join(f"{lang:>10}" for lang in r["accuracy"]))
    for task in TASKS:
        cells = []
        for lang in r["accuracy"]:
            bar = r["bars"][lang].get(task)
            mark = "" if bar is None else (" " if bar[1] else "*")
            cells.append(f"{r['accuracy'][lang][task]:>9.1%}{mark or ' '}")
        print(f"{task:<18}" + "".join(cells))
    print(f"bars met: {r['bars_met']}")
    print("\nDrafter agreement with the target's greedy tokens, per language (teacher-forced argmax match)")
    names = list(next(iter(r["agreement"].values())))
    print(f"{'language':<10}" + "".join(f"{m:>22}" for m in names))
    for lang, row in r["agreement"].items():
        print(f"{lang:<10}" + "".join(f"{row[m]:>22.1%}" for m in names))
    print("\nParameters")
    for m, k in r["params"].items():
        ratio = "" if m == "target" else f"  (1/{r['params']['target'] / k:.1f} of the target)"
        print(f"{m:<22}{k:>12,}{ratio}")
    print(f"\nLoad time: {r['load_s']:.2f} s\n")


def main() -> None:
    command_line(__doc__.split("\n\n")[0], evaluate_languages, print_tables)


if __name__ == "__main__":
    main()
