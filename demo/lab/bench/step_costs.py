"""One step-cost bench: `python -m demo.lab.bench.step_costs [--device cuda] [--rows PATTERN ...]`.

A row of ROWS is "part/path/shape". A `target` row times the target's forward (`Target`) over 1
token (T1) and over gamma + 1 (a verify) after a prompt with its image; a `drafter` row one step
of each drafter model; a `race` row (a drafter's name for its path) the steps of the benchmark's
own races (`cells.bench_cell`): T1, T(gamma+1), D, and the NumPy step at each draft position.
Shapes: `embedded` (the preset's models), `7b` (llava-1.5-7b and vicuna-68m shapes, random
weights) and `tiny`. Steps are taken in turn and synchronised; a path that cannot run here says
why, a GPU path is checked against the eager step at its first use, and `--device cuda` without
CUDA falls back to the CPU. Prints one JSON line; the GPU check (`demo.lab.bench.gpu_check`)
reads its shapes, models and costs.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from PIL import Image
from tokenizers import Tokenizer, models
from transformers import (
    CLIPVisionConfig,
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaConfig,
    LlavaForConditionalGeneration,
    PreTrainedTokenizerFast,
)

from demo.engine import lean_steps
from demo.engine.compat import cache_keyword
from demo.engine.decoding import Prompt, Target
from demo.engine.drafters import ids_on
from demo.engine.lean_lm import LeanLM
from demo.lab.bench.benchmark import examples_for
from demo.lab.bench.cells import bench_cell
from demo.models import devices, loader

GAMMA = 4
TARGET_PATHS = ("transformers", "lean")
DRAFTER_PATHS = ("transformers", "lean", "static", "numpy", "graphs", "compiled")
EMBEDDED_CONTEXT = 100  # an embedded drafter's tokens before its step (the target's: its prompt + 64)


def clip(hidden: int, intermediate: int, layers: int, heads: int, image: int, patch: int, projection: int) -> dict:
    """CLIPVisionConfig fields of a vision tower: `image` pixels a side, cut into `patch`-pixel patches."""
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "image_size")
    return dict(zip(keys, (hidden, intermediate, layers, heads, image)), patch_size=patch, projection_dim=projection)


def llama(vocab: int, hidden: int, intermediate: int, layers: int, heads: int, positions: int) -> dict:
    """LlamaConfig fields of a multi-head Llama (as many key/value heads as query heads: both
    llava-1.5-7b's language model and vicuna-68m are)."""
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    values = (vocab, hidden, intermediate, layers, heads)
    return dict(zip(keys, values), num_key_value_heads=heads, max_position_embeddings=positions)


@dataclass(frozen=True)
class Shapes:
    vision: dict  # CLIPVisionConfig fields (`clip`)
    text: dict  # LlamaConfig fields of the target's language model (`llama`)
    drafter: dict  # LlamaConfig fields of the drafter
    image_token: int  # id of <image>, the first id past the drafter's vocabulary
    prompt_text: int  # text tokens around the image
    answer: int  # tokens already answered when steps are timed: the context is prompt + answer

    @property
    def image_tokens(self) -> int:
        return (self.vision["image_size"] // self.vision["patch_size"]) ** 2


# vision: hidden, intermediate, layers, heads, image, patch, projection; language models: vocab, hidden,
# intermediate, layers, heads, positions; then the image token, the prompt's text tokens, the answer's.
SHAPES = {
    "7b": Shapes(  # llava-hf/llava-1.5-7b-hf and double7/vicuna-68m (JackFram/llama-68m's shape)
        clip(1024, 4096, 24, 16, 336, 14, 768),
        llama(32064, 4096, 11008, 32, 32, 4096),
        llama(32000, 768, 3072, 2, 12, 2048),
        32000,  # the image token
        40,  # the prompt's text tokens
        64,  # the answer's
    ),
    "tiny": Shapes(
        clip(32, 64, 1, 2, 32, 8, 32), llama(1064, 64, 128, 2, 4, 512), llama(1000, 32, 64, 1, 2, 512), 1000, 8, 8
    ),
}
ROWS = tuple(
    f"{part}/{path}/{shape}"
    for shape in ("embedded", *SHAPES)
    for part, paths in (("target", TARGET_PATHS), ("drafter", DRAFTER_PATHS))
    for path in paths
) + ("race/feature/embedded",)
DEFAULT_ROWS = ("target/*/embedded", "drafter/[!c]*/embedded")  # compiled (minutes) and race on request


def time_steps(steps: dict[object, Callable[[], object]], warmup: int, repeats: int) -> dict[object, dict]:
    """Each step's median and p10 wall time (ms), the steps taken in turn (interleaved) so that a
    machine busier at one moment than another slows every path alike, the device synchronised."""
    for _ in range(warmup):
        for step in steps.values():
            step()
    wall = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            devices.synchronize()
            start = time.perf_counter()
            step()
            devices.synchronize()
            wall[name].append(time.perf_counter() - start)
    return {
        name: {"median_ms": statistics.median(w) * 1e3, "p10_ms": sorted(w)[len(w) // 10] * 1e3}
        for name, w in wall.items()
    }


def word_tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    words = {f"t{i}": i for i in range(vocab)} | {"<unk>": 0, "<s>": 1, "</s>": 2}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="</s>", pad_token="</s>")


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
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            torch.manual_seed(0)
            return LlavaForConditionalGeneration(config).eval(), LlamaForCausalLM(LlamaConfig(**shapes.drafter)).eval()
    finally:
        torch.set_default_dtype(previous)


def random_prompt(shapes: Shapes, target_model) -> Prompt:
    """<s>, the image's tokens and random text, with random pixels; the drafter's inputs: <s> and the text."""
    device, g = target_model.device, torch.Generator().manual_seed(1)
    text = torch.randint(3, shapes.drafter["vocab_size"], (1, shapes.prompt_text), generator=g)
    image = torch.full((1, shapes.image_tokens), shapes.image_token)
    ids = torch.cat([torch.ones(1, 1, dtype=torch.long), image, text], 1).to(device)
    pixels = torch.randn(1, 3, shapes.vision["image_size"], shapes.vision["image_size"], generator=g)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    inputs["pixel_values"] = pixels.to(device, target_model.dtype)
    return Prompt(inputs, {"input_ids": torch.cat([ids[:, :1], text.to(device)], 1)})


def targets(model, tokenizer, stop_ids: frozenset[int], name: str, paths=TARGET_PATHS) -> dict[str, Target]:
    """The target on each path, its lean check and graph captures done before any clock."""
    out = {path: Target(model, tokenizer, name=name, stop_ids=stop_ids, lean=path == "lean") for path in paths}
    for target in out.values():
        target.prepare()
    return out


@torch.inference_mode()
def target_costs(targets: dict[str, Target], prompt: Prompt, answer: int, widths, warmup: int, repeats: int) -> dict:
    """Each target's forward over each width of tokens after the prompt and `answer` tokens, rolled
    back after each, the paths taken in turn -> path: {"path", "context", "params", "ms": {width:
    figures}}, or {"error": why} where the lean path was asked for and does not run."""
    out, steps = {}, {}
    for name, target in targets.items():
        if target.lean.want and not target.path.startswith("lean"):
            out[name] = {"error": f"runs transformers: {target.lean.fallback_reason}"}
            continue
        cache = target.new_cache()
        target.prefill(prompt.target_inputs, cache)
        image = target.model.config.image_token_id
        text = [i for i in prompt.target_inputs["input_ids"][0].tolist() if i != image]
        ids = {n: ids_on(target.device, (text * (n // len(text) + 1))[:n]) for n in (answer, *widths)}
        target.forward(ids[answer], cache)  # the answer so far
        out[name] = {"path": target.path, "context": cache.get_seq_length(), "params": target.n_params, "ms": {}}
        for w in widths:
            steps[name, w] = lambda t=target, c=cache, w=w: (t.forward(ids[w], c), c.crop(-w))
    for (name, w), figures in time_steps(steps, warmup, repeats).items():
        out[name]["ms"][w] = figures
    return out


class Unavailable(Exception):
    """A path that cannot run here, and why."""


@torch.inference_mode()
def drafter_costs(model, context: int, paths, warmup: int, repeats: int) -> dict:
    """One step of a drafter model after `context` tokens on each of `paths` (`DRAFTER_PATHS`) ->
    path: figures, or {"error": why} where it cannot run here. Each path's first step is timed
    (`first_call_s`: a compile, a graph capture) and its logits checked against transformers'."""
    vocab = model.get_output_embeddings().weight.shape[0]
    ids = torch.randint(3, vocab, (1, context + 1), generator=torch.Generator().manual_seed(0)).to(model.device)
    kw, cache = cache_keyword(model), DynamicCache(config=model.config)
    model(input_ids=ids[:, :-1], **{kw: cache}, use_cache=True, logits_to_keep=1)
    token, token_id = ids[:, -1:], int(ids[0, -1])
    lm = LeanLM(model)
    static = lm.new_cache(context + 1)
    static.load(cache)
    position, keys_index = torch.tensor([context], device=lm.device), torch.arange(static.capacity, device=lm.device)
    args = (static, token[0], position, keys_index, lm.rope(static.capacity))  # the static step's

    def path_step(path: str):
        """(a step feeding the token and returning its logits, the cache it grows or None)."""
        if path == "transformers":
            return lambda: model(input_ids=token, **{kw: cache}, use_cache=True, logits_to_keep=1).logits, cache
        if path == "lean":
            return lambda: lm.forward(static, [token_id]), static
        if path == "static":
            return lambda: lm.static_step(*args), None
        if path == "numpy":
            if why := lean_steps.supported(lm):
                raise Unavailable(why)
            numpy = lean_steps.NumpyStep(lm)
            return lambda: numpy(static, token_id), static
        if path == "graphs":
            if lm.device.type != "cuda":
                raise Unavailable("no CUDA device")
            graph = lean_steps.GraphStep(lm, static)
            return lambda: graph(token_id), static
        compiled = torch.compile(lm.static_step, fullgraph=True, dynamic=False)
        return lambda: compiled(*args), None

    steps, out, reference = {}, {}, None
    for path in ("transformers", *(p for p in paths if p != "transformers")):  # transformers' logits first
        try:
            started = time.perf_counter()
            step, grows = path_step(path)
            logits = step().reshape(-1).float()
            if grows is not None:
                grows.crop(-1)
            reference = logits if reference is None else reference
            out[path] = {"first_call_s": time.perf_counter() - started}
            out[path]["max_abs_logit_diff"] = float((logits - reference).abs().max())
            steps[path] = lambda step=step, grows=grows: (step(), grows is not None and grows.crop(-1))
        except Unavailable as why:
            out[path] = {"error": str(why)}
        except Exception as error:  # reported, not fatal: the other paths still run
            out[path] = {"error": f"{type(error).__name__}: {error}"[:200]}
    for path, figures in time_steps({p: steps[p] for p in paths if p in steps}, warmup, repeats).items():
        out[path] |= figures
    return {"params": sum(p.numel() for p in model.parameters()), "context": context} | {p: out[p] for p in paths}


class TimedStep:
    """A drafter's NumPy step (`feature_steps.NumpySpeculator`) that records each step's seconds by
    draft position in `seconds`; everything else is the step's own."""

    def __init__(self, step, seconds: dict[int, list[float]]):
        self.step, self.seconds = step, seconds

    def step_rows(self, k, s, token, seen):
        started = time.perf_counter()
        out = self.step.step_rows(k, s, token, seen)
        self.seconds.setdefault(k + 1, []).append(time.perf_counter() - started)
        return out

    def __getattr__(self, name):
        return getattr(self.step, name)


def race_costs(loaded, name: str, task: str = "description", n: int = 2, max_new: int = 160) -> dict:
    """The steps of the benchmark's own races (`cells.bench_cell`: the task's held-out examples,
    SPD and AR in turn, greedy, gamma GAMMA) with the drafter `name`: the cell's T1, T(gamma+1) and
    D, and where it drafts with a NumPy step, that step's median µs at each draft position (on a
    CPU a round's first draft runs right after the verify: docs/drafters-feature.md)."""
    drafter = loaded.drafter(name)
    numpy, seconds = getattr(drafter, "numpy", None), {}
    if numpy is not None:
        drafter.numpy = TimedStep(numpy, seconds)
    try:
        cell, _ = bench_cell(loaded, task, drafter, GAMMA, "greedy", examples_for(task, n, 0), max_new)
    finally:
        if numpy is not None:
            drafter.numpy = numpy  # the loaded drafter is shared: leave it as it was
    out = {
        "drafter_path": cell.drafter_path,
        "task": task,
        "n": n,
        "t1_ms": cell.t1_ms,
        "t_verify_ms": cell.t_verify_ms,
    }
    out |= {"d_ms": cell.d_ms, "d_over_t1": cell.d_ms / cell.t1_ms, "tau": cell.tau, "lossless": cell.lossless}
    return out | {"step_us_by_draft": {k: statistics.median(v) * 1e6 for k, v in sorted(seconds.items())}}


def shape_rows(shape: str, wanted: dict[str, list[str]], device, dtype, warmup: int, repeats: int) -> dict:
    """The rows of one shape (`wanted`: part -> paths) -> row -> {model: figures}."""
    if shape == "embedded":
        loaded = loader.load(loader.DEFAULT_PRESET)
        model, tokenizer, stop_ids, name = (
            getattr(loaded.target, a) for a in ("model", "tokenizer", "stop_ids", "name")
        )
        image = Image.open(sorted((loader.ASSETS / "examples").glob("*.png"))[0]).convert("RGB")
        prompt, answer, context = loaded.prompt(image, "Describe the image."), 64, EMBEDDED_CONTEXT
        drafters = {spec.name: loaded.drafter(spec.name).model for spec in loaded.preset.drafters}
    else:
        shapes = SHAPES[shape]
        model, drafter = build(shapes, device, dtype)
        tokenizer, stop_ids, name = word_tokenizer(shapes.text["vocab_size"]), frozenset({2}), f"llava {shape} shape"
        prompt, answer, context = random_prompt(shapes, model), shapes.answer, 1 + shapes.prompt_text + shapes.answer
        drafters = {f"llama {shape} shape": drafter}
    out = {}
    if wanted["target"]:
        costs = target_costs(
            targets(model, tokenizer, stop_ids, name, wanted["target"]), prompt, answer, (1, GAMMA + 1), warmup, repeats
        )
        out |= {f"target/{path}/{shape}": {name: figures} for path, figures in costs.items()}
    for drafter_name, drafter_model in drafters.items() if wanted["drafter"] else ():
        costs = drafter_costs(drafter_model, context, wanted["drafter"], warmup, repeats)
        for path in wanted["drafter"]:
            out.setdefault(f"drafter/{path}/{shape}", {})[drafter_name] = costs[path]
    return out | {f"race/{d}/{shape}": {d: race_costs(loaded, d)} for d in wanted["race"]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m demo.lab.bench.step_costs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", default=list(DEFAULT_ROWS), help=f"patterns over ROWS: {', '.join(ROWS)}")
    parser.add_argument("--device", default="cpu", help="where the 7b and tiny shapes run (cuda: the CPU without one)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    rows = [row for row in ROWS if any(fnmatch.fnmatchcase(row, pattern) for pattern in args.rows)]
    if not rows:
        parser.error(f"no row matches {args.rows}: the rows are {', '.join(ROWS)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device == "cuda" and torch.cuda.is_available()
    device = torch.device("cuda:0" if cuda else "cpu")
    dtype = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if cuda else torch.float32
    device_name = (
        torch.cuda.get_device_name(0) if cuda else "cpu" + (" (no CUDA here)" if args.device == "cuda" else "")
    )
    result = {"device": device_name, "dtype": str(dtype).removeprefix("torch."), "torch": torch.__version__}
    result |= {"threads": torch.get_num_threads(), "warmup": args.warmup, "repeats": args.repeats, "rows": {}}
    for shape in dict.fromkeys(row.rpartition("/")[2] for row in rows):
        parts = [row.split("/") for row in rows if row.endswith(f"/{shape}")]
        wanted = {part: [p for q, p, _ in parts if q == part] for part in ("target", "drafter", "race")}
        result["rows"] |= shape_rows(shape, wanted, device, dtype, args.warmup, args.repeats)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
