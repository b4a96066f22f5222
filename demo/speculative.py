"""Speculative and autoregressive decoding of a multimodal target, as streams of typed events.

Notation (Leviathan et al. 2023; Gagrani et al. 2024 for the multimodal setting):
    p      the target's next-token distribution (the multimodal model that sees the image)
    q      the drafter's next-token distribution
    gamma  how many tokens the drafter proposes per round
    tau    block efficiency: answer tokens per target forward in decoding, bonus included

A speculative round: (1) the drafter proposes up to gamma tokens; (2) one target forward over
[last token] + drafts gives p at every draft position and one past; (3) the rule in
`demo.sampling` accepts a prefix of the drafts and adds one token of the target's own (a
resample at the first rejection, or a bonus when all were accepted); (4) the round is cut at a
stop; (5) both KV caches forget the rejected drafts. The image is encoded once, at prefill;
later forwards carry only token ids.

Cache invariant for the target, at the top of every round:
    cache = prompt + answer[:-1]       (the last answer token is fed by the next forward)

Both generators measure their own compute time and stop the clock while the consumer holds
them, so `event.t` is the time the run itself used. Nothing here knows about Gradio or plotly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from demo.compat import cache_keyword
from demo.detokenize import Detokenizer
from demo.drafters import Drafter
from demo.events import Event, PrefillEvent, RoundEvent, RunSummary, TokenEvent
from demo.sampling import Sampling, acceptance_probs, sample, verify_greedy, verify_sampled, warp


class Target:
    """The multimodal target: a prefill with the image, then text-only forwards on a KV cache."""

    def __init__(self, model, tokenizer, *, name: str, stop_ids: frozenset[int]):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.stop_ids = stop_ids
        self.n_params = sum(p.numel() for p in model.parameters())
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.cache_kw = cache_keyword(model)  # "cache", or "past_key_values" before transformers 5.2x

    @property
    def device(self) -> torch.device:
        return self.model.device

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.model.config)

    def prefill(self, inputs: dict, cache: DynamicCache) -> torch.Tensor:
        """Encode the image and the prompt; return the logits for the first answer token: [V]."""
        out = self.model(**inputs, **{self.cache_kw: cache}, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1]

    def forward(self, ids: list[int], cache: DynamicCache) -> torch.Tensor:
        """Feed ids after the cache (no pixel_values: the image is already in it) -> [len(ids), V]."""
        input_ids = torch.tensor([ids], device=self.device)
        return self.model(input_ids=input_ids, **{self.cache_kw: cache}, use_cache=True).logits[0]


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


def _first_token(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> tuple[int, float]:
    p = warp(logits, sampling)
    token = int(logits.argmax()) if sampling.greedy else int(sample(p, generator))
    return token, float(p[token])


def _stop_reason(answer: list[int], stop_ids: frozenset[int], max_new_tokens: int) -> str | None:
    if answer[-1] in stop_ids:
        return "eos"
    if len(answer) >= max_new_tokens:
        return "max_new_tokens"
    return None


@dataclass(frozen=True)
class Verdict:
    """The target's decision on one round's drafts."""

    n_accepted: int  # leading drafts accepted
    token: int  # the target's own token: the resample at the first rejection, or the bonus
    p_token: float  # p of that token
    p_drafts: list[float]  # p of each draft at its position
    q_drafts: list[float]  # q of each draft
    accept_probs: list[float]  # min(1, p/q) per draft; greedy: 1.0 if it matched the argmax, else 0.0


def verify(target: Target, cache, last: int, drafts: list[int], q: torch.Tensor, sampling: Sampling,
           generator: torch.Generator) -> Verdict:
    """One target forward over [last] + drafts, then the acceptance rule. q: [len(drafts), V]."""
    logits = target.forward([last] + drafts, cache)  # [n+1, V]
    p = warp(logits, sampling)  # [n+1, V]
    ids = torch.tensor(drafts, dtype=torch.long, device=p.device)  # [n]
    if sampling.greedy:
        n_acc, token = verify_greedy(logits, ids)
        accept = (logits[: len(drafts)].argmax(-1) == ids).float()
    else:
        n_acc, token = verify_sampled(p, q, ids, generator)
        accept = acceptance_probs(p, q, ids)
    n_acc, token = int(n_acc), int(token)
    return Verdict(
        n_accepted=n_acc,
        token=token,
        p_token=float(p[n_acc, token]),
        p_drafts=p[: len(drafts)].gather(-1, ids[:, None]).squeeze(-1).tolist(),
        q_drafts=q.gather(-1, ids[:, None]).squeeze(-1).tolist(),
        accept_probs=accept.tolist(),
    )


def _token_fields(j: int, drafts: list[int], v: Verdict, tokenizer) -> dict:
    """Kind and probabilities of the j-th token a round emits (drafts[:n_accepted] + [v.token])."""
    if j < v.n_accepted:
        return dict(kind="accepted", p=v.p_drafts[j], q=v.q_drafts[j], accept_prob=v.accept_probs[j])
    if v.n_accepted < len(drafts):
        k = v.n_accepted
        return dict(
            kind="resampled",
            p=v.p_token,
            rejected_id=drafts[k],
            rejected_text=tokenizer.decode([drafts[k]]),
            rejected_p=v.p_drafts[k],
            rejected_q=v.q_drafts[k],
            rejected_accept_prob=v.accept_probs[k],
        )
    return dict(kind="bonus" if drafts else "target", p=v.p_token)


@torch.inference_mode()
def speculative_generate(
    target: Target,
    drafter: Drafter,
    prompt: Prompt,
    *,
    gamma: int,
    sampling: Sampling,
    max_new_tokens: int,
    generator: torch.Generator,
    min_confidence: float = 0.0,
) -> Iterator[Event]:
    """Speculative decoding of `target`, drafting with `drafter`; yields the run's events.

    gamma is the most drafts per round. With min_confidence > 0 the draft length adapts: the
    drafter stops early where its top probability falls below it (see `Drafter.draft`).
    """
    assert gamma >= 1 and max_new_tokens >= 1
    clock = Stopwatch(target.device)
    detok = Detokenizer(target.tokenizer)
    cache = target.new_cache()

    # 0. prefill: the target encodes image + prompt and gives the first token on its own;
    #    the drafter reads its own prompt (text only, or with the image).
    with clock:
        logits = target.prefill(prompt.target_inputs, cache)
        first, p_first = _first_token(logits, sampling, generator)
    target_s = clock.last
    with clock:
        drafter.start(prompt.drafter_inputs)
    yield PrefillEvent(
        mode="speculative",
        prompt_tokens=prompt.target_inputs["input_ids"].shape[1],
        drafter_prompt_tokens=prompt.drafter_inputs["input_ids"].shape[1],
        target_seconds=target_s,
        drafter_seconds=clock.last,
        t=clock.total,
    )
    prefill_s = clock.total
    answer = [first]
    stop = _stop_reason(answer, target.stop_ids, max_new_tokens)
    with clock:
        text = detok.push(first) + (detok.flush() if stop else "")
    yield TokenEvent(index=0, token_id=first, text=text, kind="target", round=0, p=p_first, t=clock.total)

    n_round = 0
    while stop is None:
        n_round += 1
        # 1. draft: never more than the token budget can take (the round adds one token more).
        with clock:
            n_draft = min(gamma, max_new_tokens - len(answer) - 1)
            drafts, q = drafter.draft(answer, n_draft, sampling, generator, min_confidence)
        draft_s = clock.last

        # 2.-3. verify all drafts in one target forward, accept a prefix, add the target's token.
        with clock:
            v = verify(target, cache, answer[-1], drafts, q, sampling, generator)
        verify_s = clock.last

        with clock:
            # 4. roll back: the target cache holds prompt + answer + every draft; drop the
            #    rejected ones (the round's last token is fed by the next round's forward).
            if len(drafts) > v.n_accepted:
                cache.crop(-(len(drafts) - v.n_accepted))
            drafter.rollback(len(answer) + v.n_accepted)
            # 5. emit the accepted drafts and the target's token, cut after the first stop.
            new = drafts[: v.n_accepted] + [v.token]
            tokens = []
            for j, token in enumerate(new):
                answer.append(token)
                stop = _stop_reason(answer, target.stop_ids, max_new_tokens)
                piece = detok.push(token) + (detok.flush() if stop else "")
                tokens.append(dict(_token_fields(j, drafts, v, target.tokenizer), index=len(answer) - 1,
                                   token_id=token, text=piece, round=n_round))
                if stop:
                    break
            drafted_texts = tuple(target.tokenizer.decode([d]) for d in drafts)
        for fields in tokens:
            yield TokenEvent(**fields, t=clock.total)
        yield RoundEvent(
            index=n_round,
            drafted_ids=tuple(drafts),
            drafted_texts=drafted_texts,
            n_accepted=v.n_accepted,
            target_id=v.token,
            n_emitted=len(tokens),
            stop=stop,
            draft_seconds=draft_s,
            verify_seconds=verify_s,
            t=clock.total,
        )

    yield RunSummary(
        mode="speculative",
        token_ids=tuple(answer),
        text=detok.text,
        stop=stop,
        gamma=gamma,
        drafter=drafter.name,
        target_params=target.n_params,
        drafter_params=drafter.n_params,
        prefill_seconds=prefill_s,
        decode_seconds=clock.total - prefill_s,
        target_forwards=n_round,
        t=clock.total,
    )


@torch.inference_mode()
def autoregressive_generate(
    target: Target,
    prompt: Prompt,
    *,
    sampling: Sampling,
    max_new_tokens: int,
    generator: torch.Generator,
) -> Iterator[Event]:
    """Plain decoding of the target, one forward per token; yields the same event types."""
    assert max_new_tokens >= 1
    clock = Stopwatch(target.device)
    detok = Detokenizer(target.tokenizer)
    cache = target.new_cache()

    # 0. prefill, exactly as in the speculative run.
    with clock:
        logits = target.prefill(prompt.target_inputs, cache)
        token, p_token = _first_token(logits, sampling, generator)
    yield PrefillEvent(
        mode="autoregressive",
        prompt_tokens=prompt.target_inputs["input_ids"].shape[1],
        drafter_prompt_tokens=0,
        target_seconds=clock.last,
        drafter_seconds=0.0,
        t=clock.total,
    )
    prefill_s = clock.total
    answer = [token]
    stop = _stop_reason(answer, target.stop_ids, max_new_tokens)
    with clock:
        text = detok.push(token) + (detok.flush() if stop else "")
    yield TokenEvent(index=0, token_id=token, text=text, kind="target", round=0, p=p_token, t=clock.total)

    step = 0
    while stop is None:
        step += 1
        # 1. one target forward over the last token -> the next token.
        with clock:
            logits = target.forward([answer[-1]], cache)[0]
            token, p_token = _first_token(logits, sampling, generator)
            answer.append(token)
            stop = _stop_reason(answer, target.stop_ids, max_new_tokens)
            text = detok.push(token) + (detok.flush() if stop else "")
        yield TokenEvent(
            index=len(answer) - 1, token_id=token, text=text, kind="target", round=step, p=p_token, t=clock.total
        )
        yield RoundEvent(
            index=step,
            drafted_ids=(),
            drafted_texts=(),
            n_accepted=0,
            target_id=token,
            n_emitted=1,
            stop=stop,
            draft_seconds=0.0,
            verify_seconds=clock.last,
            t=clock.total,
        )

    yield RunSummary(
        mode="autoregressive",
        token_ids=tuple(answer),
        text=detok.text,
        stop=stop,
        gamma=0,
        drafter=None,
        target_params=target.n_params,
        drafter_params=0,
        prefill_seconds=prefill_s,
        decode_seconds=clock.total - prefill_s,
        target_forwards=step,
        t=clock.total,
    )
