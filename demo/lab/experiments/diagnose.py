"""Where long answers go wrong: `python -m demo.lab.experiments.diagnose [--dir DIR] [--n N]`.

More, with its measurements: docs/modules.md.
"""

import re
from collections import Counter
from pathlib import Path

from demo.world.scenes import Scene
from demo.world.scoring import letter_in, pairs_in, position_in, score, words
from demo.world.tasks import Example, corpus


def caption_items(text: str) -> list[tuple[int | None, tuple[str, str] | None]]:
    """(cell, (colour, shape)) per "place, a colour shape" item; None where a part is missing."""
    items = []
    for part in re.split(r";\s*(?:and\s+)?", text.strip().rstrip(".")):
        if part.strip():
            pairs = list(pairs_in(part).elements())
            items.append((position_in(part), pairs[0] if pairs else None))
    return items


def caption_tally(scene: Scene, text: str) -> Counter:
    cells = {o.cell: (o.colour, o.shape) for o in scene.objects}
    items = caption_items(text)
    t = Counter(captions=1, items=len(items))
    t["places are the occupied cells"] += sorted(c for c, _ in items if c is not None) == sorted(cells)
    t["number of items right"] += len(items) == len(cells)
    for cell, pair in items:
        if cell not in cells:
            t["items at an empty cell"] += 1
            continue
        t["items at an occupied cell"] += 1
        t["  colour and shape right"] += pair == cells[cell]
        t["  colour right"] += pair is not None and pair[0] == cells[cell][0]
        t["  shape right"] += pair is not None and pair[1] == cells[cell][1]
    return t


def corpus_words(n: int = 300) -> set[str]:
    """Every word of n training questions and answers per task."""
    return {w for text in corpus(n) for w in words(text)}


def description_tally(text: str, vocabulary: set[str]) -> Counter:
    t = Counter(descriptions=1)
    t["with a word no training text uses"] += any(w not in vocabulary for w in words(text))
    t["with multiple choice's 'answer is'"] += "answer is" in text
    return t


MC_KINDS = {"Which shape": "shape", "What colour": "colour", "Where": "position", "How many": "count"}


def options_of(question: str) -> dict[str, str]:
    line = next(line for line in question.splitlines() if line.startswith("Options: "))
    return dict(re.findall(r"\b([ABCD])\. ([a-z ]+)[,.]", line))


# One check of multiple choice's explanation: "B. circle: a square is not a circle." -> the letter,
# the option as copied, the concluded word restated, " not" or "", the option again.
CHECK = re.compile(r"\b([ABCD])\. ([a-z ]+): (?:an? |the )?([a-z ]+?) is( not)? (?:an? |the )?([a-z ]+?)\.")


def mc_tally(example: Example, text: str) -> Counter:
    kind = next(k for prefix, k in MC_KINDS.items() if example.question.startswith(prefix))
    options = options_of(example.question)
    checks = CHECK.findall(text)
    conclusion = re.search(r", so (?:it is(?: at the)?|there (?:is|are)) (?:an? )?([a-z ]+?)\.", text)
    yes = [option for _, option, _, negated, _ in checks if not negated]
    t = Counter({(kind, "n"): 1})
    t[kind, "right letter"] += score("multiple_choice", example, text)
    t[kind, "first sentence right"] += text.split(". ")[0] == example.answer.split(". ")[0]
    t[kind, "options read"] += len(checks)
    t[kind, "options read right"] += sum(options.get(letter) == option for letter, option, _, _, _ in checks)
    t[kind, "verdicts right"] += sum(
        (said == option) == (not negated) and option == again for _, option, said, negated, again in checks
    )
    t[kind, "verdict agrees with conclusion"] += bool(conclusion) and yes == [conclusion.group(1)]
    t[kind, "conclusion right"] += bool(conclusion) and conclusion.group(1) == options[letter_in(example.answer)]
    return t


def copy_accuracy(model, vocab: list[int], n: int = 64, length: int = 24, seed: int = 0) -> dict:
    """n sequences of `length` tokens drawn from `vocab`, each followed by itself; the share of
    tokens the model's argmax predicts right in the first copy (it has nothing to go on) and in
    the second (everything is in the context). `model(input_ids=...)` returns `.logits`."""
    import torch

    g = torch.Generator().manual_seed(seed)
    pool = torch.tensor(vocab)
    seq = pool[torch.randint(len(pool), (n, length), generator=g)]
    x = torch.cat([seq, seq], dim=1)
    with torch.no_grad():
        pred = model(input_ids=x).logits.argmax(-1)
    # the logit at position t predicts token t + 1; the second copy's first token cannot be known
    first = (pred[:, : length - 1] == x[:, 1:length]).float().mean().item()
    second = (pred[:, length:-1] == x[:, length + 1 :]).float().mean().item()
    return {"first copy": round(first, 3), "second copy": round(second, 3), "sequences": n, "length": length}


def diagnose(directory: Path, n: int) -> dict:
    from demo.lab.training.evaluate import answers, load_target

    model, processor = load_target(directory)
    examples, texts = answers(model, processor, "caption", n, 120)
    captions = sum((caption_tally(e.scene, t) for e, t in zip(examples, texts)), Counter())
    examples, texts = answers(model, processor, "multiple_choice", n, 160)
    mc = sum((mc_tally(e, t) for e, t in zip(examples, texts)), Counter())
    by_kind = {k: {what: mc[k, what] for (kind, what) in mc if kind == k} for k in MC_KINDS.values()}
    _, texts = answers(model, processor, "description", n // 2, 200)
    vocabulary = corpus_words()
    descriptions = sum((description_tally(t, vocabulary) for t in texts), Counter())
    special = set(processor.tokenizer.all_special_ids)
    copying = copy_accuracy(model, [i for i in range(len(processor.tokenizer)) if i not in special])
    return {
        "caption": dict(captions),
        "multiple_choice": {k: v for k, v in by_kind.items() if v},
        "description": dict(descriptions),
        "copy": copying,
    }


def print_tables(r: dict) -> None:
    c = r["caption"]
    print(f"\nCaptions ({c['captions']} held out, greedy; {c['items']} items 'place, a colour shape')")
    for key in ("places are the occupied cells", "number of items right"):
        print(f"  {key:<34}{c.get(key, 0):>5} of {c['captions']}")
    for key in ("items at an empty cell", "items at an occupied cell"):
        print(f"  {key:<34}{c.get(key, 0):>5} of {c['items']}")
    for key in ("  colour and shape right", "  colour right", "  shape right"):
        print(f"  {key:<34}{c.get(key, 0):>5} of {c.get('items at an occupied cell', 0)}")
    print("\nMultiple choice (held out, greedy)")
    columns = ("n", "right letter", "first sentence right", "conclusion right", "verdict agrees with conclusion")
    print(
        f"{'kind':<10}"
        + "".join(f"{col:>32}" for col in columns)
        + f"{'options read right':>24}"
        + f"{'verdicts right':>20}"
    )
    for kind, row in r["multiple_choice"].items():
        read, verdicts = (
            f"{row.get(key, 0)} of {row.get('options read', 0)}" for key in ("options read right", "verdicts right")
        )
        print(f"{kind:<10}" + "".join(f"{row.get(col, 0):>32}" for col in columns) + f"{read:>24}{verdicts:>20}")
    d = r["description"]
    print(f"\nDescriptions ({d['descriptions']} held out, greedy)")
    for key in ("with a word no training text uses", "with multiple choice's 'answer is'"):
        print(f"  {key:<34}{d.get(key, 0):>5} of {d['descriptions']}")
    c = r["copy"]
    print(
        f"\nCopying from the context ({c['sequences']} random sequences of {c['length']} tokens, each given twice;"
        f" argmax right)\n  first copy {c['first copy']:.1%}, second copy {c['second copy']:.1%}"
    )
    print()


def main() -> None:
    from demo.lab.training.evaluate import command_line  # here, as in `diagnose`: the parsing stays pure Python

    command_line(__doc__.split("\n\n")[0], diagnose, print_tables, n_help="held-out examples per task")


if __name__ == "__main__":
    main()
