"""The target as the engine drives it, the inputs of one request, and a run's compute clock.

Target      the multimodal target: a prefill with the image, then text-only forwards on its
            KV cache: a chain of tokens (`forward`), or a token tree in one forward
            (`forward_tree`: a tree attention mask and per-node positions). The decode forwards
            run through the lean target (`demo.engine.lean_target`: a static cache, a minimal
            forward, CUDA graphs) where it passed its check, else through transformers
Prompt      the model inputs of one request, the target's and the drafter's
Stopwatch   a run's compute time, the device synchronised around each timed block
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from demo.engine.compat import cache_keyword
from demo.engine.detokenize import Detokenizer
from demo.engine.events import RoundEvent, RunStart, Stop, TokenEvent
from demo.engine.lean_target import CAPACITY, WIDTHS, LeanTarget
from demo.engine.target_lm import TargetCache


class Target:
    """The multimodal target: a prefill with the image, then text-only forwards on a KV cache: a
    `TargetCache` where the lean path runs (the prefill, through transformers, copied into it),
    else a DynamicCache. `lean`: True wherever it passes its check, False never, None on CUDA only."""

    def __init__(self, model, tokenizer, *, name: str, stop_ids: frozenset[int], lean: bool | None = None):
        self.model = model
        self.device: torch.device = model.device  # read once: transformers' model.device walks the parameters
        self.tokenizer = tokenizer
        self.name = name
        self.stop_ids = stop_ids
        self.n_params = sum(p.numel() for p in model.parameters())
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.cache_kw = cache_keyword(model)  # "cache", or "past_key_values" before transformers 5.2x
        self.lean = LeanTarget(self, lean)

    @property
    def path(self) -> str:
        """Which forward runs the decode steps: "lean + CUDA graphs", "lean" or "transformers"."""
        return self.lean.path

    def prepare(self, *, capacity: int = CAPACITY, widths: tuple[int, ...] = WIDTHS) -> None:
        """Check the lean path and capture its CUDA graphs now (before any clock starts); a run
        does it at its first `new_cache` otherwise, with these defaults."""
        self.lean.prepare(capacity=capacity, widths=widths)

    def new_cache(self) -> TargetCache | DynamicCache:
        self.lean.prepare()
        return self.lean.new_cache() if self.lean.lm is not None else self.dynamic_cache()

    def dynamic_cache(self) -> DynamicCache:
        return DynamicCache(config=self.model.config)

    # Every forward below takes `features`: False returns the logits; True returns (logits,
    # features), the target's last hidden states at the same rows (after its final norm: the
    # logits are features @ E^T), which the same forward computed anyway. A drafter that reads
    # them (`LoadedDrafter.reads_features`) gets them for free: no extra forward.

    def prefill(self, inputs: dict, cache, features: bool = False):
        """Encode the image and the prompt; return the logits for the first answer token: [V]
        (and with `features` the prompt's last hidden states [P, C]: one row per prompt position,
        the image's included, the last one the state the first token's logits came from)."""
        if not isinstance(cache, TargetCache):
            return self.transformers_prefill(inputs, cache, features)
        dynamic = self.dynamic_cache()
        out = self.transformers_prefill(inputs, dynamic, features)
        cache.load(dynamic)
        cache.rope_delta = getattr(dynamic, "rope_delta", 0)
        return out

    def forward(self, ids: torch.Tensor | list[int], cache, features: bool = False):
        """Feed ids [n] (a long tensor on the device, or a list) after the cache (no pixel_values:
        the image is already in it) -> [n, V] (and with `features` [n, C])."""
        if not isinstance(cache, TargetCache):
            return self.transformers_forward(ids, cache, features)
        offsets = torch.arange(len(ids))  # positions are made on the host and copied without a sync
        return self.lean.forward(cache, ids, self.positions(cache, offsets).reshape(-1, len(ids)), None, features)

    def positions(self, cache, offsets: torch.Tensor) -> torch.Tensor:
        """position_ids for tokens fed after the cache at `offsets` [n] past its length: [1, n]
        (`demo.models.families.MRopeTarget` gives its three M-RoPE axes instead)."""
        return (cache.get_seq_length() + offsets)[None]

    def forward_tree(self, ids: list[int], depths: list[int], visible: torch.Tensor, cache, features: bool = False):
        """Feed a token tree after the cache in one forward -> logits [len(ids), V] (and features).

        ids[0] is the answer's last token, at depth 0; ids[i] sits at position cache length +
        depths[i]. visible [n, n] (bool): visible[i, j] when token i may attend to token j (its
        ancestors and itself); every token attends to the whole cache."""
        if not isinstance(cache, TargetCache):
            return self.transformers_forward_tree(ids, depths, visible, cache, features)
        offsets = torch.tensor(depths)  # on the host, as in `forward`
        return self.lean.forward(cache, ids, self.positions(cache, offsets).reshape(-1, len(ids)), visible, features)

    # transformers' forwards: the prefill always, the decode steps where the lean path does not run.

    # The position arguments of the prefill and of a decode forward: none here (transformers counts
    # them); `demo.models.families.MRopeTarget` gives its own.
    def prefill_positions(self, inputs: dict, cache=None) -> dict:
        return {}

    def decode_positions(self, cache, n: int) -> dict:
        return {}

    def transformers_prefill(self, inputs: dict, cache: DynamicCache, features: bool = False):
        kw = {**self.prefill_positions(inputs, cache), self.cache_kw: cache}
        out = self.model(**inputs, **kw, use_cache=True, logits_to_keep=1, output_hidden_states=features)
        return with_features(out, features, prefill=True)

    def transformers_forward(self, ids: torch.Tensor | list[int], cache: DynamicCache, features: bool = False):
        input_ids = torch.as_tensor(ids, device=self.device)[None]  # [1, n]
        kw = {**self.decode_positions(cache, len(ids)), self.cache_kw: cache}
        out = self.model(input_ids=input_ids, **kw, use_cache=True, output_hidden_states=features)
        return with_features(out, features)

    def transformers_forward_tree(
        self, ids: list[int], depths: list[int], visible: torch.Tensor, cache: DynamicCache, features: bool = False
    ):
        """`forward_tree` in transformers: the mask goes to the model as a 4-D additive mask, which
        transformers passes to the attention as it is."""
        n, past = len(ids), cache.get_seq_length()
        dtype = self.model.dtype
        allowed = torch.cat([torch.ones(n, past, dtype=torch.bool, device=self.device), visible.to(self.device)], 1)
        mask = torch.zeros(n, past + n, dtype=dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)  # [n, past + n]
        offsets = torch.tensor(depths, device=self.device)
        out = self.model(
            input_ids=torch.tensor([ids], device=self.device),
            attention_mask=mask[None, None],  # [1, 1, n, past + n]
            position_ids=self.positions(cache, offsets),
            **{self.cache_kw: cache},
            use_cache=True,
            output_hidden_states=features,
        )
        return with_features(out, features)


def with_features(out, features: bool, prefill: bool = False):
    """A transformers output as the Target's forwards return it: logits [n, V] (the prefill's last
    row [V]), and with `features` the last hidden states (after the final norm) [n, C] (prefill: [P, C])."""
    logits = out.logits[0, -1] if prefill else out.logits[0]
    if not features:
        return logits
    hidden = out.hidden_states[-1][0]
    return logits, hidden


@dataclass(frozen=True)
class Prompt:
    """Model inputs for one request, built by the preset's processors."""

    target_inputs: dict  # input_ids, attention_mask, pixel_values, ... for the target's prefill
    drafter_inputs: dict | None = None  # the drafter's own prefill inputs (its kind decides)


class Stopwatch:
    """Accumulates compute time over `with` blocks, synchronising the device around each."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.total = 0.0
        self.last = 0.0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __enter__(self) -> Stopwatch:
        self._sync()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self._sync()
        self.last = time.perf_counter() - self._start
        self.total += self.last


class Laps:
    """Marks inside one timed block, read after it: the seconds between consecutive marks. On CUDA
    a mark is an event nothing waits for, read after the block's synchronisation; on a CPU, the clock."""

    def __init__(self, device: torch.device):
        self.cuda = torch.device(device).type == "cuda"
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self) -> list[float]:
        pairs = zip(self.marks, self.marks[1:])
        if self.cuda:
            return [a.elapsed_time(b) / 1e3 for a, b in pairs]
        return [b - a for a, b in pairs]


def _stop_reason(answer: list[int], stop_ids: frozenset[int], max_new_tokens: int) -> str | None:
    if answer[-1] in stop_ids:
        return "eos"
    if len(answer) >= max_new_tokens:
        return "max_new_tokens"
    return None


@dataclass
class Decoding:
    """One run's state between rounds, shared by the prefill and every round."""

    target: Target
    start: RunStart  # the run's settings
    generator: torch.Generator
    clock: Stopwatch  # this run's compute time
    cache: TargetCache | DynamicCache  # the target's: prompt + answer[:-1] at the top of every round
    detok: Detokenizer
    answer: list[int]  # token ids so far
    stop: Stop | None = None  # set by the token that ends the run
    reads_features: bool = False  # the drafter's capabilities (`drafters.LoadedDrafter`), read at the prefill
    staged: bool = False
    features: torch.Tensor | None = None  # the target's hidden states the drafter's next `propose` takes

    def append(self, token: int) -> str:
        """Add a token to the answer; return its text piece (the rest of the text after a stop)."""
        self.answer.append(token)
        self.stop = _stop_reason(self.answer, self.target.stop_ids, self.start.max_new_tokens)
        return self.detok.push(token) + (self.detok.flush() if self.stop else "")


def emitted(state: Decoding, tokens: list[int], round_index: int, fields_of) -> list[dict]:
    """Append a round's tokens to the answer, cut after the first stop; returns each one's event
    fields: `fields_of(j)` (kind and probabilities of the j-th) with its index, id, text and round."""
    out = []
    for j, token in enumerate(tokens):
        text = state.append(token)
        out.append(dict(fields_of(j), index=len(state.answer) - 1, token_id=token, text=text, round=round_index))
        if state.stop:
            break
    return out


def round_events(
    state: Decoding,
    index: int,
    drafts: list[int],
    drafted_texts,
    n_accepted: int,
    target_id: int,
    tokens,
    seconds,
    **more,
) -> tuple[list[TokenEvent], RoundEvent]:
    """A round's events, stamped with the run's clock at its end: a TokenEvent per emitted token
    (`emitted`'s fields) and the RoundEvent (`seconds`: drafting's and verifying's; `more`: its detail)."""
    t = state.clock.total
    return [TokenEvent(**fields, t=t) for fields in tokens], RoundEvent(
        index=index,
        drafted_ids=tuple(drafts),
        drafted_texts=drafted_texts,
        n_accepted=n_accepted,
        target_id=target_id,
        n_emitted=len(tokens),
        stop=state.stop,
        draft_seconds=seconds[0],
        verify_seconds=seconds[1],
        t=t,
        **more,
    )


INSPECT_TOP_K = 5  # tokens of each distribution the inspector shows


def ranked(dist: torch.Tensor, tokenizer) -> tuple[tuple[str, float], ...]:
    """The INSPECT_TOP_K most likely tokens of dist [V], as (text, probability)."""
    probs, ids = torch.topk(dist, min(INSPECT_TOP_K, dist.shape[-1]))
    return tuple((tokenizer.decode([int(i)]), float(pr)) for pr, i in zip(probs, ids, strict=True) if pr > 0)
