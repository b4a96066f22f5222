"""The lean language model: a Llama-architecture forward over a static KV cache, on the model's own tensors.

The arithmetic and little else (no argument handling, mask construction, cache objects or output
dataclasses per call), in the style of gpt-fast's `model.py`.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import math
import threading

import torch
import torch.nn.functional as F

ARCHITECTURES = ("llama", "qwen2")  # language-model types LeanLM reproduces
STATIC_ROPE = ("default", "linear", "llama3")  # rotary types whose frequencies do not depend on the length
CHUNK = 256  # cache capacity grows in multiples of this many positions
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-8}  # a check's, relative to the logits' scale (else 5e-2)


def text_config(model):
    return getattr(model.config, "text_config", None) or model.config


def language_model(model):
    """(decoder, lm_head, text config) of a causal LM or of a LLaVA-style drafter."""
    inner = model.model
    decoder = getattr(inner, "language_model", None) or getattr(inner, "text_model", inner)  # LLaVA; Idefics3
    return decoder, model.get_output_embeddings(), text_config(model)


def check_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, name: str = "logits") -> None:
    """Raise unless a lean forward's `got` matches transformers' `want` within the dtype's tolerance."""
    allowed = TOLERANCE.get(dtype, 5e-2) * (float(want.abs().max()) + 1.0)
    error = float((got.float() - want.float()).abs().max())
    if not error <= allowed:
        raise ValueError(f"{name} differ by {error:.3g} (allowed {allowed:.3g})")


def replays_alike(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether a CUDA graph's replay matches the eager step it captured."""
    return torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2 * (float(want.abs().max()) + 1))


def capture(step, args, device: torch.device, warmup: int, **graph_kw) -> tuple[torch.cuda.CUDAGraph, object]:
    """`step(*args)` warmed up on a side stream, then captured as a CUDA graph: (graph, its outputs)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            step(*args)
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, **graph_kw):
        outputs = step(*args)
    return graph, outputs


def unsupported(model) -> str | None:
    """Why LeanLM cannot run this model, or None when it can."""
    config = text_config(model)
    if config.model_type not in ARCHITECTURES:
        return f"not covered by the lean path: architecture {config.model_type!r} (covered: {', '.join(ARCHITECTURES)})"
    try:
        _, head, _ = language_model(model)
    except AttributeError as error:
        return f"not covered by the lean path: no language model found ({error})"
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    checks = (
        (getattr(config, "hidden_act", "silu") == "silu", f"activation {getattr(config, 'hidden_act', None)!r}"),
        (rope in STATIC_ROPE, f"rotary embedding type {rope!r}"),
        ("sliding_attention" not in (getattr(config, "layer_types", None) or ()), "sliding-window attention"),
        (head is not None and head.bias is None, "an output head with a bias"),
    )
    wrong = [what for ok, what in checks if not ok]
    return f"not covered by the lean path: {'; '.join(wrong)}" if wrong else None


class StaticCache:
    """One run's KV cache: keys and values [layers, kv_heads, capacity, head_dim], and a length
    (only [0, length) is read: a rollback lowers it). Zeroed (a masked slot must be finite: 0 * nan
    is nan), grown by whole CHUNKs when a forward would pass the capacity."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int, dtype, device):
        shape = (layers, kv_heads, capacity, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, n: int) -> None:
        """Forget the last -n tokens (n < 0), as `DynamicCache.crop(-k)` does."""
        assert n < 0 and -n <= self.length, (n, self.length)
        self.length += n

    def reserve(self, end: int) -> bool:
        """Make room for positions [0, end); returns whether the tensors were reallocated."""
        if end <= self.capacity:
            return False
        capacity = math.ceil(end / CHUNK) * CHUNK
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros(old.shape[:2] + (capacity,) + old.shape[3:])
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)
        return True

    def load(self, dynamic_cache) -> None:
        """Copy a transformers DynamicCache (one run's prefill) into this cache."""
        length = dynamic_cache.get_seq_length()
        self.reserve(length)
        for i, layer in enumerate(dynamic_cache.layers):
            self.keys[i, :, :length] = layer.keys[0]  # [kv_heads, length, head_dim]
            self.values[i, :, :length] = layer.values[0]
        self.length = length


def _fuse(modules) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight [sum of outputs, C] (and bias) for Linear modules that read the same input; each
    module's weight becomes a row view of it, so transformers and the lean forward read one storage
    (one product where there were two or three). Modules fused before give back the same storage."""
    if len({m.bias is None for m in modules}) != 1:
        raise ValueError("some of the fused projections have a bias and some do not")
    if _adjacent([m.weight for m in modules]) and (modules[0].bias is None or _adjacent([m.bias for m in modules])):
        rows = sum(m.weight.shape[0] for m in modules)
        first, bias = modules[0].weight.detach(), modules[0].bias
        weight = first.as_strided((rows, first.shape[1]), first.stride())
        return weight, None if bias is None else bias.detach().as_strided((rows,), (1,))
    # The fused tensors are of the parameters' own kind: ordinary ones (usable outside inference
    # mode, as transformers' generate uses them) unless the model was built in inference mode.
    with torch.inference_mode(modules[0].weight.is_inference()), torch.no_grad():
        weight = torch.cat([m.weight for m in modules])
        bias = None if modules[0].bias is None else torch.cat([m.bias for m in modules])
        row = 0
        for m in modules:
            rows = m.weight.shape[0]
            m.weight.data = weight[row : row + rows]
            if bias is not None:
                m.bias.data = bias[row : row + rows]
            row += rows
    return weight, bias


def _adjacent(tensors: list[torch.Tensor]) -> bool:
    """Whether contiguous tensors ([rows_i, C] or [rows_i]) lie one after another in one storage (as `_fuse` leaves them)."""
    storage = tensors[0].untyped_storage().data_ptr()
    at = tensors[0].data_ptr()
    for t in tensors:
        if not t.is_contiguous() or t.untyped_storage().data_ptr() != storage or t.data_ptr() != at:
            return False
        at += t.numel() * t.element_size()
    return True


def _rotation(d: int, dtype, device) -> torch.Tensor:
    """R [D, D] with x @ R == rotate_half(x) = cat(-x[D/2:], x[:D/2]) exactly (one +-1 per column):
    one matrix product in place of two slices, a negation and a concatenation."""
    r = torch.zeros(d, d, dtype=dtype, device=device)
    half = torch.arange(d // 2, device=device)
    r[half + d // 2, half] = -1.0
    r[half, half + d // 2] = 1.0
    return r


def _mm(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [n, in] @ W^T [in, out] (+ b [out]) -> [n, out], W^T a transposed view: no transpose or linear dispatch."""
    return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)


class LeanLM:
    """A Llama-architecture language model's forward over a StaticCache, on the model's own tensors
    (q/k/v and gate/up fused, `_fuse`). Shapes: n new tokens, C hidden, H query heads, K kv heads,
    D head dim, I intermediate."""

    def __init__(self, model):
        decoder, head, config = language_model(model)
        self.config = config
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads
        self.eps = config.rms_norm_eps
        self.embed = decoder.embed_tokens.weight  # [V, C]
        self.norm = decoder.norm.weight
        self.head_t = head.weight.t()  # [C, V] (tied to embed in many drafters)
        self.layers = []
        for layer in decoder.layers:
            attn, mlp = layer.self_attn, layer.mlp
            qkv, qkv_bias = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])  # [(H + 2K) D, C]
            gate_up, gate_up_bias = _fuse([mlp.gate_proj, mlp.up_proj])  # [2 I, C]
            self.layers.append(
                (
                    layer.input_layernorm.weight,
                    (qkv.t(), qkv_bias),
                    (attn.o_proj.weight.t(), attn.o_proj.bias),
                    layer.post_attention_layernorm.weight,
                    (gate_up.t(), gate_up_bias),
                    (mlp.down_proj.weight.t(), mlp.down_proj.bias),
                )
            )
        self.intermediate = decoder.layers[0].mlp.gate_proj.weight.shape[0]
        self.rotation = _rotation(self.head_dim, self.dtype, self.device)
        self.rotary = decoder.rotary_emb
        self._lock = threading.Lock()
        self._rope = self._tables(CHUNK)  # (cos, sin) [positions, D], grown on demand

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    cache_class = StaticCache

    def new_cache(self, capacity: int) -> StaticCache:
        capacity = math.ceil(max(capacity, 1) / CHUNK) * CHUNK
        return self.cache_class(len(self.layers), self.n_kv, self.head_dim, capacity, self.dtype, self.device)

    def _tables(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [n, D] for positions 0..n-1, from the model's own rotary module (its
        frequencies and attention scaling), in the model's dtype as transformers applies them."""
        positions = torch.arange(n, device=self.device)[None]
        cos, sin = self.rotary(torch.empty(0, dtype=self.dtype, device=self.device), positions)
        return cos[0], sin[0]

    def rope(self, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin tables covering positions [0, end) (shared by every run; grown under a lock)."""
        tables = self._rope
        if tables[0].shape[0] < end:
            with self._lock:
                if self._rope[0].shape[0] < end:
                    self._rope = self._tables(math.ceil(end / CHUNK) * CHUNK)
                tables = self._rope
        return tables

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # x [n, C], weight [C] -> [n, C]. As LlamaRMSNorm: normalise in float32, cast back, then scale.
        x32 = x.float()
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def _layer(self, i: int, h: torch.Tensor, cos, sin, write, attend) -> torch.Tensor:
        """One decoder layer over h [n, C] with rotary cos, sin [n, 1, D]; `write(i, k, v)` stores the new keys and values
        [n, K, D] in the cache and `attend(i, q)` turns q [n, H, D] into the attention output [n, H*D]."""
        norm1, qkv_proj, o_proj, norm2, gate_up_proj, down_proj = self.layers[i]
        n, H, K = h.shape[0], self.n_heads, self.n_kv
        qkv = _mm(self._rms(h, norm1), *qkv_proj).view(n, H + 2 * K, self.head_dim)
        qk = qkv[:, : H + K]  # queries and keys rotate alike: cos, sin [n, 1, D]
        qk = qk * cos + torch.matmul(qk, self.rotation) * sin
        write(i, qk[:, H:], qkv[:, H + K :])
        h = h + _mm(attend(i, qk[:, :H]), *o_proj)
        gate_up = _mm(self._rms(h, norm2), *gate_up_proj)  # [n, 2 I]
        return h + _mm(F.silu(gate_up[:, : self.intermediate]) * gate_up[:, self.intermediate :], *down_proj)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """Logits [V] for the token after the last row of h [n, C]."""
        return torch.mm(self._rms(h[-1:], self.norm), self.head_t)[0]

    def forward(self, cache: StaticCache, ids: torch.Tensor | list[int], every: bool = False) -> torch.Tensor:
        """Feed ids [n] (a long tensor on the device, or a list) after the cache's tokens; return
        the logits for the token after them: [V] (with `every`, after each of them: [n, V]). Eager,
        attention sliced to the cache's tokens: one token, two batched products; several, causal SDPA."""
        n, start = len(ids), cache.length
        end = start + n
        cache.reserve(end)
        cos, sin = self.rope(end)
        cos, sin = cos[start:end, None], sin[start:end, None]  # [n, 1, D]
        if isinstance(ids, list) and n == 1:
            h = self.embed[ids[0]][None]  # [1, C]: a row view, no index kernel
        else:
            h = F.embedding(torch.as_tensor(ids, device=self.device), self.embed)  # [n, C]
        # Token j of the new ones sees the cache and the new tokens up to itself: key index <= start + j.
        mask = None if n == 1 else torch.ones(n, end, dtype=torch.bool, device=self.device).tril(start)
        H, K, D = self.n_heads, self.n_kv, self.head_dim

        def write(i, k, v):  # [n, K, D] each
            cache.keys[i, :, start:end] = k.transpose(0, 1)
            cache.values[i, :, start:end] = v.transpose(0, 1)

        def attend(i, q):
            keys, values = cache.keys[i, :, :end], cache.values[i, :, :end]  # [K, end, D]
            if n == 1:  # query head j*g + r reads kv head j (g = H / K), as transformers' repeat_kv
                scores = torch.bmm(q.view(K, H // K, D), keys.transpose(1, 2)).mul_(D**-0.5)  # [K, g, end]
                return torch.bmm(torch.softmax(scores, dim=-1), values).view(1, H * D)
            y = F.scaled_dot_product_attention(
                q.transpose(0, 1)[None], keys[None], values[None], attn_mask=mask, enable_gqa=H != K
            )  # [1, H, n, D]
            return y[0].transpose(0, 1).reshape(n, H * D)

        for i in range(len(self.layers)):
            h = self._layer(i, h, cos, sin, write, attend)
        cache.length = end
        return torch.mm(self._rms(h, self.norm), self.head_t) if every else self._logits(h)

    def static_step(self, cache: StaticCache, token: torch.Tensor, position: torch.Tensor, keys_index, tables):
        """One token at a device-side position, with every shape fixed by the cache's capacity, for
        CUDA-graph capture: token, position [1] long; keys_index [capacity]; tables: `rope(capacity)`
        (the caller keeps them alive for as long as the graph). Returns logits [V]. Attention
        covers the whole capacity, masked to positions <= position."""
        cos, sin = (t.index_select(0, position)[:, None] for t in tables)  # [1, 1, D]
        h = F.embedding(token, self.embed)  # [1, C]
        mask = (keys_index <= position)[None, None, None]  # [1, 1, 1, capacity]
        gqa = self.n_heads != self.n_kv

        def write(i, k, v):  # [1, K, D] each, at the device-side position
            cache.keys[i].index_copy_(1, position, k.transpose(0, 1))
            cache.values[i].index_copy_(1, position, v.transpose(0, 1))

        def attend(i, q):  # q [1, H, D] over every slot of the capacity, masked
            y = F.scaled_dot_product_attention(
                q.transpose(0, 1)[None], cache.keys[i, None], cache.values[i, None], attn_mask=mask, enable_gqa=gqa
            )
            return y[0].transpose(0, 1).reshape(1, -1)

        for i in range(len(self.layers)):
            h = self._layer(i, h, cos, sin, write, attend)
        return self._logits(h)
