"""The GPU check's parts 2 and 3 (`python -m demo.lab.bench.gpu_check`): the per-step costs of a
llava-1.5-7b-shaped target and a vicuna-68m-shaped drafter, and the speedups those costs predict.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import (
    CLIPVisionConfig,
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaConfig,
    LlavaForConditionalGeneration,
)

from demo.engine import metrics
from demo.engine.compat import cache_keyword
from demo.engine.lean_lm import LeanLM
from demo.engine.lean_steps import GraphStep
from demo.models import devices

TAUS = (2.0, 2.5, 3.0)
GAMMAS = tuple(range(1, 9))


@dataclass(frozen=True)
class Shapes:
    vision: dict  # CLIPVisionConfig fields
    text: dict  # LlamaConfig fields of the target's language model
    drafter: dict  # LlamaConfig fields of the drafter
    image_token: int  # id of <image>, the first id past the drafter's vocabulary
    prompt_text: int  # text tokens around the image
    answer: int  # tokens already answered when steps are timed: the context is prompt + answer
    warmup: int
    repeats: int
    max_new_tokens: int  # per embedded run
    cases: int  # (image, question) pairs per embedded configuration

    @property
    def image_tokens(self) -> int:
        return (self.vision["image_size"] // self.vision["patch_size"]) ** 2


def clip(hidden: int, intermediate: int, layers: int, heads: int, image: int, patch: int, projection: int) -> dict:
    """CLIPVisionConfig fields of a vision tower: `image` pixels a side, cut into `patch`-pixel patches."""
    return dict(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        image_size=image,
        patch_size=patch,
        projection_dim=projection,
    )


def llama(vocab: int, hidden: int, intermediate: int, layers: int, heads: int, positions: int) -> dict:
    """LlamaConfig fields of a multi-head Llama (as many key/value heads as query heads: both
    llava-1.5-7b's language model and vicuna-68m are)."""
    return dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=positions,
    )


FULL = Shapes(  # llava-hf/llava-1.5-7b-hf and double7/vicuna-68m (JackFram/llama-68m's shape)
    vision=clip(1024, 4096, layers=24, heads=16, image=336, patch=14, projection=768),
    text=llama(32064, 4096, 11008, layers=32, heads=32, positions=4096),
    drafter=llama(32000, 768, 3072, layers=2, heads=12, positions=2048),
    image_token=32000,
    prompt_text=40,
    answer=64,
    warmup=5,
    repeats=30,
    max_new_tokens=64,
    cases=3,
)
SMOKE = Shapes(
    vision=clip(32, 64, layers=1, heads=2, image=32, patch=8, projection=32),
    text=llama(1064, 64, 128, layers=2, heads=4, positions=512),
    drafter=llama(1000, 32, 64, layers=1, heads=2, positions=512),
    image_token=1000,
    prompt_text=8,
    answer=8,
    warmup=1,
    repeats=3,
    max_new_tokens=8,
    cases=1,
)


@contextmanager
def default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def median_ms(step: Callable[[], None], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        devices.synchronize()
        start = time.perf_counter()
        step()
        devices.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def build(shapes: Shapes, device: torch.device, dtype: torch.dtype):
    """Random-weight target and drafter of the given shapes, created directly on the device."""
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**shapes.vision),
        text_config=LlamaConfig(**shapes.text),
        image_token_index=shapes.image_token,
        image_seq_length=shapes.image_tokens,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",  # drop CLS: (image_size / patch_size)^2 tokens, 576
    )
    with torch.device(device), default_dtype(dtype):
        torch.manual_seed(0)
        target = LlavaForConditionalGeneration(config).eval()
        drafter = LlamaForCausalLM(LlamaConfig(**shapes.drafter)).eval()
    return target, drafter


@torch.inference_mode()
def step_costs(shapes: Shapes, target, drafter) -> dict:
    """Median milliseconds of the forwards one decoding step is made of (`build`'s models)."""
    device, dtype = target.device, target.dtype
    g = torch.Generator(device="cpu").manual_seed(0)

    def text(n: int, vocab: int) -> torch.Tensor:
        return torch.randint(3, vocab, (1, n), generator=g).to(device)

    # The target's cache: image + prompt text, then the answer so far.
    t_kw, cache = cache_keyword(target), DynamicCache(config=target.config)
    image = torch.full((1, shapes.image_tokens), shapes.image_token, device=device)
    prompt = torch.cat([text(1, 1000), image, text(shapes.prompt_text, shapes.drafter["vocab_size"])], dim=1)
    pixels = torch.randn(1, 3, shapes.vision["image_size"], shapes.vision["image_size"], generator=g).to(device, dtype)
    target(input_ids=prompt, pixel_values=pixels, **{t_kw: cache}, use_cache=True, logits_to_keep=1)
    target(input_ids=text(shapes.answer, shapes.drafter["vocab_size"]), **{t_kw: cache}, use_cache=True)
    context = cache.get_seq_length()

    def target_step(k: int) -> None:  # as Target.forward: logits for all k positions, then roll back
        target(input_ids=text(k, shapes.drafter["vocab_size"]), **{t_kw: cache}, use_cache=True)
        cache.crop(-k)

    forward_ms = {
        k: median_ms(lambda k=k: target_step(k), shapes.warmup, shapes.repeats)
        for k in (1,) + tuple(gamma + 1 for gamma in GAMMAS)
    }

    # The drafter's cache: the text-only prompt (no image tokens), then the answer so far.
    d_kw, d_cache = cache_keyword(drafter), DynamicCache(config=drafter.config)
    drafter(
        input_ids=text(1 + shapes.prompt_text + shapes.answer, shapes.drafter["vocab_size"]),
        **{d_kw: d_cache},
        use_cache=True,
        logits_to_keep=1,
    )

    def draft_step() -> None:  # as Drafter._forward: one token, logits for the last position only
        drafter(input_ids=text(1, shapes.drafter["vocab_size"]), **{d_kw: d_cache}, use_cache=True, logits_to_keep=1)
        d_cache.crop(-1)

    draft_ms = median_ms(draft_step, shapes.warmup, shapes.repeats)
    paths = lean_steps(shapes, drafter, d_cache, text)
    result = {
        "target_params": sum(p.numel() for p in target.parameters()),
        "drafter_params": sum(p.numel() for p in drafter.parameters()),
        "image_tokens": shapes.image_tokens,
        "context": context,
        "t1_ms": forward_ms[1],
        "verify_ms": {gamma: forward_ms[gamma + 1] for gamma in GAMMAS},
        "draft_ms_transformers": draft_ms,
        **paths,
    }
    # D in the predictions: the fastest drafting path measured here (the one the demo would run).
    result["draft_ms"] = min(v for k, v in result.items() if k.startswith("draft_ms_") and v is not None)
    return result


def lean_steps(shapes: Shapes, drafter, d_cache, text) -> dict:
    """The drafter's step on the lean path over a copy of the same cache: eager, and on CUDA as a
    replayed CUDA graph (None where it could not run, with the reason)."""
    lm = LeanLM(drafter)
    cache = lm.new_cache(d_cache.get_seq_length() + 1)
    cache.load(d_cache)
    token = text(1, shapes.drafter["vocab_size"])
    t_kw = cache_keyword(drafter)
    reference = drafter(input_ids=token, **{t_kw: d_cache}, use_cache=True, logits_to_keep=1).logits[0, -1]
    d_cache.crop(-1)
    lean_logits = lm.forward(cache, token[0].tolist())
    cache.crop(-1)
    out = {
        "lean_max_abs_logit_diff": float((lean_logits.float() - reference.float()).abs().max()),
        "draft_ms_lean": median_ms(
            lambda: (lm.forward(cache, token[0].tolist()), cache.crop(-1)), shapes.warmup, shapes.repeats
        ),
        "draft_ms_lean_graphs": None,
        "graphs_error": "no CUDA device" if lm.device.type != "cuda" else None,
    }
    if lm.device.type == "cuda":
        try:
            step = GraphStep(lm, cache)
            out["draft_ms_lean_graphs"] = median_ms(
                lambda: (step(int(token[0, 0])), cache.crop(-1)), shapes.warmup, shapes.repeats
            )
        except Exception as error:  # reported, not fatal: the eager lean step still ran
            out["graphs_error"] = f"{type(error).__name__}: {error}"[:200]
    return out


def predictions(costs: dict) -> dict:
    """Predicted speedup per gamma and tau (tau > gamma + 1 is impossible: None), and break-even tau."""
    out = {}
    for gamma in GAMMAS:
        verify, t1, draft = costs["verify_ms"][gamma], costs["t1_ms"], costs["draft_ms"]
        out[gamma] = {
            "break_even_tau": (gamma * draft + verify) / t1,
            **{
                f"tau={tau}": metrics.predicted_speedup(tau, gamma, t1, verify, draft) if tau <= gamma + 1 else None
                for tau in TAUS
            },
        }
    return out
