"""Evaluate the shipped world: `python -m demo.lab.training.evaluate [--dir DIR] [--n N]`.

More, with its measurements: docs/modules.md.
"""

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from demo.lab.training.data import collate
from demo.lab.training.generate import greedy
from demo.lab.training.tokenization import word_of_each_token
from demo.world import ASSETS
from demo.world.scoring import score
from demo.world.tasks import TASKS, Example, heldout_examples, image_grounded_words, in_language

MODELS = ("target", "drafter-image", "drafter-text")


def load_target(directory: Path) -> tuple[object, object]:
    """The target and its processor, float32, with transformers alone."""
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    model = LlavaForConditionalGeneration.from_pretrained(directory / "target", dtype=torch.float32)
    return model, AutoProcessor.from_pretrained(directory / "target")


def load(directory: Path) -> tuple[dict, object, float]:
    from transformers import AutoModelForCausalLM, LlavaForConditionalGeneration

    start = time.perf_counter()
    target, processor = load_target(directory)
    models = {
        "target": target,
        "drafter-image": LlavaForConditionalGeneration.from_pretrained(
            directory / "drafter-image", dtype=torch.float32
        ),
        "drafter-text": AutoModelForCausalLM.from_pretrained(directory / "drafter-text", dtype=torch.float32),
    }
    return models, processor, time.perf_counter() - start


def encode_examples(processor, examples) -> tuple[list[list[int]], torch.Tensor]:
    rows, pixels = [], []
    for ex in examples:
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": ex.question}]}]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        enc = processor(images=ex.image, text=prompt, return_tensors="pt")
        rows.append(enc["input_ids"][0].tolist())
        pixels.append(enc["pixel_values"][0])
    return rows, torch.stack(pixels)


def answers(
    model, processor, task: str, n: int, max_new_tokens: int, seed: int = 0, language: str = "en"
) -> tuple[list[Example], list[str]]:
    """n held-out examples of `task` in `language` and the model's greedy answers to them, decoded."""
    tok = processor.tokenizer
    examples = heldout_examples(task, n, seed=seed, language=language)
    rows, pixels = encode_examples(processor, examples)
    ids = greedy(
        model,
        rows,
        tok.pad_token_id,
        tok.eos_token_id,
        tok.convert_tokens_to_ids(tok.image_token),
        pixels,
        max_new_tokens=max_new_tokens,
        desc=in_language(task, language),
    )
    return examples, tok.batch_decode(ids, skip_special_tokens=True)


@torch.inference_mode()
def agreement(drafter, rows, answers, pixels, pad_id, image_id, eos_id, batch_size=32) -> list[list[bool]]:
    """Per answer token (the <|end|> included): does the drafter's argmax equal the target's token?
    A drafter with a smaller vocabulary than the target's (an English drafter beside the target
    grown for German and Chinese) reads the ids it lacks as <unk> (id 0), and is never right on them."""
    vocab = drafter.get_input_embeddings().weight.shape[0]
    out = []
    for start in range(0, len(rows), batch_size):
        chunk = []
        for prompt, answer in zip(rows[start : start + batch_size], answers[start : start + batch_size]):
            prompt = prompt if pixels is not None else [t for t in prompt if t != image_id]
            chunk.append((prompt + answer + [eos_id], [len(prompt)] * (len(answer) + 1)))
        batch = collate([([i if i < vocab else 0 for i in ids],) * 2 for ids, _ in chunk], pad_id)
        kwargs = {"pixel_values": pixels[start : start + batch_size]} if pixels is not None else {}
        pred = drafter(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **kwargs).logits.argmax(-1)
        for i, (ids, (p, *_)) in enumerate(chunk):
            # the logit at position j predicts token j + 1
            out.append([pred[i, j - 1].item() == ids[j] for j in range(p, len(ids))])
    return out


def evaluate(directory: Path, n: int) -> dict:
    models, processor, load_s = load(directory)
    tok = processor.tokenizer
    pad_id, eos_id, image_id = tok.pad_token_id, tok.eos_token_id, tok.convert_tokens_to_ids(tok.image_token)
    grounded = image_grounded_words()
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    result = {
        "load_s": round(load_s, 2),
        "params": params,
        "ratio": {k: round(params[k] / params["target"], 4) for k in MODELS[1:]},
        "accuracy": {k: {} for k in MODELS},
        "agreement": {k: {} for k in MODELS[1:]},
        "n": {},
    }
    counts = {k: [0, 0, 0, 0] for k in MODELS[1:]}  # grounded agree/total, other agree/total
    for task in TASKS:
        examples = heldout_examples(task, n // 2 if task == "description" else n)
        result["n"][task] = len(examples)
        rows, pixels = encode_examples(processor, examples)
        target_answers = None
        for name, model in models.items():
            image = name != "drafter-text"
            prompts = rows if image else [[t for t in r if t != image_id] for r in rows]
            answers = greedy(model, prompts, pad_id, eos_id, image_id, pixels if image else None, desc=f"{task} {name}")
            texts = tok.batch_decode(answers, skip_special_tokens=True)
            result["accuracy"][name][task] = sum(score(task, ex, t) for ex, t in zip(examples, texts)) / len(texts)
            if name == "target":
                target_answers = answers
                continue
            agree = agreement(model, rows, target_answers, pixels if image else None, pad_id, image_id, eos_id)
            result["agreement"][name][task] = sum(map(sum, agree)) / sum(map(len, agree))
            for answer, flags in zip(target_answers, agree):
                for word, ok in zip(word_of_each_token(tok, answer), flags):
                    k = 0 if word in grounded else 2
                    counts[name][k] += ok
                    counts[name][k + 1] += 1
    for name, (ga, gt, oa, ot) in counts.items():
        result["agreement"][name]["image-grounded words"] = ga / max(1, gt)
        result["agreement"][name]["other words"] = oa / max(1, ot)
    return result


def print_tables(r: dict) -> None:
    print("\nHeld-out accuracy, greedy (n per task: " + ", ".join(f"{t} {k}" for t, k in r["n"].items()) + ")")
    print(f"{'task':<18}" + "".join(f"{m:>15}" for m in MODELS))
    for task in TASKS:
        print(f"{task:<18}" + "".join(f"{r['accuracy'][m][task]:>15.1%}" for m in MODELS))
    print("\nDrafter agreement with the target's greedy tokens (teacher-forced argmax match)")
    print(f"{'task':<22}" + "".join(f"{m:>15}" for m in MODELS[1:]))
    for key in r["agreement"]["drafter-image"]:
        print(f"{key:<22}" + "".join(f"{r['agreement'][m][key]:>15.1%}" for m in MODELS[1:]))
    print("\nParameters")
    for m in MODELS:
        ratio = f"  (1/{1 / r['ratio'][m]:.1f} of the target)" if m in r["ratio"] else ""
        print(f"{m:<18}{r['params'][m]:>12,}{ratio}")
    print(f"\nLoad time of the three models + processor: {r['load_s']:.2f} s\n")


def command_line(
    description: str,
    run: Callable[[Path, int], dict],
    tables: Callable[[dict], None],
    n: int = 100,
    n_help: str = "held-out examples per task (half for descriptions)",
) -> None:
    """An evaluation's command line (this one's, `evaluate_languages`' and the experiments'
    `diagnose` and `object_lookup`): `run` the models of --dir on --n held-out examples per task,
    print its `tables`, then the result as one line of JSON."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dir", type=Path, default=ASSETS, help="the world's model directory")
    parser.add_argument("--n", type=int, default=n, help=n_help)
    args = parser.parse_args()
    torch.manual_seed(0)
    result = run(args.dir, args.n)
    tables(result)
    print(json.dumps(result, separators=(",", ":")))


def main() -> None:
    command_line(__doc__.split("\n\n")[0], evaluate, print_tables)


if __name__ == "__main__":
    main()
