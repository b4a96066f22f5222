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
) -> Iterator[Event]:
    """Speculative decoding of `target`, drafting with `drafter`; yields the run's events."""
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
        # 1. draft: never propose more than the token budget can take (the round adds one more).
        with clock:
            n_draft = min(gamma, max_new_tokens - len(answer) - 1)
            drafts, q = drafter.draft(answer, n_draft, sampling, generator) if n_draft else ([], None)
        draft_s = clock.last

        # 2. verify: one target forward over [last token] + drafts -> p at each draft and one past.
        with clock:
            logits = target.forward([answer[-1]] + drafts, cache)  # [n+1, V]
            p = warp(logits, sampling)  # [n+1, V]
            n = len(drafts)
            if n == 0:
                n_acc, next_token = 0, (int(logits[0].argmax()) if sampling.greedy else int(sample(p[0], generator)))
            else:
                # 3. accept a prefix of the drafts, then take the target's own token.
                draft_ids = torch.tensor(drafts, device=p.device)
                if sampling.greedy:
                    n_acc_t, next_t = verify_greedy(logits, draft_ids)
                else:
                    n_acc_t, next_t = verify_sampled(p, q, draft_ids, generator)
                n_acc, next_token = int(n_acc_t), int(next_t)
        verify_s = clock.last

        with clock:
            # 4. emit the accepted drafts and the target's token, cut after the first stop.
            new = drafts[:n_acc] + [next_token]
            for j, token in enumerate(new):
                if token in target.stop_ids:
                    new = new[: j + 1]
                    break
            # 5. roll back: the target cache now holds prompt + answer + all n drafts; keep only
            #    the accepted ones (the new last token is fed by the next round's forward).
            if n > n_acc:
                cache.crop(-(n - n_acc))
            drafter.rollback(len(answer) + n_acc)

            if n:
                accept = acceptance_probs(p, q, draft_ids).tolist() if not sampling.greedy else None
                p_drafts = p[:n].gather(-1, draft_ids[:, None]).squeeze(-1).tolist()
                q_drafts = q.gather(-1, draft_ids[:, None]).squeeze(-1).tolist()
            p_own = float(p[n_acc, next_token])
            events = []
            for j, token in enumerate(new):
                answer.append(token)
                stop = _stop_reason(answer, target.stop_ids, max_new_tokens)
                piece = detok.push(token) + (detok.flush() if stop else "")
                if j < n_acc:
                    events.append(
                        dict(kind="accepted", p=p_drafts[j], q=q_drafts[j], accept_prob=accept[j] if accept else 1.0)
                    )
                elif n_acc < n:
                    events.append(
                        dict(
                            kind="resampled",
                            p=p_own,
                            rejected_id=drafts[n_acc],
                            rejected_text=target.tokenizer.decode([drafts[n_acc]]),
                            rejected_p=p_drafts[n_acc],
                            rejected_q=q_drafts[n_acc],
                            rejected_accept_prob=accept[n_acc] if accept else 0.0,
                        )
                    )
                else:
                    events.append(dict(kind="bonus" if n else "target", p=p_own))
                events[-1].update(index=len(answer) - 1, token_id=token, text=piece, round=n_round)
            drafted_texts = tuple(target.tokenizer.decode([d]) for d in drafts)
        for fields in events:
            yield TokenEvent(**fields, t=clock.total)
        yield RoundEvent(
            index=n_round,
            drafted_ids=tuple(drafts),
            drafted_texts=drafted_texts,
            n_accepted=n_acc,
            target_id=next_token,
            n_emitted=len(new),
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
