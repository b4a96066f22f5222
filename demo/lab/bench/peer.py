"""The peer comparison: our decoding against transformers' own, on the same models and prompts.

    ours_ar       our autoregressive run                 against  hf_generate: generate(do_sample=False)
    ours_spd      our SPD, the drafter as loaded (lean)  against  hf_assisted: generate(assistant_model=...)
    ours_spd_transformers   our SPD with the same drafter's transformers forward (optional): what
                  the lean drafting path adds, in the same interleaved run

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from demo.engine import lean, speculative
from demo.engine.sampling import Sampling
from demo.engine.speculative import Stopwatch


def timed(fn) -> tuple[float, object]:
    clock = Stopwatch(torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    with clock:
        out = fn()
    return clock.last, out


def widened(d) -> torch.nn.Module:
    """The drafter `d`'s model with the target's vocabulary, for transformers' assisted generation:
    input rows of the ids it lacks are its `<unk>` row (id 0), and output rows score those ids and
    the ids it may not propose (`d.blocked`) far below any other, so its greedy drafts are its own.
    `d.model` itself when the vocabularies already agree."""
    vocab, target = d.model.get_output_embeddings().weight.shape[0], d.target_vocab_size
    if vocab == target:
        return d.model
    wide = copy.deepcopy(d.model)
    old_in, old_out = wide.get_input_embeddings(), wide.get_output_embeddings()
    weight = old_in.weight.detach()
    rows = torch.cat([weight[:target], weight[:1].expand(max(0, target - vocab), -1)])
    wide.set_input_embeddings(nn.Embedding.from_pretrained(rows, freeze=True))
    head = nn.Linear(old_out.in_features, target, bias=True, dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        head.weight.zero_()
        head.weight[: d.usable] = old_out.weight[: d.usable]
        head.bias.fill_(torch.finfo(weight.dtype).min / 2)
        head.bias[: d.usable] = torch.where(d.blocked[: d.usable], torch.finfo(weight.dtype).min / 2, 0.0)
    wide.set_output_embeddings(head)
    wide.config.get_text_config().vocab_size = target
    wide.config.tie_word_embeddings = False
    return wide


def _methods(
    loaded, prompt, d, assistant, gamma: int, max_new: int, min_confidence: float, with_transformers_path: bool
):
    """name -> a function that decodes `prompt` and returns the new token ids."""
    model = loaded.target.model
    n_in = prompt.target_inputs["input_ids"].shape[1]
    generate = dict(
        max_new_tokens=max_new,
        do_sample=False,
        eos_token_id=sorted(loaded.target.stop_ids),
        pad_token_id=loaded.target.tokenizer.pad_token_id,
    )

    def ours(drafter=None):
        def decode():
            trace = speculative.run(
                loaded.target,
                prompt,
                drafter=drafter,
                gamma=gamma if drafter else 0,
                sampling=Sampling(),
                max_new_tokens=max_new,
                min_confidence=min_confidence if drafter else 0.0,
            )
            return trace.summary.token_ids

        return decode

    def hf(**extra):
        def decode():
            return tuple(model.generate(**prompt.target_inputs, **generate, **extra)[0, n_in:].tolist())

        return decode

    methods = {
        "ours_ar": ours(),
        "hf_generate": hf(),
        "ours_spd": ours(d),
        "hf_assisted": hf(assistant_model=assistant),
    }
    if with_transformers_path:
        methods["ours_spd_transformers"] = ours(lean.on_path(d, "transformers"))
    return methods


def peer(
    loaded,
    examples,
    drafter: str,
    gamma: int,
    max_new: int,
    reps: int,
    min_confidence: float = 0.0,
    with_transformers_path: bool = False,
) -> dict:
    """Throughput of each method over the examples, and the ratios the benchmark reports."""
    d = loaded.drafter(drafter)
    assistant = widened(d)
    seconds: dict[str, list[float]] = {}
    tokens: dict[str, int] = {}
    hf_assisted_error = None
    for rep in range(reps):
        for ex in examples:
            prompt = loaded.prompt(ex.image, ex.question, drafter)
            order = list(
                _methods(loaded, prompt, d, assistant, gamma, max_new, min_confidence, with_transformers_path).items()
            )
            for name, fn in order[:: -1 if rep % 2 else 1]:
                if name == "hf_assisted" and hf_assisted_error:
                    continue
                try:
                    took, ids = timed(fn)
                except Exception as exc:  # transformers cannot run this pairing; the table says so
                    if name != "hf_assisted":
                        raise
                    hf_assisted_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                    continue
                seconds.setdefault(name, []).append(took)
                tokens[name] = tokens.get(name, 0) + len(ids)
    tok_s = {k: tokens[k] / sum(v) if sum(v) else math.nan for k, v in seconds.items()}
    tok_s.setdefault("hf_assisted", math.nan)
    result = {
        "drafter": drafter,
        "drafter_path": d.path,
        "gamma": gamma,
        "min_confidence": min_confidence,
        "tok_s": tok_s,
        "ar_vs_hf_generate": tok_s["ours_ar"] / tok_s["hf_generate"],
        "spd_vs_hf_assisted": tok_s["ours_spd"] / tok_s["hf_assisted"] if not hf_assisted_error else None,
        "hf_assisted_error": hf_assisted_error,
    }
    if with_transformers_path:
        spd_hf_path = tok_s["ours_spd_transformers"]
        result["spd_transformers_path_vs_hf_assisted"] = (
            spd_hf_path / tok_s["hf_assisted"] if not hf_assisted_error else None
        )
        result["lean_vs_transformers_path"] = tok_s["ours_spd"] / spd_hf_path
    return result
