"""The target's attention on the image, read after a run from one extra forward over its answer.

The race runs with SDPA, which returns no attention weights. After the run, off its clocks, one
target forward over prompt + answer (pixel values included, no cache, the lm head on the last
position only) recomputes the weights of the chosen decoder layers from the very query and key
tensors SDPA receives: the weights are softmax(q k^T * scaling + mask), kept only for the answer's
query rows, and averaged over heads at once. The forward's output is SDPA's own, untouched.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from demo.engine.grounding import ImageAttention
from demo.engine.lean_lm import language_model

# The layers averaged, by preset (chosen by `python -m demo.lab.bench.grounding_layers`); elsewhere
# the middle third.
LAYERS: dict[str, tuple[int, ...]] = {"embedded": (1,)}
READABLE = ("sdpa", "eager")
TILE = re.compile(r"<row_(\d+)_col_(\d+)>")

_state = threading.local()  # this thread's recording: module -> list of [heads, Q, K] weights


@contextlib.contextmanager
def recording(modules, queries: int):
    """Keep the attention weights of `modules` (their last `queries` query rows, averaged over
    nothing yet: [heads, queries, keys]) in the dict this yields, for forwards in this thread."""
    kept: dict = {m: [] for m in modules}
    _install()
    _state.kept, _state.queries = kept, queries
    try:
        yield kept
    finally:
        _state.kept = None


def _weights(query, key, mask, scaling, queries: int) -> torch.Tensor:
    """softmax(q k^T * scaling + mask) of the last `queries` rows: [heads, queries, keys], fp32."""
    q = query[0, :, -queries:].float()  # [H, Q, D]
    k = key[0].float()  # [H_kv, K, D]
    k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)  # grouped-query heads share a key
    scores = q @ k.transpose(-1, -2) * (scaling if scaling is not None else q.shape[-1] ** -0.5)  # [H, Q, K]
    n_q, n_k = query.shape[2], key.shape[2]
    if mask is None:  # SDPA's is_causal: query row r sees keys up to r + (K - Q)
        rows = torch.arange(n_q - queries, n_q, device=scores.device)[:, None] + (n_k - n_q)
        scores = scores.masked_fill(torch.arange(n_k, device=scores.device)[None, :] > rows, -math.inf)
    else:
        m = mask[0, :, -queries:, :n_k]  # [1 or H, Q, K]
        scores = scores.masked_fill(~m, -math.inf) if m.dtype == torch.bool else scores + m.float()
    return scores.softmax(-1)


def _install() -> None:
    """Wrap the registry's SDPA once: unchanged unless this thread records the calling module."""
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    if getattr(sdpa, "records_grounding", False):
        return

    def sdpa_recording(module, query, key, value, attention_mask, *args, **kwargs):
        kept = getattr(_state, "kept", None)
        if kept is not None and module in kept:
            kept[module].append(_weights(query, key, attention_mask, kwargs.get("scaling"), _state.queries))
        return sdpa(module, query, key, value, attention_mask, *args, **kwargs)

    sdpa_recording.records_grounding = True
    ALL_ATTENTION_FUNCTIONS["sdpa"] = sdpa_recording


# --- where the image is ------------------------------------------------------------------------


def layout(family: str, input_ids: list[int], inputs: dict, config, tokenizer) -> tuple[int, int, list]:
    """(rows, cols, cells): cells[k] = (position in the prompt, r0, r1, c0, c1), the k-th image
    token and the block of grid cells it covers. Raises ValueError for an image it cannot place."""
    image_id = getattr(config, "image_token_id", None)
    if image_id is None:
        image_id = config.image_token_index
    positions = [i for i, t in enumerate(input_ids) if t == image_id]
    if not positions:
        raise ValueError("the prompt has no image")
    if family == "qwen2_5_vl":
        t, h, w = (int(x) for x in inputs["image_grid_thw"][0])
        m = config.vision_config.spatial_merge_size
        rows, cols = h // m, w // m
        if t * rows * cols != len(positions):
            raise ValueError(f"{len(positions)} image tokens for a {t} x {rows} x {cols} grid")
        return rows, cols, [(p, k // cols, k // cols + 1, k % cols, k % cols + 1) for k, p in enumerate(positions)]
    if family == "idefics3":
        return _idefics3(input_ids, positions, tokenizer)
    side = math.isqrt(len(positions))
    if side * side != len(positions):
        raise ValueError(f"{len(positions)} image tokens are not a square grid")
    return side, side, [(p, k // side, k // side + 1, k % side, k % side + 1) for k, p in enumerate(positions)]


def _idefics3(input_ids: list[int], positions: list[int], tokenizer) -> tuple[int, int, list]:
    """Idefics3's tiles and thumbnail: each run of <image> named by the token before it."""
    runs, start = [], positions[0]
    for a, b in zip(positions, positions[1:] + [None]):
        if b != a + 1:
            runs.append((start, a + 1, tokenizer.convert_ids_to_tokens(input_ids[start - 1])))
            start = b
    g = math.isqrt(runs[0][1] - runs[0][0])
    tiles = {(int(m[1]) - 1, int(m[2]) - 1): (a, b) for a, b, name in runs if (m := TILE.fullmatch(name or ""))}
    n_rows = max((r for r, _ in tiles), default=0) + 1
    n_cols = max((c for _, c in tiles), default=0) + 1
    cells = []
    for (r, c), (a, b) in tiles.items():
        cells += [(a + k, r * g + k // g, r * g + k // g + 1, c * g + k % g, c * g + k % g + 1) for k in range(b - a)]
    for a, b, name in runs:
        if name == "<global-img>" or not tiles:  # the thumbnail covers n_rows x n_cols cells per cell
            cells += [
                (a + k, k // g * n_rows, (k // g + 1) * n_rows, k % g * n_cols, (k % g + 1) * n_cols)
                for k in range(b - a)
            ]
    return n_rows * g, n_cols * g, cells


def _grid(attn: torch.Tensor, rows: int, cols: int, cells: list) -> torch.Tensor:
    """attn [Q, K] -> [Q, rows * cols]: each image token's attention spread evenly over its cells."""
    grid = torch.zeros(attn.shape[0], rows, cols)
    for p, r0, r1, c0, c1 in cells:
        grid[:, r0:r1, c0:c1] += (attn[:, p] / ((r1 - r0) * (c1 - c0)))[:, None, None]
    return grid.reshape(attn.shape[0], -1)


# --- the forward --------------------------------------------------------------------------------


def layers_of(preset: str, n_layers: int) -> tuple[int, ...]:
    """The layers averaged for a preset: its measured choice, else the middle third."""
    chosen = LAYERS.get(preset)
    if chosen is not None:
        return tuple(i for i in chosen if i < n_layers)
    return tuple(range(n_layers // 3, max(n_layers // 3 + 1, 2 * n_layers // 3)))


def _decoder_attentions(model) -> list:
    """The self-attention module of each decoder layer of the target's language model."""
    return [layer.self_attn for layer in language_model(model)[0].layers]


def teacher_forced(inputs: dict, answer_ids: list[int]) -> dict:
    """The target's inputs for prompt + answer[:-1], teacher forced (a forward's row i decides
    answer token i): the per-token inputs grow with the answer (attended; text, not image)."""
    n, device = len(answer_ids), inputs["input_ids"].device
    tail = torch.tensor([answer_ids[:-1]], device=device, dtype=torch.long)
    full = {**inputs, "input_ids": torch.cat([inputs["input_ids"], tail], dim=1)}
    for name, value in inputs.items():
        if name != "input_ids" and torch.is_tensor(value) and value.shape == inputs["input_ids"].shape:
            fill = torch.ones if name == "attention_mask" else torch.zeros
            full[name] = torch.cat([value, fill((1, n - 1), dtype=value.dtype, device=device)], dim=1)
    return full


def sequence_positions(target, full: dict) -> dict:
    """A teacher-forced sequence's position arguments by the model's own rule (M-RoPE), else none."""
    return target.prefill_positions({k: v for k, v in full.items() if k != "attention_mask"})


def head_shares(model, inputs: dict, answer_ids: list[int], layers: tuple[int, ...], positions=None) -> torch.Tensor:
    """The attention rows of each answer token at `layers`: [layers, heads, n, K] over the keys
    of prompt + answer[:-1] (row i is the forward that decided answer token i). One forward, no
    cache, no gradient; `positions` are the full sequence's position ids where the family needs them."""
    n, full = len(answer_ids), teacher_forced(inputs, answer_ids)
    if positions is not None:
        full["position_ids"] = positions
    modules = _decoder_attentions(model)
    chosen = [modules[i] for i in layers]
    implementation = model.config.get_text_config()._attn_implementation
    hooks = []
    with recording(chosen if implementation == "sdpa" else (), n) as kept, torch.no_grad():
        if implementation == "eager":  # the weights come back from the module itself
            for m in chosen:
                hooks.append(
                    m.register_forward_hook(
                        lambda mod, args, out: kept.setdefault(mod, []).append(out[1][0, :, -n:].float())
                    )
                )
        try:
            model(**full, use_cache=False, logits_to_keep=1)
        finally:
            for h in hooks:
                h.remove()
        return torch.stack([kept[m][0] for m in chosen])


def image_attention(
    loaded, target_inputs: dict, answer_ids: list[int], layers: tuple[int, ...] | None = None
) -> ImageAttention:
    """The target's image attention at every answer position (`ImageAttention`), or why there is none."""
    model = loaded.target.model
    if not answer_ids:
        return ImageAttention.missing("The answer is empty.")
    if "pixel_values" not in target_inputs:
        return ImageAttention.missing("There is no image in this question, so there is no attention on it to show.")
    implementation = model.config.get_text_config()._attn_implementation
    if implementation not in READABLE:
        return ImageAttention.missing(
            f"This model's attention ({implementation}) returns no weights, so its attention on the image cannot be read."
        )
    family = loaded.preset.family
    input_ids = target_inputs["input_ids"][0].tolist()
    try:
        rows, cols, cells = layout(family, input_ids, target_inputs, model.config, loaded.processor.tokenizer)
    except (ValueError, KeyError, AttributeError) as error:
        return ImageAttention.missing(f"The image's tokens could not be placed on its grid ({error}).")
    n_layers = len(_decoder_attentions(model))
    layers = layers_of(loaded.preset.name, n_layers) if layers is None else layers
    positions = sequence_positions(loaded.target, teacher_forced(target_inputs, answer_ids)).get("position_ids")
    weights = head_shares(model, target_inputs, list(answer_ids), layers, positions)  # [layers, H, n, K]
    return summarise(weights, [c[0] for c in cells], len(input_ids), rows, cols, cells, layers)


def partition(weights: torch.Tensor, image_positions: list[int], prompt_len: int) -> torch.Tensor:
    """Each head's split of each answer token's attention, weights [layers, H, n, K] ->
    [layers, H, n, 3]: image, text, own (row i's own position is prompt_len - 1 + i); they sum to 1."""
    n = weights.shape[2]
    is_image = torch.zeros(weights.shape[-1], dtype=torch.bool)
    is_image[image_positions] = True
    own_at = (torch.arange(n) + prompt_len - 1).view(1, 1, n, 1).expand(*weights.shape[:2], n, 1)
    image = weights[..., is_image].sum(-1)
    own = weights.gather(-1, own_at)[..., 0]
    return torch.stack([image, weights.sum(-1) - image - own, own], dim=-1)


def summarise(
    weights: torch.Tensor, image_positions: list[int], prompt_len: int, rows, cols, cells, layers
) -> ImageAttention:
    """Per-token shares (mean over layers and heads) and maps from weights [layers, H, n, K]."""
    image, text, own = partition(weights, image_positions, prompt_len).mean(dim=(0, 1)).unbind(-1)  # [n] each
    maps = _grid(weights.mean(dim=(0, 1)), rows, cols, cells)
    return ImageAttention(
        layers=tuple(layers),
        rows=rows,
        cols=cols,
        image=tuple(image.tolist()),
        text=tuple(text.tolist()),
        own=tuple(own.tolist()),
        maps=tuple(tuple(round(v, 5) for v in m) for m in maps.tolist()),
    )
